/* reporter.c - a training task's metric reports to the coordinator (see reporter.h).
 *
 * DESIGN: the training thread only appends JSON items to four queues under the reporter's
 * lock; the reporter's own thread takes the queues four times a second (at once after a
 * rollback, which may be followed by the task's failure) and POSTs them
 * (points and evaluations to .../metrics, each checkpoint to .../checkpoints). What could
 * not be delivered goes back to the front of its queue, bounded by REPORTER_MAX_QUEUED.
 * Checkpoints go in the order they were written, one after the other: a report lists the
 * checkpoints on disk then ("kept"), so an older one must not arrive after a newer one.
 */
#include "agent/reporter.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "psflow/checkpoint.h"
#include "psflow/clock.h"
#include "psflow/http_client.h"
#include "psflow/mem.h"

#define REPORTER_MAX_QUEUED 100000 /* points kept while the coordinator is unreachable */
#define KEPT_MAX            10000  /* steps a checkpoint report may list (api/rest.md) */

struct agent_reporter {
    char url[1024];
    char token[512];
    char task[32];
    uint64_t incarnation; /* the task's, from its assignment; 0: none (not sent) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    json_t *points, *evals, *checkpoints, *rollbacks;
    int stop, gone; /* gone: the coordinator does not know the job; stop reporting */
    int inflight;   /* sends that have taken items and not yet stored or requeued them */
    double flush_until;
    pthread_t thread;
    int dropped;
    int refused; /* a report was refused (4xx): said once */
    int urgent;  /* a rollback waits: send without waiting for the next quarter second */
};

static int post_json(const char *url, const char *token, json_t *body, long *status) {
    char *text = json_dumps(body, JSON_COMPACT);
    if (!text)
        return -1;
    pf_http_response resp;
    pf_error err;
    pf_status st = pf_http_request("POST", url, token, text, strlen(text), 5.0, &resp, &err);
    free(text);
    *status = resp.status;
    pf_http_response_deinit(&resp);
    return st == PF_OK ? 0 : -1;
}

/* Sends the queued points and checkpoints once; returns 0 when nothing is left. */
static int reporter_send(agent_reporter *r) {
    pthread_mutex_lock(&r->mu);
    json_t *points = r->points, *evals = r->evals, *ckpts = r->checkpoints,
           *rollbacks = r->rollbacks;
    r->points = json_array();
    r->evals = json_array();
    r->rollbacks = json_array();
    r->checkpoints = json_array();
    r->inflight++;
    pthread_mutex_unlock(&r->mu);
    int left = 0;
    long status = 0;
    if (json_array_size(points) || json_array_size(evals) || json_array_size(rollbacks)) {
        json_t *body =
            json_pack("{s:s, s:O, s:O}", "task", r->task, "points", points, "evals", evals);
        if (body && r->incarnation)
            json_object_set_new(body, "incarnation", json_integer((json_int_t)r->incarnation));
        if (body && json_array_size(rollbacks))
            json_object_set(body, "rollbacks", rollbacks);
        char url[1100];
        snprintf(url, sizeof url, "%s/metrics", r->url);
        int rc = body ? post_json(url, r->token, body, &status) : -1;
        json_decref(body);
        if (rc == 0 && status == 404) {
            fprintf(stderr,
                    "psflow %s: the coordinator has no such job; metrics are not reported\n",
                    r->task);
            r->gone = 1;
        } else if (rc == 0 && status >= 400 && status < 500 && !r->refused) {
            r->refused = 1; /* once: a replaced task's reports are all refused */
            fprintf(stderr, "psflow %s: the coordinator refused the metrics (HTTP %ld)\n", r->task,
                    status);
        } else if (rc != 0 || status >= 500 || status == 0) {
            left = 1; /* keep them for the next try */
            pthread_mutex_lock(&r->mu);
            json_array_extend(points, r->points);
            json_array_extend(evals, r->evals);
            json_array_extend(rollbacks, r->rollbacks);
            json_decref(r->points);
            json_decref(r->evals);
            json_decref(r->rollbacks);
            r->points = json_incref(points);
            r->evals = json_incref(evals);
            r->rollbacks = json_incref(rollbacks);
            size_t n = json_array_size(r->points);
            while (n > REPORTER_MAX_QUEUED) { /* bounded: the oldest go first */
                json_array_remove(r->points, 0);
                n--;
                r->dropped++;
            }
            pthread_mutex_unlock(&r->mu);
        }
    }
    for (size_t i = 0; i < json_array_size(ckpts); i++) {
        char url[1100];
        snprintf(url, sizeof url, "%s/checkpoints", r->url);
        json_t *item = json_array_get(ckpts, i);
        json_object_set_new(item, "task", json_string(r->task));
        if (r->incarnation)
            json_object_set_new(item, "incarnation", json_integer((json_int_t)r->incarnation));
        if (post_json(url, r->token, json_array_get(ckpts, i), &status) == 0 && status < 500 &&
            status != 0)
            continue;
        /* Not delivered: it and the ones after it go back in front of those written since,
         * in order, and wait for the next try. */
        left = 1;
        pthread_mutex_lock(&r->mu);
        for (size_t k = i; k < json_array_size(ckpts); k++)
            json_array_insert(r->checkpoints, k - i, json_array_get(ckpts, k));
        pthread_mutex_unlock(&r->mu);
        break;
    }
    json_decref(points);
    json_decref(evals);
    json_decref(ckpts);
    json_decref(rollbacks);
    pthread_mutex_lock(&r->mu);
    r->inflight--;
    pthread_mutex_unlock(&r->mu);
    return left;
}

int agent_reporter_flush(agent_reporter *r, double seconds) {
    if (!r)
        return 0;
    double deadline = pf_clock_now() + seconds;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int busy =
            !r->gone && (r->inflight || json_array_size(r->points) || json_array_size(r->evals) ||
                         json_array_size(r->checkpoints) || json_array_size(r->rollbacks));
        pthread_mutex_unlock(&r->mu);
        if (!busy)
            return 0;
        if (pf_clock_now() > deadline)
            return -1;
        pf_clock_sleep(0.02);
    }
}

static void *reporter_main(void *arg) {
    agent_reporter *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int stop = r->stop;
        pthread_mutex_unlock(&r->mu);
        int left = r->gone ? 0 : reporter_send(r);
        if (stop && (!left || pf_clock_now() > r->flush_until))
            break;
        /* Four times a second, or at once for a rollback: the coordinator hears of it before
         * the failure it may lead to. */
        pthread_mutex_lock(&r->mu);
        if (!r->urgent && !r->stop) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 250000000L;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&r->cv, &r->mu, &until);
        }
        r->urgent = 0;
        pthread_mutex_unlock(&r->mu);
    }
    return NULL;
}

agent_reporter *agent_reporter_create(const char *coordinator, const char *token, const char *job,
                                      const char *task_name) {
    agent_reporter *r = pf_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    snprintf(r->url, sizeof r->url, "%s/api/v1/jobs/%s", coordinator, job);
    snprintf(r->token, sizeof r->token, "%s", token ? token : "");
    snprintf(r->task, sizeof r->task, "%s", task_name);
    r->points = json_array();
    r->evals = json_array();
    r->checkpoints = json_array();
    r->rollbacks = json_array();
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (!r->points || !r->evals || !r->checkpoints || !r->rollbacks ||
        pthread_create(&r->thread, NULL, reporter_main, r) != 0) {
        json_decref(r->points);
        json_decref(r->evals);
        json_decref(r->checkpoints);
        json_decref(r->rollbacks);
        pf_free(r);
        return NULL;
    }
    return r;
}

void agent_reporter_set_incarnation(agent_reporter *r, uint64_t incarnation) {
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->incarnation = incarnation;
    pthread_mutex_unlock(&r->mu);
}

json_t *agent_number_json(double v) {
    return isnan(v) ? json_null() : json_real(v);
}

/* The checkpoint item of api/rest.md from the manifest the chief just wrote. */
static json_t *checkpoint_item(const worker_report *rep) {
    char path[2200];
    snprintf(path, sizeof path, "%s/manifest.json", rep->step_dir);
    json_t *m = json_load_file(path, 0, NULL);
    json_t *files = json_object_get(m, "files");
    json_int_t bytes = 0;
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) bytes += json_integer_value(json_object_get(f, "bytes"));
    json_t *item = json_pack("{s:I, s:I, s:o}", "step", (json_int_t)rep->step, "bytes", bytes,
                             "files", files ? json_incref(files) : json_array());
    json_decref(m);
    /* Every complete checkpoint on disk now that old ones are pruned: the coordinator lists
     * exactly these, even when an earlier report was lost. */
    char job_dir[2200];
    snprintf(job_dir, sizeof job_dir, "%s", rep->step_dir);
    char *slash = strrchr(job_dir, '/');
    int64_t *steps = NULL;
    int n = 0;
    if (item && slash) {
        *slash = '\0';
        if (pf_checkpoint_list(job_dir, 0, &steps, &n, NULL) == PF_OK && n <= KEPT_MAX) {
            json_t *kept = json_array();
            for (int k = 0; kept && k < n; k++)
                json_array_append_new(kept, json_integer((json_int_t)steps[k]));
            if (kept)
                json_object_set_new(item, "kept", kept);
        }
        pf_free(steps);
    }
    return item;
}

/* An evaluation; a two-class model's adds test_auc and test_calibration, synthetic_ctr
 * data's the Bayes-optimal AUC. */
static json_t *eval_item(const worker_report *rep) {
    json_t *item = json_pack("{s:I, s:f, s:o, s:o}", "step", (json_int_t)rep->step, "time",
                             rep->time, "accuracy", agent_number_json(rep->accuracy), "test_loss",
                             agent_number_json(rep->test_loss));
    if (item && !isnan(rep->auc))
        json_object_set_new(item, "test_auc", agent_number_json(rep->auc));
    if (item && !isnan(rep->calibration))
        json_object_set_new(item, "test_calibration", agent_number_json(rep->calibration));
    if (item && !isnan(rep->bayes_auc))
        json_object_set_new(item, "bayes_auc", agent_number_json(rep->bayes_auc));
    return item;
}

void agent_reporter_add(void *ctx, const worker_report *rep) {
    agent_reporter *r = ctx;
    if (!r)
        return;
    json_t *item = NULL;
    if (rep->kind == WORKER_REPORT_STEP)
        item = json_pack("{s:I, s:f, s:o, s:o, s:o}", "step", (json_int_t)rep->step, "time",
                         rep->time, "loss", agent_number_json(rep->loss), "examples_per_sec",
                         agent_number_json(rep->examples_per_sec), "step_time_seconds",
                         agent_number_json(rep->step_time_seconds));
    else if (rep->kind == WORKER_REPORT_EVAL)
        item = eval_item(rep);
    else if (rep->kind == WORKER_REPORT_ROLLBACK && rep->reason)
        item = json_pack("{s:I, s:I, s:f, s:s, s:s}", "from", (json_int_t)rep->from_step, "to",
                         (json_int_t)rep->step, "time", rep->time, "reason", rep->reason, "message",
                         rep->message ? rep->message : "");
    else if (rep->kind == WORKER_REPORT_ROLLBACK)
        item = json_pack("{s:I, s:I, s:f}", "from", (json_int_t)rep->from_step, "to",
                         (json_int_t)rep->step, "time", rep->time);
    else
        item = checkpoint_item(rep);
    if (item && rep->kind == WORKER_REPORT_STEP && rep->bad_lines > 0)
        json_object_set_new(item, "bad_lines", json_integer((json_int_t)rep->bad_lines));
    if (!item)
        return;
    pthread_mutex_lock(&r->mu);
    json_array_append_new(rep->kind == WORKER_REPORT_STEP       ? r->points
                          : rep->kind == WORKER_REPORT_EVAL     ? r->evals
                          : rep->kind == WORKER_REPORT_ROLLBACK ? r->rollbacks
                                                                : r->checkpoints,
                          item);
    if (rep->kind == WORKER_REPORT_ROLLBACK) {
        r->urgent = 1;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

void agent_reporter_destroy(agent_reporter *r, double seconds) {
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    r->flush_until = pf_clock_now() + seconds;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    if (r->dropped)
        fprintf(stderr,
                "psflow %s: %d metric points were dropped while the coordinator was "
                "unreachable\n",
                r->task, r->dropped);
    json_decref(r->points);
    json_decref(r->evals);
    json_decref(r->checkpoints);
    json_decref(r->rollbacks);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    pf_free(r);
}
