/* cluster.h - the coordinator's state machine: jobs, their tasks and the agents (nodes) that
 * run them. Pure: no I/O, no locks, and no clock but the monotonic one that times each
 * scheduling round for /metrics (decisions never read it). Every function takes `now` (Unix
 * seconds) and changes memory only; what changed is marked dirty and every change a client should
 * see is queued as an event, so the caller (coordinator.c) can persist both in one transaction
 * before it answers. The caller serialises all calls (one lock).
 *
 * DESIGN: jobs are gang-scheduled. A job in Created or Restarting gets all of its tasks at
 * once, from idle agents of the right role (ps agents for ps tasks; worker agents for the
 * chief and worker tasks), or none: while agents are missing the status message names
 * exactly the tasks that have none. Assignments are level-triggered: a node's heartbeat
 * answer always carries what it should run (job, generation, task), and the agent makes its
 * process match. When a task fails or its node's lease expires, the restart policy decides
 * whether it restarts. A training task (the chief or a worker) holds no state: while it was
 * restarted fewer than backoff_limit times, it is replaced alone on the next idle worker agent,
 * a new incarnation in the same generation. A ps task, or a training task past that limit,
 * releases the whole gang and starts it again (generation + 1; the ps tasks restore the newest
 * checkpoint, the workers carry on from the restored global step), at most backoff_limit times
 * per job; beyond that, or when the policy does not restart, the job fails. The job
 * succeeds when its chief (the chief task, else worker 0) reports success: it has reached
 * max_steps and every ps has written the final checkpoint.
 *
 * No JSON here: events are queued as typed snapshots of what changed, and reports arrive
 * as plain structs. cluster_json.h turns both to and from the shapes of api/rest.md.
 */
#ifndef PSFLOW_COORDINATOR_CLUSTER_H
#define PSFLOW_COORDINATOR_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "coordinator/cluster_rate.h"
#include "psflow/profile.h"
#include "psflow/spec.h"
#include "psflow/status.h"

typedef enum {
    COORD_CREATED,
    COORD_RUNNING,
    COORD_RESTARTING,
    COORD_SUSPENDED,
    COORD_SUCCEEDED,
    COORD_FAILED
} coord_phase;

typedef enum {
    TASK_PENDING, /* waiting for an agent, or assigned and not yet reported running */
    TASK_RUNNING,
    TASK_SUCCEEDED,
    TASK_FAILED,
    TASK_LOST,
    TASK_STOPPED /* still Pending or Running when its job ended: its agent stops it */
} coord_task_state;

#define COORD_ID_MAX       128 /* node ids */
#define COORD_ADDR_MAX     256 /* advertised host:port */
#define COORD_ENDPOINT_MAX 400 /* a serving task's URL: http:// host : port /v1/models/ job */
#define COORD_TEXT_MAX     256 /* condition and status messages */
#define COORD_MAX_CONDS    10  /* one per condition type */
/* How long a job whose training is done waits for its evaluator's final evaluation. */
#define COORD_EVALUATOR_GRACE_SECONDS 120

typedef struct coord_condition {
    char type[24];   /* Created Running Restarting Suspended Succeeded Failed RolledBack
                        TrainingComplete */
    char status[8];  /* "True" or "False" */
    char reason[40]; /* CamelCase, e.g. WaitingForAgents */
    char message[COORD_TEXT_MAX];
    double time; /* last transition, Unix seconds */
} coord_condition;

/* Where a task's time went (psflow/profile.h): seconds of each phase, over `seconds` of its
 * time, in `count` steps (training task) or answered pulls (ps). */
typedef struct coord_profile {
    double seconds;
    int64_t count;
    double phases[PF_PHASE_COUNT];
} coord_profile;

/* A ps's share of a dynamic embedding table as its heartbeat reports it (stats.tables):
 * every count an integer 0 .. 2^53, the table named by the job's model. */
typedef struct coord_table_stats {
    char table[PF_NAME_MAX + 1];
    long long rows, max_rows, admitted, refused, evicted, lookups, misses, bytes;
    double lookups_per_sec; /* over the last two reports (a task's; 0 in a report) */
} coord_table_stats;

/* The newest trace on demand of a job (coordinator/cluster_trace.h, docs/profile.md). */
typedef struct coord_trace {
    uint64_t id; /* milliseconds of the clock when asked for, above the job's trace before */
    int steps;
    int64_t from;             /* the first global step recorded */
    double started, deadline; /* wall clock: the request, and when the recording is cut */
    bool complete;
    double completed;
    struct json_t
        *tasks; /* "ps-0" -> {"spans": [[phase, start_us, duration_us, step], ..], "rtt"} or
            {"refused": message} */
} coord_trace;

typedef struct coord_task {
    char type[16]; /* chief, ps, worker, evaluator */
    int index;
    char node_id[COORD_ID_MAX]; /* "" while no agent holds it */
    char address[COORD_ADDR_MAX];
    coord_task_state state;
    uint64_t incarnation;  /* set at each assignment; microseconds since the epoch */
    int restarts;          /* times this task was started again after the first */
    double last_heartbeat; /* its node's, 0 = never */
    int64_t step;          /* last step it reported */
    double examples_per_sec;
    int64_t updates; /* ps: optimizer updates it applied */
    /* ps: updates a second, over reports at least 2 s apart (0 when unknown or finished),
     * from the count `updates_base` it had at `updates_time` (0 = none yet) */
    double updates_per_sec, updates_time;
    int64_t updates_base;
    int64_t stale; /* ps: stale gradients it dropped */
    int workers;   /* the job's workers this task runs with, as its agent last reported */
    bool has_lag;  /* training task of a max_staleness job: lag reported by a ps */
    int64_t lag;   /* pushes ahead of the slowest connected training task */
    /* ps of a model with embedding tables: rows served (ROW_PULL) and received (row
     * pushes) so far, and their rates over the last two reports */
    int64_t rows_pulled, rows_pushed;
    double rows_pulled_per_sec, rows_pushed_per_sec;
    double rows_time; /* when the counts were reported, 0 = never */
    /* ps of a model with dynamic tables: each table's share as last reported */
    int n_tables;
    coord_table_stats tables[PF_MAX_EMBEDDINGS];
    double tables_time; /* when they were reported, 0 = never */
    double point_time;  /* the time of the newest metric point it reported, 0 = none */
    int64_t point_step; /* and its step */
    int64_t bad_lines;  /* the most bad input lines any incarnation of it reported skipping */
    /* its profile as its agent last reported it (since its incarnation's first step), the
     * report the latest window starts from, and that window: the difference of two reports
     * at least COORD_PROFILE_WINDOW seconds of its time apart */
    bool has_profile, has_window;
    uint64_t profile_incarnation; /* the incarnation `profile` is of */
    coord_profile profile, profile_base, window;
} coord_task;

#define COORD_PROFILE_WINDOW 2.0

/* A serving task of a job with a `serving` section (docs/serving.md, "Managed"): psflow serve
 * on a worker agent, from the job's first admission until the job is deleted or fails. It
 * is not a member of the job's cluster (no TF_CONFIG entry, no data-plane key). */
typedef struct coord_serving {
    char node_id[COORD_ID_MAX]; /* "" while no agent holds it */
    coord_task_state state;     /* Pending (no agent, or not yet listening), Running, Failed,
                                   Stopped (the job failed or was deleted) */
    uint64_t incarnation;
    char message[COORD_TEXT_MAX];      /* a failure's, from its agent */
    char endpoint[COORD_ENDPOINT_MAX]; /* its agent's report: http://host:port/v1/models/NAME */
    int64_t version;                   /* the serving version (checkpoint step); -1 before one */
    int64_t requests, failed;          /* predicts answered, and of those with an error */
    double requests_per_sec;           /* over the last two reports at least 2 s apart */
    double requests_time;              /* when `requests_base` was reported; 0 = never */
    int64_t requests_base;
    double latency_p50_ms, latency_p99_ms; /* over its last 10 s; NAN when it answered none */
} coord_serving;

/* What a job in the queue waits for (status.queue.reason). */
typedef enum {
    COORD_WAIT_CAPACITY,  /* "capacity": too few idle agents */
    COORD_WAIT_RESERVED,  /* "reserved": idle agents are held for a job ahead (queue_behind) */
    COORD_WAIT_TOO_SMALL, /* "cluster_too_small": more agents of a role than there are */
    COORD_WAIT_PREEMPTED, /* "preempted": stopped by a job of higher priority (preempted_by) */
    COORD_WAIT_QUOTA,     /* "quota": its queue's quota is taken and no idle agent is left to
                             borrow (the queue is run_policy.queue) */
} coord_wait;

const char *coord_wait_name(coord_wait w);

typedef struct coord_job {
    char name[PF_NAME_MAX + 1];
    char *spec_json; /* normalised spec, compact JSON (owned) */
    pf_job_spec spec;
    coord_phase phase;
    char message[COORD_TEXT_MAX];
    coord_condition conds[COORD_MAX_CONDS];
    int n_conds;
    int64_t global_step;
    double loss, accuracy, test_loss; /* NAN when unknown */
    /* a two-class job's test AUC and calibration (mean prediction / mean label): the chief's
     * latest; NAN when unknown. test_loss is then the logloss (mean cross-entropy). */
    double test_auc, test_calibration;
    /* synthetic_ctr data's Bayes-optimal test AUC (the true model's, which the chief reports
     * with its evaluations); NAN for other data and until then */
    double bayes_auc;
    double eval_loss, eval_accuracy; /* the evaluator task's latest; NAN when unknown */
    int64_t eval_step;               /* the checkpoint it evaluated; -1 before any */
    /* bad input lines its training tasks skipped (data.on_error skip): the largest sum over
     * the tasks of each one's count seen so far (a task that reads a line again after a
     * restart does not count it twice); kept in the stored status */
    int64_t bad_lines;
    /* data.splits dynamic: the input work queue as ps 0 last reported it (has_input false
     * until then); kept in the stored status */
    bool has_input, input_finished;
    int64_t input_epoch, input_splits, input_done, input_leased;
    double examples_per_sec, steps_per_sec;
    int restarts, generation;
    bool has_checkpoint;     /* a complete checkpoint was reported */
    int64_t checkpoint_step; /* the newest reported one: what a gang restart restores */
    double create_time, start_time, completion_time; /* 0 = not yet */
    /* while it waits for agents: its place in the queue (1 = next; 0 when not waiting) and
     * the job whose held agents keep it waiting ("" when none: the cluster lacks them) */
    int queue_position;
    char queue_behind[PF_NAME_MAX + 1];
    coord_wait queue_reason; /* what it waits for, while queue_position > 0 */
    /* when the first job in the queue that holds agents is expected to get the rest (as the
     * running jobs are expected to end); 0 for every other job, and when unknown */
    double queue_start;
    bool backfilled; /* started ahead of the queue, bound by its active_deadline_seconds */
    int queue_at;    /* where its queue was in coord_cluster.queues last (a hint, checked) */
    /* the memory a ps task and a training (or serving) task of it count against its queue's
     * quota (coord_job_memory), worked out for memory_for_ps ps and memory_for_workers
     * worker tasks (0: not yet; a live scale changes the workers) */
    int64_t memory_ps, memory_task;
    int memory_for_ps, memory_for_workers;
    /* times a job of higher priority stopped it to take its agents, and the newest such job
     * while it waits to resume ("" when none, or once it runs again); kept in the status */
    int preemptions;
    char preempted_by[PF_NAME_MAX + 1];
    /* while a preemption waits for its final checkpoint (drain_until > 0: until then at
     * most): the job preempting it, that job's priority, whether this job's queue had
     * borrowed its agents, the step the chief is asked to checkpoint at or after (its
     * global step when asked), and its newest checkpoint then (-1: none): only a newer one is
     * the final one; not stored: a coordinator restart lets the job run on */
    double drain_until;
    char drain_for[PF_NAME_MAX + 1];
    int drain_priority;
    bool drain_borrowed;
    /* stopped to bring its own queue within its quota: it stops even once the job preempting
     * it has started (that job's start counted this one's share as freed) */
    bool drain_quota;
    int64_t drain_step, drain_from;
    /* when the newest preemption stopped it (while preempted_by is set), and the seconds it
     * waited after its earlier ones: active_deadline_seconds does not count them */
    double preempted_at, preempted_seconds;
    int n_tasks;
    coord_task *tasks; /* chief, ps 0.., worker 0.., evaluator */
    int n_serving;
    coord_serving *serving; /* spec.serving.replicas of them (none without the section) */
    /* steps/s (steps_per_sec: NAN while unknown) and stall: the window of recent steps */
    coord_rate rate;
    double last_summary_event;
    coord_trace *trace; /* the newest trace on demand, or NULL */
    bool dirty;         /* job row (status) changed */
    bool deleted;       /* to be removed from the store, then from memory */
} coord_job;

typedef struct coord_node {
    char id[COORD_ID_MAX];
    char role[8]; /* ps or worker */
    char address[COORD_ADDR_MAX];
    char version[32];
    int64_t memory; /* bytes its tasks may use, as it registered them; 0 = unknown */
    double registered, last_heartbeat;
    bool lost;
    bool busy; /* its agent reported a running task (its last report) */
    /* assignment; job[0] == 0 when none */
    char job[PF_NAME_MAX + 1];
    int generation;
    char type[16];
    int index;
    /* a worker removed by a live scale-down, still stopping: its job ("" when none); index
     * above is the worker's. The job's ps tasks keep it in their membership until then. */
    char draining[PF_NAME_MAX + 1];
    /* the job that preempted the one this agent ran: while it waits, no running job's
     * replacement takes this agent ("" when none; not stored: lost with a restart) */
    char reserved_for[PF_NAME_MAX + 1];
    bool dirty, deleted;
} coord_node;

/* A job as a list item or a `job` event shows it, copied when the event is queued. */
typedef struct coord_job_summary {
    char name[PF_NAME_MAX + 1];
    coord_phase phase;
    char reason[40]; /* of the newest True condition */
    char message[COORD_TEXT_MAX];
    bool sync;
    int64_t global_step, max_steps;
    double loss, accuracy;                  /* NAN when unknown */
    double examples_per_sec, steps_per_sec; /* steps_per_sec NAN while unknown */
    double stalled_seconds;                 /* NAN unless stalled (coord_rate) */
    double create_time, start_time, completion_time;
    int restarts;
    int ready[2], desired[2]; /* ps, worker (with chief) */
    /* its place in the queue (0: not waiting) and why, as the job's status has them */
    int queue_position, priority;
    coord_wait queue_reason;
    char queue[PF_NAME_MAX + 1]; /* run_policy.queue */
    char queue_behind[PF_NAME_MAX + 1], preempted_by[PF_NAME_MAX + 1];
    double preempted_at, queue_start;
} coord_job_summary;

typedef enum {
    COORD_EVENT_JOB,        /* job: a summary */
    COORD_EVENT_TASK,       /* task: the task, with the lease it is judged by */
    COORD_EVENT_NODE,       /* node: the agent */
    COORD_EVENT_POINT,      /* metric: one training step's figures */
    COORD_EVENT_EVAL,       /* metric: one evaluation */
    COORD_EVENT_LOG,        /* log: a phase change, an agent coming or going */
    COORD_EVENT_CHECKPOINT, /* checkpoint: a complete checkpoint */
} coord_event_type;

/* One change for the event stream and the job log: a snapshot taken when it happened, so
 * that serialising it later gives what the state was then. Strings are owned where noted
 * (coord_event_deinit frees them). */
typedef struct coord_event {
    coord_event_type type;
    char kind[12]; /* the stream's event name: job task metric node checkpoint log */
    char job[PF_NAME_MAX + 1];
    double time; /* when it was queued (Unix seconds) */
    union {
        coord_job_summary job;
        struct {
            coord_task task;
            double lease_seconds;
        } task;
        coord_node node;
        struct {
            char *task; /* "chief" or "worker-<i>" (owned) */
            int64_t step;
            double time; /* as reported; NAN when absent */
            double loss, examples_per_sec, step_time_seconds, accuracy, test_loss;
            double test_auc, test_calibration, bayes_auc;
        } metric; /* POINT uses loss, examples_per_sec, step_time_seconds; EVAL the others */
        struct {
            char type[24];
            char reason[40];
            char message[COORD_TEXT_MAX];
        } log;
        struct {
            int64_t step, bytes;
            char *files; /* the files array as compact JSON (owned), NULL for none */
            char *kept;  /* the steps on disk as a compact JSON array (owned), NULL: unknown */
        } checkpoint;
    } u;
} coord_event;

/* Frees what e owns. */
void coord_event_deinit(coord_event *e);

/* A heartbeat's report (api/rest.md, POST /api/v1/nodes/{id}/heartbeat) as the state
 * machine reads it. Strings are borrowed: NULL when absent or not strings. Integers are 0
 * when absent or not integers; result figures NAN when absent or not numbers. */
typedef struct coord_report {
    const char *state; /* idle running succeeded failed */
    const char *job, *type, *message;
    const char *reason; /* a failed task's reason, e.g. "NonFiniteLoss"; NULL when absent */
    long long generation, index, exit_code;
    /* the incarnation of the task it reports (from its assignment); 0 when absent (an older
     * agent): a report of another incarnation than the task's current one is stale */
    uint64_t incarnation;
    bool has_updates, has_stale; /* stats.updates / stats.stale given as integers */
    bool has_workers;            /* workers (the membership it runs with) given */
    long long workers;
    /* a ps's stats.lags (training.max_staleness): lags[i] is training task i's lag, -1 while
     * it is not connected to that ps; n_lags 0 when absent or malformed */
    int n_lags;
    long long lags[PF_MAX_REPLICAS + 1];
    long long updates, stale;
    /* ps 0 of a job with dynamic splits: stats.input, every figure in range (splits 1 ..
     * 2^24, done and leased at most splits, epoch 0 .. 10^6) or has_input false */
    bool has_input, input_finished;
    long long input_epoch, input_splits, input_done, input_leased;
    bool has_rows; /* stats.rows_pulled and stats.rows_pushed given as integers >= 0 */
    long long rows_pulled, rows_pushed;
    /* stats.tables: a ps's dynamic tables; n_tables 0 when absent or any entry malformed */
    int n_tables;
    coord_table_stats tables[PF_MAX_EMBEDDINGS];
    double accuracy, test_loss;        /* result of a succeeded chief */
    double test_auc, test_calibration; /* its two-class figures; NAN when absent */
    long long steps;                   /* its result.steps; -1 when absent or not an integer >= 0 */
    /* a serving task's figures (serving); has_serving false when absent or out of range */
    bool has_serving;
    const char *endpoint; /* NULL until it listens */
    long long version;    /* -1: none yet */
    long long requests, failed;
    double latency_p50_ms, latency_p99_ms; /* NAN when null */
    /* a training task's or ps's profile: its time and phases finite, 0 .. 10^9 seconds, its
     * count 0 .. 10^15, its phases among those of the role (absent ones 0); has_profile
     * false otherwise */
    bool has_profile;
    coord_profile profile;
} coord_report;

/* Metric reports (api/rest.md, POST /api/v1/jobs/{name}/metrics); NAN for an absent or
 * null figure. The step is an integer the caller has checked (0 .. training.max_steps). */
typedef struct coord_point {
    int64_t step;
    double time, loss, examples_per_sec, step_time_seconds;
    int64_t bad_lines; /* bad input lines the task skipped so far (on_error skip); 0: none */
} coord_point;

typedef struct coord_eval {
    int64_t step;
    double time, accuracy, test_loss;
    double test_auc, test_calibration; /* a two-class model's; NAN when absent */
    double bayes_auc; /* synthetic_ctr's Bayes-optimal AUC, in [0, 1] (checked); NAN: absent */
} coord_eval;

/* A queue jobs are admitted through (run_policy.queue; api/rest.md, /api/v1/queues): the
 * agents of each role and the memory its running jobs may hold (its quota), beyond which a
 * job of it starts only on idle agents no other queue's job waits for (it borrows them, and
 * gives them back when their owner needs them); its weight, which orders the queues that
 * borrow; and its priority classes, the named priorities its jobs may give
 * (run_policy.priority_class). */
#define COORD_MAX_QUEUES  256
#define COORD_MAX_CLASSES 16 /* priority classes of one queue */
typedef struct coord_priority_class {
    char name[PF_NAME_MAX + 1];
    int value; /* -1000 .. 1000, as run_policy.priority */
} coord_priority_class;

typedef struct coord_queue {
    char name[PF_NAME_MAX + 1];
    int quota_ps, quota_workers; /* -1: no limit */
    int64_t quota_memory;        /* bytes; -1: no limit */
    int weight;                  /* 1 .. 1000 */
    int n_classes;
    coord_priority_class classes[COORD_MAX_CLASSES]; /* names unique */
    double create_time; /* 0 for the default queue until it is changed */
    /* worked out by each scheduling round: the agents of each role and the memory
     * (coord_job_memory) its running jobs hold, those held by its jobs waiting within the
     * quota (while the round walks the queue), and how many of its jobs run and wait */
    int used_ps, used_workers, held_ps, held_workers, running, waiting;
    int64_t used_memory, held_memory;
    bool dirty, deleted;
} coord_queue;

#define COORD_ROUND_SAMPLES 1024

typedef struct coord_cluster {
    coord_job **jobs; /* in creation order: ascending (create_time, name) */
    int n_jobs, cap_jobs;
    coord_job **by_name; /* open-addressing index of jobs by name; by_name_cap a power of 2 */
    int by_name_cap;
    coord_node **nodes;
    int n_nodes, cap_nodes;
    /* open-addressing index of nodes by id (set before coord_cluster_adopt_node); by_id_cap a
     * power of 2 */
    coord_node **by_id;
    int by_id_cap;
    double lease_seconds;
    coord_event *pending; /* queued since the last coord_cluster_take_events */
    int n_pending, cap_pending;
    /* the seconds the newest scheduling rounds took (coord_schedule), a ring of the last
     * COORD_ROUND_SAMPLES, and how many there were: /metrics's psflow_scheduling_round_seconds */
    double round_seconds[COORD_ROUND_SAMPLES], round_seconds_sum;
    int64_t rounds;
    /* queues[0] is the default queue (PF_DEFAULT_QUEUE), there from coord_cluster_init: no
     * limit and weight 1 until changed; the others in the order they were created */
    coord_queue queues[COORD_MAX_QUEUES];
    int n_queues;
    /* seconds a preempted job's chief has to take a final checkpoint before its agents are
     * freed; 0 (coord_cluster_init's): freed at once */
    double preempt_grace;
} coord_cluster;

/* --- lifecycle --- */
void coord_cluster_init(coord_cluster *c, double lease_seconds);
void coord_cluster_deinit(coord_cluster *c);

/* --- jobs --- */

/* Adds a job for a parsed spec (stolen into the job on success) and its normalised JSON.
 * Returns PF_OK with *created = 1 for a new job; PF_OK with *created = 0 when a job of that
 * name exists with the same spec (safe retry); PF_ERR_INVALID (err names it) when it exists
 * with another spec; PF_ERR_UNSUPPORTED for evaluator tasks; PF_ERR_NOMEM. */
pf_status coord_job_submit(coord_cluster *c, pf_job_spec *spec, double now, coord_job **out,
                           int *created, pf_error *err);
/* The job of that name (not deleted), or NULL; a hash lookup. */
coord_job *coord_job_find(const coord_cluster *c, const char *name);

/* The task of j with that type and index, or NULL. */
coord_task *coord_task_find(coord_job *j, const char *type, int index);

/* j's chief: its chief task when replicas.chief, else worker 0; NULL when it has none. */
coord_task *coord_job_chief(coord_job *j);

/* Takes what ps task t reported beyond its updates: each training task's lag
 * (training.max_staleness) and the embedding-table rows it served and received, whose
 * rates per second it computes from the last report's (at `now`). */
void coord_take_ps_stats(coord_job *j, coord_task *t, const coord_report *r, double now);

/* Frees a job's trace (NULL: nothing). */
void coord_trace_free(coord_trace *t);

/* Takes a report's profile into t (its latest, and its window); the first one of a new
 * incarnation, or one whose time or count went back, starts t's again. */
void coord_take_profile(coord_task *t, const coord_report *r);

/* Whether t is a task with a profile to show (chief, worker, ps), and whether the profile it
 * holds is its current incarnation's (a replaced task's is not shown until the new one
 * reports). */
bool coord_task_profiled(const coord_task *t);
bool coord_task_profile_current(const coord_task *t);
/* How many jobs were created before (create_time, name) in creation order: jobs[0..n) are
 * the older ones. A binary search, for listing from a position. */
int coord_cluster_jobs_before(const coord_cluster *c, double create_time, const char *name);
/* Cancels (phase Failed, reason Cancelled) unless already finished. */
void coord_job_cancel(coord_cluster *c, coord_job *j, double now);
/* Cancels and marks the job deleted. */
void coord_job_delete(coord_cluster *c, coord_job *j, double now);
/* Changes replicas.worker (new_workers > 0) and/or suspends/resumes (suspend 0/1, -1 =
 * unchanged). PF_ERR_INVALID (err names the field) for a finished job or a bad value. */
pf_status coord_job_patch(coord_cluster *c, coord_job *j, int new_workers, int suspend, double now,
                          pf_error *err);
/* Changes replicas.ps: *spec is the job's spec with the new count, parsed and admitted by the
 * caller, and is taken (zeroed) on success. A running job stops its tasks and restarts as a
 * new generation whose ps tasks restore its newest checkpoint repartitioned into the new
 * count (the steps after that checkpoint are trained again, as after a ps failure); a
 * created or suspended one starts that way. PF_ERR_INVALID for a finished job. */
pf_status coord_job_set_ps(coord_cluster *c, coord_job *j, pf_job_spec *spec, double now,
                           pf_error *err);
/* Records metric points reported for a task ("chief" or "worker-<i>"): updates the job's
 * step, loss, rates and accuracy, and queues metric events. Points that arrive after the
 * job finished are kept in the history but leave its step, loss and rates as they ended;
 * a late evaluation still sets the accuracy. */
void coord_job_record_metrics(coord_cluster *c, coord_job *j, const char *task,
                              const coord_point *points, int n_points, const coord_eval *evals,
                              int n_evals, double now);
/* Records the chief's consistent rollback (every ps restored checkpoint `to`): the job's
 * RolledBack condition and a log event name both steps, and global_step becomes the step
 * training continues from (`to`, or a later step reported after it). reason NULL: a ps
 * restarted (reason PsRestarted); "NonFiniteLoss": a value went non-finite, and `detail`
 * (may be NULL) is the chief's message (what was non-finite, which data it skips); such a
 * rollback reported after the job ended (the chief's report arrives after its exit) is
 * still logged as an event. */
void coord_job_record_rollback(coord_cluster *c, coord_job *j, int64_t from, int64_t to,
                               int64_t reached, const char *reason, const char *detail, double now);
/* Records a complete checkpoint (files: compact JSON array text, borrowed, or NULL; kept: the
 * steps of every checkpoint on disk as a compact JSON array, borrowed, or NULL; kept_max: the
 * largest of them, -1 when kept is NULL or empty): queues its checkpoint event and the log
 * line that goes with it. The newest step on disk (step, or a newer one kept names, whose own
 * report was lost) is what a gang restart rolls back to (the ps tasks restore the newest
 * checkpoint); a report older than one recorded (it was retried) leaves it as it is. */
void coord_job_record_checkpoint(coord_cluster *c, coord_job *j, int64_t step, int64_t bytes,
                                 const char *files, const char *kept, int64_t kept_max, double now);
/* Whether task `task` ("chief", "worker-<i>" or "evaluator") of j, in `incarnation`, may
 * report: 0 when it may; else the HTTP status of the refusal, with why (cap bytes) filled:
 * 409 when j never ran (none of its tasks was ever assigned), names no such task, or
 * incarnation is not that task's current one; 403 when chief_only and task is not "chief"
 * (the job's current chief: replicas.chief's task, else worker 0). Changes nothing. */
int coord_job_check_reporter(const coord_job *j, const char *task, uint64_t incarnation,
                             bool chief_only, char *why, size_t cap);
bool coord_job_finished(const coord_job *j);
const char *coord_phase_name(coord_phase p);
const char *coord_task_state_name(coord_task_state s);

/* --- nodes --- */

/* Registers (or updates: idempotent on id) an agent; memory: the bytes it offers its tasks,
 * 0 when unknown. *created = 1 for a new node. */
pf_status coord_node_register(coord_cluster *c, const char *id, const char *role,
                              const char *address, const char *version, int64_t memory, double now,
                              coord_node **out, int *created);
coord_node *coord_node_find(const coord_cluster *c, const char *id);
/* Applies a heartbeat report and renews the lease. Returns whether it changed anything beyond
 * the lease and the figures the report carries (an event queued, an agent's state, a ps's
 * worker count): a plain lease renewal has nothing to commit. */
bool coord_node_heartbeat(coord_cluster *c, coord_node *n, const coord_report *report, double now);
/* The job and task a node is assigned (both NULL when none). */
/* The workers j's ps tasks serve: replicas.worker, and any removed worker whose agent has
 * not yet reported it stopped (coord_node.draining), so a worker being removed is never
 * refused by a ps while it still runs: it is stopped by its agent, gracefully. */
int coord_job_membership(const coord_cluster *c, const coord_job *j);

void coord_node_assigned(const coord_cluster *c, const coord_node *n, coord_job **job,
                         coord_task **task);
/* Deregisters: its task (if any) is treated like a lost node's. */
void coord_node_remove(coord_cluster *c, coord_node *n, double now);

/* --- time --- */

/* Expires leases, enforces deadlines and admits waiting jobs. Call a few times a second. */
void coord_cluster_tick(coord_cluster *c, double now);

/* --- events --- */

/* The job as a list item or `job` event shows it. */
void coord_job_summarize(const coord_job *j, coord_job_summary *out);
/* Moves the queued events to the caller, who calls coord_event_deinit on each and pf_free
 * on the array. */
coord_event *coord_cluster_take_events(coord_cluster *c, int *n);

/* --- store reload --- */

/* Adds a loaded job (store reload) at its place in creation order; takes ownership of j.
 * PF_ERR_NOMEM. */
pf_status coord_cluster_adopt_job(coord_cluster *c, coord_job *j);
/* Adds a node (registered or loaded) whose id is set: the id index hashes it; takes ownership
 * of n. PF_ERR_NOMEM. */
pf_status coord_cluster_adopt_node(coord_cluster *c, coord_node *n);
/* Builds a job's task array for its spec (all Pending, unassigned). PF_ERR_NOMEM. */
pf_status coord_job_make_tasks(coord_job *j);
/* Frees a job (spec, tasks, the struct). */
void coord_job_free(coord_job *j);
/* Drops jobs, nodes and queues marked deleted (after the store has removed them). */
void coord_cluster_reap(coord_cluster *c);

#endif
