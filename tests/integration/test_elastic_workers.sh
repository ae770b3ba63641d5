#!/usr/bin/env bash
# labels: slow release-only
# timeout: 600
# Managed workers that come and go without a gang restart, against `psflow up` (a real
# coordinator with its SQLite file and real agents on 127.0.0.1), one async and one sync job:
# kill -9 of the agent running worker 1 mid-training -> its lease expires, worker 1 is
# replaced alone on a spare worker agent (event TaskReplaced) while the ps and the chief carry
# on; then the same for worker 0, the chief (async), whose replacement takes up its
# checkpoints and ends the job: generation stays 1, no restart, no ps restores a checkpoint, the global step sampled
# from the API never goes back, and the job succeeds with the example's accuracy target.
# The jobs are short (1500 async steps, 1000 sync) and paced by a push delay rather than by
# the CPU (about 40 s each), in both the release and the sanitizer build.
source "$(dirname "$0")/lib.sh"

spec() { # NAME MODE STEPS -> a softmax job on Fashion-MNIST, 1 ps + 2 workers
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$@" <<'PY'
import json, sys
src, name, mode, steps = sys.argv[1:5]
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": 1, "worker": 2}
d["training"].update(max_steps=int(steps), mode=mode, batch_size=50, eval_every_steps=0)
if mode == "sync":
    d["training"]["replicas_to_aggregate"] = 2
else:
    d["training"].pop("replicas_to_aggregate", None)
d["checkpoint"] = {"every_steps": 500, "keep": 3}
json.dump(d, sys.stdout)
PY
}
agent_pid() { pgrep -f -- "--coordinator $URL --node-id $1 " | head -1; }
step_over() { [ "$(jget "$URL/api/v1/jobs/$1" "int(d['status']['global_step'] > $2)")" = 1 ]; }

export PSFLOW_LEASE_SECONDS=3 # the coordinator (a child of psflow up) inherits it
# Every worker agent (psflow up's and the spares) waits 20 ms before each push (the worker's
# testing option --push-delay-ms, through its environment twin), so that a job lasts long
# enough for a lease to expire and a replacement to join, however fast the machine: the lone
# async worker left after a kill (before half the steps, checked) needs more than 750 x 20 ms
# = 15 s for the steps still to go, about 1100 of them (a replacement takes about 5 s: the
# 3 s lease, a start and the data), and a job stays wall-clock-bound, not CPU-bound, on a
# loaded machine or under the sanitizers.
export PSFLOW_PUSH_DELAY_MS=20
up_start --ps 1 --workers 2
spare_port=$(free_ports 1)
"$PSFLOW_BIN" worker --coordinator "$URL" --node-id spare-worker --advertise "127.0.0.1:$spare_port" \
  --checkpoint-dir "$WORK/up/checkpoints" 2>"$WORK/spare-worker.log" &
SPARE=$!
wait_until 20 "spare worker registered" jget "$URL/api/v1/nodes/spare-worker" 'd["id"]'

run_case() { # NAME MODE STEPS [WORKER-INDEX, default 1]
  local name=$1 w=${4:-1}
  spec "$@" >"$WORK/$name.json"
  code=$(curl -s -o "$WORK/submit.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary @"$WORK/$name.json" "$URL/api/v1/jobs")
  [ "$code" = 201 ] || fail "submit $name: HTTP $code $(cat "$WORK/submit.json")"
  # The global step, sampled until the job ends: it must never go back.
  # (its own answer file: jget's is the main shell's)
  (while kill -0 $$ 2>/dev/null; do # ends with the test
    curl -sf --max-time 5 "$URL/api/v1/jobs/$name" >"$WORK/$name.sample.json" 2>/dev/null &&
      json_field "$WORK/$name.sample.json" 'str(d["status"]["global_step"]) + " " + d["status"]["phase"]' \
        2>/dev/null || true
    sleep 0.2
  done) >"$WORK/$name.steps" &
  local sampler=$!
  wait_until 120 "job $name past step 300" step_over "$name" 300
  victim=$(jget "$URL/api/v1/jobs/$name/tasks" '[t["node_id"] for t in d["items"] if t["type"]=="worker" and t["index"]=='"$w"'][0]')
  pid=$(agent_pid "$victim")
  [ -n "$pid" ] || fail "$name: no process for agent $victim"
  killed_at=$(jget "$URL/api/v1/jobs/$name" 'd["status"]["global_step"]')
  [ "$killed_at" -lt $(($3 / 2)) ] || fail "$name: already at step $killed_at of $3 when worker $w could be killed; raise max_steps"
  kill -9 "$pid"
  replaced() { [ "$(jget "$URL/api/v1/jobs/$name/tasks" "[t['node_id'] for t in d['items'] if t['type']=='worker' and t['index']==$w][0] != '$victim' and [t['state'] for t in d['items'] if t['type']=='worker' and t['index']==$w][0] == 'Running'")" = True ]; }
  wait_until 60 "$name: worker $w replaced and running" replaced
  holder=$(jget "$URL/api/v1/jobs/$name/tasks" '[t["node_id"] for t in d["items"] if t["type"]=="worker" and t["index"]=='"$w"'][0]')
  wait_until 400 "job $name Succeeded" phase_is "$name" Succeeded
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
  curl -sf "$URL/api/v1/jobs/$name" -o "$WORK/$name-job.json"
  curl -sf "$URL/api/v1/jobs/$name/events" -o "$WORK/$name-events.json"
  python3 - "$WORK/$name-job.json" "$WORK/$name-events.json" "$WORK/$name.steps" <<'PY' || fail "$name"
import json, sys
job = json.load(open(sys.argv[1]))
events = json.load(open(sys.argv[2]))["items"]
st = job["status"]
assert st["generation"] == 1 and st["restarts"] == 0, (st["generation"], st["restarts"])
assert [c for c in st["conditions"] if c["type"] == "Restarting"] == [], st["conditions"]
reasons = [e.get("reason") for e in events]
assert "TaskReplaced" in reasons, reasons
steps = []
for line in open(sys.argv[3]):
    parts = line.split()
    if len(parts) == 2 and parts[0].isdigit():
        steps.append(int(parts[0]))
back = [(a, b) for a, b in zip(steps, steps[1:]) if b < a]
assert not back, "global step went back: %s" % back[:5]
assert st["accuracy"] >= 0.80, st["accuracy"]
print("ok: %d step samples, never back; generation %d, restarts %d, accuracy %.4f"
      % (len(steps), st["generation"], st["restarts"], st["accuracy"]))
PY
  ! grep -q 'restored from' "$WORK"/up/logs/ps-*.log || fail "$name: a ps restored a checkpoint (a rollback)"
  pass "$name ($2): worker $w's agent $victim killed at step $killed_at, replaced alone on $holder, no gang restart, Succeeded"
  # The killed agent is gone for good; the agent that held worker $w is the next spare.
}

run_case elastic-async async 1500
# Another worker agent for the sync case: the killed one does not come back.
spare2_port=$(free_ports 1)
"$PSFLOW_BIN" worker --coordinator "$URL" --node-id spare-worker-2 --advertise "127.0.0.1:$spare2_port" \
  --checkpoint-dir "$WORK/up/checkpoints" 2>"$WORK/spare-worker-2.log" &
SPARE2=$!
wait_until 20 "second spare worker registered" jget "$URL/api/v1/nodes/spare-worker-2" 'd["id"]'
run_case elastic-sync sync 1000
# The chief (worker 0) too, on a third spare.
spare3_port=$(free_ports 1)
"$PSFLOW_BIN" worker --coordinator "$URL" --node-id spare-worker-3 --advertise "127.0.0.1:$spare3_port" \
  --checkpoint-dir "$WORK/up/checkpoints" 2>"$WORK/spare-worker-3.log" &
SPARE3=$!
wait_until 20 "third spare worker registered" jget "$URL/api/v1/nodes/spare-worker-3" 'd["id"]'
run_case elastic-chief async 1500 0

kill -TERM "$SPARE" "$SPARE2" "$SPARE3" 2>/dev/null || true
wait "$SPARE" "$SPARE2" "$SPARE3" 2>/dev/null || true
up_stop
