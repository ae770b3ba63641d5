#!/usr/bin/env bash
# labels: slow release-only
# timeout: 600
# Preemption by priority, against `psflow up` (a real coordinator with its SQLite file and
# real agents on 127.0.0.1): 2 ps and 2 worker agents run two identical sync jobs, `steady`
# (run_policy.preemptible false) and `low` (priority 0). A job of priority 10 that needs one
# ps and one worker agent is submitted while both train:
#  - it preempts `low`, not `steady`: `low` goes Restarting with reason Preempted and an event
#    naming the preempting job (`psflow list --queue` shows it first, "preempted (by high)"),
#    its agents stop its tasks, and `high` runs on them and succeeds; `steady` trains on
#    untouched;
#  - `low` resumes by itself as generation 2 from its newest checkpoint and succeeds at its
#    max_steps, with preemptions 1 and restarts 0 in its status and in /metrics;
#  - its chief takes a final checkpoint before its agents are freed (the coordinator's default
#    --preempt-grace-seconds 30): event Checkpointing names the step it asked for, the
#    Preempted message the final checkpoint's step, at or after it;
#  - nothing is lost and its loss curve continues: it resumed from that final checkpoint, or a
#    newer one (not from an older one, nor from step 0); a sync job with one worker is deterministic, so every checkpoint
#    of `low` (100..600, those written after the resume included) exports to `steady`'s
#    variables at that step (max |diff| <= 1e-6); its reported loss after the resume is
#    `steady`'s over the same steps (means within 0.05), far below where it began.
source "$(dirname "$0")/lib.sh"

STEPS=600
spec() { # NAME STEPS RUN_POLICY-JSON -> the softmax example, sync, 1 ps + 1 worker
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$@" <<'PY'
import json, sys
src, name, steps, policy = sys.argv[1:5]
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": 1, "worker": 1}
d["training"].update(max_steps=int(steps), mode="sync", batch_size=50, eval_every_steps=0)
d["training"].pop("replicas_to_aggregate", None)
d["checkpoint"] = {"every_steps": 100, "keep": 10}
d["run_policy"] = json.loads(policy)
json.dump(d, sys.stdout)
PY
}
submit() { # FILE
  code=$(curl -s -o submit.json -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary @"$1" "$URL/api/v1/jobs")
  [ "$code" = 201 ] || fail "submit $1: HTTP $code $(cat submit.json)"
}
status() { jget "$URL/api/v1/jobs/$1" "d['status']$2"; }
newest_checkpoint() { jget "$URL/api/v1/jobs/$1/checkpoints" 'max([c["step"] for c in d["items"]] + [-1])'; }
checkpointed_past() { [ "$(newest_checkpoint "$1")" -ge "$2" ]; }
has_event() { # JOB REASON
  [ "$(jget "$URL/api/v1/jobs/$1/events" "sum(e.get('reason') == '$2' for e in d['items'])")" -ge 1 ]
}

spec steady $STEPS '{"preemptible": false}' >steady.json
spec low $STEPS '{"priority": 0}' >low.json
spec high 400 '{"priority": 10}' >high.json

# Each worker agent waits 20 ms before each push, so that the jobs are still training when
# the test submits `high`: at least 600 x 20 ms = 12 s each.
export PSFLOW_PUSH_DELAY_MS=20
up_start --ps 2 --workers 2
submit steady.json
submit low.json
wait_until 120 "job low checkpointed at step 200" checkpointed_past low 200
wait_until 30 "job steady running" phase_is steady Running

submit high.json
wait_until 60 "job low preempted" has_event low Preempted
# While it waits (high trains 400 steps, at least 8 s): `psflow list --queue` names it,
# preempted by high, first in the queue or second behind high while high waits for the agents
# to stop low's tasks.
queue_out=$(PSFLOW_COORDINATOR=$URL "$PSFLOW_BIN" list --queue 2>&1) || fail "psflow list --queue: $queue_out"
grep -Eq '^[12] +low +default +0 +Restarting +preempted \(by high\)' <<<"$queue_out" ||
  fail "psflow list --queue: $queue_out"
has_event high Preempting || fail "no Preempting event for job high"
preempted_at=$(status low "['global_step']")
[ "$(status low "['preemptions']")" = 1 ] || fail "low's status.preemptions is not 1"
[ "$(status steady "['preemptions']")" = 0 ] || fail "steady (preemptible: false) was preempted"
phase_is steady Running || fail "steady stopped: $(status steady "['message']")"
message=$(jget "$URL/api/v1/jobs/low/events" "[e['message'] for e in d['items'] if e.get('reason') == 'Preempted'][0]")
case $message in
*"preempted by job high (priority 10 > 0)"*) ;;
*) fail "low's Preempted event: $message" ;;
esac
pass "high preempted low, not steady (preemptible false): $message; psflow list --queue: $(sed -n 2p <<<"$queue_out" | tr -s ' ')"

wait_until 120 "job high Succeeded" phase_is high Succeeded
wait_until 120 "job low running again" phase_is low Running
[ "$(status low "['generation']")" = 2 ] || fail "low did not resume as generation 2"
wait_until 300 "job low Succeeded" phase_is low Succeeded
wait_until 300 "job steady Succeeded" phase_is steady Succeeded
[ "$(status low "['global_step']")" = $STEPS ] || fail "low ended at step $(status low "['global_step']")"
[ "$(status low "['restarts']")" = 0 ] || fail "a preemption counted as a restart"
[ "$(status low "['queue']")" = None ] || fail "low's queue is not null once it ran"
# (to a file first: grep -q would end the pipe early, and pipefail would see curl's SIGPIPE)
curl -sf "$URL/metrics" >metrics.txt || fail "GET /metrics"
grep -qx 'psflow_job_preemptions_total{job="low"} 1' metrics.txt ||
  fail "/metrics lacks psflow_job_preemptions_total{job=\"low\"} 1"
pass "low resumed as generation 2 and succeeded at step $STEPS; preemptions 1, restarts 0"

# It took a final checkpoint at or after the step it was asked for, and resumed from it (a
# rollback to it when the chief trained past it before its agents stopped it).
asked=$(jget "$URL/api/v1/jobs/low/events" "int([e['message'] for e in d['items'] if e.get('reason') == 'Checkpointing'][0].split('final checkpoint at step ')[1].split()[0])")
final=$(jget "$URL/api/v1/jobs/low/events" "int([e['message'] for e in d['items'] if e.get('reason') == 'Preempted'][0].split('after its final checkpoint at step ')[1].split(';')[0])") ||
  fail "low's Preempted event names no final checkpoint"
[ "$final" -ge "$asked" ] && [ "$final" -ge 200 ] || fail "low's final checkpoint at step $final, asked at $asked"
from=$(jget "$URL/api/v1/jobs/low/events" "([int(e['message'].split('to checkpoint step ')[1]) for e in d['items'] if e.get('reason') == 'JobRestarted' and 'to checkpoint step' in e['message']] or [$final])[-1]")
# (a periodic checkpoint the chief reached while its agents were stopping it may be newer)
[ "$from" -ge "$final" ] || fail "low resumed from step $from, before its final checkpoint at step $final"
# Nothing lost, and its curve continues: a sync job with one worker is deterministic, so
# every checkpoint of low, those written after the resume included, equals steady's.
worst=0
for s in $(seq 100 100 $STEPS); do
  for job in low steady; do
    "$PSFLOW_BIN" export "$WORK/up/checkpoints/$job/step-$s" --out "$job-$s.safetensors" \
      >/dev/null 2>export.err || fail "psflow export $job step $s: $(cat export.err)"
  done
  d=$(max_abs_diff "steady-$s.safetensors" "low-$s.safetensors")
  in_range "$d" 0 1e-6 || fail "step $s: low's variables differ from steady's by $d"
  worst=$(python3 -c "print(max($worst, $d))")
done
# Its loss curve goes on where it was: each report is the mean loss of the steps since the
# previous one (every 0.25 s), so the two jobs' reports cover different steps; after the
# resume low's reports average what steady's average over the same steps, well below the
# first report of either.
for job in low steady; do
  curl -sf "$URL/api/v1/jobs/$job/metrics?max_points=100000" >"$job.metrics.json" ||
    fail "metrics of $job"
done
curve=$(python3 - low.metrics.json steady.metrics.json "$from" 2>&1 <<'PY'
import json, sys
def points(path):
    return sorted((p["step"], p["loss"]) for p in json.load(open(path))["points"] if p["loss"] is not None)
low, steady, start = points(sys.argv[1]), points(sys.argv[2]), int(sys.argv[3])
def mean_after(pts):
    after = [l for s, l in pts if s > start]
    assert len(after) >= 3, f"{len(after)} reports after step {start}"
    return sum(after) / len(after)
a, b, first = mean_after(low), mean_after(steady), low[0][1]
assert abs(a - b) <= 0.05 and a < 0.6 * first, f"after step {start}: low {a:.4f}, steady {b:.4f}, low's first {first:.4f}"
print(f"mean loss after step {start}: low {a:.4f}, steady {b:.4f} (low's first report {first:.4f})")
PY
) || fail "the loss curves: $curve"
pass "low took its final checkpoint at step $final (asked at step $asked) and resumed from it (preempted at step $preempted_at); its checkpoints at steps 100..$STEPS equal steady's (max |diff| $worst); $curve"
up_stop
