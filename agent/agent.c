/* agent.c - managed ps/worker nodes (see agent.h).
 *
 * DESIGN: the main thread runs the control loop (register, heartbeat, reconcile); the task
 * runs in its own thread and only publishes its state under the agent's lock; a reporter
 * thread per training task posts metric points. Assignments are level-triggered, so a lost
 * heartbeat answer or a coordinator restart needs no special handling: the next answer says
 * again what should run.
 */
#include "agent/agent.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/reporter.h"
#include "agent/tracing.h"
#include "ps/server.h"
#include "psflow/clock.h"
#include "psflow/address.h"
#include "psflow/exit_code.h"
#include "psflow/footprint.h"
#include "psflow/http_client.h"
#include "psflow/mem.h"
#include "psflow/profile.h"
#include "psflow/signals.h"
#include "psflow/tf_config.h"
#include "psflow/version.h"
#include "psflow/wire_auth.h"
#include "serve/serve.h"
#include "worker/evaluator.h"
#include "worker/trainer.h"

static volatile sig_atomic_t agent_signalled;

static void on_signal(int sig) {
    (void)sig;
    agent_signalled = 1;
}

/* --- the task an agent runs --- */

enum { TASK_RUNNING = 1, TASK_SUCCEEDED, TASK_FAILED };

typedef struct agent agent;

typedef struct task {
    agent *a;
    pthread_t thread;
    char job[PF_NAME_MAX + 1];
    int generation;
    char type[16];
    int index;
    uint64_t incarnation; /* the task's: the assignment's, else one of its own */
    uint64_t assigned;    /* the assignment's incarnation, 0 when it had none (older coordinator) */
    pf_job_spec spec;
    pf_tf_config cfg;
    /* The data-plane key the assignment carries (docs/security.md): a ps's job key, or a
     * training task's own task key; has_key 0: none (the data plane is unauthenticated). */
    uint8_t key[PF_WIRE_KEY_SIZE];
    int has_key;
    int stop;    /* atomic: set to stop a training task */
    int workers; /* atomic: the job's workers as the coordinator last said (live changes) */
    /* atomic: the chief's checkpoint request (worker_options.checkpoint_now): 0, or 1 + the
     * step of the assignment's checkpoint_now (a preempted job's final checkpoint) */
    int64_t checkpoint_now;
    int aggregate; /* with workers: a sync step's replicas_to_aggregate, under a->mu */
    ps_server *ps; /* under a->mu */
    /* a ps's input work queue as it was when the ps ended (its last report says it) */
    ps_server_input_stats last_input;
    int has_last_input;
    /* published under a->mu */
    int state;
    int exit_code;
    char message[256];
    const char *reason; /* a failure's reason for the coordinator ("NonFiniteLoss"), or NULL */
    worker_result result;
    pf_profile profile;               /* a training task's step breakdown (the trainer writes it) */
    uint64_t trace_armed, trace_sent; /* under a->mu: the trace ids armed and sent */
    agent_reporter *rep;
    /* a serving task (type "serve"): what its server says, and the URL it is reached at */
    serve_stats *serving;
    char endpoint[400];
} task;

struct agent {
    const agent_options *o;
    pthread_mutex_t mu;
    char base[1024]; /* coordinator URL without a trailing slash */
    task *t;
    int changed;       /* the task's state changed since the last heartbeat */
    agent_clock clock; /* under mu: the coordinator's clock, for traces */
};

static void task_finish(task *t, int state, int code, const char *message) {
    pthread_mutex_lock(&t->a->mu);
    t->state = state;
    t->exit_code = code;
    snprintf(t->message, sizeof t->message, "%.255s", message ? message : "");
    t->a->changed = 1;
    pthread_mutex_unlock(&t->a->mu);
}

static void *ps_task_main(void *arg) {
    task *t = arg;
    const agent_options *o = t->a->o;
    /* the job key the coordinator gave this ps: it verifies every task of the job */
    ps_server_options so = {&t->spec,
                            t->index,
                            o->listen_host,
                            o->listen_port,
                            o->checkpoint_dir,
                            t->incarnation,
                            o->exit_grace_seconds,
                            t->has_key > 0 ? t->key : NULL,
                            o->data_plane,
                            0};
    pf_error err;
    pf_error_clear(&err);
    ps_server *s;
    pf_status started = ps_server_start(&so, &s, &err);
    if (started != PF_OK) {
        fprintf(stderr, "psflow ps agent: %s\n", err.message);
        task_finish(t, TASK_FAILED, PF_EX_UNAVAILABLE, err.message);
        return NULL;
    }
    pthread_mutex_lock(&t->a->mu);
    t->ps = s;
    int stop_now = t->stop;
    if (t->workers != t->spec.replicas.worker) /* changed while the ps was starting */
        ps_server_set_workers(s, t->workers, t->aggregate);
    pthread_mutex_unlock(&t->a->mu);
    if (stop_now)
        ps_server_stop(s);
    int rc = ps_server_wait(s);
    pthread_mutex_lock(&t->a->mu);
    t->ps = NULL;
    t->has_last_input = ps_server_input(s, &t->last_input);
    pthread_mutex_unlock(&t->a->mu);
    ps_server_destroy(s);
    if (rc == 0)
        task_finish(t, TASK_SUCCEEDED, 0, "the job is done");
    else
        task_finish(t, TASK_FAILED, 130, "stopped");
    return NULL;
}

static void *worker_task_main(void *arg) {
    task *t = arg;
    const agent_options *o = t->a->o;
    int has_chief = pf_tf_config_count(&t->cfg, "chief") > 0;
    int chief_type = !strcmp(t->type, "chief");
    const char *addrs[PF_MAX_REPLICAS];
    for (int p = 0; p < t->spec.replicas.ps; p++)
        addrs[p] = pf_tf_config_address(&t->cfg, "ps", p);
    worker_options wo = {
        .spec = &t->spec,
        .ps_addrs = addrs,
        .task = chief_type ? 0 : t->index + has_chief,
        .is_chief = chief_type || (!has_chief && t->index == 0),
        .incarnation = t->incarnation,
        .checkpoint_dir = o->checkpoint_dir,
        .log_every = o->log_every,
        .retry_seconds = o->retry_seconds,
        .push_delay_ms = o->push_delay_ms,
        .stop = &t->stop,
        .workers = &t->workers,
        .checkpoint_now = &t->checkpoint_now,
        .report = agent_reporter_add,
        .report_ctx = t->rep,
        .ca_file = o->data_plane.ca_file,
        .profile = &t->profile,
    };
    wo.task_key = t->has_key > 0 ? t->key : NULL; /* its own key only (docs/security.md) */
    t->result.accuracy = t->result.test_loss = t->result.auc = t->result.calibration = NAN;
    pf_status st = worker_run(&wo, &t->result);
    pf_profile_trace_finish(&t->profile); /* a trace still recording ends with the task */
    worker_result_print(&wo, &t->result);
    /* The final evaluation and checkpoint reach the coordinator before the task reports
     * success, so a job is Succeeded only with its final accuracy and checkpoint on record;
     * and the rollbacks before a failure reach it before the failure, so the job's events
     * come in the order they happened. */
    if (!__atomic_load_n(&t->stop, __ATOMIC_RELAXED) && agent_reporter_flush(t->rep, 10.0) != 0)
        fprintf(stderr, "psflow %s agent %s: the final metrics are still unsent after 10 s\n",
                o->role, o->node_id);
    if (st == PF_OK) {
        task_finish(t, TASK_SUCCEEDED, 0, "reached max_steps");
    } else if (st == PF_ERR_NONFINITE) { /* the job fails, whatever the restart policy */
        pthread_mutex_lock(&t->a->mu);
        t->reason = "NonFiniteLoss";
        pthread_mutex_unlock(&t->a->mu);
        task_finish(t, TASK_FAILED, pf_exit_code(st), t->result.message);
    } else {
        task_finish(t, TASK_FAILED, pf_exit_code(st), pf_strerror(st));
    }
    return NULL;
}

static void *evaluator_task_main(void *arg) {
    task *t = arg;
    evaluator_options eo = {.spec = &t->spec,
                            .checkpoint_dir = t->a->o->checkpoint_dir,
                            .stop = &t->stop,
                            .report = agent_reporter_add,
                            .report_ctx = t->rep};
    pf_error err;
    pf_status st = evaluator_run(&eo, &err);
    if (st == PF_OK && agent_reporter_flush(t->rep, 10.0) != 0)
        fprintf(stderr, "psflow %s agent %s: the final evaluation is still unsent after 10 s\n",
                t->a->o->role, t->a->o->node_id);
    if (st == PF_OK) {
        task_finish(t, TASK_SUCCEEDED, 0, "evaluated the final checkpoint");
    } else {
        fprintf(stderr, "psflow %s agent %s: evaluator: %s\n", t->a->o->role, t->a->o->node_id,
                err.message);
        task_finish(t, TASK_FAILED, pf_exit_code(st), err.message);
    }
    return NULL;
}

/* The address a serving task listens on: the agent's advertised host when that is an IPv4
 * loopback address (nothing else can reach it anyway), else every interface. */
static const char *serve_listen_host(const char *host) {
    return !strncmp(host, "127.", 4) ? host : "0.0.0.0";
}

/* A serving task (docs/serving.md, "Managed"): psflow serve for the job, its checkpoints
 * from this agent's checkpoint folder, on the agent's advertised host at serving.port (0:
 * any free port); its endpoint and figures go out with the heartbeats until it is stopped. */
static void *serve_task_main(void *arg) {
    task *t = arg;
    const agent_options *o = t->a->o;
    char host[256];
    int advertised_port;
    pf_error err;
    pf_error_clear(&err);
    if (pf_split_host_port(o->advertise, host, sizeof host, &advertised_port) != 0) {
        task_finish(t, TASK_FAILED, PF_EX_USAGE, "the agent's --advertise is not HOST:PORT");
        return NULL;
    }
    const char *listen = serve_listen_host(host);
    const char *token = o->serve_token ? o->serve_token : "";
    if (!token[0] && strncmp(listen, "127.", 4) != 0) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "serving on %.60s needs a token: give the agent PSFLOW_TOKEN or PSFLOW_TOKEN_FILE "
                 "(the job API's), or advertise a 127.0.0.1 address",
                 host);
        fprintf(stderr, "psflow %s agent %s: %s\n", o->role, o->node_id, msg);
        task_finish(t, TASK_FAILED, PF_EX_USAGE, msg);
        return NULL;
    }
    serve_options so = {.spec = &t->spec,
                        .checkpoint_dir = o->checkpoint_dir,
                        .listen_host = listen,
                        .port = t->spec.serving.port,
                        .token = token,
                        .stop = &t->stop,
                        .stats = t->serving,
                        .memory = o->memory};
    pf_status st = serve_run(&so, &err);
    if (st == PF_OK) {
        task_finish(t, TASK_SUCCEEDED, 0, "stopped");
    } else {
        fprintf(stderr, "psflow %s agent %s: serve %d of job %s: %s\n", o->role, o->node_id,
                t->index, t->job, err.message);
        task_finish(t, TASK_FAILED, pf_exit_code(st), err.message);
    }
    return NULL;
}

/* The bytes task t needs (psflow/footprint.h): a ps task's share, a training task's, or a
 * serving task's (two versions of the whole model while it switches); -1 when the placement
 * cannot even be computed. */
static int64_t task_need(const task *t) {
    if (!strcmp(t->type, "serve")) {
        pf_footprint fp;
        pf_footprint_estimate(&t->spec, &fp);
        return 2 * fp.params * (int64_t)sizeof(float);
    }
    if (strcmp(t->type, "ps") != 0) {
        pf_footprint fp;
        pf_footprint_estimate(&t->spec, &fp);
        return fp.worker_bytes;
    }
    pf_placement p;
    if (pf_placement_compute(&t->spec, &p) != PF_OK)
        return -1;
    int64_t need = pf_footprint_ps_bytes(&t->spec, &p, t->index);
    pf_placement_deinit(&p);
    return need;
}

/* The data-plane key an assignment carries into key: 1, 0 when it has none (an older
 * coordinator), -1 when it is not 64 hex digits. */
static int assignment_key(json_t *as, uint8_t key[PF_WIRE_KEY_SIZE]) {
    json_t *k = json_object_get(as, "key");
    if (!k)
        return 0;
    const char *hex = json_string_value(k);
    return hex && pf_wire_key_parse_hex(hex, strlen(hex), key) == PF_OK ? 1 : -1;
}

/* Starts the assigned task; on a bad assignment, or one that needs more memory than this
 * agent offers (the coordinator admitted it against its largest agent, and may have given
 * it a smaller one), reports the task failed instead of running out of memory. */
static task *task_start(agent *a, json_t *as) {
    task *t = pf_calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->a = a;
    snprintf(t->job, sizeof t->job, "%s", json_string_value(json_object_get(as, "job")));
    snprintf(t->type, sizeof t->type, "%s", json_string_value(json_object_get(as, "type")));
    t->generation = (int)json_integer_value(json_object_get(as, "generation"));
    t->index = (int)json_integer_value(json_object_get(as, "index"));
    json_int_t incarnation = json_integer_value(json_object_get(as, "incarnation"));
    t->assigned = incarnation > 0 ? (uint64_t)incarnation : 0;
    t->incarnation = t->assigned;
    if (!t->incarnation)
        t->incarnation = (uint64_t)(pf_clock_wall() * 1e6);
    t->state = TASK_RUNNING;
    const char *tf = json_string_value(json_object_get(as, "tf_config"));
    char *spec = json_dumps(json_object_get(as, "spec"), JSON_COMPACT);
    pf_error err;
    pf_error_clear(&err);
    t->has_key = assignment_key(as, t->key);
    if (t->has_key < 0)
        pf_error_set(&err, PF_ERR_FORMAT, NULL, "its data-plane key is not 64 hex digits");
    int is_serve = !strcmp(t->type, "serve"); /* no TF_CONFIG: it never joins the data plane */
    if (t->has_key < 0 || (!tf && !is_serve) || !spec ||
        pf_job_spec_parse(spec, strlen(spec), &t->spec, &err) != PF_OK ||
        (!is_serve && (pf_tf_config_parse(tf, strlen(tf), &t->cfg, &err) != PF_OK ||
                       pf_tf_config_validate(&t->cfg, &err) != PF_OK))) {
        free(spec);
        t->state = TASK_FAILED;
        t->exit_code = PF_EX_DATAERR;
        snprintf(t->message, sizeof t->message, "bad assignment: %.200s", err.message);
        a->changed = 1;
        return t;
    }
    free(spec);
    t->workers = t->spec.replicas.worker;
    t->aggregate = t->spec.training.replicas_to_aggregate;
    int64_t need = a->o->memory > 0 ? task_need(t) : 0;
    if (need < 0 || need > a->o->memory) {
        char want[32] = "?", have[32];
        if (need > 0)
            pf_footprint_format_bytes(need, want, sizeof want);
        pf_footprint_format_bytes(a->o->memory, have, sizeof have);
        t->state = TASK_FAILED;
        t->exit_code = PF_EX_DATAERR;
        snprintf(t->message, sizeof t->message,
                 "%s %d of job %s needs about %s of memory; this agent offers %s (--memory)",
                 t->type, t->index, t->job, want, have);
        fprintf(stderr, "psflow %s agent %s: refusing the assignment: %s\n", a->o->role,
                a->o->node_id, t->message);
        a->changed = 1;
        return t;
    }
    int is_ps = !strcmp(t->type, "ps");
    fprintf(stderr, "psflow %s agent %s: assigned %s %d of job %s (generation %d)\n", a->o->role,
            a->o->node_id, t->type, t->index, t->job, t->generation);
    if (is_serve) {
        if (!(t->serving = pf_calloc(1, sizeof *t->serving))) {
            t->state = TASK_FAILED;
            t->exit_code = PF_EX_OSERR;
            snprintf(t->message, sizeof t->message, "out of memory");
            a->changed = 1;
            return t;
        }
        serve_stats_init(t->serving);
    } else if (!is_ps) {
        char name[32];
        int chief = !strcmp(t->type, "chief") ||
                    (!strcmp(t->type, "worker") && pf_tf_config_count(&t->cfg, "chief") == 0 &&
                     t->index == 0);
        if (!strcmp(t->type, "evaluator"))
            snprintf(name, sizeof name, "evaluator");
        else if (chief)
            snprintf(name, sizeof name, "chief");
        else
            snprintf(name, sizeof name, "worker-%d", t->index);
        t->rep = agent_reporter_create(a->base, a->o->token, t->job, name);
        agent_reporter_set_incarnation(t->rep, t->assigned);
    }
    void *(*run)(void *) = is_ps                           ? ps_task_main
                           : is_serve                      ? serve_task_main
                           : !strcmp(t->type, "evaluator") ? evaluator_task_main
                                                           : worker_task_main;
    if (pthread_create(&t->thread, NULL, run, t) != 0) {
        t->state = TASK_FAILED;
        t->exit_code = PF_EX_OSERR;
        snprintf(t->message, sizeof t->message, "cannot start a thread");
        t->thread = 0;
    }
    a->changed = 1;
    return t;
}

/* Stops a task (if still running), waits for it and frees it. */
static void task_stop(agent *a, task *t) {
    if (!t)
        return;
    pthread_mutex_lock(&a->mu);
    __atomic_store_n(&t->stop, 1, __ATOMIC_RELAXED);
    if (t->ps)
        ps_server_stop(t->ps);
    int running = t->state == TASK_RUNNING;
    pthread_mutex_unlock(&a->mu);
    if (running)
        fprintf(stderr, "psflow %s agent %s: stopping %s %d of job %s\n", a->o->role, a->o->node_id,
                t->type, t->index, t->job);
    /* A stopped task ends within its current wait, which training.stall_timeout_secs
     * bounds (a ps within 0.1 s); past that and a minute more, the agent exits rather than
     * hang (69: a supervisor starts it again, clean). */
    double start = pf_clock_now(), limit = (double)t->spec.training.stall_timeout_secs + 60,
           next_note = start + 10;
    for (int done = 0; t->thread && !done;) {
        pthread_mutex_lock(&a->mu);
        done = t->state != TASK_RUNNING;
        pthread_mutex_unlock(&a->mu);
        double now = pf_clock_now();
        if (!done && now - start > limit) {
            fprintf(stderr,
                    "psflow %s agent %s: %s %d of job %s did not stop in %.0f s; exiting (69) "
                    "to start again clean\n",
                    a->o->role, a->o->node_id, t->type, t->index, t->job, now - start);
            _exit(PF_EX_UNAVAILABLE);
        }
        if (!done && now >= next_note) {
            fprintf(stderr,
                    "psflow %s agent %s: waiting %.0f s for %s %d of job %s to stop (its "
                    "current request to a ps); exiting after %.0f s\n",
                    a->o->role, a->o->node_id, now - start, t->type, t->index, t->job, limit);
            next_note += 10;
        }
        if (!done)
            pf_clock_sleep(0.05); /* polling the task's state, with a deadline */
    }
    if (t->thread)
        pthread_join(t->thread, NULL); /* it returns right after task_finish */
    agent_reporter_destroy(t->rep, 5.0);
    if (t->serving) {
        serve_stats_deinit(t->serving);
        pf_free(t->serving);
    }
    pf_job_spec_deinit(&t->spec);
    pf_tf_config_deinit(&t->cfg);
    pf_wire_key_clear(t->key, sizeof t->key);
    pf_profile_trace_free(&t->profile);
    pf_free(t);
}

/* --- control loop --- */

/* A ps's dynamic tables as its heartbeat reports them (api/rest.md), or NULL: none. */
static json_t *tables_json(ps_server *ps) {
    ps_server_table_stats st[PF_MAX_EMBEDDINGS];
    int n = ps_server_tables(ps, st, PF_MAX_EMBEDDINGS);
    json_t *out = n > 0 ? json_array() : NULL;
    for (int i = 0; out && i < n; i++) {
        json_t *o = json_pack(
            "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "table", st[i].table, "rows",
            (json_int_t)st[i].st.rows, "max_rows", (json_int_t)st[i].max_rows, "admitted",
            (json_int_t)st[i].st.admitted, "refused", (json_int_t)st[i].st.refused, "evicted",
            (json_int_t)st[i].st.evicted, "lookups", (json_int_t)st[i].st.lookups, "misses",
            (json_int_t)st[i].st.misses, "bytes", (json_int_t)st[i].st.bytes);
        if (!o || json_array_append_new(out, o) != 0) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* With training.max_staleness: each training task's lag as this ps counts it - how many
 * pushes it was ahead of the slowest connected one when its latest pull was answered, 0 ..
 * max_staleness (a held task is one more ahead now, and waits); -1 while it is not connected
 * or before its first answered pull - indexed by training task, up to the last one it has
 * seen; NULL without the bound or when out of memory. */
static json_t *staleness_lags(ps_server *ps) {
    static ps_staleness_task rec[PF_MAX_REPLICAS + 1]; /* the control loop's thread only */
    int n = ps_server_staleness(ps, rec, PF_MAX_REPLICAS + 1);
    while (n > 0 && !rec[n - 1].live && rec[n - 1].clock == 0)
        n--;
    json_t *lags = n > 0 ? json_array() : NULL;
    for (int i = 0; lags && i < n; i++)
        if (json_array_append_new(lags, json_integer(rec[i].live ? rec[i].pull_lag : -1)) != 0) {
            json_decref(lags);
            lags = NULL;
        }
    return lags;
}

/* A succeeded chief's result; a two-class model's adds test_auc and test_calibration. */
/* A ps's input work queue (data.splits dynamic), as its reports carry it. */
static json_t *input_json(const ps_server_input_stats *in) {
    return json_pack("{s:I, s:I, s:I, s:I, s:b}", "epoch", (json_int_t)in->epoch, "splits",
                     (json_int_t)in->splits, "done", (json_int_t)in->done, "leased",
                     (json_int_t)in->leased, "finished", in->finished);
}

static json_t *result_json(const worker_result *r) {
    json_t *o =
        json_pack("{s:o, s:o, s:I}", "accuracy", agent_number_json(r->accuracy), "test_loss",
                  agent_number_json(r->test_loss), "steps", (json_int_t)r->steps);
    if (o && !isnan(r->auc))
        json_object_set_new(o, "test_auc", agent_number_json(r->auc));
    if (o && !isnan(r->calibration))
        json_object_set_new(o, "test_calibration", agent_number_json(r->calibration));
    return o;
}

/* A serving task's figures, as its heartbeats carry them (api/rest.md): the endpoint once
 * it listens, the serving version, predicts answered and their latency percentiles. */
static json_t *serving_json(task *t) {
    serve_stats_view v;
    serve_stats_read(t->serving, &v);
    char host[256];
    int port;
    if (v.port && pf_split_host_port(t->a->o->advertise, host, sizeof host, &port) == 0)
        snprintf(t->endpoint, sizeof t->endpoint, "http://%.255s:%d/v1/models/%s", host, v.port,
                 t->job);
    return json_pack("{s:o, s:o, s:I, s:I, s:o, s:o}", "endpoint",
                     t->endpoint[0] ? json_string(t->endpoint) : json_null(), "version",
                     v.version >= 0 ? json_integer((json_int_t)v.version) : json_null(), "requests",
                     (json_int_t)v.requests, "failed", (json_int_t)v.failed, "latency_p50_ms",
                     agent_number_json(v.p50 * 1e3), "latency_p99_ms",
                     agent_number_json(v.p99 * 1e3));
}

/* Where a task's time went (psflow/profile.h), as its heartbeats carry it (api/rest.md):
 * cumulative seconds of the role's phases, the time since they started counting, and its
 * steps (training task) or answered pulls (ps); NULL before a training task's first step (a
 * ps counts from its start). */
static json_t *profile_json(const pf_profile *p, int ps) {
    double sec[PF_PHASE_COUNT], wall;
    uint64_t count;
    if (pf_profile_read(p, sec, &count, &wall) != 0)
        return NULL;
    json_t *phases = json_object();
    for (int i = pf_phase_first(ps); phases && i < pf_phase_end(ps); i++)
        json_object_set_new(phases, pf_phase_name(i), json_real(sec[i]));
    return phases ? json_pack("{s:I, s:f, s:o}", "count", (json_int_t)count, "seconds", wall,
                              "phases", phases)
                  : NULL;
}

/* The profile a task's phases and traces are counted in, under a->mu: a ps's, a training
 * task's, or NULL. */
static pf_profile *task_profile(task *t) {
    if (t->ps)
        return ps_server_profile(t->ps);
    return !strcmp(t->type, "chief") || !strcmp(t->type, "worker") ? &t->profile : NULL;
}

static json_t *heartbeat_body(agent *a) {
    pthread_mutex_lock(&a->mu);
    task *t = a->t;
    json_t *b;
    if (!t) {
        b = json_pack("{s:s}", "state", "idle");
    } else {
        const char *state = t->state == TASK_RUNNING     ? "running"
                            : t->state == TASK_SUCCEEDED ? "succeeded"
                                                         : "failed";
        b = json_pack("{s:s, s:s, s:i, s:s, s:i, s:i, s:s}", "state", state, "job", t->job,
                      "generation", t->generation, "type", t->type, "index", t->index, "exit_code",
                      t->exit_code, "message", t->message);
        if (b && t->assigned) /* which incarnation this report is about */
            json_object_set_new(b, "incarnation", json_integer((json_int_t)t->assigned));
        if (b && t->state == TASK_FAILED && t->reason)
            json_object_set_new(b, "reason", json_string(t->reason));
        if (b && t->state == TASK_SUCCEEDED && t->result.steps)
            json_object_set_new(b, "result", result_json(&t->result));
        if (b && t->state == TASK_RUNNING) /* the membership this task runs with */
            json_object_set_new(b, "workers",
                                json_integer(t->ps
                                                 ? ps_server_workers(t->ps)
                                                 : __atomic_load_n(&t->workers, __ATOMIC_RELAXED)));
        pf_profile *prof = task_profile(t);
        json_t *profile = prof ? profile_json(prof, t->ps != NULL) : NULL;
        if (b && profile)
            json_object_set_new(b, "profile", profile);
        else
            json_decref(profile);
        json_t *trace = prof ? agent_trace_json(prof, &t->trace_sent, &a->clock) : NULL;
        if (b && trace)
            json_object_set_new(b, "trace", trace);
        else
            json_decref(trace);
        if (b && t->ps) {
            uint64_t version, applied, stale;
            ps_server_stats(t->ps, &version, &applied, &stale);
            uint64_t pulled, pushed;
            ps_server_rows(t->ps, &pulled, &pushed);
            json_t *stats = json_pack("{s:I, s:I, s:I, s:I}", "updates", (json_int_t)version,
                                      "stale", (json_int_t)stale, "rows_pulled", (json_int_t)pulled,
                                      "rows_pushed", (json_int_t)pushed);
            json_t *lags = staleness_lags(t->ps); /* NULL without training.max_staleness */
            if (stats && lags)
                json_object_set_new(stats, "lags", lags);
            else
                json_decref(lags);
            json_t *tables = tables_json(t->ps); /* NULL without dynamic tables */
            if (stats && tables)
                json_object_set_new(stats, "tables", tables);
            else
                json_decref(tables);
            ps_server_input_stats in;
            if (stats && ps_server_input(t->ps, &in)) /* ps 0 of a job with dynamic splits */
                json_object_set_new(stats, "input", input_json(&in));
            json_object_set_new(b, "stats", stats);
        } else if (b && t->serving && t->state == TASK_RUNNING) {
            json_object_set_new(b, "serving", serving_json(t));
        } else if (b && t->has_last_input) { /* the queue as the ps left it */
            json_object_set_new(b, "stats",
                                json_pack("{s:o}", "input", input_json(&t->last_input)));
        }
    }
    a->changed = 0;
    pthread_mutex_unlock(&a->mu);
    return b;
}

/* Whether assignment `as` is the task t runs. A new incarnation of the same task (the
 * coordinator replaced a failed worker on the agent that ran it) is another assignment: the
 * old task is stopped and the new one started. */
static int same_assignment(const task *t, json_t *as) {
    const char *job = json_string_value(json_object_get(as, "job"));
    const char *type = json_string_value(json_object_get(as, "type"));
    json_int_t incarnation = json_integer_value(json_object_get(as, "incarnation"));
    /* a new key (the coordinator's secret was replaced) restarts the task with it */
    uint8_t key[PF_WIRE_KEY_SIZE];
    int has_key = assignment_key(as, key);
    int same_key = has_key == t->has_key && (has_key != 1 || !memcmp(key, t->key, sizeof key));
    pf_wire_key_clear(key, sizeof key);
    return job && type && !strcmp(job, t->job) && !strcmp(type, t->type) &&
           json_integer_value(json_object_get(as, "generation")) == t->generation &&
           json_integer_value(json_object_get(as, "index")) == t->index && same_key &&
           (incarnation <= 0 || !t->assigned || (uint64_t)incarnation == t->assigned);
}

/* The same assignment with another worker count: a live membership change, handed to the
 * running ps (ps_server_set_workers) or training task (its data shards). Range-checked: a
 * value the spec parser would refuse changes nothing. */
static void take_membership(agent *a, task *t, json_t *as) {
    json_t *spec = json_object_get(as, "spec");
    json_t *replicas = json_object_get(spec, "replicas");
    json_t *training = json_object_get(spec, "training");
    /* A ps serves "workers" where the assignment says it (removed workers still stopping
     * count); training tasks partition the data among replicas.worker. */
    json_t *w = json_object_get(as, "workers");
    if (!w || strcmp(t->type, "ps") != 0)
        w = json_object_get(replicas, "worker");
    json_int_t workers = json_integer_value(w);
    json_int_t aggregate = json_integer_value(json_object_get(training, "replicas_to_aggregate"));
    if (!json_is_integer(w) || workers == __atomic_load_n(&t->workers, __ATOMIC_RELAXED))
        return;
    if (aggregate > workers) /* a removed worker still stopping: the ps aggregates as many */
        aggregate = workers;
    if (workers < 1 || workers > PF_MAX_REPLICAS ||
        (t->spec.training.mode == PF_MODE_SYNC && (aggregate < 1 || aggregate > workers))) {
        fprintf(stderr,
                "psflow %s agent %s: ignoring a membership of %lld workers aggregating %lld: out "
                "of range\n",
                a->o->role, a->o->node_id, (long long)workers, (long long)aggregate);
        return;
    }
    if (t->spec.training.mode != PF_MODE_SYNC)
        aggregate = workers;
    fprintf(stderr, "psflow %s agent %s: job %s now has %lld workers (was %d); %s %d carries on\n",
            a->o->role, a->o->node_id, t->job, (long long)workers, t->workers, t->type, t->index);
    pthread_mutex_lock(&a->mu);
    __atomic_store_n(&t->workers, (int)workers, __ATOMIC_RELAXED);
    t->aggregate = (int)aggregate;
    if (t->ps)
        ps_server_set_workers(t->ps, (int)workers, (int)aggregate);
    a->changed = 1;
    pthread_mutex_unlock(&a->mu);
}

/* The assignment's checkpoint_now (a step >= 0: the job is preempted, and its chief takes a
 * final checkpoint at that step or later), handed to the running training task; anything
 * else there changes nothing. */
static void take_checkpoint_request(agent *a, task *t, json_t *as) {
    json_t *v = json_object_get(as, "checkpoint_now");
    if (!t || !strcmp(t->type, "ps") || !strcmp(t->type, "evaluator"))
        return;
    if (!v) { /* none (any more): a later request of the same step is a new one */
        __atomic_store_n(&t->checkpoint_now, 0, __ATOMIC_RELAXED);
        return;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) >= (json_int_t)INT64_MAX) {
        fprintf(stderr, "psflow %s agent %s: ignoring a checkpoint_now that is not a step\n",
                a->o->role, a->o->node_id);
        return;
    }
    int64_t want = (int64_t)json_integer_value(v) + 1;
    if (__atomic_exchange_n(&t->checkpoint_now, want, __ATOMIC_RELAXED) != want)
        fprintf(stderr,
                "psflow %s agent %s: job %s is preempted: its chief takes a final checkpoint at "
                "step %lld or later\n",
                a->o->role, a->o->node_id, t->job, (long long)(want - 1));
}

static void reconcile(agent *a, json_t *as) {
    int has = json_is_object(as);
    if (a->t && has && same_assignment(a->t, as))
        take_membership(a, a->t, as);
    if (a->t && (!has || !same_assignment(a->t, as))) {
        task *old = a->t;
        pthread_mutex_lock(&a->mu);
        a->t = NULL;
        a->changed = 1;
        pthread_mutex_unlock(&a->mu);
        task_stop(a, old);
    }
    if (has && !a->t) {
        task *t = task_start(a, as);
        pthread_mutex_lock(&a->mu);
        a->t = t;
        pthread_mutex_unlock(&a->mu);
    }
    if (has && a->t)
        take_checkpoint_request(a, a->t, as);
}

/* POSTs the registration; 0 when the coordinator accepted it. */
static int register_node(agent *a, int quiet) {
    json_t *body = json_pack("{s:s, s:s, s:s, s:s, s:I}", "id", a->o->node_id, "role", a->o->role,
                             "address", a->o->advertise, "version", PSFLOW_VERSION, "memory_bytes",
                             (json_int_t)a->o->memory);
    char url[1100], *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        return -1;
    snprintf(url, sizeof url, "%s/api/v1/nodes", a->base);
    pf_http_response resp;
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_http_request("POST", url, a->o->token, text, strlen(text), 5.0, &resp, &err);
    free(text);
    int ok = st == PF_OK && (resp.status == 200 || resp.status == 201);
    if (!ok && !quiet) {
        if (st != PF_OK)
            fprintf(stderr, "psflow %s agent %s: coordinator %s unreachable (%s); retrying\n",
                    a->o->role, a->o->node_id, a->base, err.message);
        else
            fprintf(stderr, "psflow %s agent %s: registration refused: HTTP %ld %.300s\n",
                    a->o->role, a->o->node_id, resp.status, resp.body);
    }
    if (ok)
        fprintf(stderr, "psflow %s agent %s: registered with %s as %s\n", a->o->role, a->o->node_id,
                a->base, a->o->advertise);
    long status = resp.status;
    pf_http_response_deinit(&resp);
    if (status == 401 || status == 422)
        return -2; /* retrying will not help */
    return ok ? 0 : -1;
}

static int register_until_accepted(agent *a) {
    double backoff = 0.25, last_log = -1e9;
    while (!agent_signalled) {
        int quiet = pf_clock_now() - last_log < 30;
        if (!quiet)
            last_log = pf_clock_now();
        int rc = register_node(a, quiet);
        if (rc == 0)
            return 0;
        if (rc == -2)
            return PF_EX_NOPERM;
        pf_clock_sleep(backoff);
        backoff = backoff * 2 > 5 ? 5 : backoff * 2;
    }
    return 130;
}

/* A heartbeat's answer: a clock sample, and a trace to record or stop (docs/profile.md). */
static void take_trace(agent *a, const json_t *reply, double sent, double answered) {
    pthread_mutex_lock(&a->mu);
    agent_clock_sample(&a->clock, sent, answered, reply);
    task *t = a->t;
    pf_profile *prof = t && t->state == TASK_RUNNING ? task_profile(t) : NULL;
    json_t *trace = json_object_get(reply, "trace");
    if (prof && trace) {
        char who[64];
        snprintf(who, sizeof who, "%s agent %s", a->o->role, a->o->node_id);
        agent_trace_directive(prof, trace, &t->trace_armed, &t->trace_sent, who);
    }
    pthread_mutex_unlock(&a->mu);
}

int agent_run(const agent_options *o) {
    agent a;
    memset(&a, 0, sizeof a);
    a.o = o;
    pthread_mutex_init(&a.mu, NULL);
    snprintf(a.base, sizeof a.base, "%s", o->coordinator);
    size_t n = strlen(a.base);
    while (n && a.base[n - 1] == '/')
        a.base[--n] = '\0';
    pf_signals_on_stop(on_signal);

    int rc = register_until_accepted(&a);
    char url[1200];
    snprintf(url, sizeof url, "%s/api/v1/nodes/%s/heartbeat", a.base, o->node_id);
    double next = 0, last_complaint = -1e9;
    while (rc == 0 && !agent_signalled) {
        double now = pf_clock_now();
        pthread_mutex_lock(&a.mu);
        int changed = a.changed;
        pthread_mutex_unlock(&a.mu);
        if (now < next && !changed) {
            pf_clock_sleep(0.05);
            continue;
        }
        next = now + 1.0;
        json_t *body = heartbeat_body(&a);
        char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
        if (!text)
            continue;
        pf_http_response resp;
        pf_error err;
        pf_error_clear(&err);
        double sent = pf_clock_now();
        pf_status st = pf_http_request("POST", url, o->token, text, strlen(text), 5.0, &resp, &err);
        free(text);
        if (st != PF_OK || resp.status >= 500) {
            if (now - last_complaint > 30) {
                fprintf(stderr,
                        "psflow %s agent %s: heartbeat failed (%s); the task keeps running, "
                        "retrying\n",
                        o->role, o->node_id, st != PF_OK ? err.message : "server error");
                last_complaint = now;
            }
        } else if (resp.status == 404) {
            fprintf(stderr,
                    "psflow %s agent %s: the coordinator does not know this node; "
                    "registering again\n",
                    o->role, o->node_id);
            rc = register_until_accepted(&a) == 0 ? 0 : 130;
            next = 0;
        } else if (resp.status == 200) {
            json_t *reply = json_loadb(resp.body, resp.len, 0, NULL);
            double answered = pf_clock_now();
            reconcile(&a, json_object_get(reply, "assignment"));
            take_trace(&a, reply, sent, answered);
            json_decref(reply);
        } else {
            fprintf(stderr, "psflow %s agent %s: heartbeat refused: HTTP %ld %.300s\n", o->role,
                    o->node_id, resp.status, resp.body);
            if (resp.status == 401)
                rc = PF_EX_NOPERM;
        }
        pf_http_response_deinit(&resp);
    }
    /* Graceful stop: the task ends (a training task after its current step), then the
     * node leaves the pool so the coordinator reassigns its work at once. */
    task_stop(&a, a.t);
    a.t = NULL;
    if (agent_signalled) {
        char durl[1200];
        snprintf(durl, sizeof durl, "%s/api/v1/nodes/%s", a.base, o->node_id);
        pf_http_response resp;
        pf_error err;
        if (pf_http_request("DELETE", durl, o->token, NULL, 0, 3.0, &resp, &err) == PF_OK)
            fprintf(stderr, "psflow %s agent %s: deregistered\n", o->role, o->node_id);
        pf_http_response_deinit(&resp);
        rc = 0;
    }
    pthread_mutex_destroy(&a.mu);
    return rc;
}
