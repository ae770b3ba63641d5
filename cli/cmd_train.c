/* cmd_train.c - `psflow train JOB.json`: the whole job in one process, no network.
 *
 * Progress goes to stderr: on a terminal one line redrawn in place (epoch, step/max, loss,
 * examples/s, ETA), otherwise one plain line every --log-every steps. Evaluation lines
 * (every training.eval_every_steps and at the end) are always printed in full. The result
 * goes to stdout: a short text summary, or with --output json one JSON object.
 */
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/node.h"
#include "cli/options.h"
#include "psflow/clock.h"
#include "psflow/data.h"
#include "psflow/dyn_checkpoint.h"
#include "psflow/exit_code.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/optim.h"
#include "psflow/session.h"
#include "psflow/signals.h"
#include "psflow/stream.h"

#define LOSS_WINDOW 100 /* the reported training loss is the mean of the last 100 steps */

static volatile sig_atomic_t interrupted;

static void on_signal(int sig) {
    (void)sig;
    interrupted = 1;
}

static void format_eta(double seconds, char *buf, size_t len) {
    if (!isfinite(seconds) || seconds < 0) {
        snprintf(buf, len, "--:--");
        return;
    }
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, len, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, len, "%ld:%02ld", s / 60, s % 60);
}

typedef struct progress {
    bool tty;
    long log_every;
    double last_draw;
    float window[LOSS_WINDOW];
    int filled;
} progress;

static double window_mean(const progress *p) {
    double sum = 0;
    for (int i = 0; i < p->filled; i++)
        sum += p->window[i];
    return p->filled ? sum / p->filled : NAN;
}

static void print_eval(const pf_session *s, const pf_eval *ev, bool tty) {
    const pf_job_spec *spec = pf_session_spec(s);
    const char *set = pf_session_has_test_set(s) ? "test" : "train";
    if (tty)
        fprintf(stderr, "\r\033[K");
    if (spec->model.type == PF_MODEL_LINEAR)
        fprintf(stderr, "eval   step %lld  %s loss %.6f\n", (long long)pf_session_global_step(s),
                set, ev->loss_sum / (double)ev->examples);
    else if (!isnan(ev->auc))
        fprintf(stderr,
                "eval   step %lld  %s loss %.4f  %s accuracy %.4f  %s auc %.4f  calibration %.4g\n",
                (long long)pf_session_global_step(s), set, ev->loss_sum / (double)ev->examples, set,
                (double)ev->correct / (double)ev->examples, set, ev->auc, ev->calibration);
    else
        fprintf(stderr, "eval   step %lld  %s loss %.4f  %s accuracy %.4f\n",
                (long long)pf_session_global_step(s), set, ev->loss_sum / (double)ev->examples, set,
                (double)ev->correct / (double)ev->examples);
}

/* Says into why[] which variable holds a NaN or infinite value, if one does. */
static void check_params(const pf_session *s, char *why, size_t len) {
    const pf_model_spec *model = pf_session_model(s);
    size_t n = pf_model_num_params(model);
    float *params = pf_mallocarray(n, sizeof *params);
    if (!params)
        return; /* the check is skipped, the evaluation still shows a non-finite result */
    pf_session_read_params(s, params);
    size_t i = pf_first_nonfinite(params, n);
    pf_var_info var;
    if (i < n && pf_model_var_at(model, i, &var) >= 0)
        snprintf(why, len, "non-finite value (%g) in %s at step %lld", (double)params[i], var.name,
                 (long long)pf_session_global_step(s));
    pf_free(params);
    const pf_model_spec *job = &pf_session_spec(s)->model;
    for (int f = 0; !why[0] && f < job->n_embeddings; f++) { /* the dynamic tables' rows */
        const pf_dyn_table *table = pf_session_table(s, f);
        int64_t cursor = 0;
        pf_dyn_row row;
        size_t width = (size_t)pf_model_row_width(job, f);
        while (table && pf_dyn_next(table, &cursor, &row)) {
            size_t k = pf_first_nonfinite(row.values, width);
            if (k < width) {
                snprintf(why, len,
                         "non-finite value (%g) in %s/embeddings, the row of id %llu, at "
                         "step %lld",
                         (double)row.values[k], job->embeddings[f].name, (unsigned long long)row.id,
                         (long long)pf_session_global_step(s));
                break;
            }
        }
    }
}

/* One run of `psflow train`: the job, its session and what the loop measured. */
typedef struct train_run {
    pf_job_spec spec;
    pf_session *s;
    progress prog;
    int batch;            /* the examples of one step: replicas x batch_size */
    double train_seconds; /* in pf_session_step */
    double bayes_auc;     /* NaN unless the data is synthetic_ctr */
    char bayes_text[64];
    pf_eval ev;
    char nonfinite[256]; /* why training stopped on a NaN or infinite number */
    pf_status input_st;  /* streamed input that could not be read: why training stopped */
    int64_t bad_lines;   /* streamed, data.on_error skip: bad lines skipped so far */
    pf_error input_err;
} train_run;

/* Loads the spec at path and refuses a job this process cannot run. Returns 0, or an exit
 * code after printing why (spec then holds nothing). */
static int load_job(const char *path, long long memory, const pf_session_options *sopts,
                    pf_job_spec *spec) {
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_job_spec_load(path, spec, &err);
    if (st != PF_OK) {
        /* Spec messages start with the JSON pointer of the field they name. */
        fprintf(stderr, "psflow train: %s: %s\n", path, err.message);
        return pf_exit_code(st);
    }
    int rc = node_check_fit("train", spec, "train", 0, memory);
    /* The job's devices, one per in-graph replica, in replica order; one line says which GPU,
     * or why "auto" trains on the CPU. The session asks again for each replica. */
    for (int r = 0; !rc && !sopts->backend && r < spec->replicas_per_worker; r++) {
        const pf_backend *be;
        st = pf_backend_for_device(spec->devices[r].device, spec->devices[r].index, &be, &err);
        if (st != PF_OK || err.message[0])
            fprintf(stderr, "psflow train: %s\n", err.message);
        if (st != PF_OK)
            rc = pf_exit_code(st);
    }
    if (rc)
        pf_job_spec_deinit(spec);
    return rc;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The distinct ids of dynamic table f among the examples of ds (-1: out of memory). */
static int64_t distinct_ids(const pf_model_spec *m, int f, const pf_dataset *ds) {
    const pf_embedding_spec *e = &m->embeddings[f];
    size_t cap = (size_t)ds->n * (size_t)e->max_ids, n = 0;
    uint64_t *ids = cap ? pf_mallocarray(cap, sizeof *ids) : NULL;
    if (!ids)
        return cap ? -1 : 0;
    const int col = pf_model_id_col(m, f);
    for (int64_t i = 0; i < ds->n; i++)
        for (int k = 0; k < e->max_ids; k++)
            if (pf_model_get_id(ds->x + (size_t)i * (size_t)ds->features + col, k, &ids[n]) > 0)
                n++;
    qsort(ids, n, sizeof *ids, cmp_u64);
    int64_t distinct = 0;
    for (size_t i = 0; i < n; i++)
        distinct += i == 0 || ids[i] != ids[i - 1];
    pf_free(ids);
    return distinct;
}

/* Says what will be trained, and for generated clicks the best AUC any model can reach. */
static void print_plan(train_run *t) {
    const pf_job_spec *spec = &t->spec;
    const pf_dataset *train = pf_session_train_set(t->s);
    const int replicas = spec->replicas_per_worker;
    int64_t max_steps = spec->training.max_steps;
    char split[64] = "";
    if (replicas > 1)
        snprintf(split, sizeof split, " (%d in-graph replicas x %d)", replicas,
                 spec->training.batch_size);
    const pf_stream_source *input = pf_session_input(t->s);
    if (input)
        fprintf(stderr,
                "psflow train: %s model, %zu parameters, streaming %d training file(s) in %d "
                "splits as %d streams, one per replica, batch %d%s, %lld steps\n",
                pf_model_type_name(spec->model.type), pf_model_num_params(&spec->model),
                pf_stream_files(input), pf_stream_splits(input), replicas, t->batch, split,
                (long long)max_steps);
    else
        fprintf(stderr,
                "psflow train: %s model, %zu parameters, %lld training examples, batch %d%s, "
                "%lld steps (%.2f epochs)\n",
                pf_model_type_name(spec->model.type), pf_model_num_params(&spec->model),
                (long long)train->n, t->batch, split, (long long)max_steps,
                (double)max_steps * t->batch / (double)train->n);
    if (train->skipped > 0)
        fprintf(stderr,
                "psflow train: skipped %lld bad line(s) (data.on_error skip, at most %lld)\n",
                (long long)train->skipped, (long long)spec->data.max_bad_lines);
    for (int f = 0; f < spec->model.n_embeddings; f++) {
        const pf_embedding_spec *e = &spec->model.embeddings[f];
        if (e->kind != PF_TABLE_DYNAMIC)
            continue;
        char admit[96] = "an id at its first update", chance[48] = "";
        if (e->min_count > 1)
            snprintf(admit, sizeof admit, "an id once %d batches have named it", e->min_count);
        if (e->probability < 1)
            snprintf(chance, sizeof chance, ", then with probability %.3g each update",
                     e->probability);
        char idle[64] = "";
        if (e->steps_to_live > 0)
            snprintf(idle, sizeof idle, ", rows idle %lld steps dropped",
                     (long long)e->steps_to_live);
        char seen[64] = ""; /* generated ids: how many distinct ones training will see */
        /* (a buffer of the ids, beside what the memory check counts: at most 1 GiB) */
        bool count = !pf_session_input(t->s) && spec->data.format == PF_DATA_SYNTHETIC_CTR &&
                     train->n * e->max_ids <= (1LL << 27);
        int64_t distinct = count ? distinct_ids(&spec->model, f, train) : -1;
        if (distinct >= 0)
            snprintf(seen, sizeof seen, "; the training set has %lld distinct ids",
                     (long long)distinct);
        fprintf(stderr,
                "psflow train: dynamic table %s: at most %lld rows of %d, admitting %s%s%s%s\n",
                e->name, (long long)e->max_rows, pf_model_row_width(&spec->model, f), admit, chance,
                idle, seen);
    }
    /* Generated clicks come from a known model: the best AUC any model can reach on them. */
    t->bayes_auc = spec->data.format == PF_DATA_SYNTHETIC_CTR
                       ? pf_synthetic_ctr_bayes_auc(spec, pf_session_eval_set(t->s))
                       : NAN;
    if (!isnan(t->bayes_auc)) {
        fprintf(stderr,
                "psflow train: synthetic_ctr: Bayes-optimal test auc %.4f (the true model on "
                "the test labels)\n",
                t->bayes_auc);
        snprintf(t->bayes_text, sizeof t->bayes_text, " (Bayes-optimal %.4f)", t->bayes_auc);
    }
}

/* The progress line after `step`: redrawn on a terminal, else every --log-every steps. */
static void show_progress(train_run *t, int64_t step) {
    progress *p = &t->prog;
    int64_t max_steps = t->spec.training.max_steps;
    double rate = (double)step * t->batch / t->train_seconds;
    bool draw = p->tty ? (pf_clock_now() - p->last_draw > 0.1 || step == max_steps)
                       : (step % p->log_every == 0 || step == max_steps);
    if (!draw)
        return;
    char eta[32], epoch[32] = ""; /* streamed files: their size is not known ahead */
    format_eta((double)(max_steps - step) * t->batch / rate, eta, sizeof eta);
    if (!pf_session_input(t->s))
        snprintf(epoch, sizeof epoch, "epoch %lld  ",
                 (long long)((step - 1) * t->batch / pf_session_train_set(t->s)->n + 1));
    fprintf(stderr, "%s%sstep %lld/%lld  loss %.4f  %.0f examples/s  ETA %s%s",
            p->tty ? "\r\033[K" : "", epoch, (long long)step, (long long)max_steps, window_mean(p),
            rate, eta, p->tty ? "" : "\n");
    p->last_draw = pf_clock_now();
}

/* Steps until training.max_steps, a signal or a non-finite loss, evaluating every
 * training.eval_every_steps. */
static void train_loop(train_run *t) {
    int64_t max_steps = t->spec.training.max_steps, every = t->spec.training.eval_every_steps;
    while (pf_session_global_step(t->s) < max_steps && !interrupted) {
        double t0 = pf_clock_now();
        float loss = pf_session_step(t->s);
        t->train_seconds += pf_clock_now() - t0;
        int64_t step = pf_session_global_step(t->s);
        char last[sizeof t->input_err.message];
        int64_t fresh = pf_session_take_bad(t->s, &t->bad_lines, last, sizeof last);
        if (fresh > 0)
            fprintf(stderr,
                    "psflow train: skipped %lld bad line(s) (data.on_error skip; %lld of at most "
                    "%lld so far), the last: %s\n",
                    (long long)fresh, (long long)t->bad_lines,
                    (long long)t->spec.data.max_bad_lines, last);
        if ((t->input_st = pf_session_input_error(t->s, &t->input_err)) != PF_OK)
            break; /* the streamed batch could not be read: nothing trained */
        if (!isfinite(loss)) {
            snprintf(t->nonfinite, sizeof t->nonfinite, "non-finite loss (%g) at step %lld",
                     (double)loss, (long long)step);
            break;
        }
        t->prog.window[(step - 1) % LOSS_WINDOW] = loss;
        if (t->prog.filled < LOSS_WINDOW)
            t->prog.filled++;
        show_progress(t, step);
        if (every > 0 && step % every == 0 && step < max_steps) {
            pf_session_evaluate(t->s, &t->ev);
            print_eval(t->s, &t->ev, t->prog.tty);
        }
    }
    if (t->prog.tty)
        fputc('\n', stderr);
    if (interrupted)
        fprintf(stderr, "psflow train: interrupted at step %lld\n",
                (long long)pf_session_global_step(t->s));
    if (t->bad_lines > 0) /* streamed: as a whole data set says it before training */
        fprintf(stderr,
                "psflow train: skipped %lld bad line(s) in all (data.on_error skip, at most "
                "%lld)\n",
                (long long)t->bad_lines, (long long)t->spec.data.max_bad_lines);
    if (!t->nonfinite[0]) /* the last update can overflow with a finite loss */
        check_params(t->s, t->nonfinite, sizeof t->nonfinite);
    if (!t->nonfinite[0]) {
        pf_session_evaluate(t->s, &t->ev);
        print_eval(t->s, &t->ev, false);
    }
}

/* Writes the variables to path, each dynamic table as its checkpoint tensors
 * (dyn_checkpoint.h). */
static pf_status save_session(const train_run *t, const char *path, pf_error *err) {
    const pf_model_spec *m = &t->spec.model;
    pf_dyn_snapshot *snaps = pf_calloc((size_t)m->n_embeddings + 1, sizeof *snaps);
    pf_tensor_view *extra =
        pf_mallocarray((size_t)(m->n_embeddings + 1) * PF_DYN_CKPT_TENSORS, sizeof *extra);
    pf_status st = snaps && extra ? PF_OK : pf_error_set(err, PF_ERR_NOMEM, NULL, "out of memory");
    int n_extra = 0;
    pf_var_info vars[PF_MAX_VARS];
    pf_model_layout(m, vars);
    const pf_optim_slots *slots = pf_optim_slots_of(&t->spec.optimizer);
    for (int f = 0; st == PF_OK && f < m->n_embeddings; f++) {
        const pf_dyn_table *table = pf_session_table(t->s, f);
        if (!table)
            continue;
        st = pf_dyn_snapshot_take(table, vars[f].name, slots->variable, &snaps[f], err);
        for (int i = 0; st == PF_OK && i < snaps[f].n; i++)
            extra[n_extra++] = snaps[f].views[i];
    }
    if (st == PF_OK)
        st = pf_session_save(t->s, path, extra, n_extra, err);
    for (int f = 0; snaps && f < m->n_embeddings; f++)
        pf_dyn_snapshot_free(&snaps[f]);
    pf_free(snaps);
    pf_free(extra);
    return st;
}

/* The exit code of the run, after writing --save (when given and the values are finite). */
static int finish(train_run *t, const char *save) {
    int rc = interrupted ? 130 : 0;
    if (t->input_st != PF_OK) {
        fprintf(stderr, "psflow train: %s\n", t->input_err.message);
        rc = pf_exit_code(t->input_st);
    }
    if (t->nonfinite[0]) {
        fprintf(stderr,
                "psflow train: %s; stopping (lower optimizer.learning_rate or check the "
                "data)\n",
                t->nonfinite);
        rc = pf_exit_code(PF_ERR_NONFINITE);
    }
    pf_error err;
    if (save && t->nonfinite[0]) {
        fprintf(stderr, "psflow train: not saving %s: the variables are not finite\n", save);
    } else if (save && save_session(t, save, &err) != PF_OK) {
        fprintf(stderr, "psflow train: cannot save: %s\n", err.message);
        rc = PF_EX_CANTCREAT;
    } else if (save) {
        fprintf(stderr, "psflow train: saved variables to %s\n", save);
    }
    return rc;
}

/* This process's resident memory now and at its peak, in bytes (0: unknown). */
static void rss_bytes(int64_t *now, int64_t *peak) {
    struct rusage ru;
    *peak = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : 0;
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%*s %ld", &pages) != 1)
        pages = 0;
    if (f)
        fclose(f);
    *now = (int64_t)pages * sysconf(_SC_PAGESIZE);
}

/* Each dynamic table's statistics: a line on stderr, and with json an entry of `tables`. */
static json_t *table_stats(const train_run *t, bool json_out) {
    const pf_model_spec *m = &t->spec.model;
    json_t *a = json_out ? json_array() : NULL;
    int64_t now, peak; /* tables that evicted most of their rows gave memory back */
    rss_bytes(&now, &peak);
    fprintf(stderr, "psflow train: resident memory %.0f MiB now, %.0f MiB at the peak\n",
            (double)now / (1 << 20), (double)peak / (1 << 20));
    for (int f = 0; f < m->n_embeddings; f++) {
        const pf_dyn_table *table = pf_session_table(t->s, f);
        if (!table)
            continue;
        pf_dyn_stats st = pf_dyn_stats_get(table);
        const char *name = m->embeddings[f].name;
        fprintf(stderr,
                "psflow train: table %s: %lld rows of at most %lld, %lld admitted, %lld updates "
                "refused, %lld evicted, %lld lookups (%lld without a row), %.1f MiB\n",
                name, (long long)st.rows, (long long)m->embeddings[f].max_rows,
                (long long)st.admitted, (long long)st.refused, (long long)st.evicted,
                (long long)st.lookups, (long long)st.misses, (double)st.bytes / (1 << 20));
        if (a)
            json_array_append_new(
                a, json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "name", name, "rows",
                             (json_int_t)st.rows, "max_rows", (json_int_t)m->embeddings[f].max_rows,
                             "admitted", (json_int_t)st.admitted, "refused", (json_int_t)st.refused,
                             "evicted", (json_int_t)st.evicted, "lookups", (json_int_t)st.lookups,
                             "misses", (json_int_t)st.misses, "bytes", (json_int_t)st.bytes));
    }
    return a;
}

/* The result on stdout: one JSON object, or a text summary. */
static void print_result(const train_run *t, double seconds, bool json_out) {
    const char *name = t->spec.name, *nonfinite = t->nonfinite;
    const pf_eval *ev = &t->ev;
    int64_t steps = pf_session_global_step(t->s);
    double epochs = pf_session_input(t->s)
                        ? NAN /* streamed: the files' size is not known */
                        : (double)steps * t->batch / (double)pf_session_train_set(t->s)->n;
    double examples_per_sec =
        t->train_seconds > 0 ? (double)steps * t->batch / t->train_seconds : 0;
    double test_loss = ev->examples ? ev->loss_sum / (double)ev->examples : NAN;
    bool classifier = t->spec.model.type != PF_MODEL_LINEAR;
    double accuracy = classifier && ev->examples ? (double)ev->correct / (double)ev->examples : NAN;
    double loss = window_mean(&t->prog);
    json_t *tables = pf_model_has_dynamic(&t->spec.model) ? table_stats(t, json_out) : NULL;
    if (json_out) {
        /* Numbers JSON cannot hold (NaN, Inf) are null; reason says why training ended. */
        const char *reason = nonfinite[0]           ? "NonFiniteLoss"
                             : t->input_st != PF_OK ? "InputError"
                             : interrupted          ? "Interrupted"
                                                    : "Done";
        json_t *o = json_pack(
            "{s:s, s:I, s:o, s:o, s:o, s:f, s:f, s:o, s:s, s:s}", "name", name, "steps",
            (json_int_t)steps, "loss", pf_json_number(nonfinite[0] ? NAN : loss), "test_loss",
            pf_json_number(test_loss), "test_accuracy", pf_json_number(accuracy),
            "examples_per_sec", examples_per_sec, "seconds", seconds, "epochs",
            pf_json_number(epochs), "backend", pf_session_backend(t->s)->name, "reason", reason);
        if (o && nonfinite[0])
            json_object_set_new(o, "message", json_string(nonfinite));
        else if (o && t->input_st != PF_OK)
            json_object_set_new(o, "message", json_string(t->input_err.message));
        int64_t skipped =
            pf_session_input(t->s) ? t->bad_lines : pf_session_train_set(t->s)->skipped;
        if (o && skipped > 0)
            json_object_set_new(o, "bad_lines_skipped", json_integer((json_int_t)skipped));
        if (o && !isnan(ev->auc))
            json_object_set_new(o, "test_auc", pf_json_number(ev->auc));
        if (o && !isnan(ev->calibration))
            json_object_set_new(o, "test_calibration", pf_json_number(ev->calibration));
        if (o && pf_model_two_class(&t->spec.model)) /* its test loss: the mean cross-entropy */
            json_object_set_new(o, "test_logloss", pf_json_number(test_loss));
        if (o && !isnan(t->bayes_auc))
            json_object_set_new(o, "bayes_auc", pf_json_number(t->bayes_auc));
        if (o && tables) {
            json_object_set_new(o, "tables", tables);
            tables = NULL;
        }
        char *text =
            o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(8)) : NULL;
        if (text)
            printf("%s\n", text);
        else
            fprintf(stderr, "psflow train: out of memory writing the result\n");
        free(text);
        json_decref(o);
    } else if (nonfinite[0]) {
        printf("%s: stopped at step %lld: %s\n", name, (long long)steps, nonfinite);
    } else if (classifier && !isnan(ev->auc)) {
        printf("%s: %lld steps, loss %.4f, test accuracy %.4f, test auc %.4f%s, test logloss %.4f, "
               "calibration %.4g, %.0f examples/s, %.1f s\n",
               name, (long long)steps, loss, accuracy, ev->auc, t->bayes_text, test_loss,
               ev->calibration, examples_per_sec, seconds);
    } else if (classifier) {
        printf("%s: %lld steps, loss %.4f, test accuracy %.4f, %.0f examples/s, %.1f s\n", name,
               (long long)steps, loss, accuracy, examples_per_sec, seconds);
    } else {
        printf("%s: %lld steps, loss %.6f, test loss %.6f, %.0f examples/s, %.1f s\n", name,
               (long long)steps, loss, test_loss, examples_per_sec, seconds);
    }
    json_decref(tables);
}

int cli_train(const cli_command *cmd, int argc, char **argv) {
    train_run t = {.prog.tty = isatty(STDERR_FILENO) != 0, .ev.auc = NAN, .ev.calibration = NAN};
    int format, backend;
    const char *save;
    long long memory;
    long threads;
    cli_option opts[] = {
        CLI_CHOICE("output", "FORMAT", "result format: text (default) or json", "text|json",
                   &format),
        CLI_TEXT("save", "FILE", "write the final variables to FILE (safetensors)", NULL, &save),
        CLI_LONG("log-every", "N", "without a terminal, print progress every N steps [100]", 1,
                 1L << 40, 100, &t.prog.log_every),
        CLI_CHOICE("backend", "NAME", "compute backend: openblas (default on cpu) or reference",
                   "openblas|reference", &backend),
        NODE_MEMORY_OPTION(&memory),
        NODE_THREADS_OPTION(&threads),
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    int rc;
    node_set_threads(threads, 1, NULL, 0); /* one task: every core it may use */
    pf_session_options sopts = {.load_test = true};
    if (backend >= 0)
        sopts.backend = backend == 0 ? pf_backend_openblas() : pf_backend_reference();
    if ((rc = load_job(run.args.positional[0], memory, &sopts, &t.spec)))
        return rc;
    fprintf(stderr, "psflow train: job %s, loading data\n", t.spec.name);
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_session_create(&t.spec, &sopts, &t.s, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow train: %s\n", err.message);
        pf_job_spec_deinit(&t.spec);
        return pf_exit_code(st);
    }
    t.batch = t.spec.replicas_per_worker * t.spec.training.batch_size;
    print_plan(&t);
    pf_signals_on_stop(on_signal);
    double t_start = pf_clock_now();
    train_loop(&t);
    double seconds = pf_clock_now() - t_start;
    rc = finish(&t, save);
    print_result(&t, seconds, format == 1);
    pf_session_destroy(t.s);
    pf_job_spec_deinit(&t.spec);
    return rc;
}
