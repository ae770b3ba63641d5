/* stream.c - training examples streamed from their files (see stream.h), and the expansion of
 * data file entries.
 *
 * DESIGN. Each stream has a reader state, owned by the source's reader thread: the epoch whose
 * split order it follows, the split open (a reader of the data format behind the small interface
 * `split_format`: criteo.c's for criteo, data_text.c's for csv and libsvm, data_idx.c's for idx),
 * and `q`, the stream position of the next example it reads; and a ring under the source's mutex:
 * the examples already read for positions [ring_q, ring_q + filled). The trainer's gather takes
 * examples from the front of the ring (dropping what is behind them: a stream is read forwards); a
 * position outside the ring moves the ring there (`want`, a new generation) and the thread seeks:
 * forwards by reading on, backwards from the start of the epoch that holds the position. Each
 * split's example count is kept once it was read through, so a seek skips whole splits it knows and
 * reads again only the split it lands in. The thread fills the ring of every stream asked for since
 * the last seek, round robin, one example at a time outside the mutex; an example read for an older
 * generation is dropped. An error stops its stream at its position until the ring moves.
 */
#include "psflow/stream.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_internal.h"
#include "psflow/criteo.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/rng.h"

#define SPLIT_ORDER_STREAM 3000u /* stream j, epoch e: pf_rng(seed, 3000 + j) advanced per e */
#define RING_MIN           4096  /* examples read ahead per stream, at least */

/* --- entries ------------------------------------------------------------------------------- */

typedef struct path_list {
    char **v;
    int n, cap;
} path_list;

static pf_status add_path(path_list *l, const char *path, pf_error *err) {
    if (l->n >= PF_INPUT_MAX_FILES)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "the data entries name more than %d files",
                            PF_INPUT_MAX_FILES);
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        char **v = pf_realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = pf_strdup(path)))
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    l->n++;
    return PF_OK;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The data files of folder `dir`, sorted by name, appended to l. */
static pf_status add_folder(path_list *l, const char *dir, pf_error *err) {
    DIR *d = opendir(dir);
    if (!d)
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: cannot read the folder: %s", dir,
                            strerror(errno));
    int first = l->n;
    pf_status st = PF_OK;
    struct dirent *e;
    while (st == PF_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || ends_with(e->d_name, ".json"))
            continue;
        char path[4096];
        struct stat sb;
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path)
            st = pf_error_set(err, PF_ERR_INVALID, NULL, "%s/%s: path too long", dir, e->d_name);
        else if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
            st = add_path(l, path, err);
    }
    closedir(d);
    if (st == PF_OK && l->n == first)
        return pf_error_set(err, PF_ERR_NOT_FOUND, NULL, "%s: the folder holds no data file", dir);
    if (st == PF_OK)
        qsort(l->v + first, (size_t)(l->n - first), sizeof *l->v, by_name);
    return st;
}

static pf_status add_pattern(path_list *l, const char *pattern, pf_error *err) {
    glob_t g;
    int rc = glob(pattern, GLOB_ERR, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        globfree(&g);
        return pf_error_set(err, PF_ERR_NOT_FOUND, NULL, "%s: no file matches the pattern",
                            pattern);
    }
    if (rc != 0) {
        globfree(&g);
        return pf_error_set(err, rc == GLOB_NOSPACE ? PF_ERR_NOMEM : PF_ERR_IO, NULL,
                            "%s: cannot expand the pattern", pattern);
    }
    pf_status st = PF_OK; /* glob sorts its matches */
    for (size_t i = 0; i < g.gl_pathc && st == PF_OK; i++)
        st = add_path(l, g.gl_pathv[i], err);
    globfree(&g);
    return st;
}

pf_status pf_input_expand(char *const *entries, int n, char ***out, int *n_out, pf_error *err) {
    path_list l = {0};
    pf_status st = PF_OK;
    for (int i = 0; i < n && st == PF_OK; i++) {
        struct stat sb;
        if (strpbrk(entries[i], "*?["))
            st = add_pattern(&l, entries[i], err);
        else if (stat(entries[i], &sb) == 0 && S_ISDIR(sb.st_mode))
            st = add_folder(&l, entries[i], err);
        else
            st = add_path(&l, entries[i], err);
    }
    if (st != PF_OK) {
        pf_input_free(l.v, l.n);
        return st;
    }
    *out = l.v;
    *n_out = l.n;
    return PF_OK;
}

void pf_input_free(char **paths, int n) {
    for (int i = 0; paths && i < n; i++)
        pf_free(paths[i]);
    pf_free(paths);
}

/* --- split order --------------------------------------------------------------------------- */

void pf_stream_split_order(uint64_t seed, int stream, int64_t epoch, int n, int *order) {
    pf_rng rng;
    pf_rng_init(&rng, seed ^ ((uint64_t)epoch * 0x9e3779b97f4a7c15ULL),
                SPLIT_ORDER_STREAM + (uint64_t)stream);
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)pf_rng_below(&rng, (uint64_t)i + 1);
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* --- splits ------------------------------------------------------------------------------- */

/* A split: the lines of file `file` that start in [start, end) (end 0: to its end); for idx
 * data the records [start, end) of the pair paths[file] (images), paths[file + 1] (labels). */
typedef struct split {
    int file;
    uint64_t start, end;
} split;

/* --- the readers of a split, per format ------------------------------------------------------ */

typedef struct pf_stream_source source;

/* How a split of one data format is read: open_range (the lines of path that start in
 * [start, end), end 0 the file's end), next (one example into x and *y: PF_OK, PF_ERR_NOT_FOUND
 * at the end, PF_ERR_FORMAT for a bad line the reader may go on after unless it ended),
 * ended (nothing more to give), close (NULL is fine). */
typedef struct split_format {
    pf_status (*open_range)(const source *s, const char *path, uint64_t start, uint64_t end,
                            void **out, pf_error *err);
    pf_status (*next)(const source *s, void *r, float *x, float *y, pf_error *err);
    int (*ended)(const void *r);
    void (*close)(void *r);
} split_format;

/* --- one stream ---------------------------------------------------------------------------- */

typedef struct stream {
    int index;
    /* its splits (indices into the source's), example counts (-1 until read through once) */
    int n;
    int *splits;
    int64_t *count;
    int64_t epoch_len;    /* the sum once every split is counted, else -1 */
    int64_t *bad_seen;    /* per split: bad lines skipped and counted so far (data.on_error) */
    int64_t bad_in_split; /* reader thread: bad lines skipped in the open split */
    /* reader thread only */
    int *order;       /* the split order of `epoch` */
    int64_t epoch;    /* -1: none drawn yet */
    int at;           /* the split read: order[at] */
    int64_t in_split; /* examples read from it */
    int64_t q;        /* the stream position of the next example read */
    void *r;          /* the split open (the source's format), or NULL */
    float *row;       /* one example, read outside the mutex */
    /* under the source's mutex */
    float *ring_x, *ring_y; /* cap examples, position p in slot p mod cap; allocated when the
                               stream is first asked for (a process reads only its own) */
    int64_t ring_q, filled, cap;
    uint64_t gen; /* moved ring: what is read for an older generation is dropped */
    int active;   /* asked for: the thread reads ahead */
    int failed;   /* the example at err_q could not be read */
    int64_t err_q;
    pf_status err_status;
    char err_message[sizeof(((pf_error *)0)->message)];
} stream;

/* Leased mode (data.splits dynamic): one stream, stream 0, whose ring holds the examples of
 * the splits leased so far in lease order. Under the source's mutex: `items` the leases
 * (split, epoch) in order, of which the reader has opened or finished the first `read`;
 * `ends` the ring positions where leased splits ended (one per finished split, in order),
 * of which the first `emitted` were given to the trainer as done. Reader thread only: the
 * split open, and the bad lines counted per split (seen, in_split). */
typedef struct lease_item {
    uint32_t split;
    uint64_t epoch;
    int64_t end; /* the ring position after its last example, once read through; else -1 */
} lease_item;

typedef struct leased_state {
    lease_item *items;
    int64_t n, cap, read, emitted;
    int64_t *seen;    /* per split: bad lines counted so far */
    int64_t in_split; /* bad lines skipped in the split open */
    int64_t at_item;  /* the item whose split is open, or -1 */
} leased_state;

struct pf_stream_source {
    pf_model_spec model; /* a copy of the spec's */
    const split_format *format;
    int data_format, index_base; /* the spec's data.format and data.index_base */
    uint64_t seed;
    int n_streams, block, features, n_files, n_splits;
    char **paths;
    split *splits;
    stream *streams;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    /* data.on_error skip: at most max_bad distinct bad lines (-1: the first fails); under mu,
     * the count, those not yet taken (pf_stream_take_bad) and the last one's message */
    int64_t max_bad, bad_total, bad_new;
    pf_criteo_scaling scaling; /* data.stats: the numeric inputs' standardisation */
    int scaled;
    char bad_msg[sizeof(((pf_error *)0)->message)];
    leased_state *lease; /* data.splits dynamic: the splits leased (stream 0 reads them) */
};

/* criteo (criteo.c): each row as data_criteo_example lays it out for the model */
static pf_status criteo_open(const source *s, const char *path, uint64_t start, uint64_t end,
                             void **out, pf_error *err) {
    (void)s;
    pf_criteo_reader *r = NULL;
    pf_status st = pf_criteo_open_range(path, start, end, 0, &r, err);
    *out = r;
    return st;
}

static pf_status criteo_next(const source *s, void *r, float *x, float *y, pf_error *err) {
    pf_criteo_row row;
    pf_status rc = pf_criteo_next(r, &row, err);
    if (rc == PF_OK) {
        data_criteo_example(&s->model, s->scaled ? &s->scaling : NULL, &row, x);
        *y = (float)row.label;
    }
    return rc;
}

static int criteo_ended(const void *r) {
    return pf_criteo_ended(r);
}

static void criteo_close(void *r) {
    pf_criteo_close(r);
}

static const split_format criteo_format = {criteo_open, criteo_next, criteo_ended, criteo_close};

/* csv and libsvm (data_text.c): the whole-file readers' line parsing */
static pf_status text_open(const source *s, const char *path, uint64_t start, uint64_t end,
                           void **out, pf_error *err) {
    data_text_reader *r = NULL;
    pf_status st = data_text_open_range(s->data_format, &s->model, s->index_base, path, start, end,
                                        0, &r, err);
    *out = r;
    return st;
}

static pf_status text_next(const source *s, void *r, float *x, float *y, pf_error *err) {
    (void)s;
    return data_text_next(r, x, y, err);
}

static int text_ended(const void *r) {
    return data_text_ended(r);
}

static void text_close(void *r) {
    data_text_close(r);
}

static const split_format text_format = {text_open, text_next, text_ended, text_close};

/* idx (data_idx.c): path is the images file, the labels file the path after it */
static pf_status idx_open(const source *s, const char *path, uint64_t start, uint64_t end,
                          void **out, pf_error *err) {
    data_idx_reader *r = NULL;
    pf_status st =
        data_idx_open_range(path, s->paths[1], start, end, s->features,
                            s->model.type != PF_MODEL_LINEAR ? s->model.outputs : 0, &r, err);
    *out = r;
    return st;
}

static pf_status idx_next(const source *s, void *r, float *x, float *y, pf_error *err) {
    (void)s;
    return data_idx_next(r, x, y, err);
}

static int idx_ended(const void *r) {
    return data_idx_ended(r);
}

static void idx_close(void *r) {
    data_idx_close(r);
}

static const split_format idx_format = {idx_open, idx_next, idx_ended, idx_close};

static void close_split(const pf_stream_source *s, stream *st) {
    if (st->r)
        s->format->close(st->r);
    st->r = NULL;
}

/* Makes `epoch` the stream's epoch, its order drawn. */
static void set_epoch(const pf_stream_source *s, stream *st, int64_t epoch) {
    if (st->epoch != epoch)
        pf_stream_split_order(s->seed, st->index, epoch, st->n, st->order);
    st->epoch = epoch;
    st->at = 0;
    st->in_split = 0;
    st->bad_in_split = 0;
}

/* After the open split ended with `in_split` examples: counts it and moves to the next split
 * (the next epoch after the last). Error: a whole epoch without an example. */
static pf_status next_split(const pf_stream_source *s, stream *st, pf_error *err) {
    close_split(s, st);
    st->count[st->order[st->at]] = st->in_split;
    st->in_split = 0;
    st->bad_in_split = 0;
    if (++st->at < st->n)
        return PF_OK;
    int64_t sum = 0;
    for (int i = 0; i < st->n && sum >= 0; i++)
        sum = st->count[i] < 0 ? -1 : sum + st->count[i];
    st->epoch_len = sum;
    if (sum == 0)
        return pf_error_set(err, PF_ERR_FORMAT, NULL,
                            "stream %d: its %d split(s) hold no example (the first in %s)",
                            st->index, st->n, s->paths[s->splits[st->splits[0]].file]);
    set_epoch(s, st, st->epoch + 1);
    return PF_OK;
}

/* A bad line in the open split, described by err, skipped (data.on_error skip): counted the
 * first time the split's reading gets this far, and an error once more than max_bad_lines
 * were. */
static pf_status skip_bad(pf_stream_source *s, int64_t *seen, int64_t *in_split, pf_error *err) {
    if (++*in_split <= *seen)
        return PF_OK; /* read again (a rollback, a seek): counted already */
    *seen = *in_split;
    pthread_mutex_lock(&s->mu);
    int64_t total = ++s->bad_total;
    s->bad_new++;
    snprintf(s->bad_msg, sizeof s->bad_msg, "%s", err->message);
    pthread_mutex_unlock(&s->mu);
    if (total <= s->max_bad)
        return PF_OK;
    char last[sizeof err->message];
    snprintf(last, sizeof last, "%s", err->message);
    return pf_error_set(err, PF_ERR_FORMAT, NULL,
                        "more than %lld bad lines (data.max_bad_lines); the last: %s",
                        (long long)s->max_bad, last);
}

/* Reads the stream's next example into st->row (and *y), opening splits as needed; with
 * data.on_error skip, past bad lines (and past the corrupt rest of a gzip file: the split
 * ends there). */
static pf_status read_next(pf_stream_source *s, stream *st, float *y, pf_error *err) {
    for (;;) {
        if (!st->r) {
            const split *sp = &s->splits[st->splits[st->order[st->at]]];
            pf_status st_open =
                s->format->open_range(s, s->paths[sp->file], sp->start, sp->end, &st->r, err);
            if (st_open != PF_OK)
                return st_open;
        }
        pf_status rc = s->format->next(s, st->r, st->row, y, err);
        if (rc == PF_OK) {
            st->in_split++;
            st->q++;
            return PF_OK;
        }
        if (rc == PF_ERR_FORMAT && s->max_bad >= 0) {
            int ended = s->format->ended(st->r);
            if ((rc = skip_bad(s, &st->bad_seen[st->order[st->at]], &st->bad_in_split, err)) !=
                PF_OK)
                return rc;
            if (!ended)
                continue;
            rc = PF_ERR_NOT_FOUND;
        }
        if (rc != PF_ERR_NOT_FOUND)
            return rc;
        if ((rc = next_split(s, st, err)) != PF_OK)
            return rc;
    }
}

/* Positions the reader so that its next example is stream position `target`: from the start
 * of the epoch that holds it when it lies behind, skipping whole splits whose count is known,
 * then reading on. */
static pf_status seek(pf_stream_source *s, stream *st, int64_t target, pf_error *err) {
    if (target < st->q || st->epoch < 0) {
        close_split(s, st);
        int64_t epoch = st->epoch_len > 0 ? target / st->epoch_len : 0;
        set_epoch(s, st, epoch);
        st->q = st->epoch_len > 0 ? epoch * st->epoch_len : 0;
    }
    while (st->q < target) {
        int64_t known = st->count[st->order[st->at]];
        if (known >= 0 && target - st->q >= known - st->in_split) {
            st->q += known - st->in_split;
            st->in_split = known;
            pf_status rc = next_split(s, st, err);
            if (rc != PF_OK)
                return rc;
            continue;
        }
        float y;
        pf_status rc = read_next(s, st, &y, err);
        if (rc != PF_OK)
            return rc;
    }
    return PF_OK;
}

/* --- the reader thread --------------------------------------------------------------------- */

/* A stream the thread may read ahead for (under mu), round robin from *next; NULL if none. */
static stream *pick(pf_stream_source *s, int *next) {
    for (int i = 0; i < s->n_streams; i++) {
        stream *st = &s->streams[(*next + i) % s->n_streams];
        if (st->active && !st->failed && st->filled < st->cap) {
            *next = (int)(st - s->streams + 1) % s->n_streams;
            return st;
        }
    }
    return NULL;
}

/* Leased mode: reads the leased splits in lease order into stream 0's ring, recording where
 * each ended; stops at a read error until the source is closed. */
static void reader_leased(pf_stream_source *s) {
    stream *st = &s->streams[0];
    leased_state *L = s->lease;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        if (st->failed || st->filled >= st->cap || (L->at_item < 0 && L->read >= L->n)) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        if (L->at_item < 0) {
            L->at_item = L->read++;
            L->in_split = 0;
        }
        uint32_t idx = L->items[L->at_item].split;
        pthread_mutex_unlock(&s->mu);
        pf_error err;
        pf_error_clear(&err);
        pf_status rc = PF_OK;
        float y = 0;
        if (!st->r) {
            const split *sp = &s->splits[idx];
            rc = s->format->open_range(s, s->paths[sp->file], sp->start, sp->end, &st->r, &err);
        }
        if (rc == PF_OK)
            rc = s->format->next(s, st->r, st->row, &y, &err);
        int skipped = 0;
        if (rc == PF_ERR_FORMAT && s->max_bad >= 0) {
            int ended = s->format->ended(st->r);
            rc = skip_bad(s, &L->seen[idx], &L->in_split, &err);
            if (rc == PF_OK)
                skipped = !ended, rc = ended ? PF_ERR_NOT_FOUND : PF_OK;
        }
        pthread_mutex_lock(&s->mu);
        if (rc == PF_OK && !skipped) {
            int64_t slot = (st->ring_q + st->filled) % st->cap;
            memcpy(st->ring_x + slot * s->features, st->row, (size_t)s->features * sizeof(float));
            st->ring_y[slot] = y;
            st->filled++;
        } else if (rc == PF_ERR_NOT_FOUND) {
            close_split(s, st);
            L->items[L->at_item].end = st->ring_q + st->filled;
            L->at_item = -1;
        } else if (rc != PF_OK) {
            close_split(s, st);
            st->failed = 1;
            st->err_status = rc;
            snprintf(st->err_message, sizeof st->err_message, "%s", err.message);
        }
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
}

static void *reader_main(void *arg) {
    pf_stream_source *s = arg;
    if (s->lease) {
        reader_leased(s);
        return NULL;
    }
    int next = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        stream *st = pick(s, &next);
        if (!st) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        int64_t pos = st->ring_q + st->filled;
        uint64_t gen = st->gen;
        pthread_mutex_unlock(&s->mu);
        pf_error err;
        pf_error_clear(&err);
        float y = 0;
        pf_status rc = st->q == pos && st->epoch >= 0 ? PF_OK : seek(s, st, pos, &err);
        if (rc == PF_OK)
            rc = read_next(s, st, &y, &err);
        pthread_mutex_lock(&s->mu);
        if (gen != st->gen)
            continue; /* the ring moved meanwhile: read again from where it is now */
        if (rc != PF_OK) {
            close_split(s, st);
            st->epoch = -1; /* the next seek starts over */
            st->failed = 1;
            st->err_q = pos;
            st->err_status = rc;
            snprintf(st->err_message, sizeof st->err_message, "%s", err.message);
        } else {
            int64_t slot = pos % st->cap;
            memcpy(st->ring_x + slot * s->features, st->row, (size_t)s->features * sizeof(float));
            st->ring_y[slot] = y;
            st->filled++;
        }
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* --- splits of the source -------------------------------------------------------------- */

/* The size of path and whether it is gzip (by its magic bytes), or an error naming it. */
static pf_status probe(const char *path, uint64_t *size, int *gzip, pf_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: cannot open: %s", path, strerror(errno));
    unsigned char magic[2] = {0, 0};
    size_t got = fread(magic, 1, 2, f);
    int seek_ok = fseeko(f, 0, SEEK_END) == 0;
    off_t end = seek_ok ? ftello(f) : -1;
    fclose(f);
    if (end < 0)
        return pf_error_set(err, PF_ERR_IO, NULL, "%s: cannot tell its size", path);
    *size = (uint64_t)end;
    *gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    return PF_OK;
}

/* How many ranges of at most `target` bytes a plain file of `size` bytes is cut into. */
static uint64_t ranges_of(uint64_t size, uint64_t target) {
    return size <= target ? 1 : (size + target - 1) / target;
}

/* Cuts the files into splits: a gzip file whole, a plain one into ranges of about
 * split_bytes (cut anywhere: the reader aligns them on lines), smaller when there would be
 * fewer splits than streams. */
static pf_status make_splits(pf_stream_source *s, uint64_t split_bytes, pf_error *err) {
    uint64_t *size = pf_mallocarray((size_t)s->n_files, sizeof *size), plain = 0;
    int *gzip = pf_mallocarray((size_t)s->n_files, sizeof *gzip), n_gzip = 0;
    pf_status st = size && gzip ? PF_OK : pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    for (int i = 0; st == PF_OK && i < s->n_files; i++)
        if ((st = probe(s->paths[i], &size[i], &gzip[i], err)) == PF_OK) {
            n_gzip += gzip[i];
            plain += gzip[i] ? 0 : size[i];
        }
    uint64_t target = split_bytes, n = 0;
    for (int pass = 0; st == PF_OK && pass < 2; pass++) {
        n = (uint64_t)n_gzip;
        for (int i = 0; i < s->n_files; i++)
            n += gzip[i] ? 0 : ranges_of(size[i], target);
        if (n >= (uint64_t)s->n_streams || plain == 0)
            break;
        uint64_t finer = plain / (uint64_t)s->n_streams; /* every stream gets a range */
        target = finer > 0 ? finer : 1;
    }
    if (st == PF_OK && n < (uint64_t)s->n_streams)
        st = pf_error_set(err, PF_ERR_SPEC, "/data/train",
                          "/data/train: streamed input gives each of the %d replicas that train "
                          "its own splits (a gzip file is one, a plain file is cut into ranges), "
                          "and the entries make %" PRIu64 ": give at least %d gzip files, or "
                          "plain ones",
                          s->n_streams, n, s->n_streams);
    if (st == PF_OK && n > (uint64_t)PF_INPUT_MAX_FILES * 64)
        st = pf_error_set(err, PF_ERR_SPEC, "/data/split_mb",
                          "/data/split_mb: %" PRIu64 " splits; raise split_mb", n);
    if (st == PF_OK && !(s->splits = pf_mallocarray((size_t)n, sizeof *s->splits)))
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    for (int i = 0; st == PF_OK && i < s->n_files; i++) {
        uint64_t k = gzip[i] ? 1 : ranges_of(size[i], target);
        for (uint64_t r = 0; r < k; r++)
            s->splits[s->n_splits++] =
                (split){i, k > 1 ? size[i] / k * r + size[i] % k * r / k : 0,
                        k > 1 && r + 1 < k ? size[i] / k * (r + 1) + size[i] % k * (r + 1) / k : 0};
    }
    pf_free(size);
    pf_free(gzip);
    return st;
}

/* Cuts an IDX pair (one entry of the splits, file 0) into ranges of records holding about
 * split_bytes of pixels, more when there would be fewer ranges than streams. Reads the headers
 * only. */
static pf_status make_idx_splits(pf_stream_source *s, uint64_t split_bytes, pf_error *err) {
    uint64_t n = 0;
    int pixels = 0;
    pf_status st = data_idx_probe(s->paths[0], s->paths[1], &n, &pixels, err);
    if (st != PF_OK)
        return st;
    if (pixels != s->features)
        return pf_error_set(err, PF_ERR_SPEC, "/model/inputs",
                            "/model/inputs: data has %d features but model.inputs is %d", pixels,
                            s->features);
    uint64_t per = split_bytes / (uint64_t)pixels;
    per = per > 0 ? per : 1;
    uint64_t k = (n + per - 1) / per;
    if (k < (uint64_t)s->n_streams) /* every stream gets a range */
        k = n < (uint64_t)s->n_streams ? n : (uint64_t)s->n_streams;
    if (k < (uint64_t)s->n_streams)
        return pf_error_set(err, PF_ERR_SPEC, "/data/train",
                            "/data/train: streamed input gives each of the %d replicas that train "
                            "its own splits, and %s holds %" PRIu64 " records: fewer than the "
                            "replicas",
                            s->n_streams, s->paths[0], n);
    if (k > (uint64_t)PF_INPUT_MAX_FILES * 64)
        return pf_error_set(err, PF_ERR_SPEC, "/data/split_mb",
                            "/data/split_mb: %" PRIu64 " splits; raise split_mb", k);
    if (!(s->splits = pf_mallocarray((size_t)k, sizeof *s->splits)))
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    for (uint64_t r = 0; r < k; r++) /* n <= 2^26 and k <= n: n * (r + 1) fits */
        s->splits[s->n_splits++] = (split){0, n * r / k, n * (r + 1) / k};
    return PF_OK;
}

/* The pair of idx entries, taken as they are: an images file, then a labels file. */
static pf_status idx_paths(pf_stream_source *s, const pf_data_spec *d, pf_error *err) {
    if (d->n_train != 2)
        return pf_error_set(err, PF_ERR_SPEC, "/data/train",
                            "/data/train: streamed idx data is one pair of files (images, "
                            "labels), split by record ranges; folders and patterns are not "
                            "expanded; got %d entries",
                            d->n_train);
    path_list l = {0};
    pf_status st = add_path(&l, d->train[0], err);
    if (st == PF_OK)
        st = add_path(&l, d->train[1], err);
    s->paths = l.v;
    s->n_files = l.n;
    return st;
}

/* --- the source ---------------------------------------------------------------------------- */

static pf_status init_streams(pf_stream_source *s, int cap, pf_error *err) {
    for (int j = 0; j < s->n_streams; j++) {
        stream *st = &s->streams[j];
        st->index = j;
        st->n = (s->n_splits - j + s->n_streams - 1) / s->n_streams;
        st->splits = pf_mallocarray((size_t)st->n, sizeof *st->splits);
        st->count = pf_mallocarray((size_t)st->n, sizeof *st->count);
        st->order = pf_mallocarray((size_t)st->n, sizeof *st->order);
        st->bad_seen = pf_calloc((size_t)st->n, sizeof *st->bad_seen);
        st->row = pf_mallocarray((size_t)s->features, sizeof(float));
        st->cap = cap;
        if (!st->splits || !st->bad_seen || !st->count || !st->order || !st->row)
            return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory for the input streams");
        for (int i = 0; i < st->n; i++) {
            st->splits[i] = j + i * s->n_streams;
            st->count[i] = -1;
        }
        st->epoch_len = -1;
        st->epoch = -1;
    }
    return PF_OK;
}

/* Leased mode: stream 0's ring allocated up front (it is the only one read), no split
 * leased yet. */
static pf_status init_leased(pf_stream_source *s, pf_error *err) {
    stream *st = &s->streams[0];
    s->lease = pf_calloc(1, sizeof *s->lease);
    if (s->lease) {
        s->lease->seen = pf_calloc((size_t)s->n_splits, sizeof *s->lease->seen);
        s->lease->at_item = -1;
    }
    st->ring_x = pf_mallocarray((size_t)st->cap * (size_t)s->features, sizeof(float));
    st->ring_y = pf_mallocarray((size_t)st->cap, sizeof(float));
    if (!s->lease || !s->lease->seen || !st->ring_x || !st->ring_y)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory for the input read-ahead");
    st->active = 1;
    return PF_OK;
}

pf_status pf_stream_open(const pf_job_spec *spec, int streams, int block, pf_stream_source **out,
                         pf_error *err) {
    *out = NULL;
    if (streams < 1 || block < 1)
        return pf_error_set(err, PF_ERR_INVALID, NULL, "streams (%d) and block (%d) must be >= 1",
                            streams, block);
    int leased = spec->data.splits == PF_SPLITS_DYNAMIC;
    pf_stream_source *s = pf_calloc(1, sizeof *s);
    if (!s)
        return pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->model = spec->model;
    s->seed = spec->training.seed;
    s->n_streams = streams;
    s->block = block;
    s->features = pf_model_input_width(&spec->model);
    s->max_bad = spec->data.on_error == PF_ON_ERROR_SKIP ? spec->data.max_bad_lines : -1;
    s->data_format = (int)spec->data.format;
    s->index_base = spec->data.index_base;
    s->format = spec->data.format == PF_DATA_CRITEO ? &criteo_format
                : spec->data.format == PF_DATA_IDX  ? &idx_format
                                                    : &text_format;
    pf_status st = PF_OK;
    if (leased)
        s->n_streams = streams = 1;
    int idx = spec->data.format == PF_DATA_IDX;
    if (spec->data.format != PF_DATA_CRITEO && spec->data.format != PF_DATA_CSV &&
        spec->data.format != PF_DATA_LIBSVM && !idx)
        st = pf_error_set(err, PF_ERR_SPEC, "/data/streaming",
                          "/data/streaming: only criteo, csv, libsvm and idx data are streamed");
    if (st == PF_OK)
        st = idx ? idx_paths(s, &spec->data, err)
                 : pf_input_expand(spec->data.train, spec->data.n_train, &s->paths, &s->n_files,
                                   err);
    if (st == PF_OK && spec->data.format == PF_DATA_CRITEO && spec->data.n_stats &&
        (st = pf_criteo_scaling_load(spec->data.stats[0], &s->scaling, err)) == PF_OK)
        s->scaled = 1;
    if (st == PF_OK)
        st = idx ? make_idx_splits(s, (uint64_t)spec->data.split_mb << 20, err)
                 : make_splits(s, (uint64_t)spec->data.split_mb << 20, err);
    if (st == PF_OK && !(s->streams = pf_calloc((size_t)streams, sizeof *s->streams)))
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    int cap = 4 * block > RING_MIN ? 4 * block : RING_MIN;
    if (st == PF_OK)
        st = init_streams(s, cap, err);
    if (st == PF_OK && leased)
        st = init_leased(s, err);
    if (st == PF_OK && pthread_create(&s->thread, NULL, reader_main, s) != 0)
        st = pf_error_set(err, PF_ERR_NOMEM, NULL, "cannot start the input reader thread");
    if (st != PF_OK) {
        pf_stream_close(s);
        return st;
    }
    s->started = 1;
    *out = s;
    return PF_OK;
}

/* Copies stream st's example at stream position q into x, *y (under mu, waiting for the
 * reader), dropping what the ring holds before it. */
static pf_status take(pf_stream_source *s, stream *st, int64_t q, float *x, float *y,
                      pf_error *err) {
    if (!st->ring_x) { /* the first time: the reader thread leaves inactive streams alone */
        st->ring_x = pf_mallocarray((size_t)st->cap * (size_t)s->features, sizeof(float));
        st->ring_y = pf_mallocarray((size_t)st->cap, sizeof(float));
        if (!st->ring_x || !st->ring_y) {
            pf_free(st->ring_x);
            pf_free(st->ring_y);
            st->ring_x = st->ring_y = NULL;
            return pf_error_set(err, PF_ERR_NOMEM, NULL,
                                "out of memory for the read-ahead of input stream %d", st->index);
        }
    }
    if (!st->active || q < st->ring_q || q > st->ring_q + st->filled + st->cap) {
        st->ring_q = q; /* a seek: a new generation, read from q on */
        st->filled = 0;
        st->failed = 0;
        st->gen++;
        st->active = 1;
        pthread_cond_broadcast(&s->cv);
    }
    for (;;) {
        if (q < st->ring_q + st->filled) {
            int64_t slot = q % st->cap;
            memcpy(x, st->ring_x + slot * s->features, (size_t)s->features * sizeof(float));
            *y = st->ring_y[slot];
            st->filled -= q + 1 - st->ring_q;
            st->ring_q = q + 1;
            pthread_cond_broadcast(&s->cv);
            return PF_OK;
        }
        /* q is not read yet: what was read before it is not needed (a stream is read
         * forwards), and its room goes to the reader */
        st->ring_q += st->filled;
        st->filled = 0;
        if (st->failed && st->err_q <= q)
            return pf_error_set(err, st->err_status, NULL, "%s", st->err_message);
        pthread_cond_broadcast(&s->cv);
        pthread_cond_wait(&s->cv, &s->mu); /* the reader thread signals every example */
    }
}

pf_status pf_stream_gather(pf_stream_source *s, int64_t start, int count, float *x, float *y,
                           int32_t *labels, pf_error *err) {
    if (s->lease)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "leased input (data.splits dynamic) is taken, not gathered");
    pf_status rc = PF_OK;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < count && rc == PF_OK; i++) {
        int64_t p = start + i, k = p / s->block;
        stream *st = &s->streams[k % s->n_streams];
        int64_t q = k / s->n_streams * s->block + p % s->block;
        rc = take(s, st, q, x + (size_t)i * (size_t)s->features, &y[i], err);
        if (rc == PF_OK && labels)
            labels[i] = (int32_t)y[i];
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* --- leased splits ------------------------------------------------------------------------ */

int pf_stream_leased(const pf_stream_source *s) {
    return s->lease != NULL;
}

pf_status pf_stream_lease_add(pf_stream_source *s, uint32_t index, uint64_t epoch, pf_error *err) {
    if (!s->lease || index >= (uint32_t)s->n_splits)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "split %" PRIu32 " leased: the input has %d splits%s", index,
                            s->n_splits, s->lease ? "" : " and is not leased");
    leased_state *L = s->lease;
    pf_status st = PF_OK;
    pthread_mutex_lock(&s->mu);
    if (L->n == L->cap) {
        int64_t cap = L->cap ? L->cap * 2 : 16;
        lease_item *v = pf_realloc(L->items, (size_t)cap * sizeof *v);
        if (v) {
            L->items = v;
            L->cap = cap;
        } else {
            st = pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory for the leased splits");
        }
    }
    if (st == PF_OK) {
        L->items[L->n++] = (lease_item){index, epoch, -1};
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

int64_t pf_stream_leased_open(pf_stream_source *s) {
    if (!s->lease)
        return 0;
    pthread_mutex_lock(&s->mu);
    int64_t n = s->lease->n - s->lease->emitted;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Moves the leased splits whose examples were all taken to done (under mu). */
static void emit_ends(pf_stream_source *s, pf_stream_split_done *done, int max_done, int *n_done) {
    leased_state *L = s->lease;
    stream *st = &s->streams[0];
    while (*n_done < max_done && L->emitted < L->n && L->items[L->emitted].end >= 0 &&
           L->items[L->emitted].end <= st->ring_q) {
        done[(*n_done)++] =
            (pf_stream_split_done){L->items[L->emitted].split, L->items[L->emitted].epoch};
        L->emitted++;
    }
    /* the leases given out are dropped, so that a long job's list does not grow: the reader
     * is at or past `emitted` (a split is done only once it was read through) */
    if (L->emitted >= 1024 && L->emitted * 2 >= L->n) {
        int64_t k = L->emitted;
        memmove(L->items, L->items + k, (size_t)(L->n - k) * sizeof *L->items);
        L->n -= k;
        L->read -= k;
        L->emitted = 0;
        if (L->at_item >= 0)
            L->at_item -= k;
    }
}

pf_status pf_stream_take(pf_stream_source *s, int count, float *x, float *y, int32_t *labels,
                         int *got, pf_stream_split_done *done, int max_done, int *n_done,
                         pf_error *err) {
    *got = 0;
    *n_done = 0;
    if (!s->lease)
        return pf_error_set(err, PF_ERR_INVALID, NULL,
                            "this input is not leased (data.splits static): gather it");
    leased_state *L = s->lease;
    stream *st = &s->streams[0];
    pf_status rc = PF_OK;
    pthread_mutex_lock(&s->mu);
    while (*got < count) {
        emit_ends(s, done, max_done, n_done);
        if (*n_done == max_done)
            break;
        if (st->filled > 0) {
            int64_t slot = st->ring_q % st->cap;
            memcpy(x + (size_t)*got * (size_t)s->features, st->ring_x + slot * s->features,
                   (size_t)s->features * sizeof(float));
            y[*got] = st->ring_y[slot];
            if (labels)
                labels[*got] = (int32_t)st->ring_y[slot];
            st->ring_q++;
            st->filled--;
            (*got)++;
            pthread_cond_broadcast(&s->cv);
            continue;
        }
        if (st->failed) {
            rc = pf_error_set(err, st->err_status, NULL, "%s", st->err_message);
            break;
        }
        if (L->emitted == L->n)
            break; /* every leased split taken through */
        pthread_cond_wait(&s->cv, &s->mu);
    }
    if (rc == PF_OK)
        emit_ends(s, done, max_done, n_done);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int pf_stream_features(const pf_stream_source *s) {
    return s->features;
}

int pf_stream_files(const pf_stream_source *s) {
    return s->n_files;
}

int64_t pf_stream_take_bad(pf_stream_source *s, int64_t *total, char *last, size_t len) {
    pthread_mutex_lock(&s->mu);
    int64_t n = s->bad_new;
    s->bad_new = 0;
    *total = s->bad_total;
    if (last && len)
        snprintf(last, len, "%s", s->bad_msg);
    pthread_mutex_unlock(&s->mu);
    return n;
}

int pf_stream_splits(const pf_stream_source *s) {
    return s->n_splits;
}

void pf_stream_close(pf_stream_source *s) {
    if (!s)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    for (int j = 0; s->streams && j < s->n_streams; j++) {
        stream *st = &s->streams[j];
        close_split(s, st);
        pf_free(st->splits);
        pf_free(st->bad_seen);
        pf_free(st->count);
        pf_free(st->order);
        pf_free(st->row);
        pf_free(st->ring_x);
        pf_free(st->ring_y);
    }
    pf_free(s->streams);
    if (s->lease) {
        pf_free(s->lease->items);
        pf_free(s->lease->seen);
        pf_free(s->lease);
    }
    pf_input_free(s->paths, s->n_files);
    pf_free(s->splits);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pf_free(s);
}
