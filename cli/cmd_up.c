/* cmd_up.c - `psflow up`: the compose topology as local processes on 127.0.0.1 — one
 * coordinator and N ps + M worker agents, each a `psflow` child process logging to
 * DIR/logs/. Ctrl-C (or SIGTERM) stops the agents first (they deregister), then the
 * coordinator. The children run in their own process group so the terminal's Ctrl-C reaches
 * only this supervisor, which stops them in that order. With --tls-cert/--tls-key the
 * coordinator serves https:// and the agents (and this supervisor) trust --ca-file, by
 * default the certificate itself (a self-signed one); the data plane is TLS too: the ps
 * agents serve wss with the same certificate and the worker agents verify it with --ca-file.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli_internal.h"
#include "cli/command.h"
#include "cli/options.h"
#include "psflow/clock.h"
#include "psflow/http_client.h"
#include "psflow/mem.h"
#include "psflow/signals.h"

#define UP_MAX_AGENTS 64

typedef struct child {
    char name[32];
    char address[64]; /* an agent's advertised address; "" for the coordinator */
    pid_t pid;
    int exited;
} child;

static volatile sig_atomic_t up_signalled;

static void on_signal(int sig) {
    (void)sig;
    up_signalled = 1;
}

/* A free TCP port on 127.0.0.1 (the kernel's pick; released before the child binds it). */
static int kernel_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* A free port not handed out before by this process: an agent binds its port only once it
 * is given a task, so until then the kernel may pick the same port again for the next one
 * (and two agents advertising one address are refused). */
static int free_port(void) {
    static int handed[4096];
    static int n_handed;
    int port = -1;
    for (int tries = 0; tries < 64; tries++) {
        port = kernel_port();
        int seen = 0;
        for (int i = 0; port > 0 && i < n_handed; i++)
            seen |= handed[i] == port;
        if (!seen)
            break;
    }
    if (port > 0 && n_handed < (int)(sizeof handed / sizeof handed[0]))
        handed[n_handed++] = port;
    return port;
}

/* The environment for the children: this one, so that tuning variables (PSFLOW_TOKEN,
 * PSFLOW_LEASE_SECONDS, PSFLOW_LOG_EVERY...) reach the coordinator and the agents, less
 * PSFLOW_JOB, which would turn every agent into a static task. Every other option that
 * names a process (its address, node id, database) is given on its command line, which
 * wins over the variable. Built before fork: the child only calls async-signal-safe
 * functions. */
static char **child_environment(void) {
    extern char **environ;
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = pf_calloc(n + 1, sizeof *env);
    if (!env)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "PSFLOW_JOB=", 11) != 0)
            env[k++] = environ[i];
    env[k] = NULL;
    return env;
}

static int spawn(child *c, const char *name, const char *log_dir, char *const argv[]) {
    snprintf(c->name, sizeof c->name, "%s", name);
    char log[PATH_MAX];
    snprintf(log, sizeof log, "%s/%s.log", log_dir, name);
    char **env = child_environment();
    if (!env)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        pf_free(env);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        execve("/proc/self/exe", argv, env);
        _exit(127);
    }
    pf_free(env);
    c->pid = pid;
    c->exited = 0;
    return 0;
}

static int get_json(const char *url, const char *token, json_t **out) {
    pf_http_response r;
    pf_error err;
    *out = NULL;
    if (pf_http_request("GET", url, token, NULL, 0, 2.0, &r, &err) != PF_OK)
        return -1;
    if (r.status == 200)
        *out = json_loadb(r.body, r.len, 0, NULL);
    long status = r.status;
    pf_http_response_deinit(&r);
    return status == 200 ? 0 : -1;
}

/* Reaps children that exited; reports each once. */
static void reap(child *kids, int n) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < n; i++) {
            if (kids[i].pid != pid)
                continue;
            kids[i].exited = 1;
            if (!up_signalled) {
                if (WIFSIGNALED(status))
                    fprintf(stderr, "psflow up: %s (pid %d) was killed by signal %d\n",
                            kids[i].name, (int)pid, WTERMSIG(status));
                else
                    fprintf(stderr, "psflow up: %s (pid %d) exited with status %d\n", kids[i].name,
                            (int)pid, WEXITSTATUS(status));
            }
        }
    }
}

static void stop_all(child *kids, int from, int to, double grace) {
    for (int i = from; i < to; i++)
        if (!kids[i].exited)
            kill(kids[i].pid, SIGTERM);
    double until = pf_clock_now() + grace;
    for (;;) {
        reap(kids, to);
        int left = 0;
        for (int i = from; i < to; i++)
            left += !kids[i].exited;
        if (!left)
            return;
        if (pf_clock_now() > until)
            break;
        pf_clock_sleep(0.05);
    }
    for (int i = from; i < to; i++)
        if (!kids[i].exited) {
            fprintf(stderr, "psflow up: %s did not stop in %.0f s; killing it\n", kids[i].name,
                    grace);
            kill(kids[i].pid, SIGKILL);
            /* SIGKILL ends it at once unless it is stuck in the kernel: 5 s at most. */
            double killed = pf_clock_now();
            while (waitpid(kids[i].pid, NULL, WNOHANG) == 0 && pf_clock_now() - killed < 5)
                pf_clock_sleep(0.05);
            if (pf_clock_now() - killed >= 5)
                fprintf(stderr,
                        "psflow up: %s (pid %d) did not exit 5 s after SIGKILL; "
                        "leaving it\n",
                        kids[i].name, (int)kids[i].pid);
            kids[i].exited = 1;
        }
}

/* What `psflow up` was told, and the paths and address it derives. */
typedef struct up_cli {
    long n_ps, n_workers, port;
    const char *dir, *cert, *key, *ca;
    char logs[PATH_MAX], db[PATH_MAX], ckpt[PATH_MAX], url[128], listen[64], token[512];
    char agent_token[PATH_MAX]; /* the coordinator writes it, the agents read it */
} up_cli;

/* DIR and DIR/logs, and the paths under DIR. Returns 0 or an exit code. */
static int make_dirs(up_cli *u) {
    snprintf(u->logs, sizeof u->logs, "%s/logs", u->dir);
    snprintf(u->db, sizeof u->db, "%s/psflow.db", u->dir);
    snprintf(u->ckpt, sizeof u->ckpt, "%s/checkpoints", u->dir);
    snprintf(u->agent_token, sizeof u->agent_token, "%s/agent-token", u->dir);
    if ((mkdir(u->dir, 0755) != 0 && errno != EEXIST) ||
        (mkdir(u->logs, 0755) != 0 && errno != EEXIST)) {
        fprintf(stderr, "psflow up: cannot create %s: %s\n", u->logs, strerror(errno));
        return PF_EX_CANTCREAT;
    }
    return 0;
}

/* TLS: --tls-cert and --tls-key together; the CA this supervisor and the agents trust is
 * --ca-file, else the certificate itself (a self-signed one is its own CA). Returns 0 or an
 * exit code. */
static int use_tls(up_cli *u) {
    if (!u->cert != !u->key) {
        fprintf(stderr, "psflow up: --tls-cert and --tls-key go together\n");
        return PF_EX_USAGE;
    }
    if (!u->ca)
        u->ca = u->cert;
    pf_error err;
    if (u->ca && pf_http_set_ca_file(u->ca, &err) != PF_OK) {
        fprintf(stderr, "psflow up: --ca-file: %s\n", err.message);
        return PF_EX_NOINPUT;
    }
    return 0;
}

/* Starts the coordinator as kids[0] and waits until /readyz answers; a coordinator that
 * exits (port taken...) ends it here. Returns 0 or an exit code. */
static int start_coordinator(const up_cli *u, child *kids) {
    char *cargv[] = {"psflow",
                     "coordinator",
                     "--listen",
                     (char *)u->listen,
                     "--db",
                     (char *)u->db,
                     "--agent-token-file",
                     (char *)u->agent_token,
                     u->cert ? "--tls-cert" : NULL,
                     (char *)u->cert,
                     "--tls-key",
                     (char *)u->key,
                     NULL};
    if (spawn(&kids[0], "coordinator", u->logs, cargv) != 0) {
        fprintf(stderr, "psflow up: cannot start the coordinator: %s\n", strerror(errno));
        return PF_EX_OSERR;
    }
    char readyz[160];
    snprintf(readyz, sizeof readyz, "%s/readyz", u->url);
    double deadline = pf_clock_now() + 30;
    int ready = 0;
    while (!ready && !up_signalled && pf_clock_now() < deadline) {
        pf_http_response r;
        pf_error err;
        if (pf_http_request("GET", readyz, u->token, NULL, 0, 1.0, &r, &err) == PF_OK &&
            r.status == 200)
            ready = 1;
        pf_http_response_deinit(&r);
        reap(kids, 1);
        if (kids[0].exited)
            break;
        if (!ready)
            pf_clock_sleep(0.1);
    }
    reap(kids, 1);
    if (kids[0].exited) /* something else answered on that port */
        ready = 0;
    if (!ready) {
        fprintf(stderr, "psflow up: the coordinator did not become ready; see %s/coordinator.log\n",
                u->logs);
        stop_all(kids, 0, 1, 5);
        return PF_EX_UNAVAILABLE;
    }
    fprintf(stderr, "psflow up: coordinator %s (pid %d, database %s)\n", u->url, (int)kids[0].pid,
            u->db);
    return 0;
}

/* Starts agent i (the ps agents first, then the workers) as kids[*n]. Returns 0, or -1
 * after printing which could not start. */
static int start_agent(const up_cli *u, long i, child *kids, int *n) {
    int is_ps = i < u->n_ps;
    long k = is_ps ? i : i - u->n_ps;
    int p = free_port();
    char name[32], id[48], adv[64];
    snprintf(name, sizeof name, "%s-%ld", is_ps ? "ps" : "worker", k);
    snprintf(id, sizeof id, "%s", name);
    snprintf(adv, sizeof adv, "127.0.0.1:%d", p);
    char *aargv[24] = {"psflow",           is_ps ? "ps" : "worker",
                       "--coordinator",    (char *)u->url,
                       "--node-id",        id,
                       "--advertise",      adv,
                       "--checkpoint-dir", (char *)u->ckpt};
    int argn = 10;
    aargv[argn++] = "--agent-token-file"; /* the one the coordinator made */
    aargv[argn++] = (char *)u->agent_token;
    if (is_ps) {
        aargv[argn++] = "--listen";
        aargv[argn++] = adv;
    }
    if (is_ps && u->cert) { /* the data plane over TLS with the API's certificate */
        aargv[argn++] = "--tls-cert";
        aargv[argn++] = (char *)u->cert;
        aargv[argn++] = "--tls-key";
        aargv[argn++] = (char *)u->key;
    }
    if (u->ca) {
        aargv[argn++] = "--ca-file";
        aargv[argn++] = (char *)u->ca;
    }
    aargv[argn] = NULL;
    if (p < 0 || spawn(&kids[(*n)++], name, u->logs, aargv) != 0) {
        fprintf(stderr, "psflow up: cannot start %s\n", name);
        return -1;
    }
    snprintf(kids[*n - 1].address, sizeof kids[*n - 1].address, "%s", adv);
    return 0;
}

/* How many of the agents started (kids[1..n-1]) the node list shows live, each under its id
 * and at the address it was started with: a database of an earlier run may still list agents
 * of the same ids, at other ports, which are not this run's. */
static size_t count_registered(json_t *items, const child *kids, int n) {
    size_t count = 0;
    for (size_t i = 0; i < json_array_size(items); i++) {
        json_t *it = json_array_get(items, i);
        const char *id = json_string_value(json_object_get(it, "id"));
        const char *addr = json_string_value(json_object_get(it, "address"));
        const char *state = json_string_value(json_object_get(it, "state"));
        for (int k = 1; id && addr && state && strcmp(state, "lost") != 0 && k < n; k++)
            if (!strcmp(kids[k].name, id) && !strcmp(kids[k].address, addr))
                count++;
    }
    return count;
}

/* Waits (30 s at most) until every agent has registered, then says how many did. */
static void wait_registered(const up_cli *u, const child *kids, int n) {
    char nodes_url[160];
    snprintf(nodes_url, sizeof nodes_url, "%s/api/v1/nodes", u->url);
    double deadline = pf_clock_now() + 30;
    size_t registered = 0;
    while (!up_signalled && pf_clock_now() < deadline) {
        json_t *nodes;
        if (get_json(nodes_url, u->token, &nodes) == 0) {
            registered = count_registered(json_object_get(nodes, "items"), kids, n);
            json_decref(nodes);
        }
        if (registered >= (size_t)(u->n_ps + u->n_workers))
            break;
        pf_clock_sleep(0.1);
    }
    fprintf(stderr, "psflow up: %zu of %ld agents registered (%ld ps, %ld workers; logs in %s)\n",
            registered, u->n_ps + u->n_workers, u->n_ps, u->n_workers, u->logs);
}

/* The dashboard's URL and how to submit a job. */
static void print_usage_hints(const up_cli *u) {
    char cacert[PATH_MAX + 32] = "", cafile[PATH_MAX + 32] = "";
    if (u->ca) {
        snprintf(cacert, sizeof cacert, "--cacert %s ", u->ca);
        snprintf(cafile, sizeof cafile, " --ca-file %s", u->ca);
    }
    printf("dashboard: %s/\n", u->url);
    printf("submit:    curl %s-X POST -H 'Content-Type: application/json' --data-binary "
           "@examples/fashion-mnist-mlp.json %s/api/v1/jobs\n",
           cacert, u->url);
    printf("      or:  psflow submit examples/fashion-mnist-mlp.json --coordinator %s%s --wait\n",
           u->url, cafile);
    printf("Ctrl-C stops the cluster.\n");
    fflush(stdout);
}

/* Starts the coordinator and the agents, then supervises them until SIGINT or SIGTERM and
 * stops the agents first (they deregister), then the coordinator. Returns the exit code. */
static int run_cluster(const up_cli *u) {
    child kids[UP_MAX_AGENTS + 1];
    int n = 1;
    int rc = start_coordinator(u, kids);
    if (rc)
        return rc;
    for (long i = 0; i < u->n_ps + u->n_workers; i++)
        if (start_agent(u, i, kids, &n) != 0) {
            stop_all(kids, 1, n, 10);
            stop_all(kids, 0, 1, 10);
            return PF_EX_OSERR;
        }
    wait_registered(u, kids, n);
    print_usage_hints(u);
    while (!up_signalled) {
        reap(kids, n);
        pf_clock_sleep(0.2);
    }
    fprintf(stderr, "psflow up: stopping %d agents, then the coordinator\n", n - 1);
    stop_all(kids, 1, n, 15);
    stop_all(kids, 0, 1, 10);
    fprintf(stderr, "psflow up: stopped\n");
    return 0;
}

int cli_up(const cli_command *cmd, int argc, char **argv) {
    up_cli u;
    cli_option opts[] = {
        CLI_LONG("ps", "N", "parameter-server agents [3]", 1, UP_MAX_AGENTS / 2, 3, &u.n_ps),
        CLI_LONG("workers", "M", "worker agents [3]", 1, UP_MAX_AGENTS / 2, 3, &u.n_workers),
        CLI_LONG("port", "P", "the coordinator's port on 127.0.0.1 [8080]", 0, 65535, 8080,
                 &u.port),
        CLI_TEXT("dir", "DIR", "database, checkpoints and logs [./psflow-up]", "./psflow-up",
                 &u.dir),
        CLI_TEXT("tls-cert", "FILE",
                 "the coordinator serves HTTPS and the ps agents wss with this PEM certificate "
                 "[HTTP]",
                 NULL, &u.cert),
        CLI_TEXT("tls-key", "FILE", "the PEM private key of --tls-cert", NULL, &u.key),
        CLI_TEXT("ca-file", "FILE",
                 "the CA the agents trust for the coordinator and the ps [--tls-cert itself]", NULL,
                 &u.ca),
        CLI_TOKEN_FILE_OPTION,
    };
    cli_run run;
    if (!cli_command_start(cmd, opts, CLI_COUNT(opts), argc, argv, &run))
        return run.exit_code;
    int rc;
    if (u.port == 0 && (u.port = free_port()) < 0) {
        fprintf(stderr, "psflow up: no free port on 127.0.0.1\n");
        return PF_EX_UNAVAILABLE;
    }
    if ((rc = make_dirs(&u)) || (rc = cli_token("up", u.token, sizeof u.token)) ||
        (rc = use_tls(&u)))
        return rc;
    snprintf(u.listen, sizeof u.listen, "127.0.0.1:%ld", u.port);
    snprintf(u.url, sizeof u.url, "%s://127.0.0.1:%ld", u.cert ? "https" : "http", u.port);
    pf_signals_on_stop(on_signal);
    return run_cluster(&u);
}
