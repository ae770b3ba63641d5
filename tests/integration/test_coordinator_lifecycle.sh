#!/usr/bin/env bash
# labels: release-only
# timeout: 400
# Job lifecycle through the public API, against `psflow up` (a real coordinator with its
# SQLite file and real agent processes on 127.0.0.1):
#  1. gang admission: a job that needs 3 workers on a cluster of 2 stays Created, its
#     message names "worker 2"; a third worker agent makes it run, and it succeeds;
#  2. a lost agent: kill -9 of the agent holding ps 1 -> its lease expires, the job goes
#     Restarting with reason TaskLost naming ps 1, restarts on a spare ps agent from the
#     newest checkpoint and succeeds;
#  3. cancel: Failed with reason Cancelled, every agent idle again within seconds;
#  4. active_deadline_seconds: Failed with reason DeadlineExceeded;
#  5. restart_policy Never: a lost worker fails the job (reason TaskLost);
#  6. psflow up stops every process it started.
source "$(dirname "$0")/lib.sh"

spec() { # NAME WORKERS STEPS [key=value ...] -> a softmax job on Fashion-MNIST
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$@" <<'PY'
import json, sys
src, name, workers, steps = sys.argv[1:5]
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": 2, "worker": int(workers)}
d["training"].update(max_steps=int(steps), mode="async", eval_every_steps=0)
d["training"].pop("replicas_to_aggregate", None)
d["checkpoint"] = {"every_steps": 100, "keep": 3}
for kv in sys.argv[5:]:
    k, v = kv.split("=")
    section, key = k.split(".")
    d.setdefault(section, {})[key] = json.loads(v)
json.dump(d, sys.stdout)
PY
}

submit() { # FILE -> HTTP status
  curl -s -o "$WORK/submit.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary @"$1" "$URL/api/v1/jobs"
}

all_idle() {
  [ "$(jget "$URL/api/v1/nodes" 'all(n["state"] in ("idle", "lost") for n in d["items"])')" = True ]
}

step_over() { # NAME N: succeeds once the job's global step is past N
  [ "$(jget "$URL/api/v1/jobs/$1" "int(d['status']['global_step'] > $2)")" = 1 ]
}

agent_pid() { # NODE_ID -> pid of that agent process of this test's cluster (other tests
  # running at the same time have agents with the same node ids, for other coordinators)
  pgrep -f -- "--coordinator $URL --node-id $1 " | head -1
}

export PSFLOW_LEASE_SECONDS=3 # the coordinator (a child of psflow up) inherits it
up_start --ps 2 --workers 2

# 1. gang admission
spec gang 3 300 >"$WORK/gang.json"
[ "$(submit "$WORK/gang.json")" = 201 ] || fail "submit: $(cat "$WORK/submit.json")"
sleep 1.5 # a job that cannot start must still be waiting after the agents' heartbeats
phase_is gang Created || fail "gang: phase $(job_phase gang), expected Created"
msg=$(jget "$URL/api/v1/jobs/gang" 'd["status"]["message"]')
[[ "$msg" == *"missing worker 2"* ]] || fail "gang: message '$msg' does not name worker 2"
pass "a job needing 3 workers on 2 agents stays Created: '$msg'"
extra_port=$(free_ports 1)
"$PSFLOW_BIN" worker --coordinator "$URL" --node-id extra-worker \
  --advertise "127.0.0.1:$extra_port" --checkpoint-dir "$WORK/up/checkpoints" \
  2>"$WORK/extra-worker.log" &
EXTRA_WORKER=$!
wait_until 60 "gang job Succeeded" phase_is gang Succeeded
conds=$(jget "$URL/api/v1/jobs/gang" '",".join(c["type"] for c in d["status"]["conditions"])')
[[ "$conds" == Created,Running,Succeeded ]] || fail "gang: conditions $conds"
pass "a third agent made it run: conditions $conds"
wait_until 20 "every agent idle after the gang job" all_idle

# 2. a lost agent: a spare ps agent takes over
spare_port=$(free_ports 1)
"$PSFLOW_BIN" ps --coordinator "$URL" --node-id spare-ps --advertise "127.0.0.1:$spare_port" \
  --listen "127.0.0.1:$spare_port" --checkpoint-dir "$WORK/up/checkpoints" \
  2>"$WORK/spare-ps.log" &
SPARE_PS=$!
wait_until 20 "spare ps registered" jget "$URL/api/v1/nodes/spare-ps" 'd["id"]'
# Long enough to be killed mid-training on a fast machine (training stalls once ps 1 is
# gone), short enough to finish after the restart on a slow one under sanitizers.
spec lost 2 10000 "training.batch_size=50" >"$WORK/lost.json"
[ "$(submit "$WORK/lost.json")" = 201 ] || fail "submit lost: $(cat "$WORK/submit.json")"
wait_until 60 "job 'lost' past step 300" step_over lost 300
# The kill must come after a checkpoint is complete, or the restart has nothing to restore
# (a loaded machine can be past step 300 before the first checkpoint's files are written).
has_checkpoint() { [ "$(jget "$URL/api/v1/jobs/$1/checkpoints" 'len(d["items"])')" -gt 0 ]; }
wait_until 60 "job 'lost' has a complete checkpoint" has_checkpoint lost
victim=$(jget "$URL/api/v1/jobs/lost/tasks" '[t["node_id"] for t in d["items"] if t["type"]=="ps" and t["index"]==1][0]')
pid=$(agent_pid "$victim")
[ -n "$pid" ] || fail "no process for agent $victim"
kill -9 "$pid"
restart_reason() { # NAME: "<reason>: <message>" of the job's Restarting condition
  jget "$URL/api/v1/jobs/$1" '[c["reason"] + ": " + c["message"] for c in d["status"]["conditions"] if c["type"]=="Restarting"][0]'
}
wait_until 30 "job 'lost' restarting (a Restarting condition)" restart_reason lost
reason=$(restart_reason lost)
[[ "$reason" == TaskLost:*"ps 1"* ]] || fail "lost: Restarting condition '$reason'"
pass "kill -9 of the agent of ps 1 ($victim) -> Restarting, '$reason'"
wait_until 300 "job 'lost' Succeeded after the restart" phase_is lost Succeeded
gen=$(jget "$URL/api/v1/jobs/lost" 'd["status"]["generation"]')
[ "$gen" -ge 2 ] || fail "lost: generation $gen after a restart"
holder=$(jget "$URL/api/v1/jobs/lost/tasks" '[t["node_id"] for t in d["items"] if t["type"]=="ps" and t["index"]==1][0]')
[ "$holder" != "$victim" ] || fail "ps 1 still on the lost agent"
grep -q "restored" "$WORK"/spare-ps.log "$WORK"/up/logs/ps-*.log ||
  fail "no ps restored a checkpoint after the restart"
pass "restarted (generation $gen, ps 1 on $holder), restored the checkpoint, Succeeded"
# keep 3 pruned the older checkpoints: the API lists exactly the complete ones on disk.
on_disk() { (cd "$WORK/up/checkpoints/lost" && ls -d step-*/manifest.json | sed 's|step-\([0-9]*\)/.*|\1|' | sort -n | paste -sd,); }
listed() { jget "$URL/api/v1/jobs/lost/checkpoints" '",".join(str(c["step"]) for c in sorted(d["items"], key=lambda c: c["step"]))'; }
same_checkpoints() { [ "$(listed)" = "$(on_disk)" ]; }
wait_until 20 "/checkpoints lists what is on disk ($(on_disk))" same_checkpoints
[ "$(on_disk | tr , '\n' | wc -l)" = 3 ] || fail "keep 3, but on disk: $(on_disk)"
pass "/checkpoints lists exactly the checkpoints on disk after pruning: $(listed)"
wait_until 20 "every agent idle after the restart job" all_idle

# 3. cancel
spec cancelled 2 1000000 >"$WORK/cancel.json"
[ "$(submit "$WORK/cancel.json")" = 201 ] || fail "submit cancel"
wait_until 30 "job 'cancelled' Running" phase_is cancelled Running
curl -sf -X POST "$URL/api/v1/jobs/cancelled/cancel" >/dev/null || fail "cancel request"
phase_is cancelled Failed || fail "cancel: phase $(job_phase cancelled)"
reason=$(jget "$URL/api/v1/jobs/cancelled" '[c for c in d["status"]["conditions"] if c["type"]=="Failed"][0]["reason"]')
[ "$reason" = Cancelled ] || fail "cancel: reason $reason"
wait_until 10 "every agent idle within 10 s of the cancel" all_idle
pass "cancel: Failed/Cancelled, agents idle again"

# 4. active_deadline_seconds
spec deadline 2 1000000 "run_policy.active_deadline_seconds=2" >"$WORK/deadline.json"
[ "$(submit "$WORK/deadline.json")" = 201 ] || fail "submit deadline"
wait_until 30 "job 'deadline' Failed" phase_is deadline Failed
reason=$(jget "$URL/api/v1/jobs/deadline" '[c for c in d["status"]["conditions"] if c["type"]=="Failed"][0]["reason"]')
[ "$reason" = DeadlineExceeded ] || fail "deadline: reason $reason"
wait_until 10 "every agent idle after the deadline" all_idle
pass "active_deadline_seconds 2: Failed/DeadlineExceeded"

# 5. restart_policy Never: losing a worker fails the job
spec never 2 1000000 'run_policy.restart_policy="Never"' >"$WORK/never.json"
[ "$(submit "$WORK/never.json")" = 201 ] || fail "submit never: $(cat "$WORK/submit.json")"
wait_until 30 "job 'never' Running" phase_is never Running
victim=$(jget "$URL/api/v1/jobs/never/tasks" '[t["node_id"] for t in d["items"] if t["type"]=="worker" and t["index"]==1][0]')
pid=$(agent_pid "$victim")
[ -n "$pid" ] || fail "no process for agent $victim"
kill -9 "$pid"
wait_until 30 "job 'never' Failed" phase_is never Failed
reason=$(jget "$URL/api/v1/jobs/never" '[c for c in d["status"]["conditions"] if c["type"]=="Failed"][0]["reason"]')
[ "$reason" = TaskLost ] || fail "never: reason $reason"
pass "restart_policy Never: a lost worker fails the job (TaskLost)"

# 6. everything stops
kill -TERM "$EXTRA_WORKER" "$SPARE_PS" 2>/dev/null || true
wait "$EXTRA_WORKER" "$SPARE_PS" 2>/dev/null || true
up_stop
pass "psflow up stopped every process it started"
