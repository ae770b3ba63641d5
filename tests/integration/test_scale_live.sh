#!/usr/bin/env bash
# labels: slow release-only
# timeout: 900
# PATCH of a managed job's worker count while it runs, against `psflow up` (a real coordinator
# and real agents on 127.0.0.1): a sync and an async softmax job go 2 -> 3 -> 2 workers. No
# gang restart (generation 1, restarts 0, no Restarting condition, no ps rolls back), worker 2
# joins on the spare agent and leaves again (events WorkersAdded, TaskAdded, WorkersRemoved;
# every ps logs both membership changes), the global step sampled from the API never goes
# back, and the job succeeds. The final accuracy of the sync job is compared with an
# undisturbed run of the same spec in this test, on a static cluster (TF_CONFIG, 1 ps + 2
# workers, no push delay: a sync run aggregating every worker is deterministic, so it gives
# what an undisturbed managed run gives, in seconds): within 0.01; the async job, whose result
# depends on timing, must meet the example's target. The jobs are short (1500 sync steps,
# 3600 async) and paced by a push delay rather than by the CPU, in both the release and the
# sanitizer build.
source "$(dirname "$0")/lib.sh"

spec() { # NAME MODE STEPS -> a softmax job on Fashion-MNIST, 1 ps + 2 workers
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$@" <<'PY'
import json, sys
src, name, mode, steps = sys.argv[1:5]
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": 1, "worker": 2}
d["training"].update(max_steps=int(steps), mode=mode, batch_size=50, eval_every_steps=0)
d["training"].pop("replicas_to_aggregate", None)  # sync: every worker's gradient, as many as there are
# The example's learning-rate schedule over fewer steps: it halves 5 times in the run, as in
# the example's 6000 steps, so that a run ends converged and two runs' accuracies compare.
d["optimizer"]["decay"]["decay_steps"] = int(steps) // 5
d["checkpoint"] = {"every_steps": 1000, "keep": 3}
json.dump(d, sys.stdout)
PY
}
step_over() { [ "$(jget "$URL/api/v1/jobs/$1" "int(d['status']['global_step'] > $2)")" = 1 ]; }
workers_running() { # NAME N: exactly N worker tasks, all Running
  [ "$(jget "$URL/api/v1/jobs/$1/tasks" "sorted(t['state'] for t in d['items'] if t['type']=='worker') == ['Running'] * $2")" = True ]
}
patch_workers() { # NAME N
  local code
  code=$(curl -s -o "$WORK/patch.json" -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' \
    --data '{"replicas":{"worker":'"$2"'}}' "$URL/api/v1/jobs/$1")
  [ "$code" = 200 ] || fail "PATCH $1 to $2 workers: HTTP $code $(cat "$WORK/patch.json")"
}
submit() { # NAME MODE STEPS
  spec "$@" >"$WORK/$1.json"
  local code
  code=$(curl -s -o "$WORK/submit.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary @"$WORK/$1.json" "$URL/api/v1/jobs")
  [ "$code" = 201 ] || fail "submit $1: HTTP $code $(cat "$WORK/submit.json")"
}

# Every worker agent (psflow up's and the spare) waits 20 ms before each push (the worker's
# testing option --push-delay-ms, through its environment twin), so that a job lasts long
# enough for two membership changes however fast the machine: from the scale-up at a tenth
# of the steps to the scale-down deadline at three quarters, at least 975 sync steps x 20 ms
# = 19 s (2340 async steps over 2-3 workers, at least 16 s) for worker 2 to start (a few
# seconds) and train 300 steps (6 s); without it a fast machine trains the 1500 sync steps in
# about 1 s, before an added worker has even started.
export PSFLOW_PUSH_DELAY_MS=20
up_start --ps 1 --workers 2
spare_port=$(free_ports 1)
"$PSFLOW_BIN" worker --coordinator "$URL" --node-id spare-worker --advertise "127.0.0.1:$spare_port" \
  --checkpoint-dir "$WORK/up/checkpoints" 2>"$WORK/spare-worker.log" &
SPARE=$!
wait_until 20 "spare worker registered" jget "$URL/api/v1/nodes/spare-worker" 'd["id"]'

run_case() { # MODE STEPS
  local mode=$1 steps=$2 base="scale-$1-base" name="scale-$1-live"
  local from spare_from # the ps and spare agent log lines of this case start after these
  from=$(cat "$WORK"/up/logs/ps-*.log | wc -l)
  spare_from=$(wc -l <"$WORK/spare-worker.log")
  local base_acc=none
  if [ "$mode" = sync ]; then
    # The undisturbed run of the same spec (only the name differs), on a static cluster.
    spec "$base" "$mode" "$steps" >"$WORK/$base.json"
    base_acc=$(PSFLOW_PUSH_DELAY_MS=0 run_static_cluster "$WORK/$base.json" 2 1 "$WORK/base-ckpt" |
      python3 -c 'import json, sys; print([json.loads(l) for l in sys.stdin if l.strip()][-1]["test_accuracy"])')
  fi

  submit "$name" "$mode" "$steps"
  # The global step, sampled until the job ends: it must never go back.
  (while kill -0 $$ 2>/dev/null; do # ends with the test
    curl -sf --max-time 5 "$URL/api/v1/jobs/$name" >"$WORK/$name.sample.json" 2>/dev/null &&
      json_field "$WORK/$name.sample.json" 'str(d["status"]["global_step"]) + " " + d["status"]["phase"]' \
        2>/dev/null || true
    sleep 0.2
  done) >"$WORK/$name.steps" &
  local sampler=$!
  wait_until 120 "job $name past step $((steps / 10))" step_over "$name" $((steps / 10))
  local up_at down_at
  up_at=$(jget "$URL/api/v1/jobs/$name" 'd["status"]["global_step"]')
  patch_workers "$name" 3
  wait_until 60 "$name: 3 workers running" workers_running "$name" 3
  # Worker 2 (on the spare agent) has trained 300 steps of its own.
  spare_steps() { [ "$(tail -n +$((spare_from + 1)) "$WORK/spare-worker.log" | grep -c "psflow worker 2: step")" -ge 3 ]; }
  wait_until 120 "$name: worker 2 trained 300 steps" spare_steps
  down_at=$(jget "$URL/api/v1/jobs/$name" 'd["status"]["global_step"]')
  [ "$down_at" -lt $((steps * 3 / 4)) ] || fail "$name: already at step $down_at of $steps when scaling down; raise max_steps"
  patch_workers "$name" 2
  wait_until 60 "$name: back to 2 workers" workers_running "$name" 2
  wait_until 600 "job $name Succeeded" phase_is "$name" Succeeded
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
  curl -sf "$URL/api/v1/jobs/$name" -o "$WORK/$name-job.json"
  curl -sf "$URL/api/v1/jobs/$name/events" -o "$WORK/$name-events.json"
  python3 - "$WORK/$name-job.json" "$WORK/$name-events.json" "$WORK/$name.steps" "$base_acc" "$mode" \
    "$up_at" "$down_at" <<'PY' || fail "$name"
import json, sys
job = json.load(open(sys.argv[1]))
events = json.load(open(sys.argv[2]))["items"]
base, mode, up_at, down_at = sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
st = job["status"]
assert st["phase"] == "Succeeded", st["phase"]
assert st["generation"] == 1 and st["restarts"] == 0, (st["generation"], st["restarts"])
assert [c for c in st["conditions"] if c["type"] == "Restarting"] == [], st["conditions"]
assert job["spec"]["replicas"]["worker"] == 2, job["spec"]["replicas"]
reasons = [e.get("reason") for e in events]
for r in ("WorkersAdded", "TaskAdded", "WorkersRemoved"):
    assert r in reasons, (r, reasons)
for r in ("RolledBack", "JobRestarted", "TaskReplaced"):
    assert r not in reasons, (r, reasons)
steps = []
for line in open(sys.argv[3]):
    parts = line.split()
    if len(parts) == 2 and parts[0].isdigit():
        steps.append(int(parts[0]))
back = [(a, b) for a, b in zip(steps, steps[1:]) if b < a]
assert not back, "global step went back: %s" % back[:5]
acc = st["accuracy"]
print("%s: 2 -> 3 workers at step %s, 3 -> 2 at step %s; %d step samples, never back; "
      "generation %d, restarts %d; accuracy %.4f%s"
      % (mode, up_at, down_at, len(steps), st["generation"], st["restarts"], acc,
         "" if mode != "sync" else ", undisturbed %.4f, difference %.4f"
         % (float(base), abs(acc - float(base)))))
if mode == "sync":
    assert abs(acc - float(base)) <= 0.01, (acc, base)
assert acc >= 0.80, acc
PY
  cat "$WORK"/up/logs/ps-*.log | tail -n +$((from + 1)) >"$WORK/$name-ps.log"
  grep -q "membership: 2 -> 3 training tasks" "$WORK/$name-ps.log" || fail "$name: no ps took 3 workers"
  grep -q "membership: 3 -> 2 training tasks" "$WORK/$name-ps.log" || fail "$name: no ps took 2 workers"
  ! grep -q 'rolled back\|restored from' "$WORK/$name-ps.log" || fail "$name: a ps rolled back or restored"
  # Worker 2 trained (on the spare agent) and was stopped when removed.
  tail -n +$((spare_from + 1)) "$WORK/spare-worker.log" >"$WORK/$name-spare.log"
  grep -q "psflow worker 2: step [0-9]*/$steps" "$WORK/$name-spare.log" || fail "$name: worker 2 never trained"
  grep -q "stopping worker 2 of job $name" "$WORK/$name-spare.log" || fail "$name: worker 2 was not stopped"
  pass "$name ($mode): 2 -> 3 -> 2 workers live, no restart, Succeeded"
}

run_case sync 1500
run_case async 3600

kill -TERM "$SPARE" 2>/dev/null || true
wait "$SPARE" 2>/dev/null || true
up_stop
