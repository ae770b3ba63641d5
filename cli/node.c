/* node.c - what the node commands share (see node.h). */
#include "cli/node.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/cli_internal.h"
#include "cli/options.h"
#include "psflow/backend.h"
#include "psflow/clock.h"
#include "psflow/cpus.h"
#include "psflow/footprint.h"
#include "psflow/http_client.h"
#include "psflow/mem.h"
#include "psflow/wire_auth.h"

void node_deinit(node *n) {
    pf_job_spec_deinit(&n->spec);
    pf_tf_config_deinit(&n->cfg);
}

int node_load(const char *cmd, const char *job_path, bool serving, node *n) {
    memset(n, 0, sizeof *n);
    pf_error err;
    pf_error_clear(&err);
    if (!job_path) {
        fprintf(stderr, "psflow %s: --job FILE is required (see 'psflow %s --help')\n", cmd, cmd);
        return PF_EX_USAGE;
    }
    pf_status st = pf_job_spec_load(job_path, &n->spec, &err);
    if (st != PF_OK) {
        fprintf(stderr, "psflow %s: %s: %s\n", cmd, job_path, err.message);
        return st == PF_ERR_IO ? PF_EX_NOINPUT : PF_EX_DATAERR;
    }
    const char *tf = getenv("TF_CONFIG");
    if (!tf || !*tf) {
        fprintf(stderr,
                "psflow %s: TF_CONFIG is not set: set it to this task's cluster and task, e.g. "
                "{\"cluster\":{\"ps\":[\"host:2222\"],\"worker\":[\"host:2223\"]},"
                "\"task\":{\"type\":\"%s\",\"index\":0}}\n",
                cmd, cmd);
        return PF_EX_USAGE;
    }
    if (pf_tf_config_parse(tf, strlen(tf), &n->cfg, &err) != PF_OK ||
        pf_tf_config_validate(&n->cfg, &err) != PF_OK) {
        fprintf(stderr, "psflow %s: %s\n", cmd, err.message);
        return PF_EX_DATAERR;
    }
    n->type = n->cfg.task_type;
    n->index = n->cfg.task_index;
    if (serving) {
        int ps = pf_tf_config_count(&n->cfg, "ps");
        if (ps < 1 || ps > PF_MAX_REPLICAS) {
            fprintf(stderr, "psflow %s: TF_CONFIG names %d ps tasks (1 .. %d)\n", cmd, ps,
                    PF_MAX_REPLICAS);
            return PF_EX_DATAERR;
        }
        n->spec.replicas.ps = ps;
        return 0;
    }
    const struct {
        const char *job;
        int want;
    } shape[] = {{"ps", n->spec.replicas.ps},
                 {"worker", n->spec.replicas.worker},
                 {"chief", n->spec.replicas.chief}};
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        int have = pf_tf_config_count(&n->cfg, shape[i].job);
        if (have != shape[i].want) {
            fprintf(stderr,
                    "psflow %s: TF_CONFIG has %d %s task(s) but the job spec's replicas.%s is %d: "
                    "make them agree\n",
                    cmd, have, shape[i].job, shape[i].job, shape[i].want);
            return PF_EX_DATAERR;
        }
    }
    return 0;
}

int node_check_fit(const char *cmd, const pf_job_spec *spec, const char *role, int index,
                   long long memory) {
    pf_footprint fp;
    pf_error err;
    pf_error_clear(&err);
    pf_footprint_estimate(spec, &fp);
    if (pf_footprint_check(spec, &fp, &err) != PF_OK ||
        (strcmp(role, "train") && pf_footprint_check_cluster(spec, &err) != PF_OK)) {
        fprintf(stderr, "psflow %s: %s\n", cmd, err.message);
        return PF_EX_DATAERR;
    }
    int64_t need = fp.worker_bytes;
    const char *what =
        !strcmp(role, "train") ? "the whole job in this process" : "this training task";
    if (!strcmp(role, "train"))
        need = fp.process_bytes;
    if (!strcmp(role, "ps")) {
        pf_placement p;
        if (pf_placement_compute(spec, &p) != PF_OK) {
            fprintf(stderr, "psflow %s: out of memory placing the model's shards\n", cmd);
            return PF_EX_OSERR;
        }
        pf_status st = pf_footprint_check_placement(spec, &p, &err);
        need = pf_footprint_ps_bytes(spec, &p, index);
        pf_placement_deinit(&p);
        if (st != PF_OK) {
            fprintf(stderr, "psflow %s: %s\n", cmd, err.message);
            return PF_EX_DATAERR;
        }
        what = "this ps task's shards (values, gradients, optimizer slots, push and sync "
               "buffers)";
    }
    int64_t have = memory > 0 ? memory : pf_mem_system_bytes();
    if (have > 0 && need > have) {
        char a[32], b[32], c[32];
        pf_footprint_format_bytes(need, a, sizeof a);
        pf_footprint_format_bytes(have, b, sizeof b);
        pf_footprint_format_bytes(fp.dynamic_bytes, c, sizeof c);
        bool dynamic = !strcmp(role, "train") && fp.dynamic_bytes > 0;
        fprintf(stderr,
                "psflow %s: job %s needs about %s for %s%s%s%s, more than this process may use "
                "(%s%s): shrink the model or the batch, %s\n",
                cmd, spec->name, a, what, dynamic ? " (" : "", dynamic ? c : "",
                dynamic ? " of it for the dynamic tables at their max_rows)" : "", b,
                memory > 0 ? ", --memory" : "",
                dynamic ? "or lower max_rows" : "or spread it over more tasks");
        return PF_EX_DATAERR;
    }
    return 0;
}

int node_job_key(const char *cmd, const char *job, uint8_t *key) {
    char token[512];
    int rc = cli_token(cmd, token, sizeof token);
    if (rc)
        return -rc;
    if (!token[0])
        return 0;
    pf_wire_job_key(token, strlen(token), job, key);
    pf_wire_key_clear(token, sizeof token);
    return 1;
}

uint64_t node_incarnation(void) {
    /* Microseconds since the epoch: a restarted task always gets a larger one. */
    return (uint64_t)(pf_clock_wall() * 1e6);
}

/* A TCP port of this host that no other process holds, kept bound (never listened on) for
 * this process's life so that no other agent on the host takes it; 2222 when none can be. */
static int reserve_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof a;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        return ntohs(a.sin_port); /* fd stays open: the reservation */
    if (fd >= 0)
        close(fd);
    return 2222;
}

void node_defaults(const char *role, const char *id, const char *advertise, int port, char *id_out,
                   size_t id_cap, char *adv_out, size_t adv_cap) {
    char host[200] = "localhost";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    if (id)
        snprintf(id_out, id_cap, "%s", id);
    else
        snprintf(id_out, id_cap, "%s-%s-%d", role, host, (int)getpid());
    if (advertise)
        snprintf(adv_out, adv_cap, "%s", advertise);
    else
        snprintf(adv_out, adv_cap, "%s:%d", host, port > 0 ? port : reserve_port());
}

int node_set_threads(long threads, int tasks_on_host, char *note, size_t cap) {
    int cores = pf_cpus_available();
    int want = threads > 0 ? (int)threads : pf_cpus_share(cores, tasks_on_host);
    const char *ceiling = getenv("OPENBLAS_NUM_THREADS"); /* the user's, kept as a ceiling */
    long capped = ceiling ? strtol(ceiling, NULL, 10) : 0;
    if (threads <= 0 && capped >= 1 && capped < want)
        want = (int)capped;
    int set = pf_backend_openblas_set_threads(want);
    if (note && threads > 0)
        snprintf(note, cap, "%d BLAS thread%s (--threads)", set, set == 1 ? "" : "s");
    else if (note)
        snprintf(note, cap,
                 "%d BLAS thread%s: %d core%s for %d of the job's training tasks on this host", set,
                 set == 1 ? "" : "s", cores, cores == 1 ? "" : "s", tasks_on_host);
    return set;
}

int node_reporter_start(const char *cmd, const cli_option *opts, int n_opts,
                        const char *coordinator, const char *job, const char *task,
                        void (**report)(void *ctx, const worker_report *r), void **ctx) {
    *report = NULL;
    *ctx = NULL;
    if (!coordinator)
        return 0;
    char token[512];
    int rc = cli_coordinator_auth(cmd, opts, n_opts, token, sizeof token);
    if (!rc)
        *ctx = agent_reporter_create(coordinator, token, job, task);
    if (*ctx)
        *report = agent_reporter_add;
    return rc;
}
