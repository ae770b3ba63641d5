/* store.c - SQLite persistence of the coordinator (see store.h).
 *
 * DESIGN: the in-memory cluster (cluster.c) is the working copy; this file writes what
 * changed in it inside the caller's transaction and reads it all back at start. WAL mode
 * with synchronous=NORMAL: a committed transaction survives the coordinator being killed
 * (kill -9), which is the failure the API's promise ("2xx only after commit") is about.
 * Migrations are numbered; each runs in its own transaction and bumps user_version, so a
 * database of any older version is brought up to date at open.
 */
#include "coordinator/store.h"

#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator/cluster_json.h"
#include "coordinator/cluster_queues.h"
#include "coordinator/cluster_serving.h"
#include "psflow/mem.h"

static const char *const migrations[] = {
    /* 1: the initial schema */
    "CREATE TABLE jobs (name TEXT PRIMARY KEY, spec TEXT NOT NULL, phase TEXT NOT NULL,"
    "  status TEXT NOT NULL, create_time REAL NOT NULL);"
    "CREATE TABLE tasks (job TEXT NOT NULL, type TEXT NOT NULL, idx INTEGER NOT NULL,"
    "  node_id TEXT NOT NULL, address TEXT NOT NULL, state TEXT NOT NULL,"
    "  incarnation INTEGER NOT NULL, restarts INTEGER NOT NULL, step INTEGER NOT NULL,"
    "  PRIMARY KEY (job, type, idx));"
    "CREATE TABLE nodes (id TEXT PRIMARY KEY, role TEXT NOT NULL, address TEXT NOT NULL,"
    "  version TEXT NOT NULL, registered REAL NOT NULL, last_heartbeat REAL NOT NULL,"
    "  lost INTEGER NOT NULL, busy INTEGER NOT NULL, job TEXT NOT NULL,"
    "  generation INTEGER NOT NULL, type TEXT NOT NULL, idx INTEGER NOT NULL);"
    "CREATE TABLE metrics (job TEXT NOT NULL, task TEXT NOT NULL, step INTEGER NOT NULL,"
    "  time REAL NOT NULL, loss REAL, examples_per_sec REAL, step_time REAL);"
    "CREATE INDEX metrics_by_job ON metrics (job, step);"
    "CREATE TABLE evals (job TEXT NOT NULL, task TEXT NOT NULL, step INTEGER NOT NULL,"
    "  time REAL NOT NULL, accuracy REAL, test_loss REAL);"
    "CREATE INDEX evals_by_job ON evals (job, step);"
    "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL,"
    "  job TEXT NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL);"
    "CREATE INDEX events_by_job ON events (job, id);"
    "CREATE TABLE checkpoints (job TEXT NOT NULL, step INTEGER NOT NULL, time REAL NOT NULL,"
    "  bytes INTEGER NOT NULL, files TEXT NOT NULL, PRIMARY KEY (job, step));",
    /* 2: the memory an agent offers its tasks (bytes, 0 = unknown), for admission */
    "ALTER TABLE nodes ADD COLUMN memory INTEGER NOT NULL DEFAULT 0;",
    /* 3: the job whose removed worker the agent is still stopping ('' = none): the job's ps
     * tasks keep that worker in their membership across a coordinator restart */
    "ALTER TABLE nodes ADD COLUMN draining TEXT NOT NULL DEFAULT '';",
    /* 4: a metric point and an evaluation are stored once per (job, task, incarnation,
     * step): duplicates an older version stored are dropped (the newest row of each is kept)
     * and a UNIQUE index keeps them out; events are pruned by job and kind */
    "ALTER TABLE metrics ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE evals ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0;"
    "DELETE FROM metrics WHERE rowid NOT IN (SELECT MAX(rowid) FROM metrics"
    "  GROUP BY job, task, incarnation, step);"
    "DELETE FROM evals WHERE rowid NOT IN (SELECT MAX(rowid) FROM evals"
    "  GROUP BY job, task, incarnation, step);"
    "CREATE UNIQUE INDEX metrics_once ON metrics (job, task, incarnation, step);"
    "CREATE UNIQUE INDEX evals_once ON evals (job, task, incarnation, step);"
    "CREATE INDEX events_by_job_kind ON events (job, kind, id);",
    /* 5: a two-class model's test AUC and calibration (mean prediction / mean label) */
    "ALTER TABLE evals ADD COLUMN auc REAL; ALTER TABLE evals ADD COLUMN calibration REAL;",
    /* 6: the queues jobs are admitted through (quota -1: no limit); the default queue has a
     * row only once it was changed */
    ("CREATE TABLE queues (name TEXT PRIMARY KEY, quota_ps INTEGER NOT NULL,"
     "  quota_workers INTEGER NOT NULL, weight INTEGER NOT NULL, create_time REAL NOT NULL);"),
    /* 7: a queue's quota of memory (bytes, -1: no limit) and its priority classes (a JSON
     * object of names and priorities) */
    ("ALTER TABLE queues ADD COLUMN quota_memory INTEGER NOT NULL DEFAULT -1;"
     "ALTER TABLE queues ADD COLUMN priority_classes TEXT NOT NULL DEFAULT '{}';"),
};

enum {
    Q_JOB_UPSERT,
    Q_JOB_DELETE,
    Q_TASK_UPSERT,
    Q_TASKS_DELETE,
    Q_NODE_UPSERT,
    Q_NODE_DELETE,
    Q_EVENT_ADD,
    Q_METRIC_ADD,
    Q_EVAL_ADD,
    Q_CKPT_ADD,
    Q_METRICS_DELETE,
    Q_EVALS_DELETE,
    Q_CKPTS_KEEP,
    Q_CKPTS_DELETE,
    Q_METRICS_COUNT,
    Q_METRICS_CUT,
    Q_METRICS_THIN,
    Q_EVENTS_CUT,
    Q_EVENTS_PRUNE,
    Q_QUEUE_UPSERT,
    Q_QUEUE_DELETE,
    Q_COUNT
};

static const char *const queries[Q_COUNT] = {
    [Q_JOB_UPSERT] = "INSERT INTO jobs (name, spec, phase, status, create_time) VALUES (?,?,?,?,?)"
                     " ON CONFLICT(name) DO UPDATE SET spec = excluded.spec,"
                     " phase = excluded.phase, status = excluded.status",
    [Q_JOB_DELETE] = "DELETE FROM jobs WHERE name = ?",
    [Q_QUEUE_UPSERT] = "INSERT OR REPLACE INTO queues (name, quota_ps, quota_workers, weight,"
                       " create_time, quota_memory, priority_classes) VALUES (?,?,?,?,?,?,?)",
    [Q_QUEUE_DELETE] = "DELETE FROM queues WHERE name = ?",
    [Q_TASK_UPSERT] = "INSERT OR REPLACE INTO tasks (job, type, idx, node_id, address, state,"
                      " incarnation, restarts, step) VALUES (?,?,?,?,?,?,?,?,?)",
    [Q_TASKS_DELETE] = "DELETE FROM tasks WHERE job = ?",
    [Q_NODE_UPSERT] = "INSERT OR REPLACE INTO nodes (id, role, address, version, registered,"
                      " last_heartbeat, lost, busy, job, generation, type, idx, memory, draining)"
                      " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    [Q_NODE_DELETE] = "DELETE FROM nodes WHERE id = ?",
    [Q_EVENT_ADD] = "INSERT INTO events (time, job, kind, data) VALUES (?,?,?,?)",
    /* The same step again (a retried report, or the step trained again after a rollback):
     * the newer measurement replaces the older, a retry of an older one changes nothing. */
    [Q_METRIC_ADD] = "INSERT INTO metrics (job, task, incarnation, step, time, loss,"
                     " examples_per_sec, step_time) VALUES (?,?,?,?,?,?,?,?)"
                     " ON CONFLICT(job, task, incarnation, step) DO UPDATE SET"
                     " time = excluded.time, loss = excluded.loss,"
                     " examples_per_sec = excluded.examples_per_sec,"
                     " step_time = excluded.step_time WHERE excluded.time > metrics.time",
    [Q_EVAL_ADD] = "INSERT INTO evals (job, task, incarnation, step, time, accuracy, test_loss,"
                   " auc, calibration) VALUES (?,?,?,?,?,?,?,?,?)"
                   " ON CONFLICT(job, task, incarnation, step) DO UPDATE"
                   " SET time = excluded.time, accuracy = excluded.accuracy,"
                   " test_loss = excluded.test_loss, auc = excluded.auc,"
                   " calibration = excluded.calibration WHERE excluded.time > evals.time",
    [Q_METRICS_COUNT] = "SELECT COUNT(*), MIN(step) FROM metrics WHERE job = ? AND task = ?",
    /* The step below which a task's points are thinned: that of its `recent`-th newest. */
    [Q_METRICS_CUT] = "SELECT step FROM metrics WHERE job = ? AND task = ?"
                      " ORDER BY step DESC LIMIT 1 OFFSET ?",
    /* Below the cut, one point (the first stored) per bucket of `width` steps from `first`. */
    [Q_METRICS_THIN] = "DELETE FROM metrics WHERE job = ?1 AND task = ?2 AND step < ?3"
                       " AND rowid NOT IN (SELECT MIN(rowid) FROM metrics WHERE job = ?1"
                       " AND task = ?2 AND step < ?3 GROUP BY (step - ?4) / ?5)",
    /* The id of a job's `keep`-th newest event of a kind: older ones are pruned. */
    [Q_EVENTS_CUT] = "SELECT id FROM events WHERE job = ? AND kind = ?"
                     " ORDER BY id DESC LIMIT 1 OFFSET ?",
    [Q_EVENTS_PRUNE] = "DELETE FROM events WHERE job = ? AND kind = ? AND id <= ?",
    [Q_CKPT_ADD] = "INSERT OR REPLACE INTO checkpoints (job, step, time, bytes, files)"
                   " VALUES (?,?,?,?,?)",
    [Q_METRICS_DELETE] = "DELETE FROM metrics WHERE job = ?",
    [Q_EVALS_DELETE] = "DELETE FROM evals WHERE job = ?",
    [Q_CKPTS_DELETE] = "DELETE FROM checkpoints WHERE job = ?",
    /* Only steps below the report's: a report that arrives after a newer one (a retry)
     * lists what was on disk before the newer checkpoint was written. */
    [Q_CKPTS_KEEP] = "DELETE FROM checkpoints WHERE job = ? AND step < ?"
                     " AND step NOT IN (SELECT value FROM json_each(?))",
};

struct coord_store {
    sqlite3 *db;
    sqlite3_stmt *q[Q_COUNT];
    int version;
};

static pf_status db_error(coord_store *s, pf_error *err, const char *what) {
    return pf_error_set(err, PF_ERR_IO, NULL, "database: %s: %s", what, sqlite3_errmsg(s->db));
}

static int exec(coord_store *s, const char *sql) {
    return sqlite3_exec(s->db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

static pf_status migrate(coord_store *s, pf_error *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK)
        return db_error(s, err, "reading the schema version");
    s->version = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : 0;
    sqlite3_finalize(st);
    int newest = (int)(sizeof migrations / sizeof migrations[0]);
    if (s->version > newest)
        return pf_error_set(err, PF_ERR_UNSUPPORTED, NULL,
                            "database schema version %d is newer than this psflow knows (%d)",
                            s->version, newest);
    for (int v = s->version; v < newest; v++) {
        char bump[64];
        snprintf(bump, sizeof bump, "PRAGMA user_version = %d", v + 1);
        if (exec(s, "BEGIN IMMEDIATE") || exec(s, migrations[v]) || exec(s, bump)) {
            pf_status st2 = db_error(s, err, "migrating the schema");
            exec(s, "ROLLBACK");
            return st2;
        }
        if (exec(s, "COMMIT"))
            return db_error(s, err, "committing a migration");
        s->version = v + 1;
    }
    return PF_OK;
}

pf_status coord_store_open(const char *path, coord_store **out, pf_error *err) {
    *out = NULL;
    coord_store *s = pf_calloc(1, sizeof *s);
    if (!s)
        return PF_ERR_NOMEM;
    pf_status st = PF_OK;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        st = pf_error_set(err, PF_ERR_IO, NULL, "database %s: %s", path,
                          s->db ? sqlite3_errmsg(s->db) : "cannot open");
        goto fail;
    }
    sqlite3_busy_timeout(s->db, 5000);
    if (exec(s, "PRAGMA journal_mode = WAL") || exec(s, "PRAGMA synchronous = NORMAL") ||
        exec(s, "PRAGMA foreign_keys = ON")) {
        st = pf_error_set(err, PF_ERR_IO, NULL, "database %s: %s", path, sqlite3_errmsg(s->db));
        goto fail;
    }
    if ((st = migrate(s, err)) != PF_OK)
        goto fail;
    for (int i = 0; i < Q_COUNT; i++)
        if (sqlite3_prepare_v3(s->db, queries[i], -1, SQLITE_PREPARE_PERSISTENT, &s->q[i], NULL) !=
            SQLITE_OK) {
            st = db_error(s, err, "preparing statements");
            goto fail;
        }
    *out = s;
    return PF_OK;
fail:
    coord_store_close(s);
    return st;
}

void coord_store_close(coord_store *s) {
    if (!s)
        return;
    for (int i = 0; i < Q_COUNT; i++)
        sqlite3_finalize(s->q[i]);
    sqlite3_close(s->db);
    pf_free(s);
}

int coord_store_schema_version(const coord_store *s) {
    return s->version;
}

pf_status coord_store_begin(coord_store *s) {
    return exec(s, "BEGIN IMMEDIATE") ? PF_ERR_IO : PF_OK;
}

pf_status coord_store_commit(coord_store *s) {
    return exec(s, "COMMIT") ? PF_ERR_IO : PF_OK;
}

void coord_store_rollback(coord_store *s) {
    exec(s, "ROLLBACK");
}

/* Binds positional values: 's' text, 'i' int64, 'd' double (NaN -> NULL). */
static sqlite3_stmt *bind(coord_store *s, int q, const char *types, ...) {
    sqlite3_stmt *st = s->q[q];
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    va_list ap;
    va_start(ap, types);
    for (int i = 0; types[i]; i++) {
        if (types[i] == 's') {
            sqlite3_bind_text(st, i + 1, va_arg(ap, const char *), -1, SQLITE_TRANSIENT);
        } else if (types[i] == 'i') {
            sqlite3_bind_int64(st, i + 1, va_arg(ap, int64_t));
        } else {
            double v = va_arg(ap, double);
            if (isnan(v))
                sqlite3_bind_null(st, i + 1);
            else
                sqlite3_bind_double(st, i + 1, v);
        }
    }
    va_end(ap);
    return st;
}

static pf_status run(sqlite3_stmt *st) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? PF_OK : PF_ERR_IO;
}

static pf_status save_job(coord_store *s, coord_job *j) {
    if (j->deleted) {
        if (run(bind(s, Q_JOB_DELETE, "s", j->name)) ||
            run(bind(s, Q_TASKS_DELETE, "s", j->name)) ||
            run(bind(s, Q_METRICS_DELETE, "s", j->name)) ||
            run(bind(s, Q_EVALS_DELETE, "s", j->name)) ||
            run(bind(s, Q_CKPTS_DELETE, "s", j->name)))
            return PF_ERR_IO;
        return PF_OK;
    }
    json_t *status = coord_job_status_json(j);
    char *text = status ? json_dumps(status, JSON_COMPACT) : NULL;
    json_decref(status);
    if (!text)
        return PF_ERR_NOMEM;
    pf_status st = run(bind(s, Q_JOB_UPSERT, "ssssd", j->name, j->spec_json,
                            coord_phase_name(j->phase), text, j->create_time));
    free(text);
    /* Scaling changes the task list: replace it whole. */
    if (st == PF_OK)
        st = run(bind(s, Q_TASKS_DELETE, "s", j->name));
    for (int i = 0; st == PF_OK && i < j->n_tasks; i++) {
        coord_task *t = &j->tasks[i];
        st = run(bind(s, Q_TASK_UPSERT, "ssisssiii", j->name, t->type, (int64_t)t->index,
                      t->node_id, t->address, coord_task_state_name(t->state),
                      (int64_t)t->incarnation, (int64_t)t->restarts, t->step));
    }
    return st;
}

static pf_status save_node(coord_store *s, coord_node *n) {
    if (n->deleted)
        return run(bind(s, Q_NODE_DELETE, "s", n->id));
    return run(bind(s, Q_NODE_UPSERT, "ssssddiisisiis", n->id, n->role, n->address, n->version,
                    n->registered, n->last_heartbeat, (int64_t)n->lost, (int64_t)n->busy, n->job,
                    (int64_t)n->generation, n->type, (int64_t)n->index, n->memory, n->draining));
}

static pf_status save_queue(coord_store *s, const coord_queue *q) {
    if (q->deleted)
        return run(bind(s, Q_QUEUE_DELETE, "s", q->name));
    json_t *classes = coord_queue_classes_json(q);
    char *text = classes ? json_dumps(classes, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(classes);
    if (!text)
        return PF_ERR_NOMEM;
    pf_status rc = run(bind(s, Q_QUEUE_UPSERT, "siiidis", q->name, (int64_t)q->quota_ps,
                            (int64_t)q->quota_workers, (int64_t)q->weight, q->create_time,
                            q->quota_memory, text));
    free(text);
    return rc;
}

pf_status coord_store_save(coord_store *s, coord_cluster *c) {
    for (int i = 0; i < c->n_jobs; i++)
        if (c->jobs[i]->dirty) {
            pf_status st = save_job(s, c->jobs[i]);
            if (st != PF_OK)
                return st;
        }
    for (int i = 0; i < c->n_nodes; i++)
        if (c->nodes[i]->dirty && save_node(s, c->nodes[i]) != PF_OK)
            return PF_ERR_IO;
    for (int i = 0; i < c->n_queues; i++)
        if (c->queues[i].dirty && save_queue(s, &c->queues[i]) != PF_OK)
            return PF_ERR_IO;
    for (int i = 0; i < c->n_jobs; i++)
        c->jobs[i]->dirty = false;
    for (int i = 0; i < c->n_nodes; i++)
        c->nodes[i]->dirty = false;
    for (int i = 0; i < c->n_queues; i++)
        c->queues[i].dirty = false;
    return PF_OK;
}

static const char *col_text(sqlite3_stmt *st, int i) {
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? (const char *)t : "";
}

static pf_status load_tasks(coord_store *s, coord_job *j) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT type, idx, node_id, address, state, incarnation, restarts, step"
                           " FROM tasks WHERE job = ?",
                           -1, &st, NULL) != SQLITE_OK)
        return PF_ERR_IO;
    sqlite3_bind_text(st, 1, j->name, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *type = col_text(st, 0);
        int index = sqlite3_column_int(st, 1);
        for (int i = 0; i < j->n_tasks; i++) {
            coord_task *t = &j->tasks[i];
            if (strcmp(t->type, type) != 0 || t->index != index)
                continue;
            snprintf(t->node_id, sizeof t->node_id, "%s", col_text(st, 2));
            snprintf(t->address, sizeof t->address, "%s", col_text(st, 3));
            const char *state = col_text(st, 4);
            for (int k = TASK_PENDING; k <= TASK_STOPPED; k++)
                if (!strcmp(state, coord_task_state_name((coord_task_state)k)))
                    t->state = (coord_task_state)k;
            t->incarnation = (uint64_t)sqlite3_column_int64(st, 5);
            t->restarts = sqlite3_column_int(st, 6);
            t->step = sqlite3_column_int64(st, 7);
        }
    }
    sqlite3_finalize(st);
    return PF_OK;
}

/* The newest checkpoint the coordinator was told about: what a gang restart rolls back to. */
static pf_status load_checkpoint_step(coord_store *s, coord_job *j) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, "SELECT MAX(step) FROM checkpoints WHERE job = ?", -1, &st,
                           NULL) != SQLITE_OK)
        return PF_ERR_IO;
    sqlite3_bind_text(st, 1, j->name, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        j->has_checkpoint = true;
        j->checkpoint_step = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    return PF_OK;
}

/* The queues, before the jobs: each job finds its own (coord_job_queue). */
static pf_status load_queues(coord_store *s, coord_cluster *c, pf_error *err) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT name, quota_ps, quota_workers, weight, create_time,"
                           " quota_memory, priority_classes FROM queues"
                           " ORDER BY create_time, name",
                           -1, &st, NULL) != SQLITE_OK)
        return db_error(s, err, "loading queues");
    pf_status rc = PF_OK;
    while (rc == PF_OK && sqlite3_step(st) == SQLITE_ROW) {
        coord_queue q = {0};
        snprintf(q.name, sizeof q.name, "%s", col_text(st, 0));
        int64_t quota_ps = sqlite3_column_int64(st, 1), quota_workers = sqlite3_column_int64(st, 2),
                weight = sqlite3_column_int64(st, 3);
        q.create_time = sqlite3_column_double(st, 4);
        q.quota_memory = sqlite3_column_int64(st, 5);
        json_t *classes = json_loads(col_text(st, 6), 0, NULL);
        const char *key;
        char why[160];
        int bad_classes = coord_queue_classes_read(classes, &q, &key, why, sizeof why);
        json_decref(classes);
        if (!pf_job_name_valid(q.name) || quota_ps < -1 || quota_ps > COORD_QUEUE_QUOTA_MAX ||
            quota_workers < -1 || quota_workers > COORD_QUEUE_QUOTA_MAX || weight < 1 ||
            weight > COORD_QUEUE_WEIGHT_MAX || q.quota_memory < -1 ||
            q.quota_memory > COORD_QUEUE_MEMORY_QUOTA_MAX || bad_classes) {
            rc = pf_error_set(err, PF_ERR_FORMAT, NULL, "database: queue %.63s: out of range",
                              q.name);
            break;
        }
        q.quota_ps = (int)quota_ps;
        q.quota_workers = (int)quota_workers;
        q.weight = (int)weight;
        if (coord_queue_adopt(c, &q) != PF_OK)
            rc = pf_error_set(err, PF_ERR_FORMAT, NULL, "database: more than %d queues",
                              COORD_MAX_QUEUES);
    }
    sqlite3_finalize(st);
    return rc;
}

pf_status coord_store_load(coord_store *s, coord_cluster *c, double now, pf_error *err) {
    pf_status qrc = load_queues(s, c, err);
    if (qrc != PF_OK)
        return qrc;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(
            s->db, "SELECT name, spec, status, create_time FROM jobs ORDER BY create_time, name",
            -1, &st, NULL) != SQLITE_OK)
        return db_error(s, err, "loading jobs");
    pf_status rc = PF_OK;
    while (rc == PF_OK && sqlite3_step(st) == SQLITE_ROW) {
        coord_job *j = pf_calloc(1, sizeof *j);
        const char *spec = col_text(st, 1);
        pf_error perr;
        if (!j || !(j->spec_json = pf_calloc(1, strlen(spec) + 1))) {
            coord_job_free(j);
            rc = PF_ERR_NOMEM;
            break;
        }
        memcpy(j->spec_json, spec, strlen(spec));
        if (pf_job_spec_parse(spec, strlen(spec), &j->spec, &perr) != PF_OK) {
            rc = pf_error_set(err, PF_ERR_FORMAT, NULL, "database: job %s: stored spec: %s",
                              col_text(st, 0), perr.message);
            coord_job_free(j);
            break;
        }
        /* Normalised again: a spec stored by an older version lacks fields added since
         * (their defaults), and must still equal the same spec submitted again. */
        char *normal = pf_job_spec_to_json(&j->spec);
        if (!normal) {
            coord_job_free(j);
            rc = PF_ERR_NOMEM;
            break;
        }
        pf_free(j->spec_json);
        j->spec_json = normal;
        if (coord_serving_make(j) != PF_OK) { /* before the status, which names their state */
            coord_job_free(j);
            rc = PF_ERR_NOMEM;
            break;
        }
        snprintf(j->name, sizeof j->name, "%s", col_text(st, 0));
        json_t *status = json_loads(col_text(st, 2), 0, NULL);
        coord_job_status_from_json(j, status);
        json_decref(status);
        /* The column keeps the exact time; the status's RFC 3339 text only milliseconds. It
         * orders the jobs and is their position in a paginated list. */
        j->create_time = sqlite3_column_double(st, 3);
        coord_rate_restart(&j->rate, j->global_step, now); /* no rate until it is measured */
        j->steps_per_sec = NAN;
        if (coord_job_make_tasks(j) != PF_OK || load_tasks(s, j) != PF_OK ||
            load_checkpoint_step(s, j) != PF_OK || coord_cluster_adopt_job(c, j) != PF_OK) {
            coord_job_free(j);
            rc = PF_ERR_NOMEM;
        }
        for (int i = 0; rc == PF_OK && i < j->n_tasks; i++)
            j->tasks[i].last_heartbeat = j->tasks[i].node_id[0] ? now : 0;
    }
    sqlite3_finalize(st);
    if (rc != PF_OK)
        return rc;
    if (sqlite3_prepare_v2(
            s->db,
            "SELECT id, role, address, version, registered, lost, busy, job,"
            " generation, type, idx, memory, draining FROM nodes ORDER BY registered",
            -1, &st, NULL) != SQLITE_OK)
        return db_error(s, err, "loading nodes");
    while (rc == PF_OK && sqlite3_step(st) == SQLITE_ROW) {
        coord_node *n = pf_calloc(1, sizeof *n);
        if (n) /* before it is adopted: the index hashes it */
            snprintf(n->id, sizeof n->id, "%s", col_text(st, 0));
        if (!n || coord_cluster_adopt_node(c, n) != PF_OK) {
            pf_free(n);
            rc = PF_ERR_NOMEM;
            break;
        }
        snprintf(n->role, sizeof n->role, "%s", col_text(st, 1));
        snprintf(n->address, sizeof n->address, "%s", col_text(st, 2));
        snprintf(n->version, sizeof n->version, "%s", col_text(st, 3));
        n->registered = sqlite3_column_double(st, 4);
        n->lost = sqlite3_column_int(st, 5) != 0;
        n->busy = sqlite3_column_int(st, 6) != 0;
        snprintf(n->job, sizeof n->job, "%s", col_text(st, 7));
        n->generation = sqlite3_column_int(st, 8);
        snprintf(n->type, sizeof n->type, "%s", col_text(st, 9));
        n->index = sqlite3_column_int(st, 10);
        n->memory = sqlite3_column_int64(st, 11);
        snprintf(n->draining, sizeof n->draining, "%s", col_text(st, 12));
        n->last_heartbeat = now; /* a fresh lease: see store.h */
    }
    sqlite3_finalize(st);
    if (rc == PF_OK) /* the serving tasks and the agents must agree on who serves what */
        coord_serving_reconcile(c);
    return rc;
}

pf_status coord_store_add_event(coord_store *s, const char *kind, const char *job, const char *data,
                                double now, int64_t *id) {
    if (run(bind(s, Q_EVENT_ADD, "dsss", now, job ? job : "", kind, data)) != PF_OK)
        return PF_ERR_IO;
    *id = sqlite3_last_insert_rowid(s->db);
    return PF_OK;
}

pf_status coord_store_events_after(coord_store *s, int64_t after, const char *job, const char *kind,
                                   int limit,
                                   int (*fn)(int64_t id, const char *kind, const char *job,
                                             const char *data, void *ctx),
                                   void *ctx) {
    sqlite3_stmt *st;
    const char *sql = "SELECT id, kind, job, data FROM events WHERE id > ?1"
                      " AND (?2 IS NULL OR job = ?2 OR job = '')"
                      " AND (?3 IS NULL OR kind = ?3) ORDER BY id LIMIT ?4";
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return PF_ERR_IO;
    sqlite3_bind_int64(st, 1, after);
    if (job)
        sqlite3_bind_text(st, 2, job, -1, SQLITE_TRANSIENT);
    if (kind)
        sqlite3_bind_text(st, 3, kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 4, limit);
    while (sqlite3_step(st) == SQLITE_ROW)
        if (fn(sqlite3_column_int64(st, 0), col_text(st, 1), col_text(st, 2), col_text(st, 3), ctx))
            break;
    sqlite3_finalize(st);
    return PF_OK;
}

int64_t coord_store_last_event_id(coord_store *s) {
    sqlite3_stmt *st;
    int64_t id = 0;
    if (sqlite3_prepare_v2(s->db, "SELECT COALESCE(MAX(id), 0) FROM events", -1, &st, NULL) ==
        SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            id = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    return id;
}

static double jnum(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* Thins the points of one task of a job once it holds more than max_rows: the newest
 * max_rows / 4 stay at full resolution, the older ones keep one point per bucket of equal
 * steps, at most max_rows / 4 buckets. A task's rows stay at most max_rows (+ one report). */
static pf_status thin_metrics(coord_store *s, const char *job, const char *task, int max_rows) {
    sqlite3_stmt *st = bind(s, Q_METRICS_COUNT, "ss", job, task);
    int64_t rows = 0, first = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        rows = sqlite3_column_int64(st, 0);
        first = sqlite3_column_int64(st, 1);
    }
    sqlite3_reset(st);
    if (rows <= max_rows)
        return PF_OK;
    int64_t quarter = max_rows / 4 > 0 ? max_rows / 4 : 1, cut = -1;
    st = bind(s, Q_METRICS_CUT, "ssi", job, task, quarter - 1);
    if (sqlite3_step(st) == SQLITE_ROW)
        cut = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    if (cut <= first)
        return PF_OK;
    int64_t width = (cut - first + quarter - 1) / quarter;
    return run(bind(s, Q_METRICS_THIN, "ssiii", job, task, cut, first, width < 1 ? 1 : width));
}

/* Keeps a job's newest COORD_STORE_EVENTS_KEPT events of one kind. */
static pf_status prune_events(coord_store *s, const char *job, const char *kind) {
    sqlite3_stmt *st = bind(s, Q_EVENTS_CUT, "ssi", job, kind, (int64_t)COORD_STORE_EVENTS_KEPT);
    int64_t cut = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        cut = sqlite3_column_int64(st, 0);
    sqlite3_reset(st);
    return cut < 0 ? PF_OK : run(bind(s, Q_EVENTS_PRUNE, "ssi", job, kind, cut));
}

pf_status coord_store_add_metrics(coord_store *s, const char *job, const char *task,
                                  uint64_t incarnation, json_t *points, json_t *evals,
                                  int max_rows) {
    size_t i;
    json_t *p;
    int64_t inc = (int64_t)incarnation;
    json_array_foreach(points, i, p) {
        if (run(bind(s, Q_METRIC_ADD, "ssiidddd", job, task, inc,
                     (int64_t)json_integer_value(json_object_get(p, "step")), jnum(p, "time"),
                     jnum(p, "loss"), jnum(p, "examples_per_sec"), jnum(p, "step_time_seconds"))) !=
            PF_OK)
            return PF_ERR_IO;
    }
    json_array_foreach(evals, i, p) {
        if (run(bind(s, Q_EVAL_ADD, "ssiiddddd", job, task, inc,
                     (int64_t)json_integer_value(json_object_get(p, "step")), jnum(p, "time"),
                     jnum(p, "accuracy"), jnum(p, "test_loss"), jnum(p, "test_auc"),
                     jnum(p, "test_calibration"))) != PF_OK)
            return PF_ERR_IO;
    }
    if (json_array_size(points) && thin_metrics(s, job, task, max_rows) != PF_OK)
        return PF_ERR_IO;
    if (prune_events(s, job, "metric") != PF_OK || prune_events(s, job, "job") != PF_OK)
        return PF_ERR_IO;
    return PF_OK;
}

static json_t *real_or_null(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? json_null()
                                                     : json_real(sqlite3_column_double(st, i));
}

json_t *coord_store_metrics(coord_store *s, const char *job, int64_t since_step, int max_points) {
    sqlite3_stmt *st;
    int64_t total = 0, max_step = since_step;
    int n_tasks = 1;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT COUNT(*), COALESCE(MAX(step), 0), COUNT(DISTINCT task)"
                           " FROM metrics WHERE job = ? AND step >= ?",
                           -1, &st, NULL) != SQLITE_OK)
        return NULL;
    sqlite3_bind_text(st, 1, job, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, since_step);
    if (sqlite3_step(st) == SQLITE_ROW) {
        total = sqlite3_column_int64(st, 0);
        max_step = sqlite3_column_int64(st, 1);
        n_tasks = sqlite3_column_int(st, 2) > 0 ? sqlite3_column_int(st, 2) : 1;
    }
    sqlite3_finalize(st);
    /* Per series at most max_points: bucket steps evenly when there are more. */
    int per_series = max_points / n_tasks > 0 ? max_points / n_tasks : 1;
    int64_t span = max_step - since_step + 1;
    int64_t width = total > max_points ? (span + per_series - 1) / per_series : 1;
    if (width < 1)
        width = 1;
    json_t *out =
        json_pack("{s:s, s:I, s:b, s:[], s:[], s:[]}", "job", job, "total_points",
                  (json_int_t)total, "downsampled", width > 1, "points", "aggregate", "evals");
    if (!out)
        return NULL;
    json_t *points = json_object_get(out, "points"), *agg = json_object_get(out, "aggregate"),
           *evals = json_object_get(out, "evals");
    const char *by_task = "SELECT task, CAST(MAX(step) AS INTEGER), AVG(time), AVG(loss),"
                          " AVG(examples_per_sec), AVG(step_time) FROM metrics"
                          " WHERE job = ?1 AND step >= ?2 GROUP BY task, (step - ?2) / ?3"
                          " ORDER BY 2, 1";
    if (sqlite3_prepare_v2(s->db, by_task, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, job, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, since_step);
        sqlite3_bind_int64(st, 3, width);
        while (sqlite3_step(st) == SQLITE_ROW)
            json_array_append_new(
                points, json_pack("{s:s, s:I, s:f, s:o, s:o, s:o}", "task", col_text(st, 0), "step",
                                  (json_int_t)sqlite3_column_int64(st, 1), "time",
                                  sqlite3_column_double(st, 2), "loss", real_or_null(st, 3),
                                  "examples_per_sec", real_or_null(st, 4), "step_time_seconds",
                                  real_or_null(st, 5)));
        sqlite3_finalize(st);
    }
    /* The aggregate: mean loss over tasks, examples/s summed over tasks (mean per task times
     * the number of tasks reporting in the bucket). */
    const char *all = "SELECT CAST(MAX(step) AS INTEGER), AVG(time), AVG(loss),"
                      " AVG(examples_per_sec) * COUNT(DISTINCT task) FROM metrics"
                      " WHERE job = ?1 AND step >= ?2 GROUP BY (step - ?2) / ?3 ORDER BY 1";
    if (sqlite3_prepare_v2(s->db, all, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, job, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, since_step);
        sqlite3_bind_int64(st, 3, width);
        while (sqlite3_step(st) == SQLITE_ROW)
            json_array_append_new(agg, json_pack("{s:I, s:f, s:o, s:o}", "step",
                                                 (json_int_t)sqlite3_column_int64(st, 0), "time",
                                                 sqlite3_column_double(st, 1), "loss",
                                                 real_or_null(st, 2), "examples_per_sec",
                                                 real_or_null(st, 3)));
        sqlite3_finalize(st);
    }
    if (sqlite3_prepare_v2(s->db,
                           "SELECT step, time, accuracy, test_loss, task, auc, calibration"
                           " FROM evals WHERE job = ? AND step >= ? ORDER BY step LIMIT 10000",
                           -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, job, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 2, since_step);
        while (sqlite3_step(st) == SQLITE_ROW)
            json_array_append_new(
                evals, json_pack("{s:I, s:f, s:o, s:o, s:o, s:o, s:s}", "step",
                                 (json_int_t)sqlite3_column_int64(st, 0), "time",
                                 sqlite3_column_double(st, 1), "accuracy", real_or_null(st, 2),
                                 "test_loss", real_or_null(st, 3), "test_auc", real_or_null(st, 5),
                                 "test_calibration", real_or_null(st, 6), "task", col_text(st, 4)));
        sqlite3_finalize(st);
    }
    return out;
}

pf_status coord_store_add_checkpoint(coord_store *s, const char *job, int64_t step, double time,
                                     int64_t bytes, const char *files_json, const char *kept_json) {
    if (run(bind(s, Q_CKPT_ADD, "sidis", job, step, time, bytes, files_json)))
        return PF_ERR_IO;
    return kept_json && run(bind(s, Q_CKPTS_KEEP, "sis", job, step, kept_json)) ? PF_ERR_IO : PF_OK;
}

json_t *coord_store_checkpoints(coord_store *s, const char *job) {
    sqlite3_stmt *st;
    json_t *items = json_array();
    if (!items || sqlite3_prepare_v2(s->db,
                                     "SELECT step, time, bytes, files FROM checkpoints"
                                     " WHERE job = ? ORDER BY step DESC LIMIT 1000",
                                     -1, &st, NULL) != SQLITE_OK) {
        json_decref(items);
        return NULL;
    }
    sqlite3_bind_text(st, 1, job, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(st) == SQLITE_ROW) {
        json_t *files = json_loads(col_text(st, 3), 0, NULL);
        json_array_append_new(items, json_pack("{s:I, s:o, s:I, s:o}", "step",
                                               (json_int_t)sqlite3_column_int64(st, 0), "time",
                                               coord_time_json(sqlite3_column_double(st, 1)),
                                               "bytes", (json_int_t)sqlite3_column_int64(st, 2),
                                               "files", files ? files : json_array()));
    }
    sqlite3_finalize(st);
    return json_pack("{s:o}", "items", items);
}

int coord_store_metric_rows_per_task(int n_tasks) {
    int rows = n_tasks > 0 ? COORD_STORE_METRIC_ROWS / n_tasks : COORD_STORE_METRIC_ROWS;
    return rows < COORD_STORE_MIN_TASK_ROWS ? COORD_STORE_MIN_TASK_ROWS : rows;
}
