/* cmd_plan.c - `psflow plan FILE [-o json]`: what a job spec asks for, before it is submitted,
 * without a coordinator: how its variables are placed on the ps tasks and the memory each
 * task needs.
 *
 * Every figure comes from the code the job's processes and the coordinator run: the
 * placement from pf_placement_compute (psflow/placement.h, as every ps and worker computes
 * it), its imbalance as GET /api/v1/jobs/{name}/placement reports it, and the memory from
 * psflow/footprint.h, the figures the coordinator's admission check compares with its
 * agents' memory (coordinator/admission.c). The spec is checked as the coordinator checks it
 * on submission, short of what only the coordinator knows (its limits, its agents and data
 * roots): an invalid spec exits 65 naming the field by its JSON pointer, an unreadable file
 * 66, as `psflow submit` does.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/options.h"
#include "psflow/dyn_batch.h"
#include "psflow/footprint.h"
#include "psflow/mem.h"
#include "psflow/placement.h"
#include "psflow/spec.h"

/* What `psflow plan` found: the spec, its placement and the footprint figures. */
typedef struct plan {
    pf_job_spec spec;
    pf_placement placement;
    pf_footprint fp;
    int64_t *ps_bytes;      /* [n_ps]: pf_footprint_ps_bytes of each ps task */
    int largest_ps;         /* the ps task that needs the most memory */
    json_t *placement_spec; /* the spec's "placement" with its defaults filled in */
} plan;

static void plan_deinit(plan *p) {
    pf_free(p->ps_bytes);
    json_decref(p->placement_spec);
    pf_placement_deinit(&p->placement);
    pf_job_spec_deinit(&p->spec);
}

/* The spec's normalised "placement" object (strategy and partitioner as the spec spells
 * them, defaults filled in); NULL on allocation failure. */
static json_t *placement_spec(const pf_job_spec *spec) {
    char *text = pf_job_spec_to_json(spec);
    json_t *doc = text ? json_loads(text, 0, NULL) : NULL;
    pf_free(text);
    json_t *out = json_object_get(doc, "placement");
    json_incref(out);
    json_decref(doc);
    return out;
}

/* Loads, checks and places the spec at path. Returns 0, or an exit code after printing why
 * (p then holds nothing). */
static int plan_init(plan *p, const char *path) {
    memset(p, 0, sizeof *p);
    pf_error err;
    pf_error_clear(&err);
    pf_status st = pf_job_spec_load(path, &p->spec, &err);
    if (st != PF_OK) {
        /* Spec messages start with the JSON pointer of the field they name. */
        fprintf(stderr, "psflow plan: %s: %s\n", path, err.message);
        return pf_exit_code(st);
    }
    pf_footprint_estimate(&p->spec, &p->fp);
    st = pf_footprint_check(&p->spec, &p->fp, &err);
    if (st == PF_OK)
        st = pf_footprint_check_cluster(&p->spec, &err);
    if (st == PF_OK && (st = pf_placement_compute(&p->spec, &p->placement)) != PF_OK)
        pf_error_set(&err, st, NULL, "cannot place the model's shards: %s", pf_strerror(st));
    if (st == PF_OK)
        st = pf_footprint_check_placement(&p->spec, &p->placement, &err);
    if (st == PF_OK) {
        p->ps_bytes = pf_calloc((size_t)p->placement.n_ps, sizeof *p->ps_bytes);
        p->placement_spec = placement_spec(&p->spec);
        if (!p->ps_bytes || !p->placement_spec)
            st = pf_error_set(&err, PF_ERR_NOMEM, NULL, "out of memory");
    }
    if (st != PF_OK) {
        fprintf(stderr, "psflow plan: %s: %s\n", path, err.message);
        plan_deinit(p);
        return pf_exit_code(st);
    }
    for (int t = 0; t < p->placement.n_ps; t++) {
        p->ps_bytes[t] = pf_footprint_ps_bytes(&p->spec, &p->placement, t);
        if (p->ps_bytes[t] > p->ps_bytes[p->largest_ps])
            p->largest_ps = t;
    }
    return 0;
}

static int training_tasks(const pf_job_spec *spec) {
    return spec->replicas.worker + spec->replicas.chief;
}

static int64_t shard_bytes(const pf_shard_info *sh) {
    return (int64_t)sh->count * (int64_t)sizeof(float);
}

/* ---- text ------------------------------------------------------------------------------- */

static void print_shards(const plan *p, int task) {
    const pf_placement *pl = &p->placement;
    for (int i = 0; i < pl->n_shards; i++) {
        const pf_shard_info *sh = &pl->shards[i];
        if (sh->ps_task != task)
            continue;
        char shape[48], bytes[32];
        if (sh->dynamic) { /* rows by id, up to this ps's share of the cap */
            pf_dyn_config cfg;
            pf_dyn_table_config(&p->spec, sh->var, sh->max_rows, &cfg);
            pf_footprint_format_bytes(pf_dyn_bytes_bound(&cfg), bytes, sizeof bytes);
            printf("    %-26s dynamic up to %lld rows of %lld, at most %s\n", sh->name,
                   (long long)sh->max_rows, (long long)sh->shape[1], bytes);
            continue;
        }
        if (sh->rank == 2)
            snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)sh->shape[0],
                     (long long)sh->shape[1]);
        else
            snprintf(shape, sizeof shape, "[%lld]", (long long)sh->shape[0]);
        pf_footprint_format_bytes(shard_bytes(sh), bytes, sizeof bytes);
        printf("    %-26s %-5s %-16s %s\n", sh->name,
               sh->var < p->spec.model.n_embeddings ? "table" : "dense", shape, bytes);
    }
}

static void print_text(const plan *p) {
    const pf_job_spec *s = &p->spec;
    const pf_placement *pl = &p->placement;
    const pf_footprint *fp = &p->fp;
    char a[32], b[32];
    pf_footprint_format_bytes(fp->model_bytes, a, sizeof a);
    printf("job %s: %s, %lld parameters; %s, %d slot%s each: %s of values and slots\n", s->name,
           pf_model_type_name(s->model.type), (long long)fp->params,
           pf_optimizer_type_name(s->optimizer.type), fp->slots, fp->slots == 1 ? "" : "s", a);
    json_t *part = json_object_get(p->placement_spec, "partitioner");
    printf("placement: %s, partitioner %s: %d shards, imbalance %.2f (largest ps / mean)\n",
           json_string_value(json_object_get(p->placement_spec, "strategy")),
           json_string_value(json_object_get(part, "type")), pl->n_shards,
           pf_placement_imbalance(pl));
    for (int t = 0; t < pl->n_ps; t++) {
        pf_footprint_format_bytes(pl->bytes_per_ps[t], a, sizeof a);
        pf_footprint_format_bytes(p->ps_bytes[t], b, sizeof b);
        printf("ps %d: %d shard%s, %s of values, needs %s\n", t, pl->shards_per_ps[t],
               pl->shards_per_ps[t] == 1 ? "" : "s", a, b);
        print_shards(p, t);
    }
    pf_footprint_format_bytes(fp->worker_bytes, a, sizeof a);
    printf("training tasks: %s%d worker%s, each needs %s", s->replicas.chief ? "1 chief and " : "",
           s->replicas.worker, s->replicas.worker == 1 ? "" : "s", a);
    if (fp->data_bytes > 0) {
        pf_footprint_format_bytes(fp->data_bytes, b, sizeof b);
        printf(" (%s of it the data generated in memory)\n", b);
    } else {
        printf(" (data read from files not counted)\n");
    }
    pf_footprint_format_bytes(p->ps_bytes[p->largest_ps], a, sizeof a);
    pf_footprint_format_bytes(fp->worker_bytes, b, sizeof b);
    printf("agent memory needed: ps %s (ps task %d), worker %s\n", a, p->largest_ps, b);
}

/* ---- json ------------------------------------------------------------------------------- */

static json_t *plan_json(const plan *p) {
    const pf_job_spec *s = &p->spec;
    const pf_placement *pl = &p->placement;
    json_t *ps = json_array();
    int64_t total = 0;
    for (int t = 0; ps && t < pl->n_ps; t++) {
        total += pl->bytes_per_ps[t];
        json_array_append_new(ps, json_pack("{s:i, s:I, s:i, s:I}", "task", t, "bytes",
                                            (json_int_t)pl->bytes_per_ps[t], "shards",
                                            pl->shards_per_ps[t], "memory_bytes",
                                            (json_int_t)p->ps_bytes[t]));
    }
    json_t *training =
        json_pack("{s:i, s:i, s:i, s:I, s:I}", "tasks", training_tasks(s), "workers",
                  s->replicas.worker, "chief", s->replicas.chief, "memory_bytes",
                  (json_int_t)p->fp.worker_bytes, "data_bytes", (json_int_t)p->fp.data_bytes);
    json_t *agents =
        json_pack("{s:I, s:i, s:I}", "ps_memory_bytes", (json_int_t)p->ps_bytes[p->largest_ps],
                  "ps_task", p->largest_ps, "worker_memory_bytes", (json_int_t)p->fp.worker_bytes);
    return json_pack("{s:s, s:s, s:I, s:i, s:I, s:O, s:I, s:f, s:o, s:o, s:o, s:o}", "job", s->name,
                     "model", pf_model_type_name(s->model.type), "parameters",
                     (json_int_t)p->fp.params, "optimizer_slots", p->fp.slots, "model_bytes",
                     (json_int_t)p->fp.model_bytes, "placement", p->placement_spec, "total_bytes",
                     (json_int_t)total, "imbalance", pf_placement_imbalance(pl), "shards",
                     pf_placement_shards_json(pl, s->model.n_embeddings), "ps", ps, "training",
                     training, "agents", agents);
}

int cli_plan(const cli_command *cmd, int argc, char **argv) {
    int format;
    cli_option opts[] = {
        CLI_CHOICE("output", "FORMAT",
                   "text (the placement and memory, default) or json (the same as JSON); also -o",
                   "text|json", &format),
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    plan p;
    int rc = plan_init(&p, run.args.positional[0]);
    if (rc)
        return rc;
    if (format == 1) { /* json */
        json_t *doc = plan_json(&p);
        if (!doc || json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
            fprintf(stderr, "psflow plan: out of memory\n");
            rc = PF_EX_OSERR;
        } else {
            printf("\n");
        }
        json_decref(doc);
    } else {
        print_text(&p);
    }
    plan_deinit(&p);
    return rc;
}
