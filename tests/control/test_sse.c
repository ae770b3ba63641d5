/* test_sse.c - the Server-Sent Events parser: messages as the coordinator sends them, every
 * way a stream can be cut into chunks (byte by byte, between CR and LF), CR, LF and CRLF line
 * ends, the WHATWG field rules (default event name, joined data lines, comments, ids, one
 * leading space), overlong lines, reconnection (reset, Last-Event-ID, resuming after an id),
 * failing allocations, and the streams under tests/data/sse/{valid,invalid}/.
 *
 * Each NAME.sse there is fed whole and a byte at a time; NAME.events lists the messages it
 * must dispatch, one per line as EVENT<TAB>ID<TAB>DATA with \n, \r, \t and \\ escaped
 * (lines starting with '#' are comments). valid/ holds streams as servers send them;
 * invalid/ holds malformed ones, whose bad parts must be ignored without harm.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "psflow/fs.h"
#include "psflow/mem.h"
#include "psflow/sse.h"
#include "tests/support/counting_alloc.h"
#include "tests/support/data_files.h"

/* --- what the handler saw --------------------------------------------------------------- */

#define MAX_SEEN 16

typedef struct seen {
    int n;
    char event[MAX_SEEN][64];
    char data[MAX_SEEN][256];
    char id[MAX_SEEN][PF_SSE_ID_MAX];
} seen;

static void record(const char *event, const char *data, const char *id, void *ctx) {
    seen *s = ctx;
    assert_true(s->n < MAX_SEEN);
    snprintf(s->event[s->n], sizeof s->event[0], "%s", event);
    snprintf(s->data[s->n], sizeof s->data[0], "%s", data);
    snprintf(s->id[s->n], sizeof s->id[0], "%s", id);
    s->n++;
}

static void feed_str(pf_sse *p, const char *text) {
    pf_sse_feed(p, text, strlen(text));
}

static void assert_seen(const seen *s, int i, const char *event, const char *data, const char *id) {
    assert_true(i < s->n);
    assert_string_equal(s->event[i], event);
    assert_string_equal(s->data[i], data);
    assert_string_equal(s->id[i], id);
}

/* Two messages as GET /api/v1/events sends them, with a keepalive comment between. */
static const char stream[] = "id: 41\nevent: job\ndata: {\"name\":\"a\",\"phase\":\"Running\"}\n\n"
                             ":keepalive\n\n"
                             "id: 42\r\nevent: metric\r\ndata: {\"step\":10}\r\n\r\n";

static void check_stream(const seen *s) {
    assert_int_equal(s->n, 2);
    assert_seen(s, 0, "job", "{\"name\":\"a\",\"phase\":\"Running\"}", "41");
    assert_seen(s, 1, "metric", "{\"step\":10}", "42");
}

/* --- tests ------------------------------------------------------------------------------ */

static void test_whole_stream(void **state) {
    (void)state;
    seen s = {0};
    pf_sse p;
    pf_sse_init(&p, record, &s);
    assert_string_equal(pf_sse_last_id(&p), "");
    feed_str(&p, stream);
    check_stream(&s);
    assert_string_equal(pf_sse_last_id(&p), "42");
    pf_sse_deinit(&p);
    pf_sse_deinit(&p); /* twice is fine */
}

/* Any cut of the stream into two chunks, and one byte at a time, gives the same messages. */
static void test_any_chunking(void **state) {
    (void)state;
    size_t n = strlen(stream);
    for (size_t cut = 0; cut <= n; cut++) {
        seen s = {0};
        pf_sse p;
        pf_sse_init(&p, record, &s);
        pf_sse_feed(&p, stream, cut);
        pf_sse_feed(&p, stream + cut, n - cut);
        check_stream(&s);
        pf_sse_deinit(&p);
    }
    seen s = {0};
    pf_sse p;
    pf_sse_init(&p, record, &s);
    for (size_t i = 0; i < n; i++)
        pf_sse_feed(&p, stream + i, 1);
    check_stream(&s);
    pf_sse_deinit(&p);
}

/* CR alone ends a line; CR LF split across two chunks is one line end, not two (a second
 * would be a blank line dispatching the message early). */
static void test_line_ends(void **state) {
    (void)state;
    seen s = {0};
    pf_sse p;
    pf_sse_init(&p, record, &s);
    feed_str(&p, "data: one\rdata: two\r");
    feed_str(&p, "\ndata: three\r");
    assert_int_equal(s.n, 0);
    feed_str(&p, "\r");
    assert_int_equal(s.n, 1);
    assert_seen(&s, 0, "message", "one\ntwo\nthree", "");
    pf_sse_deinit(&p);
}

static void test_fields(void **state) {
    (void)state;
    seen s = {0};
    pf_sse p;
    pf_sse_init(&p, record, &s);
    /* Only one leading space is dropped; a field without a colon has an empty value;
     * retry and unknown fields are ignored; the event name does not carry over. */
    feed_str(&p, "event: log\nretry: 5000\nfoo: bar\ndata:  two spaces\ndata\ndata:x\n\n");
    feed_str(&p, "data: plain\n\n");
    assert_int_equal(s.n, 2);
    assert_seen(&s, 0, "log", " two spaces\n\nx", "");
    assert_seen(&s, 1, "message", "plain", "");
    /* A message without data is not dispatched, but its id counts as seen. */
    feed_str(&p, "id: 7\nevent: job\n\n");
    assert_int_equal(s.n, 2);
    assert_string_equal(pf_sse_last_id(&p), "7");
    /* The id stays in force for the next message; an id holding NUL or too long is ignored. */
    feed_str(&p, "data: a\n\n");
    assert_seen(&s, 2, "message", "a", "7");
    pf_sse_feed(&p, "id: 8\0x\ndata: b\n\n", 17);
    assert_seen(&s, 3, "message", "b", "7");
    char line[PF_SSE_ID_MAX + 16];
    snprintf(line, sizeof line, "id: %0*d\ndata: c\n\n", PF_SSE_ID_MAX, 9);
    feed_str(&p, line);
    assert_seen(&s, 4, "message", "c", "7");
    pf_sse_deinit(&p);
}

/* A line longer than PF_SSE_MAX_LINE is dropped whole; what follows is parsed as usual. */
static void test_overlong_line(void **state) {
    (void)state;
    seen s = {0};
    pf_sse p;
    pf_sse_init(&p, record, &s);
    feed_str(&p, "data: ");
    char chunk[4096];
    memset(chunk, 'x', sizeof chunk);
    for (size_t sent = 0; sent <= PF_SSE_MAX_LINE; sent += sizeof chunk)
        pf_sse_feed(&p, chunk, sizeof chunk);
    feed_str(&p, "\ndata: after\n\n");
    assert_int_equal(s.n, 1);
    assert_seen(&s, 0, "message", "after", "");
    assert_true(p.line.cap <= PF_SSE_MAX_LINE * 2); /* bounded, not the whole line */
    pf_sse_deinit(&p);
}

/* After a dropped connection: the half-received message is forgotten, the next stream
 * resumes after the last dispatched id. */
static void test_reset_and_resume(void **state) {
    (void)state;
    seen s = {0};
    pf_sse p;
    pf_sse_init(&p, record, &s);
    feed_str(&p, "id: 3\ndata: whole\n\nid: 4\nevent: job\ndata: half");
    pf_sse_reset(&p);
    assert_string_equal(pf_sse_last_id(&p), "3");
    feed_str(&p, "data: next\n\n");
    assert_int_equal(s.n, 2);
    assert_seen(&s, 1, "message", "next", "3"); /* no "job", no "half", no id 4 */
    pf_sse_resume_after(&p, "100");
    assert_string_equal(pf_sse_last_id(&p), "100");
    feed_str(&p, "data: later\n\n");
    assert_seen(&s, 2, "message", "later", "100");
    pf_sse_deinit(&p);
}

/* Out of memory: the message being received is dropped whole, none is half-dispatched, and
 * the parser works again once memory is back. */
static void test_alloc_failure(void **state) {
    (void)state;
    seen s = {0};
    pf_sse p;
    pf_sse_init(&p, record, &s);
    use_counting(0);
    feed_str(&p, "id: 1\ndata: lost\n\n");
    use_libc();
    assert_int_equal(s.n, 0);
    feed_str(&p, "data: kept\n\n");
    assert_int_equal(s.n, 1);
    assert_seen(&s, 0, "message", "kept", "");
    pf_sse_deinit(&p);
    pf_sse_init(&p, record, &s);
    use_counting(1); /* the line buffer gets its block, the data buffer none */
    feed_str(&p, "data: lost too\n\n");
    use_libc();
    assert_int_equal(s.n, 1);
    feed_str(&p, "data: back\n\n");
    assert_int_equal(s.n, 2);
    assert_seen(&s, 1, "message", "back", "");
    pf_sse_deinit(&p);
}

/* --- the data files ---------------------------------------------------------------------- */

#define SSE_DIR   PSFLOW_TEST_DATA "/sse"
#define MAX_FILES 64

/* One field of an .events line, unescaped, into out[cap]; returns where the next begins. */
static const char *unescape_field(const char *p, char *out, size_t cap) {
    size_t n = 0;
    for (; *p && *p != '\t' && *p != '\n'; p++) {
        char c = *p;
        if (c == '\\' && p[1]) {
            c = *++p;
            c = c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
        }
        assert_true(n + 1 < cap);
        out[n++] = c;
    }
    out[n] = '\0';
    return *p == '\t' ? p + 1 : p;
}

/* Checks what s saw against the .events text. */
static void check_events(const char *name, const seen *s, const char *events) {
    int i = 0;
    for (const char *line = events; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len && line[0] != '#') {
            char event[64], id[PF_SSE_ID_MAX], data[256];
            const char *p = unescape_field(line, event, sizeof event);
            p = unescape_field(p, id, sizeof id);
            unescape_field(p, data, sizeof data);
            if (i >= s->n)
                fail_msg("%s: message %d (%s) was not dispatched", name, i, data);
            if (strcmp(s->event[i], event) || strcmp(s->id[i], id) || strcmp(s->data[i], data))
                fail_msg("%s: message %d is %s/%s/%s, expected %s/%s/%s", name, i, s->event[i],
                         s->id[i], s->data[i], event, id, data);
            i++;
        }
        line += len + (end != NULL);
    }
    if (s->n != i)
        fail_msg("%s: %d messages dispatched, %d expected", name, s->n, i);
}

static void run_files(const char *kind) {
    char dir[512], *names[MAX_FILES];
    snprintf(dir, sizeof dir, "%s/%s", SSE_DIR, kind);
    size_t n = data_files(dir, ".sse", true, names, MAX_FILES);
    assert_true(n >= 5);
    for (size_t f = 0; f < n; f++) {
        char path[768];
        size_t len, events_len;
        snprintf(path, sizeof path, "%s/%s.sse", dir, names[f]);
        char *stream_bytes = data_read(path, 1 << 20, &len);
        snprintf(path, sizeof path, "%s/%s.events", dir, names[f]);
        char *events = data_read(path, 1 << 20, &events_len);
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            seen s = {0};
            pf_sse p;
            pf_sse_init(&p, record, &s);
            if (bytewise)
                for (size_t i = 0; i < len; i++)
                    pf_sse_feed(&p, stream_bytes + i, 1);
            else
                pf_sse_feed(&p, stream_bytes, len);
            check_events(names[f], &s, events);
            pf_sse_deinit(&p);
        }
        pf_free(stream_bytes);
        pf_free(events);
        free(names[f]);
    }
}

static void test_valid_files(void **state) {
    (void)state;
    run_files("valid");
}

static void test_invalid_files(void **state) {
    (void)state;
    run_files("invalid");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_stream),  cmocka_unit_test(test_any_chunking),
        cmocka_unit_test(test_line_ends),     cmocka_unit_test(test_fields),
        cmocka_unit_test(test_overlong_line), cmocka_unit_test(test_reset_and_resume),
        cmocka_unit_test(test_alloc_failure), cmocka_unit_test(test_valid_files),
        cmocka_unit_test(test_invalid_files),
    };
    return cmocka_run_group_tests_name("sse", tests, NULL, NULL);
}
