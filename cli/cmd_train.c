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
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/node.h"
#include "cli/options.h"
#include "psflow/clock.h"
#include "psflow/data.h"
#include "psflow/exit_code.h"
#include "psflow/mem.h"
#include "psflow/model.h"
#include "psflow/session.h"

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
        fprintf(stderr, "eval   step %lld  %s loss %.4f  %s accuracy %.4f  %s auc %.4f\n",
                (long long)pf_session_global_step(s), set, ev->loss_sum / (double)ev->examples, set,
                (double)ev->correct / (double)ev->examples, set, ev->auc);
    else
        fprintf(stderr, "eval   step %lld  %s loss %.4f  %s accuracy %.4f\n",
                (long long)pf_session_global_step(s), set, ev->loss_sum / (double)ev->examples, set,
                (double)ev->correct / (double)ev->examples);
}

/* Says into why[] which variable holds a NaN or infinite value, if one does. */
static void check_params(const pf_session *s, char *why, size_t len) {
    const pf_job_spec *spec = pf_session_spec(s);
    size_t n = pf_model_num_params(&spec->model);
    float *params = pf_mallocarray(n, sizeof *params);
    if (!params)
        return; /* the check is skipped, the evaluation still shows a non-finite result */
    pf_session_read_params(s, params);
    size_t i = pf_first_nonfinite(params, n);
    pf_var_info var;
    if (i < n && pf_model_var_at(&spec->model, i, &var) >= 0)
        snprintf(why, len, "non-finite value (%g) in %s at step %lld", (double)params[i], var.name,
                 (long long)pf_session_global_step(s));
    pf_free(params);
}

int cli_train(int argc, char **argv) {
    cli_option opts[] = {
        {"output", "FORMAT", "result format: text (default) or json", NULL},
        {"save", "FILE", "write the final variables to FILE (safetensors)", NULL},
        {"log-every", "N", "without a terminal, print progress every N steps [100]", NULL},
        {"backend", "NAME", "compute backend: openblas (default on cpu) or reference", NULL},
        NODE_MEMORY_OPTION,
        NODE_THREADS_OPTION,
    };
    const int n_opts = (int)(sizeof opts / sizeof opts[0]);
    cli_args args;
    if (cli_parse("train", argc, argv, opts, n_opts, &args) != 0)
        return PF_EX_USAGE;
    if (args.help) {
        cli_print_help("train", "JOB.json [options]",
                       "Trains the job described by JOB.json in this one process, evaluates it "
                       "on the\ntest set and prints the result. Exit codes: 0 done, 64 usage, "
                       "65 invalid spec\nor data, or a NaN/infinite loss or value (training "
                       "stops at that step\nwhatever training.on_nonfinite says: one process "
                       "has no checkpoint to roll\nback to), 66 unreadable input, 69 device "
                       "unavailable, 73 cannot write --save.",
                       opts, n_opts);
        return 0;
    }
    if (args.n_positional != 1) {
        fprintf(stderr, "psflow train: expected one job spec file (see 'psflow train --help')\n");
        return PF_EX_USAGE;
    }
    const char *output = cli_get(opts, n_opts, "output");
    bool json_out = false;
    if (output && !strcmp(output, "json"))
        json_out = true;
    else if (output && strcmp(output, "text") != 0) {
        fprintf(stderr, "psflow train: --output must be text or json, got '%s'\n", output);
        return PF_EX_USAGE;
    }
    progress prog = {.tty = isatty(STDERR_FILENO) != 0};
    long long memory;
    long threads;
    if (cli_get_long("train", opts, n_opts, "log-every", 1, 1L << 40, 100, &prog.log_every) ||
        cli_get_long("train", opts, n_opts, "threads", 1, 4096, 0, &threads) ||
        cli_get_size("train", opts, n_opts, "memory", 1, INT64_MAX, 0, &memory))
        return PF_EX_USAGE;
    node_set_threads(threads, 1, NULL, 0); /* one task: every core it may use */
    const char *save = cli_get(opts, n_opts, "save");
    const char *backend = cli_get(opts, n_opts, "backend");
    pf_session_options sopts = {.load_test = true};
    if (backend && !strcmp(backend, "reference"))
        sopts.backend = pf_backend_reference();
    else if (backend && !strcmp(backend, "openblas"))
        sopts.backend = pf_backend_openblas();
    else if (backend) {
        fprintf(stderr, "psflow train: --backend must be openblas or reference, got '%s'\n",
                backend);
        return PF_EX_USAGE;
    }

    const char *path = args.positional[0];
    pf_job_spec spec;
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_job_spec_load(path, &spec, &err);
    if (st != PF_OK) {
        /* Spec messages start with the JSON pointer of the field they name. */
        fprintf(stderr, "psflow train: %s: %s\n", path, err.message);
        return pf_exit_code(st);
    }
    int fit = node_check_fit("train", &spec, "train", 0, memory);
    if (fit) {
        pf_job_spec_deinit(&spec);
        return fit;
    }
    /* The job's devices, one per in-graph replica, in replica order; one line says which GPU,
     * or why "auto" trains on the CPU. The session asks again for each replica. */
    for (int r = 0; !sopts.backend && r < spec.replicas_per_worker; r++) {
        const pf_backend *be;
        st = pf_backend_for_device(spec.devices[r].device, spec.devices[r].index, &be, &err);
        if (st != PF_OK || err.message[0])
            fprintf(stderr, "psflow train: %s\n", err.message);
        if (st != PF_OK) {
            pf_job_spec_deinit(&spec);
            return pf_exit_code(st);
        }
    }
    fprintf(stderr, "psflow train: job %s, loading data\n", spec.name);
    pf_session *s;
    st = pf_session_create(&spec, &sopts, &s, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow train: %s\n", err.message);
        pf_job_spec_deinit(&spec);
        return pf_exit_code(st);
    }
    const pf_dataset *train = pf_session_train_set(s);
    int64_t max_steps = spec.training.max_steps;
    /* the examples of one step: replicas x batch_size */
    const int replicas = spec.replicas_per_worker, batch = replicas * spec.training.batch_size;
    char split[64] = "";
    if (replicas > 1)
        snprintf(split, sizeof split, " (%d in-graph replicas x %d)", replicas,
                 spec.training.batch_size);
    fprintf(stderr,
            "psflow train: %s model, %zu parameters, %lld training examples, batch %d%s, "
            "%lld steps (%.2f epochs)\n",
            pf_model_type_name(spec.model.type), pf_model_num_params(&spec.model),
            (long long)train->n, batch, split, (long long)max_steps,
            (double)max_steps * batch / (double)train->n);
    /* Generated clicks come from a known model: the best AUC any model can reach on them. */
    double bayes_auc = spec.data.format == PF_DATA_SYNTHETIC_CTR
                           ? pf_synthetic_ctr_bayes_auc(&spec, pf_session_eval_set(s))
                           : NAN;
    char bayes_text[64] = "";
    if (!isnan(bayes_auc)) {
        fprintf(stderr,
                "psflow train: synthetic_ctr: Bayes-optimal test auc %.4f (the true model on "
                "the test labels)\n",
                bayes_auc);
        snprintf(bayes_text, sizeof bayes_text, " (Bayes-optimal %.4f)", bayes_auc);
    }

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    double train_seconds = 0, t_start = pf_clock_now();
    pf_eval ev = {.auc = NAN};
    char nonfinite[256] = ""; /* why training stopped on a NaN or infinite number */
    while (pf_session_global_step(s) < max_steps && !interrupted) {
        double t0 = pf_clock_now();
        float loss = pf_session_step(s);
        train_seconds += pf_clock_now() - t0;
        int64_t step = pf_session_global_step(s);
        if (!isfinite(loss)) {
            snprintf(nonfinite, sizeof nonfinite, "non-finite loss (%g) at step %lld", (double)loss,
                     (long long)step);
            break;
        }
        prog.window[(step - 1) % LOSS_WINDOW] = loss;
        if (prog.filled < LOSS_WINDOW)
            prog.filled++;
        double rate = (double)step * batch / train_seconds;
        bool draw = prog.tty ? (pf_clock_now() - prog.last_draw > 0.1 || step == max_steps)
                             : (step % prog.log_every == 0 || step == max_steps);
        if (draw) {
            char eta[32];
            format_eta((double)(max_steps - step) * batch / rate, eta, sizeof eta);
            fprintf(stderr, "%sepoch %lld  step %lld/%lld  loss %.4f  %.0f examples/s  ETA %s%s",
                    prog.tty ? "\r\033[K" : "", (long long)((step - 1) * batch / train->n + 1),
                    (long long)step, (long long)max_steps, window_mean(&prog), rate, eta,
                    prog.tty ? "" : "\n");
            prog.last_draw = pf_clock_now();
        }
        int64_t every = spec.training.eval_every_steps;
        if (every > 0 && step % every == 0 && step < max_steps) {
            pf_session_evaluate(s, &ev);
            print_eval(s, &ev, prog.tty);
        }
    }
    if (prog.tty)
        fputc('\n', stderr);
    if (interrupted)
        fprintf(stderr, "psflow train: interrupted at step %lld\n",
                (long long)pf_session_global_step(s));
    if (!nonfinite[0]) /* the last update can overflow with a finite loss */
        check_params(s, nonfinite, sizeof nonfinite);
    if (!nonfinite[0]) {
        pf_session_evaluate(s, &ev);
        print_eval(s, &ev, false);
    }
    double seconds = pf_clock_now() - t_start;

    int rc = interrupted ? 130 : 0;
    if (nonfinite[0]) {
        fprintf(stderr,
                "psflow train: %s; stopping (lower optimizer.learning_rate or check the "
                "data)\n",
                nonfinite);
        rc = pf_exit_code(PF_ERR_NONFINITE);
    }
    if (save && nonfinite[0]) {
        fprintf(stderr, "psflow train: not saving %s: the variables are not finite\n", save);
    } else if (save) {
        st = pf_session_save(s, save, &err);
        if (st != PF_OK) {
            fprintf(stderr, "psflow train: cannot save: %s\n", err.message);
            rc = PF_EX_CANTCREAT;
        } else {
            fprintf(stderr, "psflow train: saved variables to %s\n", save);
        }
    }
    int64_t steps = pf_session_global_step(s);
    double examples_per_sec = train_seconds > 0 ? (double)steps * batch / train_seconds : 0;
    double test_loss = ev.examples ? ev.loss_sum / (double)ev.examples : NAN;
    bool classifier = spec.model.type != PF_MODEL_LINEAR;
    double accuracy = classifier && ev.examples ? (double)ev.correct / (double)ev.examples : NAN;
    if (json_out) {
        /* Numbers JSON cannot hold (NaN, Inf) are null; reason says why training ended. */
        const char *reason = nonfinite[0] ? "NonFiniteLoss" : interrupted ? "Interrupted" : "Done";
        json_t *o = json_pack("{s:s, s:I, s:o, s:o, s:o, s:f, s:f, s:f, s:s, s:s}", "name",
                              spec.name, "steps", (json_int_t)steps, "loss",
                              pf_json_number(nonfinite[0] ? NAN : window_mean(&prog)), "test_loss",
                              pf_json_number(test_loss), "test_accuracy", pf_json_number(accuracy),
                              "examples_per_sec", examples_per_sec, "seconds", seconds, "epochs",
                              (double)steps * batch / (double)train->n, "backend",
                              pf_session_backend(s)->name, "reason", reason);
        if (o && nonfinite[0])
            json_object_set_new(o, "message", json_string(nonfinite));
        if (o && !isnan(ev.auc))
            json_object_set_new(o, "test_auc", pf_json_number(ev.auc));
        if (o && !isnan(bayes_auc))
            json_object_set_new(o, "bayes_auc", pf_json_number(bayes_auc));
        char *text =
            o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(8)) : NULL;
        if (text)
            printf("%s\n", text);
        else
            fprintf(stderr, "psflow train: out of memory writing the result\n");
        free(text);
        json_decref(o);
    } else if (nonfinite[0]) {
        printf("%s: stopped at step %lld: %s\n", spec.name, (long long)steps, nonfinite);
    } else if (classifier && !isnan(ev.auc)) {
        printf("%s: %lld steps, loss %.4f, test accuracy %.4f, test auc %.4f%s, %.0f examples/s, "
               "%.1f s\n",
               spec.name, (long long)steps, window_mean(&prog), accuracy, ev.auc, bayes_text,
               examples_per_sec, seconds);
    } else if (classifier) {
        printf("%s: %lld steps, loss %.4f, test accuracy %.4f, %.0f examples/s, %.1f s\n",
               spec.name, (long long)steps, window_mean(&prog), accuracy, examples_per_sec,
               seconds);
    } else {
        printf("%s: %lld steps, loss %.6f, test loss %.6f, %.0f examples/s, %.1f s\n", spec.name,
               (long long)steps, window_mean(&prog), test_loss, examples_per_sec, seconds);
    }
    pf_session_destroy(s);
    pf_job_spec_deinit(&spec);
    return rc;
}
