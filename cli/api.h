/* api.h - what the clients of the coordinator's REST API share (psflow submit, list, get,
 * watch, cancel, scale, suspend, resume, delete, tfconfig, health): the coordinator's address
 * and token, one request with its failure mapped to an exit code, problem+json errors, the
 * job state as the API shows it, waiting for a change of a job, the options and help texts
 * every client command has.
 *
 * Exit codes (psflow/exit_code.h): 65 for a rejected spec (400, 413, 422), 77 for 401/403,
 * 69 when the coordinator is unreachable or answers 5xx, 1 for any other 4xx. Errors are
 * printed from the problem+json body: its detail, then one line per `errors[]` entry with
 * the JSON pointer of the field. Single-threaded, like the commands.
 */
#ifndef PSFLOW_CLI_API_H
#define PSFLOW_CLI_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cli/options.h"
#include "psflow/http_client.h"

#define API_DEFAULT_COORDINATOR "http://127.0.0.1:8080"
#define API_REQUEST_TIMEOUT     10.0 /* seconds for one ordinary API call */

/* The --coordinator and --ca-file options every client command has, and the help text about
 * the token. */
#define API_COORDINATOR_OPTIONS                                                                    \
    CLI_OPT("coordinator", "URL",                                                                  \
            "the coordinator's address, http:// or https:// [" API_DEFAULT_COORDINATOR "]"),       \
        CLI_CA_FILE_OPTION, CLI_TOKEN_FILE_OPTION

#define API_TOKEN_NOTE                                                                             \
    "\n\nThe API token, when the coordinator requires one, is read from PSFLOW_TOKEN or the "      \
    "file\nnamed by --token-file (PSFLOW_TOKEN_FILE)."

/* A command's connection settings. */
typedef struct api_client {
    const char *cmd; /* the subcommand, for messages: "psflow CMD: ..." */
    char base[1024]; /* coordinator URL without a trailing slash */
    char token[1024];
} api_client;

/* A job's state as the API shows it (a list item, a `job` event or a job's status). */
typedef struct api_job_view {
    char phase[32];
    char reason[64];
    char message[256];
    long long step, max_steps; /* -1: unknown */
    bool has_loss, has_accuracy, has_test_loss, has_rate, has_eta;
    double loss, accuracy, test_loss, steps_per_sec, eta_seconds; /* eta: the coordinator's */
    bool has_test_auc, has_test_calibration; /* a two-class job's, once evaluated */
    double test_auc, test_calibration;
} api_job_view;

/* --- requests --- */

/* Fills c from --coordinator (or its default) and, with need_token, the token environment,
 * and applies --ca-file. Returns 0 or an exit code after printing why. */
int api_client_init(api_client *c, const char *cmd, const cli_option *opts, int n_opts,
                    bool need_token);

/* Percent-encodes everything but RFC 3986's unreserved characters. Returns dst, or NULL
 * when the result does not fit. */
char *api_url_escape(const char *s, char *dst, size_t cap);

/* A job named on the command line: its name percent-encoded, the API path of the job (or
 * of one of its resources) and the message for a 404. */
typedef struct api_job_ref {
    const char *name;
    char escaped[512];
    char path[600];      /* /api/v1/jobs/{escaped}{suffix} */
    char not_found[400]; /* no job named '{name}' */
} api_job_ref;

/* Fills j for the job `name` and the path suffix ("", "/cancel"). Returns 0, or the usage
 * exit code after printing "job NAME too long". */
int api_job_ref_init(api_job_ref *j, const char *cmd, const char *name, const char *suffix);

/* Joins the base URL and a path ("/api/v1/jobs"). Returns 0 or a usage exit code. */
int api_url(const api_client *c, const char *path, char *url, size_t cap);

/* Sends one request. PF_OK whenever a response arrived, whatever its status; otherwise
 * PF_ERR_UNAVAILABLE (unreachable, timed out) or another error, with *why saying why. */
pf_status api_try(const api_client *c, const char *method, const char *path, const char *body,
                  size_t len, double timeout, pf_http_response *out, pf_error *why);

/* Like api_try, but prints the failure and returns its exit code (0 when a response
 * arrived). */
int api_call(const api_client *c, const char *method, const char *path, const char *body,
             size_t len, double timeout, pf_http_response *out);

/* Sends METHOD j->path. Returns 0 with a 200 answer in *out (pf_http_response_deinit), else
 * the exit code after printing the failure or the error answer (j->not_found for a 404). */
int api_call_job(const api_client *c, const char *method, const api_job_ref *j,
                 pf_http_response *out);

/* api_call_job with a JSON body (NULL: none); any 2xx answer is a success (DELETE: 204). */
int api_send_job(const api_client *c, const char *method, const api_job_ref *j, const char *body,
                 pf_http_response *out);

/* --- JSON answers --- */

/* o[key] as a string (borrowed), NULL when it is not one. */
const char *api_jstr(const json_t *o, const char *key);

/* True when o[key] is a number (null or absent: false). */
bool api_jnum(const json_t *o, const char *key, double *out);

/* o[key] as an integer (a number, truncated), else fallback. */
long long api_jint(const json_t *o, const char *key, long long fallback);

/* The body as JSON (new reference), or NULL when it is not JSON. */
json_t *api_body_json(const pf_http_response *r);

/* Prints a problem+json error: "psflow CMD: PREFIX: detail", then "  /pointer: message"
 * for each errors[] entry. Bodies that are not JSON are shown by their first line. */
void api_print_problem(const api_client *c, const char *prefix, const pf_http_response *r);

/* Prints an error answer and returns its exit code. A 401 gets a hint about the token;
 * not_found, when given, replaces the coordinator's text for a 404. */
int api_report_error(const api_client *c, const pf_http_response *r, const char *not_found);

/* --- times and the job state --- */

/* A duration the way kubectl shows ages: 45s, 12m, 3h, 2d. */
void api_format_age(double seconds, char *buf, size_t cap);

/* Updates v from a job summary (list item, `job` event) or a job's status object. Fields
 * the object lacks keep their values, except the ones the object owns when present. */
void api_view_update(api_job_view *v, const json_t *o);

/* "step/max_steps", "step" when max_steps is unknown, "-" when the step is. */
void api_format_steps(const api_job_view *v, char *buf, size_t cap);

/* --- waiting for a change of a job --- */

/* A wait's test of the job as GET shows it and, when asked for, of its tasks (the items of
 * GET .../tasks). Writes where the change stands into line[cap] ("workers 2/3 ready") and
 * returns whether it is done. */
typedef bool (*api_wait_test)(const json_t *job, const json_t *tasks, void *ctx, char *line,
                              size_t cap);

/* Reads the job every second until `test` says done (0) or the job ends first (0 Succeeded,
 * 1 Failed); with test NULL, until GET answers 404 (0: the job is gone). Prints to stderr
 * "psflow CMD: job NAME: LINE (PHASE)" each time that changes, and once per outage that the
 * coordinator is unreachable, then retries until it is back (as submit --wait does). A 404
 * while waiting for anything else prints "job NAME no longer exists" (1); another error
 * answer, its exit code (api_report_error). *last: the job as last read (new reference; NULL
 * once gone or never read), for the command's output. */
int api_wait_job(const api_client *c, const api_job_ref *j, bool tasks, api_wait_test test,
                 void *ctx, json_t **last);

/* Prints the one human line of a changed job to stdout: "job NAME: WHAT (PHASE)", or for a
 * job that ended "job NAME: Succeeded" / "job NAME: Failed (REASON: MESSAGE)". */
void api_print_job_line(const char *name, const json_t *job, const char *what);

/* The output of a command after api_wait_job() returned rc with *last: the job as JSON, or
 * its line (api_print_job_line); nothing when the wait failed otherwise than by the job
 * ending (its error was printed). */
void api_print_waited(const char *name, const json_t *last, int rc, bool json, const char *what);

/* --- output --- */

/* Writes a raw body followed by a newline when it lacks one. */
void api_print_body(const pf_http_response *r);

#endif
