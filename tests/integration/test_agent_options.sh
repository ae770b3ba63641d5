#!/usr/bin/env bash
# labels: sanitizer-only
# A managed agent's task options reach the tasks it runs: a worker agent started with
# --retry-seconds 2 gives up on a ps killed with -9 about 2 s later (the default, 120 s, is
# longer than this test waits, and the coordinator's lease is set longer still, so nothing
# else ends the task meanwhile). --output, which only static mode has, is refused.
source "$(dirname "$0")/lib.sh"

expect_exit 64 "$PSFLOW_BIN" worker --coordinator http://127.0.0.1:1 --output json
grep -q -- "--output is for static mode" "$WORK/stderr" || fail "no reason given: $(cat "$WORK/stderr")"
expect_exit 64 "$PSFLOW_BIN" worker --coordinator http://127.0.0.1:1 --retry-seconds 0
expect_exit 64 "$PSFLOW_BIN" ps --coordinator http://127.0.0.1:1 --exit-grace -1
pass "managed agents check their task options: --output refused, bad values are usage errors"

read -r PORT PS_PORT WORKER_PORT <<<"$(free_ports 3)"
URL=http://127.0.0.1:$PORT
PSFLOW_LEASE_SECONDS=120 "$PSFLOW_BIN" coordinator --listen "127.0.0.1:$PORT" \
  --db "$WORK/psflow.db" 2>"$WORK/coordinator.log" &
COORD=$!
"$PSFLOW_BIN" ps --coordinator "$URL" --node-id opt-ps --advertise "127.0.0.1:$PS_PORT" \
  --listen "127.0.0.1:$PS_PORT" --checkpoint-dir "$WORK/ckpt" --exit-grace 1 \
  2>"$WORK/ps.log" &
PS=$!
"$PSFLOW_BIN" worker --coordinator "$URL" --node-id opt-worker \
  --advertise "127.0.0.1:$WORKER_PORT" --checkpoint-dir "$WORK/ckpt" --retry-seconds 2 \
  2>"$WORK/worker.log" &
WORKER=$!
trap 'rc=$?; kill -9 "$COORD" "$PS" "$WORKER" 2>/dev/null; wait 2>/dev/null; (exit $rc); cleanup' EXIT

registered() { [ "$(jget "$URL/api/v1/nodes" 'len(d["items"])')" = 2 ]; }
wait_until 30 "both agents registered" registered

python3 - "$WORK/job.json" <<'PY'
import json, sys
json.dump({"name": "opts", "replicas": {"ps": 1, "worker": 1},
           "model": {"type": "linear", "inputs": 1},
           "data": {"format": "synthetic_linear", "w": 2, "b": 10, "noise": 0.1, "n": 1000},
           "optimizer": {"type": "sgd", "learning_rate": 0.1},
           "training": {"batch_size": 10, "max_steps": 100000000, "mode": "async"},
           "checkpoint": {"every_steps": 0}}, open(sys.argv[1], "w"))
PY
code=$(curl -s -o "$WORK/created.json" -w '%{http_code}' -X POST \
  -H 'Content-Type: application/json' --data-binary @"$WORK/job.json" "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "submit: $code $(cat "$WORK/created.json")"
step_over() { [ "$(jget "$URL/api/v1/jobs/opts" "int(d['status']['global_step'] > $1)")" = 1 ]; }
wait_until 60 "global step past 20" step_over 20

kill -9 "$PS"
killed=$SECONDS
gave_up() { grep -q "cannot reach ps 0" "$WORK/worker.log"; }
wait_until 60 "the worker agent to give up on ps 0" gave_up
took=$((SECONDS - killed))
pass "the worker agent gave up on the killed ps after ${took} s (--retry-seconds 2; the default is 120)"
