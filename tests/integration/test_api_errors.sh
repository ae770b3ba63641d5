#!/usr/bin/env bash
# labels: sanitizer-only
# The REST API's answers to bad requests (api/rest.md "Errors"), checked against a real
# coordinator started with a token: every case in the table below gets its documented
# status, an application/problem+json body with type/title/status/detail whose detail or
# errors[].pointer names the problem, and leaves the database exactly as it was. Before
# the table, the happy path it relies on: a job is created (201), the same spec again is a
# safe retry (200, still one job), another spec under the same name is a conflict (409).
# After it, requests only a raw socket can send (inside the same before/after check of the
# database): a 2 GB Content-Length with "Expect: 100-continue" is answered 413 at once and
# without "100 Continue", as is a text/plain body; two different Content-Lengths and
# Transfer-Encoding with Content-Length are 400.
# labels: integration
source "$(dirname "$0")/lib.sh"

TOKEN=secret
DB=$WORK/psflow.db
PORT=$(free_ports 1)
BASE=http://127.0.0.1:$PORT

# A lease long enough that the node registered below is never lost while the table runs
# (a lost node would change the database), however slow the machine or the build.
PSFLOW_TOKEN=$TOKEN "$PSFLOW_BIN" coordinator --listen "127.0.0.1:$PORT" --db "$DB" \
  --lease-seconds 600 \
  >"$WORK/coordinator.log" 2>&1 &
COORD_PID=$!
trap 'rc=$?; kill "$COORD_PID" 2>/dev/null; wait "$COORD_PID" 2>/dev/null; (exit $rc); cleanup' EXIT

# Waits until /readyz answers 200, failing when the coordinator exits or 15 s pass.
deadline=$((SECONDS + 15))
until [ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/readyz")" = 200 ]; do
  kill -0 "$COORD_PID" 2>/dev/null || { cat "$WORK/coordinator.log" >&2; fail "coordinator exited"; }
  [ "$SECONDS" -lt "$deadline" ] || { cat "$WORK/coordinator.log" >&2; fail "coordinator not ready after 15 s"; }
  sleep 0.05
done

# request METHOD PATH AUTH [BODYFILE [CURL ARGS...]]: sends one request; AUTH is ok, none,
# wrong or basic. The body goes as application/json, or as $BODY_TYPE when set ("" sends
# none). Leaves the status in $code (000 when no answer came), the Content-Type in $ctype,
# the headers in $WORK/headers and the body in $WORK/body.
request() {
  local method=$1 path=$2 auth=$3 body=${4:--}
  shift $(($# < 4 ? $# : 4))
  local args=(-s -X "$method" -o "$WORK/body" -D "$WORK/headers" -w '%{http_code} %{content_type}')
  case $auth in
    ok) args+=(-H "Authorization: Bearer $TOKEN") ;;
    wrong) args+=(-H "Authorization: Bearer not-$TOKEN") ;;
    basic) args+=(-u "admin:$TOKEN") ;;
    none) ;;
    *) fail "request: bad auth mode $auth" ;;
  esac
  if [ "$body" != - ]; then
    args+=(-H "Content-Type: ${BODY_TYPE-application/json}" --data-binary "@$body")
  fi
  : >"$WORK/body"
  : >"$WORK/headers"
  local out
  out=$(curl "${args[@]}" "$@" "$BASE$path") || true
  code=${out%% *}
  ctype=${out#* }
}

# The bodies of the table, written by Python so that bytes curl or bash would mangle
# (invalid UTF-8, 2 MiB, deep nesting) are exact.
mkdir "$WORK/b"
python3 - "$WORK/b" <<'PY'
import json, os, sys

out = sys.argv[1]
base = {"name": "bad", "replicas": {"ps": 1, "worker": 1},
        "model": {"type": "linear", "inputs": 1},
        "data": {"format": "synthetic_linear"}, "training": {"max_steps": 100}}

def spec(**changes):
    """base with dotted-path changes; a value of ... deletes the field."""
    d = json.loads(json.dumps(base))
    for path, value in changes.items():
        keys = path.split("__")
        t = d
        for k in keys[:-1]:
            t = t.setdefault(k, {})
        if value is ...:
            del t[keys[-1]]
        else:
            t[keys[-1]] = value
    return json.dumps(d).encode()

bodies = {
    # The job the happy path creates, the same spec spelled differently (defaults
    # written out, other key order), and another spec under the same name.
    "job": json.dumps(dict(base, name="errs")).encode(),
    "job_same": json.dumps({"training": {"max_steps": 100, "batch_size": 100},
                            "device": "cpu", "data": {"format": "synthetic_linear"},
                            "model": {"inputs": 1, "type": "linear"},
                            "replicas": {"worker": 1, "ps": 1}, "name": "errs"}).encode(),
    "job_other": json.dumps(dict(base, name="errs", training={"max_steps": 200})).encode(),
    "job_fresh": json.dumps(dict(base, name="fresh")).encode(),

    "malformed": b'{"name": "bad", "model": {"type": "linear", "inputs": 1},',
    "invalid_utf8": spec().replace(b'"bad"', b'"b\xff\xfed"'),
    "trailing": spec() + b" x",
    "empty": b"",
    "duplicate_key": b'{"name": "bad", "name": "other", "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"}}',
    "deep": b'{"name": "bad", "model": ' + b"[" * 100 + b"]" * 100 + b"}",
    "top_array": b"[" + spec() + b"]",
    "int_overflow": spec().replace(b'"max_steps": 100', b'"max_steps": 99999999999999999999'),
    "unknown_field": spec(extra=1),
    "unknown_nested": spec(training__foo=1),
    "batch_string": spec(training__batch_size="100"),
    "model_string": spec(model="linear"),
    "name_upper": spec(name="Bad"),
    "name_long": spec(name="a" * 64),
    "name_underscore": spec(name="bad_name"),
    "name_missing": spec(name=...),
    "ps_zero": spec(replicas__ps=0),
    "worker_zero": spec(replicas__worker=0),
    "inputs_negative": spec(model__inputs=-5),
    "batch_negative": spec(training__batch_size=-1),
    "model_type_cnn": spec(model__type="cnn"),
    "optimizer_lion": spec(optimizer={"type": "lion"}),
    "device_tpu": spec(device="tpu"),
    "restart_lower": spec(run_policy={"restart_policy": "onfailure"}),
    "big": spec(name="big") .replace(b'"name": "big"', b'"name": "big", "pad": "' + b"x" * (2 << 20) + b'"'),

    # Admission: data outside the data roots (the Fashion-MNIST folder and the working
    # directory, where "link" points at /etc/passwd), sizes over the limits.
    "data_outside": spec(model__inputs=2, data={"format": "csv", "train": ["/etc/passwd"]}),
    "data_dotdot": spec(model__inputs=2, data={"format": "csv", "train": [
        "/usr/share/datasets/fashion-mnist/../../../../etc/passwd"]}),
    "data_symlink": spec(model__inputs=2, data={"format": "csv", "train": ["link"]}),
    "data_test_outside": spec(model={"type": "softmax", "inputs": 784, "outputs": 10}, data={
        "format": "idx",
        "train": ["/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                  "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"],
        "test": ["/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "/etc/hostname"]}),
    "model_huge": spec(model={"type": "mlp", "inputs": 65536, "hidden": [65536], "outputs": 10},
                       data={"format": "csv", "train": ["data.csv"]}),
    "steps_huge": spec(training__max_steps=2**63 - 1),
    "ps_many": spec(replicas__ps=1000),
    "node_memory_negative": b'{"id": "n-bad", "role": "ps", "address": "127.0.0.1:2302", "memory_bytes": -1}',
    "node_memory_string": b'{"id": "n-bad", "role": "ps", "address": "127.0.0.1:2302", "memory_bytes": "1G"}',

    "patch_unknown": b'{"replicaz": {"worker": 2}}',
    "patch_worker_zero": b'{"replicas": {"worker": 0}}',
    "patch_suspend_string": b'{"suspend": "yes"}',
    "patch_suspend": b'{"suspend": true}',

    "node_ok": b'{"id": "errs-worker-1", "role": "worker", "address": "127.0.0.1:2301", "version": "0.1.0"}',
    "node_bad_role": b'{"id": "n-bad", "role": "gpu", "address": "127.0.0.1:2302"}',
    "node_role_number": b'{"id": "n-bad", "role": 1, "address": "127.0.0.1:2302"}',
    "node_missing_id": b'{"role": "worker", "address": "127.0.0.1:2302"}',
    "node_empty_id": b'{"id": "", "role": "worker", "address": "127.0.0.1:2302"}',
    "node_unknown_field": b'{"id": "n-bad", "role": "worker", "address": "127.0.0.1:2302", "colour": "red"}',
    "node_malformed": b'{"id": "n-bad", "role": ',
    "hb_idle": b'{"state": "idle"}',
    "hb_bad_state": b'{"state": "sleeping"}',
    "hb_unknown_field": b'{"state": "idle", "colour": "red"}',
    "hb_malformed": b'{"state": idle}',
    "metrics_points_string": b'{"task": "worker-0", "points": "many"}',
    # Steps are integers from 0 to the job's max_steps (100): a double past 2^63 is refused,
    # never converted.
    "metrics_step_huge": b'{"task": "chief", "points": [{"step": 1e300, "time": 0}]}',
    "metrics_step_fraction": b'{"task": "worker-0", "evals": [{"step": 1.5, "time": 0}]}',
    "metrics_step_past_max": b'{"task": "chief", "points": [{"step": 101, "time": 0}]}',
    "metrics_rollback_huge": b'{"task": "chief", "rollbacks": [{"from": 1e300, "to": 1e300, "time": 0}]}',
    "metrics_rollback_past_max": b'{"task": "chief", "rollbacks": [{"from": 200, "to": 150, "time": 0}]}',
    # A Bayes-optimal AUC is an AUC: in [0, 1].
    "metrics_bayes_auc_range": b'{"task": "chief", "evals": [{"step": 1, "time": 0, "bayes_auc": 1.5}]}',
    "hb_exit_code_big": b'{"state": "failed", "exit_code": 300}',
    "hb_exit_code_huge": b'{"state": "failed", "exit_code": 1e300}',
    "hb_steps_huge": b'{"state": "succeeded", "result": {"steps": 1e300}}',
    "hb_incarnation_negative": b'{"state": "idle", "incarnation": -1}',
    "checkpoint_partial": b'{"step": 1}',
}
for name, data in bodies.items():
    with open(os.path.join(out, name + ".json"), "wb") as f:
        f.write(data)
PY
B=$WORK/b
# The coordinator's working directory is a data root: a link there to a file outside it
# must not let a job read that file; data.csv there is admissible.
ln -s /etc/passwd "$WORK/link"
printf '1,2,3\n' >"$WORK/data.csv"

# --- the happy path the table relies on -------------------------------------------------------
request POST /api/v1/jobs ok "$B/job.json"
[ "$code" = 201 ] || { cat "$WORK/body" >&2; fail "valid job: status $code, expected 201"; }
grep -qi '^location: /api/v1/jobs/errs' "$WORK/headers" || fail "201 without Location: /api/v1/jobs/errs"
[ "$(json_field "$WORK/body" 'd["name"]')" = errs ] || fail "created job's name"
request POST /api/v1/jobs ok "$B/job_same.json"
[ "$code" = 200 ] || { cat "$WORK/body" >&2; fail "same spec again: status $code, expected 200"; }
request POST /api/v1/jobs ok "$B/job_other.json"
[ "$code" = 409 ] || { cat "$WORK/body" >&2; fail "other spec, same name: status $code, expected 409"; }
case $ctype in application/problem+json*) ;; *) fail "409 with Content-Type '$ctype'" ;; esac
request GET /api/v1/jobs ok
[ "$code" = 200 ] || fail "list jobs: status $code"
[ "$(json_field "$WORK/body" '[j["name"] for j in d["items"]]')" = "['errs']" ] ||
  fail "after a retry and a conflict the list is not exactly one job: $(cat "$WORK/body")"
[ "$(json_field "$WORK/body" 'd["items"][0]["max_steps"]')" = 100 ] || fail "the conflict changed the job"
pass "create 201 + Location, same spec 200, other spec 409, one job"

request POST /api/v1/nodes ok "$B/node_ok.json"
[ "$code" = 201 ] || { cat "$WORK/body" >&2; fail "register node: status $code, expected 201"; }
request POST /api/v1/nodes ok "$B/node_ok.json"
[ "$code" = 200 ] || fail "register the same node again: status $code, expected 200"
request POST /api/v1/nodes/errs-worker-1/heartbeat ok "$B/hb_idle.json"
[ "$code" = 200 ] || fail "heartbeat of a registered node: status $code, expected 200"
pass "node registration 201 then 200, heartbeat 200"

# --- bad requests -----------------------------------------------------------------------------
# Columns: method, path, auth, body (a file under $B, or -), expected status (alternatives
# separated by "/" where api/rest.md allows either), what must name the problem:
#   ptr:/a/b   errors[] has that pointer
#   re:REGEX   detail, or an errors[] pointer or message, matches (case-insensitive)
#   allow:M,M  the Allow header lists these methods (405)
CASES=$(
  cat <<'EOF'
POST   /api/v1/jobs                          ok     malformed            400     re:expected|json|end of
POST   /api/v1/jobs                          ok     invalid_utf8         400     re:decode|utf
POST   /api/v1/jobs                          ok     trailing             400     re:end of file|trailing|garbage
POST   /api/v1/jobs                          ok     empty                400     re:expected|empty|body
POST   /api/v1/jobs                          ok     duplicate_key        400     re:duplicate
POST   /api/v1/jobs                          ok     deep                 400     re:nest|deep|depth
POST   /api/v1/jobs                          ok     top_array            400/422 re:object
POST   /api/v1/jobs                          ok     int_overflow         400/422 re:big|overflow|range|max_steps
POST   /api/v1/jobs                          ok     unknown_field        400     ptr:/extra
POST   /api/v1/jobs                          ok     unknown_nested       400     ptr:/training/foo
POST   /api/v1/jobs                          ok     batch_string         422     ptr:/training/batch_size
POST   /api/v1/jobs                          ok     model_string         422     ptr:/model
POST   /api/v1/jobs                          ok     name_upper           422     ptr:/name
POST   /api/v1/jobs                          ok     name_long            422     ptr:/name
POST   /api/v1/jobs                          ok     name_underscore      422     ptr:/name
POST   /api/v1/jobs                          ok     name_missing         422     ptr:/name
POST   /api/v1/jobs                          ok     ps_zero              422     ptr:/replicas/ps
POST   /api/v1/jobs                          ok     worker_zero          422     ptr:/replicas/worker
POST   /api/v1/jobs                          ok     inputs_negative      422     ptr:/model/inputs
POST   /api/v1/jobs                          ok     batch_negative       422     ptr:/training/batch_size
POST   /api/v1/jobs                          ok     model_type_cnn       422     ptr:/model/type
POST   /api/v1/jobs                          ok     optimizer_lion       422     ptr:/optimizer/type
POST   /api/v1/jobs                          ok     device_tpu           422     ptr:/device
POST   /api/v1/jobs                          ok     restart_lower        422     ptr:/run_policy/restart_policy
POST   /api/v1/jobs                          ok     data_outside         422     ptr:/data/train/0
POST   /api/v1/jobs                          ok     data_dotdot          422     ptr:/data/train/0
POST   /api/v1/jobs                          ok     data_symlink         422     ptr:/data/train/0
POST   /api/v1/jobs                          ok     data_test_outside    422     ptr:/data/test/1
POST   /api/v1/jobs                          ok     model_huge           422     ptr:/model
POST   /api/v1/jobs                          ok     steps_huge           422     ptr:/training/max_steps
POST   /api/v1/jobs                          ok     ps_many              422     ptr:/replicas/ps
POST   /api/v1/jobs                          ok     big                  413     re:1 ?MiB|1048576|large|big
POST   /api/v1/jobs                          ok     big:chunked          413     re:1 ?MiB|1048576|large|big
POST   /api/v1/jobs                          ok     job_fresh:text       415     re:Content-Type.*text/plain
POST   /api/v1/jobs                          ok     job_fresh:form       415     re:Content-Type.*x-www-form-urlencoded
POST   /api/v1/jobs                          ok     job_fresh:notype     415     re:Content-Type.*missing
PATCH  /api/v1/jobs/errs                     ok     patch_suspend:text   415     re:Content-Type
POST   /api/v1/nodes/errs-worker-1/heartbeat ok     hb_idle:form         415     re:Content-Type
POST   /api/v1/jobs/errs/cancel              ok     -:evil               403     re:origin
DELETE /api/v1/jobs/errs                     none   -:evil               403     re:origin
GET    /api/v1/jobs                          none   -                    401     re:token|auth
GET    /api/v1/jobs                          wrong  -                    401     re:token|auth
GET    /api/v1/jobs                          basic  -                    401     re:token|auth|bearer
POST   /api/v1/jobs                          none   job_fresh            401     re:token|auth
POST   /api/v1/nodes                         wrong  node_ok              401     re:token|auth
GET    /api/v1/events                        none   -                    401     re:token|auth
PUT    /api/v1/jobs                          ok     job_fresh            405     allow:GET,POST
GET    /api/v1/jobs/errs/cancel              ok     -                    405     allow:POST
POST   /api/v1/jobs/errs                     ok     job_fresh            405     allow:GET,PATCH,DELETE
DELETE /api/v1/nodes                         ok     -                    405     allow:GET,POST
GET    /api/v1/nodes/errs-worker-1/heartbeat ok     -                    405     allow:POST
GET    /api/v1/jobs/nope                     ok     -                    404     re:nope
DELETE /api/v1/jobs/nope                     ok     -                    404     re:nope
POST   /api/v1/jobs/nope/cancel              ok     -                    404     re:nope
PATCH  /api/v1/jobs/nope                     ok     patch_suspend        404     re:nope
GET    /api/v1/jobs/nope/tasks               ok     -                    404     re:nope
GET    /api/v1/nope                          ok     -                    404     re:nope|not found|route
POST   /api/v1/nodes/ghost/heartbeat         ok     hb_idle              404     re:ghost
DELETE /api/v1/nodes/ghost                   ok     -                    404     re:ghost
GET    /api/v1/jobs/errs/tf_config?type=gpu&index=0     ok -             400     re:type
GET    /api/v1/jobs/errs/tf_config?type=worker&index=x  ok -             400     re:index
GET    /api/v1/jobs/errs/tf_config?type=worker          ok -             400     re:index
GET    /api/v1/jobs/errs/tf_config?type=worker&index=5  ok -             404     re:worker|task|index
GET    /api/v1/jobs/errs/tf_config?type=worker&index=0  ok -             409     re:agent|created|assign
GET    /api/v1/jobs/errs/metrics?max_points=0           ok -             400     re:max_points
GET    /api/v1/jobs/errs/metrics?max_points=100001      ok -             400     re:max_points
GET    /api/v1/jobs/errs/metrics?since_step=-1          ok -             400     re:since_step
GET    /api/v1/jobs/errs/metrics?since_step=abc         ok -             400     re:since_step
GET    /api/v1/jobs/errs/events?since_id=x              ok -             400     re:since_id
PATCH  /api/v1/jobs/errs                     ok     patch_unknown        400     re:replicaz
PATCH  /api/v1/jobs/errs                     ok     malformed            400     re:expected|json|end of
PATCH  /api/v1/jobs/errs                     ok     patch_worker_zero    422     re:worker
PATCH  /api/v1/jobs/errs                     ok     patch_suspend_string 422     re:suspend
POST   /api/v1/nodes                         ok     node_bad_role        422     re:role
POST   /api/v1/nodes                         ok     node_role_number     422     re:role
POST   /api/v1/nodes                         ok     node_missing_id      422     re:\bid\b
POST   /api/v1/nodes                         ok     node_empty_id        422     re:\bid\b
POST   /api/v1/nodes                         ok     node_unknown_field   400     re:colour
POST   /api/v1/nodes                         ok     node_malformed       400     re:expected|json|end of
POST   /api/v1/nodes                         ok     node_memory_negative 422     re:memory_bytes
POST   /api/v1/nodes                         ok     node_memory_string   422     re:memory_bytes
POST   /api/v1/nodes/errs-worker-1/heartbeat ok     hb_bad_state         422     re:state
POST   /api/v1/nodes/errs-worker-1/heartbeat ok     hb_unknown_field     400     re:colour
POST   /api/v1/nodes/errs-worker-1/heartbeat ok     hb_malformed         400     re:expected|json|invalid
POST   /api/v1/jobs/errs/metrics             ok     metrics_points_string 422    re:points
POST   /api/v1/jobs/errs/metrics             ok     metrics_step_huge    422     ptr:/points/0/step
POST   /api/v1/jobs/errs/metrics             ok     metrics_step_fraction 422    ptr:/evals/0/step
POST   /api/v1/jobs/errs/metrics             ok     metrics_step_past_max 422    ptr:/points/0/step
POST   /api/v1/jobs/errs/metrics             ok     metrics_rollback_huge 422    ptr:/rollbacks/0/from
POST   /api/v1/jobs/errs/metrics             ok     metrics_rollback_past_max 422 ptr:/rollbacks/0/from
POST   /api/v1/jobs/errs/metrics             ok     metrics_bayes_auc_range 422   ptr:/evals/0/bayes_auc
POST   /api/v1/nodes/errs-worker-1/heartbeat ok     hb_exit_code_big     422     ptr:/exit_code
POST   /api/v1/nodes/errs-worker-1/heartbeat ok     hb_exit_code_huge    422     ptr:/exit_code
POST   /api/v1/nodes/errs-worker-1/heartbeat ok     hb_steps_huge        422     ptr:/result/steps
POST   /api/v1/nodes/errs-worker-1/heartbeat ok     hb_incarnation_negative 422  ptr:/incarnation
POST   /api/v1/jobs/errs/checkpoints         ok     checkpoint_partial   422     re:time|bytes|files
EOF
)

# The job and node tables, and every other table, as SQL text: the sqlite3 CLI reads the
# WAL, so this sees every committed change.
db_digest() {
  sqlite3 "$DB" .dump | sha256sum | cut -d' ' -f1
}
sqlite3 "$DB" .dump >"$WORK/before.sql"
before=$(db_digest)
grep -q 'errs-worker-1' "$WORK/before.sql" || fail "the dump does not show the registered node"

# Sends every request first and checks the answers afterwards in one pass, so that the
# table runs in about a second (the lease is 600 s all the same).
mkdir "$WORK/r"
n=0
while read -r method path auth body want expect; do
  [ -n "$method" ] || continue
  n=$((n + 1))
  extra=()
  file=-
  unset BODY_TYPE
  case $body in
    -:evil) extra=(-H 'Origin: http://evil.example') ;;
    -) ;;
    *:chunked)
      file=$B/${body%:chunked}.json
      extra=(-H 'Transfer-Encoding: chunked')
      ;;
    *:text) file=$B/${body%:text}.json BODY_TYPE=text/plain ;;
    *:form) file=$B/${body%:form}.json BODY_TYPE=application/x-www-form-urlencoded ;;
    *:notype) file=$B/${body%:notype}.json BODY_TYPE= ;;
    *) file=$B/$body.json ;;
  esac
  request "$method" "$path" "$auth" "$file" "${extra[@]}"
  unset BODY_TYPE
  mv "$WORK/body" "$WORK/r/$n.body"
  mv "$WORK/headers" "$WORK/r/$n.headers"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$method $path [$auth, $body]" "$code" "$ctype" \
    "$want" "$expect" >>"$WORK/r/index.tsv"
done <<<"$CASES"

# Requests curl will not send: raw HTTP/1.1 on a socket. Each answer must come at once (the
# client sends no body before it), with "Connection: close", and never "100 Continue".
python3 - "$PORT" "$TOKEN" <<'PY' || fail "raw-socket framing and size checks"
import json, socket, sys, time

port, token = int(sys.argv[1]), sys.argv[2]
head = ("POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n" % token)

def exchange(headers, body=b""):
    """Sends the head (and body); returns (seconds to the answer, the whole answer)."""
    s = socket.create_connection(("127.0.0.1", port))
    t0 = time.monotonic()
    s.sendall((head + headers + "\r\n").encode() + body)
    s.settimeout(5)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    s.close()
    return time.monotonic() - t0, data

cases = [
    ("2 GB body announced with Expect: 100-continue",
     "Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 2000000000\r\n",
     b"", 413, "larger than"),
    ("text/plain body announced with Expect: 100-continue",
     "Content-Type: text/plain\r\nExpect: 100-continue\r\nContent-Length: 100\r\n",
     b"", 415, "Content-Type"),
    ("two different Content-Length headers",
     "Content-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 12\r\n",
     b'{}', 400, "Content-Length"),
    ("Transfer-Encoding and Content-Length",
     "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nContent-Length: 7\r\n",
     b"2\r\n{}\r\n0\r\n\r\n", 400, "Transfer-Encoding"),
]
failed = 0
for what, headers, body, want, word in cases:
    took, data = exchange(headers, body)
    text = data.decode("latin-1")
    head_end = text.find("\r\n\r\n")
    status_line = text.split("\r\n", 1)[0]
    problems = []
    if "100 Continue" in text:
        problems.append("sent 100 Continue")
    if not status_line.startswith("HTTP/1.1 %d " % want):
        problems.append("status line %r, expected %d" % (status_line, want))
    hdrs = text[:head_end].lower()
    if "connection: close" not in hdrs:
        problems.append("no Connection: close")
    if "content-type: application/problem+json" not in hdrs:
        problems.append("not problem+json")
    try:
        doc = json.loads(text[head_end + 4:])
        if doc.get("status") != want or word.lower() not in doc.get("detail", "").lower():
            problems.append("problem %r does not name %r" % (doc, word))
    except ValueError:
        problems.append("body is not JSON: %r" % text[head_end + 4:][:200])
    if problems:
        print("FAIL: %s: %s" % (what, "; ".join(problems)), file=sys.stderr)
        failed += 1
    else:
        # The figure, for the record; the pass/fail above needs no clock.
        print("ok: %s -> %d in %.1f ms, no 100 Continue" % (what, want, took * 1000))
sys.exit(failed)
PY
after=$(db_digest)

failures=0
python3 - "$WORK/r" <<'PY' || failures=$?
import json, re, sys

rdir = sys.argv[1]
failed = 0
for line in open(f"{rdir}/index.tsv", encoding="utf-8"):
    n, what, code, ctype, want, expect = line.rstrip("\n").split("\t")[:6]
    problems = []
    if code not in want.split("/"):
        problems.append(f"status {code}, expected {want}")
    if ctype.split(";")[0].strip().lower() != "application/problem+json":
        problems.append(f"Content-Type {ctype!r}, expected application/problem+json")
    raw = open(f"{rdir}/{n}.body", "rb").read()
    headers = open(f"{rdir}/{n}.headers", encoding="latin-1").read().splitlines()
    try:
        d = json.loads(raw)
    except ValueError:
        d = None
        problems.append(f"body is not JSON: {raw[:200]!r}")
    if isinstance(d, dict):
        for key, kind in (("type", str), ("title", str), ("status", int), ("detail", str)):
            if not isinstance(d.get(key), kind):
                problems.append(f"no {key} ({kind.__name__}) in the problem")
        if d.get("status") != int(code):
            problems.append(f"problem status {d.get('status')} differs from the HTTP status")
        errors = d.get("errors", [])
        if not isinstance(errors, list) or not all(
                isinstance(e, dict) and isinstance(e.get("pointer"), str) and
                isinstance(e.get("message"), str) for e in errors):
            problems.append("errors[] is not a list of {pointer, message}")
            errors = []
        kind, _, arg = expect.partition(":")
        if kind == "ptr":
            if arg not in [e["pointer"] for e in errors]:
                problems.append(f"no errors[] entry with pointer {arg}")
        elif kind == "re":
            texts = [str(d.get("detail", ""))] + [e["pointer"] + " " + e["message"] for e in errors]
            if not any(re.search(arg, t, re.I) for t in texts):
                problems.append(f"detail does not match /{arg}/")
        elif kind == "allow":
            allow = [h.split(":", 1)[1] for h in headers if h.lower().startswith("allow:")]
            listed = {m.strip().upper() for a in allow for m in a.split(",")}
            missing = set(arg.split(",")) - listed
            if not allow or missing:
                problems.append(f"Allow header {allow!r} lacks {sorted(missing)}")
        if code == "401" and not any(h.lower().startswith("www-authenticate:") for h in headers):
            problems.append("401 without WWW-Authenticate")
    if problems:
        detail = d.get("detail") if isinstance(d, dict) else None
        errors = d.get("errors") if isinstance(d, dict) else None
        print(f"FAIL: {what}: " + "; ".join(problems) + f" (detail: {detail!r}, errors: {errors!r})",
              file=sys.stderr)
        failed += 1
    else:
        print(f"ok: {what} -> {code}")
sys.exit(min(failed, 125))
PY

if [ "$before" != "$after" ]; then
  sqlite3 "$DB" .dump >"$WORK/after.sql"
  diff "$WORK/before.sql" "$WORK/after.sql" >&2 || true
  fail "bad requests changed the database"
fi
[ "$failures" = 0 ] || fail "$failures of $n bad requests were answered wrongly"
[ "$n" -ge 25 ] || fail "only $n cases ran"
kill -0 "$COORD_PID" 2>/dev/null || fail "the coordinator died"
pass "$n bad requests answered with problem+json naming the problem; database unchanged"
