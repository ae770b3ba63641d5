/* test_reporter.c - a training task's reports to the coordinator (agent/reporter.c) against a
 * small HTTP server on 127.0.0.1 that records what arrives and can hold and refuse a request:
 * a checkpoint report that could not be delivered is sent again before the ones written
 * after it, so the coordinator never takes an older checkpoint's list of the steps on disk
 * after a newer one's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/reporter.h"
#include "psflow/clock.h"

#define MAX_SEEN 16

/* The server: answers every request with 204 but the first checkpoint report, which it holds
 * until the test releases it and then refuses with 503 (the coordinator could not store it). */
typedef struct server {
    int fd, port;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int holding, released, stop;
    int64_t seen[MAX_SEEN]; /* checkpoint steps in the order they arrived */
    int status[MAX_SEEN];   /* the answer each got */
    int n_seen;
} server;

/* Reads one request (headers, then Content-Length bytes of body) into buf; its length, or -1. */
static int read_request(int fd, char *buf, size_t cap) {
    size_t len = 0;
    char *end = NULL;
    while (!end) {
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n <= 0)
            return -1;
        len += (size_t)n;
        buf[len] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    const char *cl = strstr(buf, "Content-Length:");
    if (!cl)
        cl = strstr(buf, "content-length:");
    size_t want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 15, NULL, 10) : 0);
    while (len < want && len < cap - 1) {
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n <= 0)
            return -1;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return (int)len;
}

static void *serve(void *arg) {
    server *s = arg;
    char buf[65536];
    for (;;) {
        int fd = accept(s->fd, NULL, NULL);
        if (fd < 0)
            return NULL;
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) {
            close(fd);
            return NULL;
        }
        int status = 204;
        if (read_request(fd, buf, sizeof buf) > 0 && strstr(buf, "/checkpoints ")) {
            json_t *body = json_loads(strstr(buf, "\r\n\r\n") + 4, 0, NULL);
            int64_t step = json_integer_value(json_object_get(body, "step"));
            json_decref(body);
            pthread_mutex_lock(&s->mu);
            if (s->n_seen == 0) { /* the first: hold it, then refuse it */
                s->holding = 1;
                pthread_cond_broadcast(&s->cv);
                while (!s->released)
                    pthread_cond_wait(&s->cv, &s->mu);
                status = 503;
            }
            if (s->n_seen < MAX_SEEN) {
                s->seen[s->n_seen] = step;
                s->status[s->n_seen++] = status;
            }
            pthread_mutex_unlock(&s->mu);
        }
        char reply[128];
        int n = snprintf(reply, sizeof reply,
                         "HTTP/1.1 %d %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status,
                         status == 204 ? "No Content" : "Service Unavailable");
        if (write(fd, reply, (size_t)n) != n)
            fprintf(stderr, "test server: short write\n");
        close(fd);
    }
}

static void server_start(server *s) {
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s->fd, 16), 0);
    assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &len), 0);
    s->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&s->thread, NULL, serve, s), 0);
}

static void server_stop(server *s) {
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    s->released = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    /* Wake accept() with one last connection. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)s->port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        fprintf(stderr, "test server: could not wake the server\n");
    if (fd >= 0)
        close(fd);
    pthread_join(s->thread, NULL);
    close(s->fd);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
}

/* A checkpoint report of `step` (its folder does not exist: no files, no kept). */
static void add_checkpoint(agent_reporter *r, uint64_t step) {
    worker_report rep = {.kind = WORKER_REPORT_CHECKPOINT,
                         .step = step,
                         .time = pf_clock_wall(),
                         .step_dir = "/nonexistent/psflow-test/step"};
    agent_reporter_add(r, &rep);
}

/* Checkpoint 500's report is refused while checkpoint 600 is written: 500 goes again before
 * 600, so the coordinator's last word on the steps on disk is 600's. */
static void test_failed_checkpoint_goes_first(void **state) {
    (void)state;
    server s;
    server_start(&s);
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%d", s.port);
    agent_reporter *r = agent_reporter_create(base, NULL, "job", "chief");
    assert_non_null(r);

    add_checkpoint(r, 500);
    double deadline = pf_clock_now() + 10;
    pthread_mutex_lock(&s.mu);
    while (!s.holding && pf_clock_now() < deadline) {
        pthread_mutex_unlock(&s.mu);
        pf_clock_sleep(0.01); /* polling the server's state, with a deadline */
        pthread_mutex_lock(&s.mu);
    }
    int holding = s.holding;
    pthread_mutex_unlock(&s.mu);
    assert_true(holding);
    add_checkpoint(r, 600); /* written while 500's report is in flight */
    pthread_mutex_lock(&s.mu);
    s.released = 1;
    pthread_cond_broadcast(&s.cv);
    pthread_mutex_unlock(&s.mu);

    assert_int_equal(agent_reporter_flush(r, 10.0), 0);
    agent_reporter_destroy(r, 1.0);
    server_stop(&s);
    assert_int_equal(s.n_seen, 3);
    static const int64_t steps[] = {500, 500, 600};
    static const int statuses[] = {503, 204, 204};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(s.seen[i], steps[i]);
        assert_int_equal(s.status[i], statuses[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_checkpoint_goes_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
