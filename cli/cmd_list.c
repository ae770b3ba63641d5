/* cmd_list.c - `psflow list`: the coordinator's jobs as a table (GET /api/v1/jobs, every
 * page: the list is paginated and each page's metadata.continue asks for the next);
 * `--queue`: the jobs waiting for agents, in queue order, with what each waits for. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/api.h"
#include "cli/cli_internal.h"
#include "cli/command.h"
#include "psflow/clock.h"
#include "psflow/mem.h"
#include "psflow/text.h"

enum { COL_NAME, COL_PHASE, COL_STEP, COL_LOSS, COL_ACC, COL_WORKERS, COL_PS, COL_AGE, N_COLS };

static void ready_desired(const json_t *item, const char *type, char *buf, size_t cap) {
    const json_t *rep = json_object_get(json_object_get(item, "replicas"), type);
    if (!rep)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%lld/%lld", api_jint(rep, "ready", 0), api_jint(rep, "desired", 0));
}

#define LIST_PAGE  500 /* jobs asked for per request */
#define QUEUE_CELL 256 /* a cell of the queue table: a message is cut there */

/* Every job the coordinator lists, page after page, as one array (new reference); NULL
 * with *rc set after printing why. */
static json_t *fetch_all(const api_client *c, bool waiting_only, int *rc) {
    json_t *all = json_array();
    char token[256] = "", path[1024];
    for (;;) {
        char escaped[3 * sizeof token];
        if (!all || !api_url_escape(token, escaped, sizeof escaped)) {
            *rc = PF_EX_OSERR;
            break;
        }
        snprintf(path, sizeof path, "/api/v1/jobs?limit=%d%s%s%s", LIST_PAGE,
                 waiting_only ? "&waiting=true" : "", token[0] ? "&continue=" : "", escaped);
        pf_http_response r;
        if ((*rc = api_call(c, "GET", path, NULL, 0, API_REQUEST_TIMEOUT, &r)))
            break;
        if (r.status != 200) {
            *rc = api_report_error(c, &r, NULL);
            pf_http_response_deinit(&r);
            break;
        }
        json_t *doc = api_body_json(&r);
        pf_http_response_deinit(&r);
        json_t *items = json_object_get(doc, "items");
        if (!json_is_array(items)) {
            fprintf(stderr, "psflow list: the coordinator's answer has no items list\n");
            json_decref(doc);
            *rc = PF_EX_UNAVAILABLE;
            break;
        }
        json_array_extend(all, items);
        const char *next = api_jstr(json_object_get(doc, "metadata"), "continue");
        int more = next && *next && strlen(next) < sizeof token && json_array_size(items) > 0;
        if (more)
            snprintf(token, sizeof token, "%s", next);
        json_decref(doc);
        if (!more)
            return all;
    }
    json_decref(all);
    return NULL;
}

/* Prints rows x cols cells (each `size` bytes, row after row, the header first), each column
 * as wide as its widest cell, the last one unpadded. */
static void print_cells(const char *cells, size_t size, size_t rows, int cols) {
    int width[16] = {0};
    for (size_t i = 0; i < rows; i++)
        for (int k = 0; k < cols && k < 16; k++) {
            int w = (int)strlen(cells + (i * (size_t)cols + (size_t)k) * size);
            width[k] = w > width[k] ? w : width[k];
        }
    for (size_t i = 0; i < rows; i++)
        for (int k = 0; k < cols && k < 16; k++) {
            bool last = k + 1 == cols;
            printf("%-*s%s", last ? 0 : width[k], cells + (i * (size_t)cols + (size_t)k) * size,
                   last ? "\n" : "   ");
        }
}

/* Prints the jobs as a table (n > 0). Returns 0 or PF_EX_OSERR. */
static int print_table(const json_t *items, size_t n) {
    /* Two passes: format every cell, then print with each column as wide as its widest. */
    typedef char cell[80];
    cell *cells = pf_mallocarray((n + 1) * N_COLS, sizeof(cell));
    if (!cells) {
        fprintf(stderr, "psflow list: out of memory\n");
        return PF_EX_OSERR;
    }
    static const char *const head[N_COLS] = {"NAME",     "PHASE",   "STEP", "LOSS",
                                             "ACCURACY", "WORKERS", "PS",   "AGE"};
    for (int k = 0; k < N_COLS; k++)
        snprintf(cells[k], sizeof(cell), "%s", head[k]);
    double now = pf_clock_wall();
    for (size_t i = 0; i < n; i++) {
        const json_t *it = json_array_get(items, i);
        cell *row = cells + (i + 1) * N_COLS;
        api_job_view v = {.step = -1, .max_steps = -1};
        api_view_update(&v, it);
        snprintf(row[COL_NAME], sizeof(cell), "%s",
                 api_jstr(it, "name") ? api_jstr(it, "name") : "?");
        snprintf(row[COL_PHASE], sizeof(cell), "%s", v.phase[0] ? v.phase : "-");
        api_format_steps(&v, row[COL_STEP], sizeof(cell));
        if (v.has_loss)
            snprintf(row[COL_LOSS], sizeof(cell), "%.4f", v.loss);
        else
            snprintf(row[COL_LOSS], sizeof(cell), "-");
        if (v.has_accuracy)
            snprintf(row[COL_ACC], sizeof(cell), "%.4f", v.accuracy);
        else
            snprintf(row[COL_ACC], sizeof(cell), "-");
        ready_desired(it, "worker", row[COL_WORKERS], sizeof(cell));
        ready_desired(it, "ps", row[COL_PS], sizeof(cell));
        double created;
        if (pf_text_parse_rfc3339(api_jstr(it, "create_time"), &created))
            api_format_age(now - created, row[COL_AGE], sizeof(cell));
        else
            snprintf(row[COL_AGE], sizeof(cell), "-");
    }
    print_cells(cells[0], sizeof(cell), n + 1, N_COLS);
    pf_free(cells);
    return 0;
}

static int by_position(const void *a, const void *b) {
    long long x = api_jint(json_object_get(*(json_t *const *)a, "queue"), "position", 0),
              y = api_jint(json_object_get(*(json_t *const *)b, "queue"), "position", 0);
    return (x > y) - (x < y);
}

/* The waiting jobs of items (those with a queue object), in queue order: a new array, or
 * NULL when out of memory. */
static json_t *waiting_jobs(const json_t *items) {
    size_t n = json_array_size(items), k = 0;
    json_t **w = pf_mallocarray(n ? n : 1, sizeof *w);
    json_t *out = json_array();
    for (size_t i = 0; w && i < n; i++)
        if (json_is_object(json_object_get(json_array_get(items, i), "queue")))
            w[k++] = json_array_get(items, i);
    if (w)
        qsort(w, k, sizeof *w, by_position);
    for (size_t i = 0; w && out && i < k; i++)
        if (json_array_append(out, w[i]) != 0) {
            json_decref(out);
            out = NULL;
        }
    pf_free(w);
    if (!w) {
        json_decref(out);
        return NULL;
    }
    return out;
}

/* Prints the waiting jobs in queue order: position, name, queue, priority, phase, reason (with the
 * job it names), its message and its age. Returns 0 or PF_EX_OSERR. */
static int print_queue(const json_t *waiting) {
    size_t n = json_array_size(waiting);
    if (n == 0) {
        fprintf(stderr, "psflow list: no job waits for agents\n");
        return 0;
    }
    enum {
        Q_POS,
        Q_NAME,
        Q_QUEUE,
        Q_PRIORITY,
        Q_PHASE,
        Q_REASON,
        Q_AGE,
        Q_START,
        Q_MESSAGE,
        Q_COLS
    };
    typedef char cell[QUEUE_CELL];
    cell *cells = pf_mallocarray((n + 1) * Q_COLS, sizeof(cell));
    if (!cells) {
        fprintf(stderr, "psflow list: out of memory\n");
        return PF_EX_OSERR;
    }
    static const char *const head[Q_COLS] = {"POS",    "NAME", "QUEUE", "PRIORITY", "PHASE",
                                             "REASON", "AGE",  "START", "MESSAGE"};
    for (int k = 0; k < Q_COLS; k++)
        snprintf(cells[k], sizeof(cell), "%s", head[k]);
    double now = pf_clock_wall();
    for (size_t i = 0; i < n; i++) {
        const json_t *it = json_array_get(waiting, i), *q = json_object_get(it, "queue");
        cell *row = cells + (i + 1) * Q_COLS;
        const char *reason = api_jstr(q, "reason"), *behind = api_jstr(q, "behind"),
                   *by = api_jstr(q, "preempted_by");
        snprintf(row[Q_POS], sizeof(cell), "%lld", api_jint(q, "position", 0));
        snprintf(row[Q_NAME], sizeof(cell), "%s",
                 api_jstr(it, "name") ? api_jstr(it, "name") : "?");
        snprintf(row[Q_QUEUE], sizeof(cell), "%s", api_jstr(q, "name") ? api_jstr(q, "name") : "-");
        snprintf(row[Q_PRIORITY], sizeof(cell), "%lld", api_jint(q, "priority", 0));
        snprintf(row[Q_PHASE], sizeof(cell), "%s",
                 api_jstr(it, "phase") ? api_jstr(it, "phase") : "-");
        if (by)
            snprintf(row[Q_REASON], sizeof(cell), "%s (by %s)", reason ? reason : "-", by);
        else if (behind)
            snprintf(row[Q_REASON], sizeof(cell), "%s (for %s)", reason ? reason : "-", behind);
        else
            snprintf(row[Q_REASON], sizeof(cell), "%s", reason ? reason : "-");
        double created;
        if (pf_text_parse_rfc3339(api_jstr(it, "create_time"), &created))
            api_format_age(now - created, row[Q_AGE], sizeof(cell));
        else
            snprintf(row[Q_AGE], sizeof(cell), "-");
        double start; /* the first job holding agents only: when it is expected to start */
        if (pf_text_parse_rfc3339(api_jstr(q, "estimated_start"), &start)) {
            char in[32];
            api_format_age(start > now ? start - now : 0, in, sizeof in);
            snprintf(row[Q_START], sizeof(cell), "in %s", in);
        } else {
            snprintf(row[Q_START], sizeof(cell), "-");
        }
        snprintf(row[Q_MESSAGE], sizeof(cell), "%s",
                 api_jstr(it, "message") ? api_jstr(it, "message") : "");
    }
    print_cells(cells[0], sizeof(cell), n + 1, Q_COLS);
    pf_free(cells);
    return 0;
}

int cli_list(const cli_command *cmd, int argc, char **argv) {
    int format;
    bool queue = false;
    cli_option opts[] = {
        CLI_CHOICE("output", "FORMAT",
                   "text (a table, default) or json (the API's answer); also -o", "text|json",
                   &format),
        CLI_FLAG("queue",
                 "only the jobs waiting for agents, in queue order, with the reason each waits "
                 "(capacity, reserved for a job ahead, preempted, cluster_too_small)",
                 &queue),
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    int rc;
    json_t *items = fetch_all(&run.client, queue, &rc);
    if (!items)
        return rc;
    if (queue) {
        json_t *waiting = waiting_jobs(items);
        json_decref(items);
        if (!waiting) {
            fprintf(stderr, "psflow list: out of memory\n");
            return PF_EX_OSERR;
        }
        items = waiting;
        if (format != 1) {
            rc = print_queue(items);
            json_decref(items);
            return rc;
        }
    }
    json_t *doc = json_pack("{s:o}", "items", items);
    if (!doc) {
        fprintf(stderr, "psflow list: out of memory\n");
        return PF_EX_OSERR;
    }
    if (format == 1) { /* json */
        /* Every page's items as one answer, the shape of a single page without metadata. */
        int ok = json_dumpf(doc, stdout, JSON_COMPACT) == 0;
        fputc('\n', stdout);
        json_decref(doc);
        return ok ? 0 : PF_EX_OSERR;
    }
    size_t n = json_array_size(items);
    if (n == 0) {
        fprintf(stderr, "psflow list: no jobs\n");
        json_decref(doc);
        return 0;
    }
    rc = print_table(items, n);
    json_decref(doc);
    return rc;
}
