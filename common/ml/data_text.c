/* data_text.c - csv and libsvm files streamed line by line (data.streaming; see
 * data_internal.h): the counterpart of criteo.c's reader for the text formats.
 *
 * DESIGN. One buffer of DATA_TEXT_BUFFER + max_line bytes, filled by zlib's gzread (which reads
 * plain files as they are); each line is found with memchr and handed in place to the per-line
 * parsing the whole-file readers use (data_csv_line, data_libsvm_line), so both read the same
 * examples and say the same things about a bad line. What is left of a line cut by the
 * buffer's end moves to the front before the next read; a line longer than max_line is an
 * error and its rest is read past without keeping it, so memory never depends on the file.
 * A byte range [start, end) reads the lines that start in it, as pf_criteo_open_range does:
 * from start - 1 the line in progress is dropped, and the first line at or past end is left
 * to the next range. A CSV header is looked for in the file's first line that is not blank:
 * in the first range, or in a later one when every line before it is blank (blank_before).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "data_internal.h"
#include "psflow/mem.h"

struct data_text_reader {
    char path[1024];
    int format; /* PF_DATA_CSV or PF_DATA_LIBSVM */
    const pf_model_spec *model;
    bool classification;
    data_sink sink; /* the ids of a model with embeddings, or libsvm's dense row */
    bool ids;       /* csv: cells of ids (sink), else model->inputs numbers */
    bool header;    /* csv from the start of a file: the first line may be a header */
    gzFile f;
    char *buf; /* cap bytes: [pos, len) not yet parsed */
    size_t cap, pos, len, max_line;
    int eof;  /* gzread said end */
    int skip; /* in the middle of a line too long, or before a range's first line: drop bytes */
    int done; /* the end, a read error or corrupt data: nothing more */
    uint64_t line, bytes;
    uint64_t base, start, end; /* the range: bytes counted from base; end 0: the file's end */
};

static void os_text(int errnum, char *buf, size_t size) {
    if (errnum == 0 || strerror_r(errnum, buf, size) != 0)
        snprintf(buf, size, "error %d", errnum);
}

/* Whether every line of plain file f that starts before byte `start` is blank to the CSV
 * reader (spaces, tabs, a '\r' before its end): then the first line from `start` on is the
 * file's first that is not blank, which may be a header. Reads from the file's start up to the
 * first byte that is not blank, so almost always a few bytes. -1 for a failed read. */
static int blank_before(gzFile f, uint64_t start) {
    if (gzseek(f, 0, SEEK_SET) < 0)
        return -1;
    char buf[4096];
    uint64_t at = 0;
    int cr = 0; /* the byte before was a '\r' */
    for (;;) {
        int n = gzread(f, buf, sizeof buf);
        if (n < 0)
            return -1;
        if (n == 0)
            return 1;
        for (int i = 0; i < n; i++, at++) {
            char c = buf[i];
            if (c == '\n') {
                if (at + 1 >= start)
                    return 1;
            } else if (cr || (c != ' ' && c != '\t' && c != '\r')) {
                return 0;
            }
            cr = c == '\r';
        }
    }
}

pf_status data_text_open_range(int format, const pf_model_spec *model, int index_base,
                               const char *path, uint64_t start, uint64_t end, size_t max_line,
                               data_text_reader **out, pf_error *err) {
    *out = NULL;
    if (format != PF_DATA_CSV && format != PF_DATA_LIBSVM)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "%s: format %d is not streamed as text",
                            path, format);
    data_text_reader *r = pf_calloc(1, sizeof *r);
    if (!r)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
    snprintf(r->path, sizeof r->path, "%s", path);
    r->format = format;
    r->model = model;
    r->classification = model->type != PF_MODEL_LINEAR;
    pf_status st = PF_OK;
    if (model->n_embeddings > 0)
        st = data_sink_for_model(&r->sink, model, format == PF_DATA_LIBSVM ? index_base : 0,
                                 r->path, err);
    else
        r->sink = (data_sink){.features = model->inputs, .base = index_base};
    if (st != PF_OK) {
        pf_free(r);
        return st;
    }
    r->ids = model->n_embeddings > 0;
    r->header = format == PF_DATA_CSV && start == 0;
    r->max_line = max_line ? max_line : DATA_TEXT_MAX_LINE;
    r->cap = DATA_TEXT_BUFFER + r->max_line;
    r->buf = pf_malloc(r->cap);
    if (!r->buf) {
        pf_free(r);
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: out of memory", path);
    }
    errno = 0;
    r->f = gzopen(path, "rb");
    if (!r->f) {
        char os[128];
        int e = errno;
        os_text(e, os, sizeof os);
        pf_free(r->buf);
        pf_free(r);
        return e ? pf_error_set(err, PF_ERR_IO, NULL, "%s: cannot open: %s", path, os)
                 : pf_error_set(err, PF_ERR_NOMEM, NULL, "%s: cannot open: out of memory", path);
    }
    gzbuffer(r->f, 256 << 10);
    r->start = start;
    r->end = end;
    int blank = 0;
    if (start > 0 && format == PF_DATA_CSV && gzdirect(r->f))
        r->header = (blank = blank_before(r->f, start)) == 1;
    if (start > 0) { /* from the byte before: the line there ends where this range begins */
        if (!gzdirect(r->f) || blank < 0 || gzseek(r->f, (z_off_t)(start - 1), SEEK_SET) < 0) {
            data_text_close(r);
            return pf_error_set(err, PF_ERR_INVALID, NULL,
                                "%s: cannot read from byte %" PRIu64 " (a gzip file is read "
                                "from its start)",
                                path, start);
        }
        r->base = start - 1;
        r->skip = 1;
    }
    *out = r;
    return PF_OK;
}

/* The file offset of the first byte not yet parsed. */
static uint64_t offset_of_pos(const data_text_reader *r) {
    return r->base + r->bytes - (uint64_t)(r->len - r->pos);
}

/* Reads more after the unparsed bytes (moved to the front first). PF_OK, or an error that
 * ends the reader (truncated or corrupt gzip, a failed read). */
static pf_status fill(data_text_reader *r, pf_error *err) {
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
    }
    size_t room = r->cap - r->len;
    if (room > DATA_TEXT_BUFFER)
        room = DATA_TEXT_BUFFER;
    int n = gzread(r->f, r->buf + r->len, (unsigned)room);
    if (n > 0) {
        r->len += (size_t)n;
        r->bytes += (uint64_t)n;
        return PF_OK;
    }
    r->eof = 1;
    int zerr = Z_OK;
    const char *msg = gzerror(r->f, &zerr);
    if (n == 0 && zerr == Z_OK)
        return PF_OK; /* a gzip stream cut short shows at gzclose_r */
    r->done = 1;
    if (zerr == Z_BUF_ERROR && r->skip) /* inside a line passed over, whose bytes are gone */
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: gzip data ends early (truncated after %" PRIu64
                            " decompressed bytes, inside a line passed over)",
                            r->path, r->bytes);
    if (zerr == Z_BUF_ERROR) /* the line it cut: the bytes of it read so far, then the end */
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: gzip data ends early (truncated after %" PRIu64
                            " decompressed bytes, line %" PRIu64 ", column %zu)",
                            r->path, r->bytes, r->line + 1, r->len - r->pos + 1);
    if (zerr == Z_ERRNO) {
        char os[128];
        os_text(errno, os, sizeof os);
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: read failed: %s", r->path, os);
    }
    return pf_error_set(err, PF_ERR_FORMAT, NULL, "%s: corrupt gzip data near line %" PRIu64 ": %s",
                        r->path, r->line + 1, msg ? msg : "unknown error");
}

/* Ends the reader at the end of its file or range: PF_ERR_NOT_FOUND, or the error of a gzip
 * stream cut short. */
static pf_status finish(data_text_reader *r, pf_error *err) {
    int rc = gzclose_r(r->f);
    r->f = NULL;
    r->done = 1;
    if (rc == Z_BUF_ERROR)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "%s: gzip data ends early (truncated after %" PRIu64
                            " decompressed bytes, line %" PRIu64 ", column 1)",
                            r->path, r->bytes, r->line + 1);
    return PF_ERR_NOT_FOUND;
}

/* The next line into *line, *n (without its '\n') and *at: PF_OK, PF_ERR_NOT_FOUND at the
 * end, or an error (a line too long: the reader goes on after it). */
static pf_status next_line(data_text_reader *r, const char **line, size_t *n, data_at *at,
                           pf_error *err) {
    for (;;) {
        if (r->done)
            return PF_ERR_NOT_FOUND;
        char *nl = memchr(r->buf + r->pos, '\n', r->len - r->pos);
        if (r->skip) { /* the rest of a line too long, or the line before the range */
            if (nl) {
                r->pos = (size_t)(nl - r->buf) + 1;
                r->skip = 0;
                continue;
            }
            r->pos = r->len;
            if (r->eof) {
                r->skip = 0;
                continue;
            }
            pf_status st = fill(r, err);
            if (st != PF_OK)
                return st;
            continue;
        }
        uint64_t line_offset = offset_of_pos(r);
        if (r->end && line_offset >= r->end) /* the next range's first line */
            return finish(r, err);
        size_t have = nl ? (size_t)(nl - r->buf) - r->pos : r->len - r->pos;
        if (!nl && !r->eof && have <= r->max_line) {
            pf_status st = fill(r, err);
            if (st != PF_OK)
                return st;
            continue;
        }
        r->line++;
        *at = (data_at){r->path, r->start > 0 ? 0 : (long long)r->line, (long long)line_offset};
        if (have > r->max_line) {
            r->skip = 1;
            r->pos = nl ? (size_t)(nl - r->buf) : r->len; /* the skip finds its end */
            char where[DATA_AT_TEXT];
            return pf_error_set_offset(err, PF_ERR_FORMAT, (long long)line_offset,
                                       "%s: the line is longer than %zu bytes (column %zu is "
                                       "past the limit); not read",
                                       data_at_text(at, where, sizeof where), r->max_line,
                                       r->max_line + 1);
        }
        if (!nl && have == 0) {
            r->line--;
            return finish(r, err);
        }
        *line = r->buf + r->pos;
        *n = have;
        r->pos += have + (nl ? 1 : 0);
        return PF_OK;
    }
}

/* A bad line's message with the column (from 1, in bytes) its offset points at. */
static pf_status with_column(const data_at *at, pf_error *err) {
    if (err && err->offset >= at->start) {
        char message[sizeof err->message];
        snprintf(message, sizeof message, "%s", err->message);
        pf_error_set_offset(err, PF_ERR_FORMAT, err->offset, "%s (column %lld)", message,
                            err->offset - at->start + 1);
    }
    return PF_ERR_FORMAT;
}

pf_status data_text_next(data_text_reader *r, float *x, float *y, pf_error *err) {
    for (;;) {
        const char *line = NULL;
        size_t n = 0;
        data_at at;
        pf_status st = next_line(r, &line, &n, &at, err);
        if (st != PF_OK)
            return st;
        double label = 0;
        if (r->format == PF_DATA_CSV) {
            if ((n = data_csv_trim(line, n)) == 0)
                continue; /* blank */
            if (r->header) {
                r->header = false;
                if (data_csv_is_header(line, n, r->ids))
                    continue;
            }
            st = data_csv_line(line, n, &at, r->model->inputs, r->ids ? &r->sink : NULL,
                               r->classification, x, &label, err);
        } else {
            bool empty = false;
            st =
                data_libsvm_line(line, n, &at, &r->sink, r->classification, x, &label, &empty, err);
            if (st == PF_OK && empty)
                continue;
        }
        if (st == PF_ERR_FORMAT)
            return with_column(&at, err);
        if (st != PF_OK)
            return st;
        if (r->classification && label >= r->model->outputs) {
            char where[DATA_AT_TEXT];
            return pf_error_set_offset(err, PF_ERR_FORMAT, at.start,
                                       "%s: label %g is not a class of the model's %d outputs "
                                       "(column 1)",
                                       data_at_text(&at, where, sizeof where), label,
                                       r->model->outputs);
        }
        *y = (float)label;
        return PF_OK;
    }
}

int data_text_ended(const data_text_reader *r) {
    return r->done;
}

void data_text_close(data_text_reader *r) {
    if (!r)
        return;
    if (r->f)
        gzclose_r(r->f);
    pf_free(r->buf);
    pf_free(r);
}
