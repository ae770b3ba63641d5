#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 300
# The job actions of the command line against `psflow up` (1 ps, 3 worker agents: one spare):
# a running sync softmax job of 2 workers, paced by a push delay, goes through `psflow scale
# --workers 3 --wait` (the API then shows 3 workers running), `psflow suspend --wait` (phase
# Suspended, every agent idle), `psflow resume --wait` (Running again), `psflow scale
# --workers 2 -o json` (the PATCH answer) and `psflow delete` (then `psflow get` exits 1 and
# every agent is idle). Usage errors exit 64 before any request (no --workers/--ps; --workers 0
# is refused by the client's own range check), an unknown job 1 with "no job named", an
# unreachable coordinator 69. Then `resume --wait` rides out a coordinator restart and ends
# with exit 1 when the job is cancelled. --ps is not exercised here (test_scale_ps.sh).
source "$(dirname "$0")/lib.sh"

unset PSFLOW_TOKEN PSFLOW_TOKEN_FILE PSFLOW_WORKERS PSFLOW_PS PSFLOW_WAIT PSFLOW_OUTPUT
NAME=cli-actions
P="$PSFLOW_BIN"

# Every worker agent waits 20 ms before each push: the 20000 steps last far longer than the
# test, which deletes the job once done with it.
export PSFLOW_PUSH_DELAY_MS=20
up_start --ps 1 --workers 3
export PSFLOW_COORDINATOR=$URL

python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$NAME" >"$WORK/job.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = sys.argv[2]
d["replicas"] = {"ps": 1, "worker": 2}
d["training"].update(max_steps=20000, batch_size=50, eval_every_steps=0)
d["training"].pop("replicas_to_aggregate", None)  # every worker's gradient, as many as there are
d["checkpoint"] = {"every_steps": 200, "keep": 2}
json.dump(d, sys.stdout)
PY

# running ROLE N: the API shows exactly N tasks of ROLE, all Running, and the job Running
# (what the job list summarises as replicas.worker ready == desired == N).
running() {
  [ "$(jget "$URL/api/v1/jobs/$NAME/tasks" "sorted(t['state'] for t in d['items'] if t['type']=='$1') == ['Running'] * $2")" = True ] &&
    [ "$(job_phase "$NAME")" = Running ]
}
agents_idle() { # every agent of psflow up idle: no job holds one
  [ "$(jget "$URL/api/v1/nodes" "all(n['state'] == 'idle' for n in d['items']) and len(d['items']) == 4")" = True ]
}
step_over() { [ "$(jget "$URL/api/v1/jobs/$NAME" "int(d['status']['global_step'] > $1)")" = 1 ]; }

# --- usage and refusals, answered without a job -----------------------------------------------
expect_exit 64 "$P" scale "$NAME"
grep -q -- "--workers N, --ps N or both" "$WORK/stderr" || fail "scale without a count: $(cat "$WORK/stderr")"
expect_exit 64 "$P" scale "$NAME" --workers 0
grep -q -- "--workers must be an integer in \[1, " "$WORK/stderr" || fail "--workers 0: $(cat "$WORK/stderr")"
expect_exit 64 "$P" scale --workers 2
expect_exit 64 "$P" suspend
expect_exit 64 "$P" delete a b
expect_exit 64 "$P" resume "$NAME" -o yaml
for cmd in "scale nope --workers 2" "suspend nope" "resume nope" "delete nope" "scale nope --ps 2"; do
  # shellcheck disable=SC2086 # the words of cmd are the arguments
  expect_exit 1 "$P" $cmd
  grep -q "psflow ${cmd%% *}: no job named 'nope'" "$WORK/stderr" ||
    fail "$cmd: no clear message: $(cat "$WORK/stderr")"
done
expect_exit 69 "$P" suspend "$NAME" --coordinator "http://127.0.0.1:$(free_ports 1)"
grep -q "coordinator unreachable" "$WORK/stderr" || fail "unreachable: $(cat "$WORK/stderr")"
pass "usage errors exit 64 (no count, --workers 0: the client's range), an unknown job 1 with 'no job named', an unreachable coordinator 69"

# --- a running job ----------------------------------------------------------------------------
"$P" submit "$WORK/job.json" >"$WORK/submit.out" || fail "submit: $(cat "$WORK/submit.out")"
wait_until 120 "$NAME running with 2 workers" running worker 2
wait_until 120 "$NAME past step 50" step_over 50

expect_exit 0 timeout 180 "$P" scale "$NAME" --workers 3 --wait
grep -qx "job $NAME: workers 2 -> 3 (Running)" "$WORK/stdout" ||
  fail "scale --wait printed: $(cat "$WORK/stdout")"
grep -q "psflow scale: job $NAME: workers 2/3 ready (Running)" "$WORK/stderr" ||
  fail "scale --wait did not say what it waits for: $(cat "$WORK/stderr")"
running worker 3 || fail "after scale --wait the API does not show 3 workers running"
[ "$(jget "$URL/api/v1/jobs" "[j['replicas']['worker'] for j in d['items'] if j['name'] == '$NAME'][0]")" = \
  "{'ready': 3, 'desired': 3}" ] || fail "the job list does not show 3 of 3 workers ready"
pass "scale --workers 3 --wait: '$(cat "$WORK/stdout")', the API shows 3 of 3 workers ready"

expect_exit 0 timeout 120 "$P" suspend "$NAME" --wait
grep -qx "job $NAME: suspended (Suspended)" "$WORK/stdout" || fail "suspend --wait printed: $(cat "$WORK/stdout")"
[ "$(job_phase "$NAME")" = Suspended ] || fail "after suspend --wait the job is $(job_phase "$NAME")"
wait_until 60 "every agent idle after the suspension" agents_idle
expect_exit 0 "$P" suspend "$NAME" # again: nothing changes
pass "suspend --wait: phase Suspended, every agent released"

expect_exit 0 timeout 180 "$P" resume "$NAME" --wait
grep -qx "job $NAME: resumed (Running)" "$WORK/stdout" || fail "resume --wait printed: $(cat "$WORK/stdout")"
[ "$(job_phase "$NAME")" = Running ] || fail "after resume --wait the job is $(job_phase "$NAME")"
pass "resume --wait: Running again"

expect_exit 0 "$P" scale "$NAME" --workers 2 -o json
python3 - "$WORK/stdout" "$NAME" <<'PY' || fail "scale -o json: $(cat "$WORK/stdout")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["name"] == sys.argv[2], d["name"]
assert d["spec"]["replicas"]["worker"] == 2, d["spec"]["replicas"]
assert d["status"]["phase"] in ("Running", "Restarting", "Created"), d["status"]["phase"]
PY
wait_until 120 "$NAME back to 2 workers" running worker 2
pass "scale --workers 2 -o json: the job as the PATCH answers it (spec.replicas.worker 2)"

expect_exit 0 "$P" delete "$NAME" --wait
grep -qx "job $NAME deleted (checkpoints kept)" "$WORK/stdout" || fail "delete printed: $(cat "$WORK/stdout")"
expect_exit 1 "$P" get "$NAME"
grep -q "no job named '$NAME'" "$WORK/stderr" || fail "get after delete: $(cat "$WORK/stderr")"
wait_until 60 "every agent idle after the deletion" agents_idle
compgen -G "$WORK/up/checkpoints/$NAME/step-*" >/dev/null || fail "the checkpoints of $NAME are gone"
expect_exit 1 "$P" delete "$NAME"
pass "delete --wait: get exits 1, every agent idle, checkpoints kept; a second delete exits 1"

up_stop
pass "psflow up stopped cleanly"

# --- --wait rides out a coordinator restart -----------------------------------------------------
# A coordinator without agents: the job waits for them (Created), so `resume --wait` waits for
# Running; the coordinator stops and starts again on the same database meanwhile, then the job
# is cancelled: the wait says once that the coordinator is unreachable and ends with exit 1.
read -r PORT <<<"$(free_ports 1)"
export PSFLOW_COORDINATOR="http://127.0.0.1:$PORT"
start_coordinator() {
  "$P" coordinator --listen "127.0.0.1:$PORT" --db "$WORK/db" >>"$WORK/coordinator.log" 2>&1 &
  COORD=$!
  wait_until 30 "the coordinator ready" "$P" health
}
start_coordinator
"$P" submit "$WORK/job.json" >/dev/null || fail "submit to the lone coordinator"
"$P" resume "$NAME" --wait >"$WORK/resume.out" 2>"$WORK/resume.err" &
WAITER=$!
wait_until 30 "resume --wait waiting" grep -q "waiting for phase Running (Created)" "$WORK/resume.err"
kill "$COORD"
wait_pid "$COORD" 30 || true
wait_until 30 "resume --wait noticing the outage" grep -q "coordinator unreachable, retrying" "$WORK/resume.err"
start_coordinator
"$P" cancel "$NAME" >/dev/null || fail "cancel"
rc=0
wait_pid "$WAITER" 60 || rc=$?
[ "$rc" = 1 ] || fail "resume --wait exited $rc, expected 1: $(cat "$WORK/resume.err")"
grep -qx "job $NAME: Failed (Cancelled: cancelled by request)" "$WORK/resume.out" ||
  fail "resume --wait printed: $(cat "$WORK/resume.out")"
[ "$(grep -c "coordinator unreachable" "$WORK/resume.err")" = 1 ] ||
  fail "the outage was not said exactly once: $(cat "$WORK/resume.err")"
kill "$COORD"
wait_pid "$COORD" 30 || true
pass "resume --wait rode out a coordinator restart (said once) and exited 1 when the job was cancelled"

# submit --set: the spec changed before it is sent; a malformed --set changes nothing.
start_coordinator
expect_exit 64 "$P" submit "$WORK/job.json" --set replicas.worker
grep -q "expected KEY=VALUE" "$WORK/stderr" || fail "--set without '=': $(cat "$WORK/stderr")"
expect_exit 64 "$P" submit "$WORK/job.json" --set name.first=x
grep -q "name is not an object" "$WORK/stderr" || fail "--set through a string: $(cat "$WORK/stderr")"
echo 'not json' >"$WORK/bad.json"
expect_exit 65 "$P" submit "$WORK/bad.json" --set name=x
expect_exit 65 "$P" submit "$WORK/job.json" --set replicas.worker=0
grep -q "/replicas/worker" "$WORK/stderr" || fail "--set replicas.worker=0: $(cat "$WORK/stderr")"
expect_exit 0 "$P" submit "$WORK/job.json" --set name=set-copy --set replicas.worker=3 --set 'training.seed=7'
curl -sf "http://127.0.0.1:$PORT/api/v1/jobs/set-copy" -o "$WORK/set-copy.json" || fail "no job set-copy"
[ "$(json_field "$WORK/set-copy.json" '(d["spec"]["replicas"]["worker"], d["spec"]["training"]["seed"])')" = "(3, 7)" ] ||
  fail "--set did not change the spec: $(cat "$WORK/set-copy.json")"
"$P" delete set-copy >/dev/null || fail "delete set-copy"
kill "$COORD"
wait_pid "$COORD" 30 || true
pass "submit --set: name, replicas.worker and training.seed changed; no '=' and a path through a string 64, not JSON 65, an invalid value 65 with its pointer"
