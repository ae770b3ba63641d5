/* test_store.c - the coordinator's SQLite store (coordinator/store.c) on a file in a temporary
 * folder: a cluster saved, closed and loaded again is the same cluster (and carries on: its
 * agents get the same assignments and fresh leases); deletions are stored and rolled-back
 * changes are not; metrics are downsampled to about max_points; the event log's filters and
 * ids; checkpoints; migrations that run once (schema 4 evaluations gain null auc and
 * calibration) and a schema newer than the code refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <sqlite3.h> /* only to write a file as an older psflow did */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coordinator/cluster.h"
#include "coordinator/cluster_json.h"
#include "coordinator/cluster_queues.h"
#include "psflow/mem.h"
#include "psflow/spec.h"
#include "coordinator/store.h"

#define T0    1763805600.0 /* 2025-11-22T10:00:00Z: test times are offsets from it */
#define LEASE 10.0

typedef struct fixture {
    char dir[64];
    char path[128]; /* dir/coord.db */
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof fx->dir, "/tmp/psflow-store-XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    snprintf(fx->path, sizeof fx->path, "%s/coord.db", fx->dir);
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    static const char *const suffixes[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        char p[160];
        snprintf(p, sizeof p, "%s%s", fx->path, suffixes[i]);
        unlink(p);
    }
    int rc = rmdir(fx->dir);
    free(fx);
    return rc;
}

/* --- helpers ---------------------------------------------------------------------------------- */

static coord_store *open_store(const fixture *fx) {
    coord_store *s = NULL;
    pf_error err;
    pf_status st = coord_store_open(fx->path, &s, &err);
    if (st != PF_OK)
        fail_msg("open %s: %s", fx->path, err.message);
    return s;
}

/* Writes what changed in c in one transaction, as coord_commit does, then drops what was
 * deleted. */
static void save(coord_store *s, coord_cluster *c) {
    assert_int_equal(coord_store_begin(s), PF_OK);
    assert_int_equal(coord_store_save(s, c), PF_OK);
    assert_int_equal(coord_store_commit(s), PF_OK);
    coord_cluster_reap(c);
}

static void load(coord_store *s, coord_cluster *c, double now) {
    coord_cluster_init(c, LEASE);
    pf_error err;
    pf_status st = coord_store_load(s, c, now, &err);
    if (st != PF_OK)
        fail_msg("load: %s", err.message);
}

/* A linear job `name` with `ps` ps and `workers` worker tasks, submitted at `now`. */
static coord_job *submit(coord_cluster *c, const char *name, int ps, int workers, double now) {
    char text[512];
    snprintf(text, sizeof text,
             "{\"name\": \"%s\", \"replicas\": {\"ps\": %d, \"worker\": %d},"
             " \"model\": {\"type\": \"linear\", \"inputs\": 1},"
             " \"data\": {\"format\": \"synthetic_linear\"}}",
             name, ps, workers);
    pf_job_spec spec;
    pf_error err;
    if (pf_job_spec_parse(text, strlen(text), &spec, &err) != PF_OK)
        fail_msg("spec: %s", err.message);
    coord_job *j = NULL;
    int created = 0;
    assert_int_equal(coord_job_submit(c, &spec, now, &j, &created, &err), PF_OK);
    assert_int_equal(created, 1);
    pf_job_spec_deinit(&spec);
    return j;
}

static coord_node *add_node(coord_cluster *c, const char *id, const char *role, double now) {
    char address[COORD_ADDR_MAX];
    snprintf(address, sizeof address, "%s.test:2222", id);
    coord_node *n = NULL;
    int created = 0;
    assert_int_equal(
        coord_node_register(c, id, role, address, "0.1.0", (int64_t)3 << 30, now, &n, &created),
        PF_OK);
    return n;
}

static void report(coord_cluster *c, coord_node *n, const char *state, double now) {
    json_t *r = json_pack("{s:s, s:s, s:i, s:s, s:i}", "state", state, "job", n->job, "generation",
                          n->generation, "type", n->type, "index", n->index);
    coord_node_heartbeat_json(c, n, r, now);
    json_decref(r);
}

/* Compact JSON with sorted keys (new string, free()). */
static char *text_of(json_t *v) {
    assert_non_null(v);
    char *t = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    json_decref(v);
    assert_non_null(t);
    return t;
}

static void assert_same_json(json_t *a, json_t *b) {
    char *x = text_of(a), *y = text_of(b);
    assert_string_equal(x, y);
    free(x);
    free(y);
}

/* Asserts that `loaded` (read back at `now`) holds what `saved` held. */
static void assert_same_cluster(const coord_cluster *saved, const coord_cluster *loaded,
                                double now) {
    assert_int_equal(loaded->n_jobs, saved->n_jobs);
    for (int i = 0; i < saved->n_jobs; i++) {
        const coord_job *a = saved->jobs[i];
        const coord_job *b = coord_job_find(loaded, a->name);
        if (!b)
            fail_msg("job %s was not loaded", a->name);
        assert_string_equal(b->spec_json, a->spec_json);
        assert_int_equal(b->phase, a->phase);
        assert_false(b->dirty);
        assert_same_json(coord_job_json(a, now), coord_job_json(b, now));
        assert_same_json(coord_job_summary_json(a), coord_job_summary_json(b));
        assert_int_equal(b->n_tasks, a->n_tasks);
        for (int k = 0; k < a->n_tasks; k++) {
            const coord_task *x = &a->tasks[k], *y = &b->tasks[k];
            assert_string_equal(y->type, x->type);
            assert_int_equal(y->index, x->index);
            assert_string_equal(y->node_id, x->node_id);
            assert_string_equal(y->address, x->address);
            assert_int_equal(y->state, x->state);
            assert_int_equal(y->incarnation, x->incarnation);
            assert_int_equal(y->restarts, x->restarts);
            assert_int_equal(y->step, x->step);
            assert_true(y->last_heartbeat == (x->node_id[0] ? now : 0));
        }
    }
    assert_int_equal(loaded->n_nodes, saved->n_nodes);
    for (int i = 0; i < saved->n_nodes; i++) {
        const coord_node *a = saved->nodes[i];
        const coord_node *b = coord_node_find(loaded, a->id);
        if (!b)
            fail_msg("node %s was not loaded", a->id);
        assert_string_equal(b->role, a->role);
        assert_string_equal(b->address, a->address);
        assert_string_equal(b->version, a->version);
        assert_true(b->memory == a->memory && b->memory == (int64_t)3 << 30);
        assert_true(b->registered == a->registered);
        assert_int_equal(b->lost, a->lost);
        assert_int_equal(b->busy, a->busy);
        assert_string_equal(b->job, a->job);
        assert_int_equal(b->generation, a->generation);
        assert_string_equal(b->type, a->type);
        assert_int_equal(b->index, a->index);
        assert_string_equal(b->draining, a->draining);
        assert_true(b->last_heartbeat == now); /* a fresh lease */
        assert_false(b->dirty);
        assert_same_json(coord_node_assignment(saved, a), coord_node_assignment(loaded, b));
    }
}

/* --- schema ----------------------------------------------------------------------------------- */

/* Migrations run once: opening the same file again finds it migrated and keeps its rows. A
 * file that cannot be opened is an I/O error naming it. */
static void test_open_and_migrate(void **state) {
    fixture *fx = *state;
    coord_store *s = open_store(fx);
    int version = coord_store_schema_version(s);
    assert_true(version >= 1);
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    submit(&c, "kept", 1, 1, T0);
    save(s, &c);
    coord_cluster_deinit(&c);
    coord_store_close(s);

    for (int i = 0; i < 2; i++) {
        s = open_store(fx);
        assert_int_equal(coord_store_schema_version(s), version);
        load(s, &c, T0 + 1);
        assert_int_equal(c.n_jobs, 1);
        assert_non_null(coord_job_find(&c, "kept"));
        coord_cluster_deinit(&c);
        coord_store_close(s);
    }

    char missing[192];
    snprintf(missing, sizeof missing, "%s/no-such-folder/coord.db", fx->dir);
    pf_error err;
    assert_int_equal(coord_store_open(missing, &s, &err), PF_ERR_IO);
    assert_null(s);
    assert_non_null(strstr(err.message, missing));
}

/* A database written by a newer psflow (a higher schema version) is refused, not changed. */
static void test_newer_schema_refused(void **state) {
    fixture *fx = *state;
    coord_store *s = open_store(fx);
    int version = coord_store_schema_version(s);
    coord_store_close(s); /* the last connection checkpoints the WAL into the file */

    /* The SQLite file format keeps user_version at byte offset 60, big-endian. */
    FILE *f = fopen(fx->path, "r+b");
    assert_non_null(f);
    unsigned char be[4] = {0, 0, 0, (unsigned char)(version + 1)};
    assert_int_equal(fseek(f, 60, SEEK_SET), 0);
    assert_int_equal(fwrite(be, 1, 4, f), 4);
    assert_int_equal(fclose(f), 0);

    pf_error err;
    s = NULL;
    assert_int_equal(coord_store_open(fx->path, &s, &err), PF_ERR_UNSUPPORTED);
    assert_null(s);
    assert_non_null(strstr(err.message, "newer"));
}

/* A file of schema 4 (evals without auc and calibration) opens migrated: its evaluations read
 * back with null test_auc and test_calibration, new ones keep theirs. */
static void test_eval_columns_migrated(void **state) {
    fixture *fx = *state;
    coord_store *s = open_store(fx);
    int version = coord_store_schema_version(s);
    assert_true(version >= 5);
    coord_store_close(s);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(fx->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "ALTER TABLE evals DROP COLUMN calibration;"
                                  "ALTER TABLE evals DROP COLUMN auc;"
                                  "DROP TABLE queues;" /* schema 6 */
                                  "INSERT INTO evals (job, task, incarnation, step, time, accuracy,"
                                  "  test_loss) VALUES ('q', 'chief', 1, 5, 1.0, 0.7, 0.6);"
                                  "PRAGMA user_version = 4;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);

    s = open_store(fx);
    assert_int_equal(coord_store_schema_version(s), version);
    json_t *evals =
        json_pack("[{s:i, s:f, s:f, s:f, s:f, s:f}]", "step", 10, "time", T0, "accuracy", 0.8,
                  "test_loss", 0.45, "test_auc", 0.75, "test_calibration", 1.05);
    assert_int_equal(coord_store_begin(s), PF_OK);
    assert_int_equal(coord_store_add_metrics(s, "q", "chief", 1, NULL, evals, 20000), PF_OK);
    assert_int_equal(coord_store_commit(s), PF_OK);
    json_decref(evals);
    json_t *m = coord_store_metrics(s, "q", 0, 100);
    json_t *ev = json_object_get(m, "evals");
    assert_int_equal(json_array_size(ev), 2);
    json_t *old = json_array_get(ev, 0), *now = json_array_get(ev, 1);
    assert_int_equal(json_integer_value(json_object_get(old, "step")), 5);
    assert_true(json_is_null(json_object_get(old, "test_auc")));
    assert_true(json_is_null(json_object_get(old, "test_calibration")));
    assert_true(json_real_value(json_object_get(old, "test_loss")) == 0.6);
    assert_true(json_real_value(json_object_get(now, "test_auc")) == 0.75);
    assert_true(json_real_value(json_object_get(now, "test_calibration")) == 1.05);
    json_decref(m);
    coord_store_close(s);
}

/* --- jobs, tasks, nodes ----------------------------------------------------------------------- */

/* A cluster with a running job (and its metrics and restarts), a job waiting for agents, a
 * cancelled job, an idle and a lost agent reads back the same, at times with sub-millisecond
 * digits; the loaded cluster gives its agents the same assignments and fresh leases. */
static void test_save_load_round_trip(void **state) {
    fixture *fx = *state;
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_job *alpha = submit(&c, "alpha", 2, 2, T0 + 0.1111);
    coord_node *nodes[4] = {
        add_node(&c, "ps-a", "ps", T0 + 1.2345), add_node(&c, "ps-b", "ps", T0 + 1.3456),
        add_node(&c, "w-a", "worker", T0 + 1.4567), add_node(&c, "w-b", "worker", T0 + 1.5678)};
    assert_int_equal(alpha->phase, COORD_RUNNING);
    /* ps-a restarts (its ps held variables): alpha runs again as generation 2. */
    add_node(&c, "ps-a", "ps", T0 + 2.0009);
    assert_int_equal(alpha->generation, 2);
    for (int i = 0; i < 4; i++)
        report(&c, nodes[i], "running", T0 + 2.3456);
    json_t *points = json_pack("[{s:i, s:f, s:f, s:f}]", "step", 7, "time", T0 + 3, "loss", 0.25,
                               "examples_per_sec", 123.5);
    coord_job_record_metrics_json(&c, alpha, "worker-0", points, NULL, T0 + 3.0007);
    json_decref(points);

    coord_job *beta = submit(&c, "beta", 2, 1, T0 + 4.5678);
    coord_job *gamma = submit(&c, "gamma", 1, 1, T0 + 4.6);
    coord_job_cancel(&c, gamma, T0 + 4.7891);
    add_node(&c, "w-c", "worker", T0 + 5.0001);
    coord_node *lost = add_node(&c, "ps-z", "ps", T0 + 5.0002);
    assert_int_equal(beta->phase, COORD_CREATED);
    assert_string_equal(beta->message, "waiting for agents: missing ps 1");
    for (int i = 0; i < 4; i++)
        report(&c, nodes[i], "running", T0 + 9.9999);
    coord_cluster_tick(&c, T0 + 16.5); /* w-c and ps-z are lost, alpha's agents are not */
    assert_true(lost->lost);
    assert_int_equal(alpha->phase, COORD_RUNNING);
    assert_string_equal(beta->message, "waiting for agents: missing ps 0, ps 1, worker 0");
    /* alpha loses worker 1 live; w-b is still stopping it, so alpha's ps tasks keep it. */
    pf_error err;
    assert_int_equal(coord_job_patch(&c, alpha, 1, -1, T0 + 16.75, &err), PF_OK);
    assert_string_equal(nodes[3]->draining, "alpha");
    assert_int_equal(coord_job_membership(&c, alpha), 2);

    coord_store *s = open_store(fx);
    save(s, &c);
    coord_store_close(s);

    s = open_store(fx);
    coord_cluster loaded;
    double now = T0 + 1000.0625;
    load(s, &loaded, now);
    assert_same_cluster(&c, &loaded, now);
    coord_store_close(s);

    /* The leases restarted at the load: agents silent since before it are not lost. */
    coord_cluster_tick(&loaded, now + LEASE - 1);
    coord_job *again = coord_job_find(&loaded, "alpha");
    assert_int_equal(again->phase, COORD_RUNNING);
    assert_int_equal(again->generation, 2);
    assert_int_equal(coord_job_membership(&loaded, again), 2); /* w-b is still stopping */
    assert_false(coord_node_find(&loaded, "w-a")->lost);
    coord_cluster_deinit(&loaded);
    coord_cluster_deinit(&c);
}

/* Deleted jobs (with their metrics and checkpoints) and removed agents are gone from the
 * file; a rolled-back transaction leaves no trace. */
/* Queues come back with their quotas and weights; the default queue's settings too once
 * changed; a deleted queue is gone. */
static void test_queues_round_trip(void **state) {
    fixture *fx = *state;
    coord_store *s = open_store(fx);
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_queue *q;
    int created;
    pf_error err;
    coord_queue a = {.name = "team-a",
                     .quota_ps = 2,
                     .quota_workers = 4,
                     .quota_memory = 3ll << 30,
                     .weight = 3,
                     .n_classes = 2,
                     .classes = {{"high", 100}, {"low", -5}}},
                b = {.name = "team-b",
                     .quota_ps = -1,
                     .quota_workers = 1,
                     .quota_memory = -1,
                     .weight = 1},
                d = {.name = "default",
                     .quota_ps = 1,
                     .quota_workers = 2,
                     .quota_memory = -1,
                     .weight = 5,
                     .n_classes = 1,
                     .classes = {{"urgent", 1000}}};
    assert_int_equal(coord_queue_put(&c, &a, T0, &q, &created, &err), PF_OK);
    assert_int_equal(created, 1);
    assert_int_equal(coord_queue_put(&c, &b, T0 + 1, &q, &created, &err), PF_OK);
    assert_int_equal(coord_queue_put(&c, &d, T0 + 2, &q, &created, &err), PF_OK);
    assert_int_equal(created, 0);
    save(s, &c);
    assert_int_equal(coord_queue_delete(&c, coord_queue_find(&c, "team-b"), &err), PF_OK);
    assert_int_not_equal(coord_queue_delete(&c, coord_queue_find(&c, "default"), &err), PF_OK);
    save(s, &c);
    coord_cluster_deinit(&c);

    load(s, &c, T0 + 10);
    assert_int_equal(c.n_queues, 2);
    assert_string_equal(c.queues[0].name, "default");
    assert_int_equal(c.queues[0].quota_ps, 1);
    assert_int_equal(c.queues[0].quota_workers, 2);
    assert_int_equal(c.queues[0].weight, 5);
    assert_int_equal(c.queues[0].quota_memory, -1);
    assert_int_equal(c.queues[0].n_classes, 1);
    assert_int_equal(coord_queue_class(&c.queues[0], "urgent")->value, 1000);
    q = coord_queue_find(&c, "team-a");
    assert_non_null(q);
    assert_int_equal(q->quota_ps, 2);
    assert_int_equal(q->quota_workers, 4);
    assert_int_equal(q->quota_memory, 3ll << 30);
    assert_int_equal(q->weight, 3);
    assert_int_equal(q->n_classes, 2);
    assert_int_equal(coord_queue_class(q, "high")->value, 100);
    assert_int_equal(coord_queue_class(q, "low")->value, -5);
    assert_null(coord_queue_class(q, "medium"));
    assert_null(coord_queue_find(&c, "team-b"));
    coord_cluster_deinit(&c);
    coord_store_close(s);
}

static void test_delete_and_rollback(void **state) {
    fixture *fx = *state;
    coord_store *s = open_store(fx);
    coord_cluster c;
    coord_cluster_init(&c, LEASE);
    coord_job *keep = submit(&c, "keep", 1, 1, T0);
    coord_job *drop = submit(&c, "drop", 1, 1, T0 + 1);
    add_node(&c, "n1", "ps", T0 + 2);
    add_node(&c, "n2", "worker", T0 + 2);
    coord_node *spare = add_node(&c, "n3", "worker", T0 + 2);
    assert_int_equal(keep->phase, COORD_RUNNING);
    json_t *points = json_pack("[{s:i, s:f, s:f}]", "step", 1, "time", T0 + 3, "loss", 1.0);
    assert_int_equal(coord_store_begin(s), PF_OK);
    assert_int_equal(coord_store_add_metrics(s, "drop", "worker-0", 1, points, NULL, 20000), PF_OK);
    assert_int_equal(coord_store_add_metrics(s, "keep", "worker-0", 1, points, NULL, 20000), PF_OK);
    assert_int_equal(coord_store_add_checkpoint(s, "drop", 1, T0 + 3, 10, "[]", NULL), PF_OK);
    assert_int_equal(coord_store_commit(s), PF_OK);
    json_decref(points);
    save(s, &c);

    coord_job_delete(&c, drop, T0 + 4);
    coord_node_remove(&c, spare, T0 + 4);
    save(s, &c);
    assert_int_equal(c.n_jobs, 1);
    assert_int_equal(c.n_nodes, 2);

    /* A change rolled back is not stored. */
    coord_job *ghost = submit(&c, "ghost", 1, 1, T0 + 5);
    assert_non_null(ghost);
    assert_int_equal(coord_store_begin(s), PF_OK);
    assert_int_equal(coord_store_save(s, &c), PF_OK);
    coord_store_rollback(s);
    coord_store_close(s);

    s = open_store(fx);
    coord_cluster loaded;
    load(s, &loaded, T0 + 10);
    assert_int_equal(loaded.n_jobs, 1);
    assert_non_null(coord_job_find(&loaded, "keep"));
    assert_null(coord_job_find(&loaded, "drop"));
    assert_null(coord_job_find(&loaded, "ghost"));
    assert_int_equal(loaded.n_nodes, 2);
    assert_null(coord_node_find(&loaded, "n3"));
    json_t *m = coord_store_metrics(s, "drop", 0, 100);
    assert_int_equal(json_integer_value(json_object_get(m, "total_points")), 0);
    json_decref(m);
    m = coord_store_metrics(s, "keep", 0, 100);
    assert_int_equal(json_integer_value(json_object_get(m, "total_points")), 1);
    json_decref(m);
    json_t *ck = coord_store_checkpoints(s, "drop");
    assert_int_equal(json_array_size(json_object_get(ck, "items")), 0);
    json_decref(ck);
    coord_cluster_deinit(&loaded);
    coord_cluster_deinit(&c);
    coord_store_close(s);
}

/* --- metrics ---------------------------------------------------------------------------------- */

enum { STEPS = 1000 };

/* Points of one task at steps 1..STEPS: loss = step, a constant examples/s. */
static json_t *series(double examples_per_sec) {
    json_t *a = json_array();
    for (int step = 1; step <= STEPS; step++)
        json_array_append_new(a, json_pack("{s:i, s:f, s:f, s:f, s:f}", "step", step, "time",
                                           T0 + step, "loss", (double)step, "examples_per_sec",
                                           examples_per_sec, "step_time_seconds", 0.01));
    return a;
}

static json_t *metrics(coord_store *s, int64_t since, int max_points) {
    json_t *m = coord_store_metrics(s, "m", since, max_points);
    assert_non_null(m);
    return m;
}

/* More raw points than max_points: every series is averaged over equal step buckets, the
 * answer holds at most max_points points, ordered by step, and each bucket's mean lies in
 * its own step range. */
static void test_metrics_downsampling(void **state) {
    fixture *fx = *state;
    coord_store *s = open_store(fx);
    json_t *w0 = series(100.0), *w1 = series(300.0);
    json_t *evals = json_pack("[{s:i, s:f, s:f, s:f}, {s:i, s:f, s:f, s:f}]", "step", 1000, "time",
                              T0 + 1000, "accuracy", 0.9, "test_loss", 0.3, "step", 500, "time",
                              T0 + 500, "accuracy", 0.8, "test_loss", 0.5);
    assert_int_equal(coord_store_begin(s), PF_OK);
    assert_int_equal(coord_store_add_metrics(s, "m", "worker-0", 1, w0, NULL, 20000), PF_OK);
    assert_int_equal(coord_store_add_metrics(s, "m", "worker-1", 1, w1, evals, 20000), PF_OK);
    assert_int_equal(coord_store_commit(s), PF_OK);
    json_decref(w0);
    json_decref(w1);
    json_decref(evals);

    json_t *m = metrics(s, 0, 100);
    assert_string_equal(json_string_value(json_object_get(m, "job")), "m");
    assert_int_equal(json_integer_value(json_object_get(m, "total_points")), 2 * STEPS);
    assert_true(json_is_true(json_object_get(m, "downsampled")));
    json_t *points = json_object_get(m, "points");
    size_t n = json_array_size(points);
    assert_true(n <= 100);
    assert_true(n >= 80); /* the budget is used, not squandered */
    int64_t prev_step = 0, last[2] = {0, 0};
    int per_task[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_array_get(points, i);
        const char *task = json_string_value(json_object_get(p, "task"));
        int t = !strcmp(task, "worker-1");
        assert_true(t || !strcmp(task, "worker-0"));
        int64_t step = json_integer_value(json_object_get(p, "step"));
        double loss = json_real_value(json_object_get(p, "loss"));
        assert_true(step >= prev_step);
        /* The bucket's mean step lies after the task's previous bucket, up to its last step. */
        assert_true(loss > (double)last[t] && loss <= (double)step);
        assert_true(json_real_value(json_object_get(p, "examples_per_sec")) == (t ? 300 : 100));
        prev_step = step;
        last[t] = step;
        per_task[t]++;
    }
    assert_int_equal(per_task[0], per_task[1]);
    assert_true(per_task[0] <= 50);
    assert_int_equal(last[0], STEPS);
    assert_int_equal(last[1], STEPS);

    /* The aggregate: one point per bucket, loss averaged and examples/s summed over tasks. */
    json_t *agg = json_object_get(m, "aggregate");
    assert_int_equal(json_array_size(agg), per_task[0]);
    prev_step = 0;
    for (size_t i = 0; i < json_array_size(agg); i++) {
        json_t *p = json_array_get(agg, i);
        int64_t step = json_integer_value(json_object_get(p, "step"));
        assert_true(step > prev_step);
        assert_true(fabs(json_real_value(json_object_get(p, "examples_per_sec")) - 400.0) < 1e-9);
        prev_step = step;
    }
    json_t *ev = json_object_get(m, "evals");
    assert_int_equal(json_array_size(ev), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ev, 0), "step")), 500);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(ev, 1), "step")), 1000);
    json_decref(m);

    /* Within the budget every raw point comes back as it was. */
    m = metrics(s, 0, 5000);
    assert_true(json_is_false(json_object_get(m, "downsampled")));
    points = json_object_get(m, "points");
    assert_int_equal(json_array_size(points), 2 * STEPS);
    for (size_t i = 0; i < json_array_size(points); i++) {
        json_t *p = json_array_get(points, i);
        assert_true(json_real_value(json_object_get(p, "loss")) ==
                    (double)json_integer_value(json_object_get(p, "step")));
    }
    json_decref(m);

    /* since_step cuts the series and the evaluations. */
    m = metrics(s, 990, 100);
    assert_int_equal(json_integer_value(json_object_get(m, "total_points")), 2 * 11);
    assert_true(json_is_false(json_object_get(m, "downsampled")));
    points = json_object_get(m, "points");
    assert_int_equal(json_array_size(points), 2 * 11);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(points, 0), "step")), 990);
    assert_int_equal(json_array_size(json_object_get(m, "evals")), 1);
    json_decref(m);

    m = coord_store_metrics(s, "other", 0, 100);
    assert_int_equal(json_integer_value(json_object_get(m, "total_points")), 0);
    assert_int_equal(json_array_size(json_object_get(m, "points")), 0);
    json_decref(m);
    coord_store_close(s);
}

/* --- events and checkpoints ------------------------------------------------------------------- */

typedef struct seen {
    int64_t ids[16];
    int n, stop_after;
} seen;

static int collect(int64_t id, const char *kind, const char *job, const char *data, void *ctx) {
    (void)kind;
    (void)job;
    (void)data;
    seen *s = ctx;
    if (s->n < 16)
        s->ids[s->n] = id;
    s->n++;
    return s->stop_after && s->n >= s->stop_after;
}

static void assert_events(coord_store *st, int64_t after, const char *job, const char *kind,
                          int limit, int stop_after, const int64_t *want, int n_want) {
    seen s = {.stop_after = stop_after};
    assert_int_equal(coord_store_events_after(st, after, job, kind, limit, collect, &s), PF_OK);
    assert_int_equal(s.n, n_want);
    for (int i = 0; i < n_want; i++)
        assert_int_equal(s.ids[i], want[i]);
}

/* Event ids increase and continue after a reopen; a job's log includes the events of no job;
 * kind, limit and the callback's stop are honoured. */
static int count_event(int64_t id, const char *kind, const char *job, const char *data, void *ctx) {
    (void)id, (void)kind, (void)job, (void)data;
    (*(int *)ctx)++;
    return 0;
}

/* Points of steps [from, to) of one report, one second apart from `t`. */
static json_t *steps_json(int64_t from, int64_t to, double t) {
    json_t *a = json_array();
    for (int64_t step = from; a && step < to; step++)
        json_array_append_new(a, json_pack("{s:I, s:f, s:f, s:f, s:f}", "step", (json_int_t)step,
                                           "time", t + (double)(step - from), "loss", 1.0,
                                           "examples_per_sec", 100.0, "step_time_seconds", 0.01));
    assert_non_null(a);
    return a;
}

static int64_t total_points(coord_store *s, const char *job) {
    json_t *m = coord_store_metrics(s, job, 0, 10);
    assert_non_null(m);
    int64_t n = json_integer_value(json_object_get(m, "total_points"));
    json_decref(m);
    return n;
}

/* The same report stored 50 times (a client that repeats it) is stored once per step; the
 * same step measured later (trained again after a rollback) replaces it; another
 * incarnation's points of the same steps are its own. */
static void test_metrics_stored_once(void **state) {
    fixture *fx = *state;
    coord_store *s = open_store(fx);
    json_t *points = steps_json(0, 1000, T0);
    for (int i = 0; i < 50; i++) {
        assert_int_equal(coord_store_begin(s), PF_OK);
        assert_int_equal(coord_store_add_metrics(s, "once", "chief", 7, points, NULL, 20000),
                         PF_OK);
        assert_int_equal(coord_store_commit(s), PF_OK);
    }
    assert_int_equal(total_points(s, "once"), 1000);
    json_t *later = json_pack("[{s:i, s:f, s:f}]", "step", 10, "time", T0 + 5000, "loss", 0.25);
    assert_int_equal(coord_store_begin(s), PF_OK);
    assert_int_equal(coord_store_add_metrics(s, "once", "chief", 7, later, NULL, 20000), PF_OK);
    assert_int_equal(coord_store_add_metrics(s, "once", "chief", 8, points, NULL, 20000), PF_OK);
    assert_int_equal(coord_store_commit(s), PF_OK);
    assert_int_equal(total_points(s, "once"), 2000);
    json_t *m = coord_store_metrics(s, "once", 10, 100000);
    json_t *p = json_array_get(json_object_get(m, "points"), 0);
    assert_int_equal(json_integer_value(json_object_get(p, "step")), 10);
    /* incarnation 7's 0.25 (measured later) and incarnation 8's 1.0, averaged */
    assert_true(fabs(json_real_value(json_object_get(p, "loss")) - 0.625) < 1e-9);
    json_decref(m);
    json_decref(later);
    json_decref(points);
    coord_store_close(s);
}

/* A job of 1,000,000 steps, reported 5,000 steps at a time by its one training task, keeps
 * at most COORD_STORE_METRIC_ROWS rows after every report: the newest steps at full
 * resolution, the older ones evenly spaced back to the first; its metric events are pruned
 * to the newest COORD_STORE_EVENTS_KEPT. */
static void test_metrics_bounded(void **state) {
    fixture *fx = *state;
    coord_store *s = open_store(fx);
    int rows = coord_store_metric_rows_per_task(1);
    assert_int_equal(rows, COORD_STORE_METRIC_ROWS);
    assert_int_equal(coord_store_metric_rows_per_task(1000), COORD_STORE_MIN_TASK_ROWS);
    const int64_t steps = 1000000, batch = 5000;
    for (int64_t from = 0; from < steps; from += batch) {
        json_t *points = steps_json(from, from + batch, T0 + (double)from);
        /* As coord_commit does: the report's events, then its points. */
        assert_int_equal(coord_store_begin(s), PF_OK);
        for (int k = 0; k < 100; k++) {
            int64_t id;
            assert_int_equal(coord_store_add_event(s, "metric", "long", "{}", T0, &id), PF_OK);
        }
        assert_int_equal(coord_store_add_metrics(s, "long", "chief", 1, points, NULL, rows), PF_OK);
        assert_int_equal(coord_store_commit(s), PF_OK);
        json_decref(points);
        if (from % (50 * batch) == 0)
            assert_true(total_points(s, "long") <= COORD_STORE_METRIC_ROWS);
    }
    int64_t total = total_points(s, "long");
    assert_true(total <= COORD_STORE_METRIC_ROWS);
    assert_true(total >= COORD_STORE_METRIC_ROWS / 4); /* thinned, not emptied */
    /* The newest rows / 4 steps are all there; the oldest kept is near step 0. */
    json_t *m = coord_store_metrics(s, "long", steps - rows / 4, 100000);
    assert_int_equal(json_integer_value(json_object_get(m, "total_points")), rows / 4);
    json_decref(m);
    m = coord_store_metrics(s, "long", 0, 100000);
    json_t *first = json_array_get(json_object_get(m, "points"), 0);
    assert_true(json_integer_value(json_object_get(first, "step")) < steps / 100);
    json_decref(m);
    int n_events = 0;
    assert_int_equal(
        coord_store_events_after(s, 0, "long", "metric", 100000, count_event, &n_events), PF_OK);
    assert_int_equal(n_events, COORD_STORE_EVENTS_KEPT);
    coord_store_close(s);
}

static void test_events(void **state) {
    fixture *fx = *state;
    coord_store *s = open_store(fx);
    assert_int_equal(coord_store_last_event_id(s), 0);
    static const struct {
        const char *kind, *job;
    } added[] = {{"job", "a"}, {"node", NULL}, {"log", "b"}, {"log", "a"}, {"metric", "a"}};
    for (int i = 0; i < 5; i++) {
        int64_t id = 0;
        assert_int_equal(
            coord_store_add_event(s, added[i].kind, added[i].job, "{\"x\":1}", T0 + i, &id), PF_OK);
        assert_int_equal(id, i + 1);
    }
    coord_store_close(s);

    s = open_store(fx);
    assert_int_equal(coord_store_last_event_id(s), 5);
    assert_events(s, 0, NULL, NULL, 100, 0, (const int64_t[]){1, 2, 3, 4, 5}, 5);
    assert_events(s, 0, "a", NULL, 100, 0, (const int64_t[]){1, 2, 4, 5}, 4);
    assert_events(s, 0, "a", "log", 100, 0, (const int64_t[]){4}, 1);
    assert_events(s, 2, NULL, NULL, 2, 0, (const int64_t[]){3, 4}, 2);
    assert_events(s, 0, NULL, NULL, 100, 1, (const int64_t[]){1}, 1);
    assert_events(s, 5, NULL, NULL, 100, 0, NULL, 0);
    int64_t id = 0;
    assert_int_equal(coord_store_add_event(s, "log", "", "{}", T0 + 9, &id), PF_OK);
    assert_int_equal(id, 6);
    coord_store_close(s);
}

/* Checkpoints list newest first; the same step again replaces its row. */
static void test_checkpoints(void **state) {
    fixture *fx = *state;
    coord_store *s = open_store(fx);
    static const char files[] =
        "[{\"name\":\"ps-0.safetensors\",\"bytes\":10,\"crc32\":\"1a2b3c4d\"}]";
    assert_int_equal(coord_store_add_checkpoint(s, "c", 500, T0 + 5.25, 10, files, NULL), PF_OK);
    assert_int_equal(coord_store_add_checkpoint(s, "c", 1500, T0 + 15, 30, files, NULL), PF_OK);
    assert_int_equal(coord_store_add_checkpoint(s, "c", 1000, T0 + 10, 20, "[]", NULL), PF_OK);
    assert_int_equal(coord_store_add_checkpoint(s, "c", 1000, T0 + 11, 21, files, NULL), PF_OK);
    assert_int_equal(coord_store_add_checkpoint(s, "other", 7, T0, 1, "[]", NULL), PF_OK);

    json_t *ck = coord_store_checkpoints(s, "c");
    json_t *items = json_object_get(ck, "items");
    assert_int_equal(json_array_size(items), 3);
    static const int64_t steps[] = {1500, 1000, 500}, bytes[] = {30, 21, 10};
    for (size_t i = 0; i < 3; i++) {
        json_t *it = json_array_get(items, i);
        assert_int_equal(json_integer_value(json_object_get(it, "step")), steps[i]);
        assert_int_equal(json_integer_value(json_object_get(it, "bytes")), bytes[i]);
        json_t *f = json_object_get(it, "files");
        assert_int_equal(json_array_size(f), 1);
        assert_string_equal(json_string_value(json_object_get(json_array_get(f, 0), "crc32")),
                            "1a2b3c4d");
    }
    assert_string_equal(json_string_value(json_object_get(json_array_get(items, 2), "time")),
                        "2025-11-22T10:00:05.250Z");
    json_decref(ck);

    /* A report naming what is on disk forgets the rest (pruned, set aside), of this job only. */
    assert_int_equal(coord_store_add_checkpoint(s, "c", 2000, T0 + 20, 40, files, "[1500,2000]"),
                     PF_OK);
    ck = coord_store_checkpoints(s, "c");
    items = json_object_get(ck, "items");
    assert_int_equal(json_array_size(items), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(items, 0), "step")), 2000);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(items, 1), "step")), 1500);
    json_decref(ck);
    ck = coord_store_checkpoints(s, "other");
    assert_int_equal(json_array_size(json_object_get(ck, "items")), 1);
    json_decref(ck);

    /* A report retried after a newer one (2500 kept [2000,2500] arrived before 2000's retry,
     * kept [1500,2000]) forgets nothing newer than its own step: 2500 is on disk. */
    assert_int_equal(coord_store_add_checkpoint(s, "c", 2500, T0 + 25, 50, files, "[2000,2500]"),
                     PF_OK);
    assert_int_equal(coord_store_add_checkpoint(s, "c", 2000, T0 + 26, 40, files, "[1500,2000]"),
                     PF_OK);
    ck = coord_store_checkpoints(s, "c");
    items = json_object_get(ck, "items");
    assert_int_equal(json_array_size(items), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(items, 0), "step")), 2500);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(items, 1), "step")), 2000);
    json_decref(ck);
    coord_store_close(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_open_and_migrate, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_schema_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eval_columns_migrated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_save_load_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queues_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete_and_rollback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_downsampling, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_stored_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metrics_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_events, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoints, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
