#!/usr/bin/env bash
# labels: sanitizer-only
# The REST clients (psflow health, submit, list, get, watch, cancel, tfconfig) against a real
# `psflow coordinator` without agents: what they print and the exit codes scripts rely on
# (0 ok, 1 failed job or other 4xx, 65 spec rejected, 66 unreadable file, 69 coordinator
# unreachable, 77 token missing or refused), and that `submit --wait` and `watch` carry on
# across a coordinator restart.
# labels: integration
source "$(dirname "$0")/lib.sh"

unset PSFLOW_TOKEN PSFLOW_TOKEN_FILE
read -r PORT <<<"$(free_ports 1)"
export PSFLOW_COORDINATOR="http://127.0.0.1:$PORT"
P="$PSFLOW_BIN"
COORD=""
BACKGROUND=()

stop_clients() { # then lib.sh's cleanup: the logs on failure, sanitizer reports, $WORK
  local rc=$?
  for pid in "${BACKGROUND[@]}" $COORD; do
    kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  (exit $rc)
  cleanup
}
trap stop_clients EXIT

# wait_for SECONDS WHAT CMD...: polls CMD every 0.1 s until it succeeds.
wait_for() {
  local limit=$1 what=$2 tries=0
  shift 2
  until "$@" >/dev/null 2>&1; do
    tries=$((tries + 1))
    [ "$tries" -lt $((limit * 10)) ] || fail "no $what after ${limit}s"
    sleep 0.1
  done
}

# start_coordinator [VAR=VALUE...]: starts the coordinator with that environment and waits
# until `psflow health` says it is ready.
start_coordinator() {
  env "$@" "$P" coordinator --listen "127.0.0.1:$PORT" --db "$WORK/db" >>"$WORK/coordinator.log" 2>&1 &
  COORD=$!
  local tries=0
  until "$P" health >/dev/null 2>&1; do
    kill -0 "$COORD" 2>/dev/null || { cat "$WORK/coordinator.log" >&2; fail "coordinator exited"; }
    tries=$((tries + 1))
    [ "$tries" -lt 200 ] || fail "coordinator not ready after 20s"
    sleep 0.1
  done
}

stop_coordinator() {
  kill "$COORD"
  wait_pid "$COORD" 20 || true
  COORD=""
}

# spec NAME [PYTHON]: writes $WORK/NAME.json, a small valid job, after running PYTHON on
# the dict `d` (to break or change it).
spec() {
  python3 - "$WORK/$1.json" "$1" "${2:-pass}" <<'PY'
import json, sys
d = {"name": sys.argv[2], "replicas": {"ps": 1, "worker": 2},
     "model": {"type": "linear", "inputs": 1},
     "data": {"format": "synthetic_linear", "w": 2, "b": 10, "noise": 0.1, "n": 1000},
     "optimizer": {"type": "sgd", "learning_rate": 0.5},
     "training": {"batch_size": 10, "max_steps": 500}}
exec(sys.argv[3])
json.dump(d, open(sys.argv[1], "w"))
PY
}

contains() {
  grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "$1 lacks '$2'"; }
}

# --- health: 69 when nothing listens, and quickly when the peer never answers ------------
expect_exit 69 "$P" health
contains "$WORK/stderr" "unreachable"
python3 - "$WORK/silent.port" <<'PY' &
import os, socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)  # completes handshakes but never answers
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
PY
BACKGROUND+=("$!")
wait_for 10 "silent listener" test -s "$WORK/silent.port"
t0=$(date +%s.%N)
expect_exit 69 "$P" health --coordinator "127.0.0.1:$(cat "$WORK/silent.port")"
elapsed=$(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$(date +%s.%N)")
# health gives up after 2 s; the peer stays silent for 60 s. The bound only tells "gave up"
# from "waited for the peer", with room for a loaded machine under the sanitizers.
in_range "$elapsed" 0 30 || fail "psflow health took ${elapsed}s against a silent peer"
pass "health: 69 when down, gave up on a silent peer after ${elapsed}s"

start_coordinator
expect_exit 0 "$P" health
[ "$(cat "$WORK/stdout")" = ok ] || fail "health printed '$(cat "$WORK/stdout")'"
pass "health: ok"

# --- submit -------------------------------------------------------------------------------
spec alpha
expect_exit 0 "$P" submit "$WORK/alpha.json"
[ "$(cat "$WORK/stdout")" = "job alpha created" ] || fail "submit printed '$(cat "$WORK/stdout")'"
expect_exit 0 "$P" submit "$WORK/alpha.json"
[ "$(cat "$WORK/stdout")" = "job alpha exists (same spec)" ] || fail "resubmit printed '$(cat "$WORK/stdout")'"
spec alpha-other 'd["name"] = "alpha"; d["training"]["max_steps"] = 600'
expect_exit 1 "$P" submit "$WORK/alpha-other.json"
contains "$WORK/stderr" "another spec"
pass "submit: 201 created, same spec again exists, other spec refused"

spec bad-batch 'd["training"]["batch_size"] = 0'
expect_exit 65 "$P" submit "$WORK/bad-batch.json"
contains "$WORK/stderr" "  /training/batch_size: "
spec bad-field 'd["colour"] = "blue"'
expect_exit 65 "$P" submit "$WORK/bad-field.json"
contains "$WORK/stderr" "/colour"
printf '{"name": ' >"$WORK/truncated.json"
expect_exit 65 "$P" submit "$WORK/truncated.json"
expect_exit 66 "$P" submit "$WORK/missing.json"
contains "$WORK/stderr" "missing.json"
expect_exit 64 "$P" submit
pass "submit: rejected specs exit 65 with the JSON pointer, unreadable file 66"

# --- list and get -------------------------------------------------------------------------
expect_exit 0 "$P" list
contains "$WORK/stdout" "NAME"
head -1 "$WORK/stdout" | grep -Eq '^NAME +PHASE +STEP +LOSS +ACCURACY +WORKERS +PS +AGE$' ||
  fail "list header: $(head -1 "$WORK/stdout")"
grep -Eq '^alpha +Created +0/500 +- +- +0/2 +0/1 +[0-9]+[smhd]$' "$WORK/stdout" ||
  { cat "$WORK/stdout" >&2; fail "list row of alpha"; }
expect_exit 0 "$P" list -o json
[ "$(json_field "$WORK/stdout" '[i["name"] for i in d["items"]]')" = "['alpha']" ] ||
  fail "list -o json: $(cat "$WORK/stdout")"

expect_exit 0 "$P" get alpha
contains "$WORK/stdout" "Phase:       Created"
contains "$WORK/stdout" "waiting for agents"
contains "$WORK/stdout" "WaitingForAgents"
contains "$WORK/stdout" "worker-1"
contains "$WORK/stdout" "Queue:       default, position 1, priority 0, waiting: "
expect_exit 0 "$P" get alpha -o json
[ "$(json_field "$WORK/stdout" 'd["status"]["phase"]')" = Created ] || fail "get -o json phase"
[ "$(json_field "$WORK/stdout" 'd["spec"]["training"]["max_steps"]')" = 500 ] || fail "get -o json spec"
expect_exit 1 "$P" get nope
[ "$(cat "$WORK/stderr")" = "psflow get: no job named 'nope'" ] || fail "get nope: $(cat "$WORK/stderr")"
expect_exit 1 "$P" cancel nope
contains "$WORK/stderr" "no job named 'nope'"
pass "list and get, text and -o json; unknown job exits 1"

# --- tfconfig without agents --------------------------------------------------------------
expect_exit 1 "$P" tfconfig alpha worker 0
contains "$WORK/stderr" "no TF_CONFIG yet"
expect_exit 1 "$P" tfconfig nope worker 0
expect_exit 64 "$P" tfconfig alpha worker first
pass "tfconfig: a job without agents has no TF_CONFIG yet (exit 1)"

# --- submit --wait and watch, across a coordinator restart ----------------------------------
# --since-id 0 replays from the first event, so watch sees alpha's whatever the timing.
"$P" watch --since-id 0 >"$WORK/watch.out" 2>"$WORK/watch.err" &
WATCH=$!
BACKGROUND+=("$WATCH")
wait_for 10 "alpha in watch output" grep -Eq ' alpha +job +Created' "$WORK/watch.out"
spec beta
"$P" submit "$WORK/beta.json" --wait >"$WORK/wait.out" 2>"$WORK/wait.err" &
WAIT=$!
BACKGROUND+=("$WAIT")
wait_for 10 "beta in watch output" grep -Eq ' beta +job +Created' "$WORK/watch.out"
wait_for 10 "progress line of beta" grep -q '^beta  Created' "$WORK/wait.err"

stop_coordinator
wait_for 15 "outage notice from submit --wait" grep -q "coordinator unreachable, retrying" "$WORK/wait.err"
wait_for 15 "outage notice from watch" grep -q "coordinator unreachable, retrying" "$WORK/watch.err"
kill -0 "$WAIT" 2>/dev/null || fail "submit --wait gave up while the coordinator was down"
start_coordinator

expect_exit 0 "$P" cancel beta
contains "$WORK/stdout" "job beta Failed (Cancelled)"
wait_pid "$WAIT" 30 && fail "submit --wait exited 0 for a cancelled job" || rc=$?
[ "$rc" = 1 ] || { cat "$WORK/wait.err" >&2; fail "submit --wait exited $rc, expected 1"; }
grep -q '^beta: Failed, step 0/500, Cancelled' "$WORK/wait.out" ||
  { cat "$WORK/wait.out" "$WORK/wait.err" >&2; fail "submit --wait result line"; }
[ "$(grep -c "coordinator unreachable" "$WORK/wait.err")" = 1 ] || fail "outage said more than once"
wait_for 15 "beta Failed in watch output" grep -Eq ' beta +job +Failed' "$WORK/watch.out"
kill "$WATCH"
pass "submit --wait and watch followed beta across a coordinator restart to Failed"

expect_exit 0 "$P" get alpha -o json
[ "$(json_field "$WORK/stdout" 'd["status"]["phase"]')" = Created ] || fail "alpha after restart"
expect_exit 0 "$P" cancel alpha
expect_exit 1 "$P" submit "$WORK/alpha.json" --wait
contains "$WORK/stdout" "alpha: Failed"
pass "cancel: phase Failed; submit --wait of a finished job returns at once"

# --- token --------------------------------------------------------------------------------
stop_coordinator
start_coordinator PSFLOW_TOKEN=s3cret
expect_exit 77 "$P" list
contains "$WORK/stderr" "PSFLOW_TOKEN"
PSFLOW_TOKEN=wrong expect_exit 77 "$P" get alpha
PSFLOW_TOKEN=s3cret expect_exit 0 "$P" list
contains "$WORK/stdout" "alpha"
printf 's3cret\n' >"$WORK/token"
PSFLOW_TOKEN_FILE="$WORK/token" expect_exit 0 "$P" get alpha
PSFLOW_TOKEN_FILE="$WORK/no-token" expect_exit 66 "$P" list
expect_exit 0 "$P" get alpha --token-file "$WORK/token"
PSFLOW_TOKEN=wrong expect_exit 0 "$P" list --token-file="$WORK/token" # the flag wins
PSFLOW_TOKEN=s3cret expect_exit 66 "$P" list --token-file "$WORK/no-token"
contains "$WORK/stderr" "no-token"
expect_exit 77 "$P" submit "$WORK/alpha.json"
expect_exit 0 "$P" health
pass "token: 77 without or with a wrong one, ok with PSFLOW_TOKEN, PSFLOW_TOKEN_FILE or --token-file"

stop_coordinator
expect_exit 69 "$P" health
expect_exit 69 "$P" list
pass "after the coordinator stopped: health and list exit 69"
