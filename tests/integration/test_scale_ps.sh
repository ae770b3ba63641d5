#!/usr/bin/env bash
# labels: slow release-only
# timeout: 600
# PATCH of a managed job's ps count, against `psflow up` (a real coordinator and real agents
# on 127.0.0.1): the `make demo` job (examples/fashion-mnist-mlp.json: greedy placement, its
# first kernel in 7 row ranges), sync, 2 ps + 2 workers, goes to 3 ps while it trains and
# later to 1 ps while it is suspended, beside the same job left alone. Each change restarts
# the job from its newest checkpoint, the ps tasks reassembling their shards from the slices
# the checkpoint's files hold:
#  - the API answers the PATCH with the spec's new count, the job restarts (event PsChanged,
#    a new generation) and runs with 3 ps tasks; the placement over 3 ps has imbalance
#    <= 1.2; the checkpoints before the change are written by 2 ps tasks, those after by 3
#    and then by 1 (their manifests);
#  - nothing is lost: a sync job aggregating every worker is deterministic, so every
#    checkpoint of the changed job, before and after each change, exports to the variables
#    of the undisturbed job's checkpoint at that step (max |diff| <= 1e-6);
#  - a bad count (0, a string, 2000, none) is 422 naming /replicas..., the job unchanged; a
#    finished job's count cannot change (409).
source "$(dirname "$0")/lib.sh"

STEPS=800
python3 - "$PSFLOW_SRC/examples/fashion-mnist-mlp.json" "$STEPS" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "grow"
d["training"].update(batch_size=50, max_steps=int(sys.argv[2]), eval_every_steps=0)
d["optimizer"]["decay"]["decay_steps"] = int(sys.argv[2]) // 3
d["checkpoint"] = {"every_steps": 100, "keep": 20}
json.dump(d, sys.stdout)
PY
sed 's/"grow"/"steady"/' job.json >steady.json

# Each worker agent waits 20 ms before each push, so that the job is still training when the
# test changes it: at least 800 x 20 ms = 16 s. The two jobs run side by side: 2 + 3 ps
# agents, 2 + 2 worker agents.
export PSFLOW_PUSH_DELAY_MS=20
up_start --ps 5 --workers 4
CKPT=$WORK/up/checkpoints/grow

patch() { # BODY -> HTTP code, the answer in patch.json
  curl -s -o patch.json -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' \
    --data "$1" "$URL/api/v1/jobs/grow"
}
status() { jget "$URL/api/v1/jobs/grow" "d['status']$1"; }
ps_running() { # N: exactly N ps tasks, all Running, and the job Running
  [ "$(jget "$URL/api/v1/jobs/grow/tasks" "sorted(t['state'] for t in d['items'] if t['type']=='ps') == ['Running'] * $1")" = True ] &&
    phase_is grow Running
}
newest_checkpoint() { jget "$URL/api/v1/jobs/grow/checkpoints" 'max([c["step"] for c in d["items"]] + [-1])'; }
checkpointed_past() { [ "$(newest_checkpoint)" -ge "$1" ]; }
manifest_ps() { # STEP: the number of ps tasks that wrote that checkpoint
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["num_ps"])' \
    "$CKPT/step-$1/manifest.json"
}

for job in steady job; do
  code=$(curl -s -o submit.json -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary @$job.json "$URL/api/v1/jobs")
  [ "$code" = 201 ] || fail "submit $job: HTTP $code $(cat submit.json)"
done
# The change comes early (the job's status trails its steps by a heartbeat, and the API shows
# the new ps tasks Running only seconds after they are), so that the job trains on 3 ps long
# enough to write a checkpoint before the test suspends it.
wait_until 120 "a checkpoint at step 100 or later" checkpointed_past 100

# Bad counts change nothing.
for body in '{"replicas":{"ps":0}}' '{"replicas":{"ps":"3"}}' '{"replicas":{"ps":2000}}' '{"replicas":{}}'; do
  code=$(patch "$body")
  [ "$code" = 422 ] || fail "PATCH $body: HTTP $code, expected 422"
  grep -q '"pointer": *"/replicas' patch.json || fail "PATCH $body: no pointer: $(cat patch.json)"
done
[ "$(jget "$URL/api/v1/jobs/grow" "d['spec']['replicas']['ps']")" = 2 ] || fail "a refused PATCH changed the ps count"
pass "PATCH replicas.ps 0, \"3\", 2000, {}: 422 naming the field, the job unchanged"

before_step=$(status "['global_step']")
code=$(patch '{"replicas":{"ps":3}}')
[ "$code" = 200 ] || fail "PATCH ps 3: HTTP $code $(cat patch.json)"
[ "$(json_field patch.json "d['spec']['replicas']['ps']")" = 3 ] || fail "the spec still says 2 ps"
wait_until 120 "3 ps tasks running" ps_running 3
gen=$(status "['generation']")
[ "$gen" = 2 ] || fail "generation $gen after the change, expected 2"
jget "$URL/api/v1/jobs/grow/events" "[e['reason'] for e in d['items']]" | grep -q PsChanged ||
  fail "no PsChanged event"
imb=$(jget "$URL/api/v1/jobs/grow/placement" '"%.3f" % d["imbalance"]')
nps=$(jget "$URL/api/v1/jobs/grow/placement" 'len([p for p in d["ps"] if p["bytes"] > 0])')
in_range "$imb" 1.0 1.2 || fail "placement imbalance $imb over 3 ps"
pass "PATCH ps 2 -> 3 at step $before_step: generation 2, event PsChanged, 3 ps running, placement over $nps ps (imbalance $imb)"

# Later, while suspended: 3 -> 1, once 3 ps tasks have written a checkpoint (the newest one
# may still be the 2 ps tasks' own, from before the restart).
three_ps_checkpoint() { s=$(newest_checkpoint); [ "$s" -gt "$before_step" ] && [ "$(manifest_ps "$s")" = 3 ]; }
wait_until 120 "a checkpoint of 3 ps tasks" three_ps_checkpoint
code=$(patch '{"suspend":true}')
[ "$code" = 200 ] || fail "suspend: HTTP $code $(cat patch.json)"
wait_until 30 "Suspended" phase_is grow Suspended
code=$(patch '{"replicas":{"ps":1}}')
[ "$code" = 200 ] || fail "PATCH ps 1 while suspended: HTTP $code $(cat patch.json)"
[ "$(json_field patch.json "d['status']['phase']")" = Suspended ] || fail "the PATCH resumed the job"
suspended_at=$(newest_checkpoint)
code=$(patch '{"suspend":false}')
[ "$code" = 200 ] || fail "resume: HTTP $code $(cat patch.json)"
wait_until 120 "1 ps task running" ps_running 1
pass "suspended at checkpoint $suspended_at, PATCH ps 3 -> 1 (still Suspended), resumed on 1 ps"

wait_until 300 "job grow Succeeded" phase_is grow Succeeded
code=$(patch '{"replicas":{"ps":2}}')
[ "$code" = 409 ] || fail "PATCH ps of a finished job: HTTP $code, expected 409"

# Which ps count wrote each checkpoint.
first=$(status "['generation']")
layout=""
for dir in "$CKPT"/step-*; do
  s=${dir##*step-}
  layout="$layout $s:$(manifest_ps "$s")"
done
echo "checkpoints (step:ps tasks):$layout"
[ "$(manifest_ps "$STEPS")" = 1 ] || fail "the final checkpoint was not written by 1 ps task"
python3 - "$layout" "$before_step" "$suspended_at" <<'PY' || fail "checkpoint layouts do not follow the changes"
import sys
layout = dict(map(int, p.split(":")) for p in sys.argv[1].split())
changed, suspended = int(sys.argv[2]), int(sys.argv[3])
assert layout[100] == 2, layout
assert any(n == 3 for n in layout.values()), layout
assert all(n == 1 for s, n in layout.items() if s > suspended), layout
PY

wait_until 300 "job steady Succeeded" phase_is steady Succeeded
# Every checkpoint of the changed job against the undisturbed job's at the same step.
worst=0
compared=""
for dir in "$CKPT"/step-*; do
  s=${dir##*step-}
  [ -f "$WORK/up/checkpoints/steady/step-$s/manifest.json" ] || continue
  "$PSFLOW_BIN" export "$dir" --out "grow-$s.safetensors" >/dev/null 2>export.err ||
    fail "psflow export grow step $s: $(cat export.err)"
  "$PSFLOW_BIN" export "$WORK/up/checkpoints/steady/step-$s" --out "steady-$s.safetensors" \
    >/dev/null 2>export.err || fail "psflow export steady step $s: $(cat export.err)"
  d=$(max_abs_diff "steady-$s.safetensors" "grow-$s.safetensors")
  in_range "$d" 0 1e-6 || fail "step $s: the changed job's variables differ from the undisturbed job's by $d"
  worst=$(python3 -c "print(max($worst, $d))")
  compared="$compared $s"
done
[ "$(echo $compared | wc -w)" -ge 6 ] || fail "only the checkpoints at steps$compared were compared"
pass "Succeeded at step $STEPS (generation $first; a finished job's ps count is 409); the checkpoints at steps$compared equal the undisturbed job's: max |diff| $worst"
up_stop
