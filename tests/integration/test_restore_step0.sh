#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 600
# The chief checkpoints step 0 right after the variables are initialised, so a ps killed
# (kill -9) and restarted before the first periodic checkpoint restores that checkpoint
# instead of serving freshly initialised values mid-job. Real processes on 127.0.0.1
# (TF_CONFIG + --job): the Fashion-MNIST softmax example (sync, 2 ps, 2 workers, no
# periodic checkpoint before the end); ps 1 is killed at chief step >= 1000 and started
# again; it restores step-0, the chief rolls every ps back to step-0 (so all ps are at one
# version again), the job completes, every process exits 0, both ps end at one version,
# and the final test accuracy meets the example's target (>= 0.84).
source "$(dirname "$0")/lib.sh"

python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "step0"
d["replicas"] = {"ps": 2, "worker": 2}
d["training"]["eval_every_steps"] = 0
d["placement"] = {"partitioner": {"type": "fixed_shards", "num_shards": 2}}
d["checkpoint"] = {"every_steps": 0, "every_secs": 600}
json.dump(d, sys.stdout)
PY

read -r -a PORTS <<<"$(free_ports 4)"
PS_PORTS="${PORTS[0]},${PORTS[1]}"
W_PORTS="${PORTS[2]},${PORTS[3]}"
PIDS=()
start_ps() { # INDEX
  TF_CONFIG=$(tf_config ps "$1" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" ps --job job.json \
    --checkpoint-dir "$WORK/ckpt" --exit-grace 2 2>>"$WORK/ps$1.log" &
  PIDS[$1]=$!
}
for i in 0 1; do start_ps "$i"; done
for i in 0 1; do
  TF_CONFIG=$(tf_config worker "$i" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" worker --job job.json \
    --checkpoint-dir "$WORK/ckpt" --log-every 50 >"$WORK/worker$i.out" 2>"$WORK/worker$i.log" &
  PIDS[$((2 + i))]=$!
done

chief_past() { logged_step_past "$WORK/worker0.log" "$1"; } # the chief logged a step >= $1
wait_until 60 "the step-0 checkpoint" test -f "$WORK/ckpt/step0/step-0/manifest.json"
wait_until 120 "chief step 1000" chief_past 1000
ls "$WORK/ckpt/step0" | grep -qv '^step-0$' && fail "a periodic checkpoint exists already: $(ls "$WORK/ckpt/step0")"
kill -9 "${PIDS[1]}"
wait "${PIDS[1]}" 2>/dev/null || true
echo "ps 1 killed at chief step $(grep -o 'step [0-9]*/' "$WORK/worker0.log" | tail -1)"
start_ps 1
wait_until 60 "ps 1 restored" grep -q 'restored from' "$WORK/ps1.log"
grep 'restored from' "$WORK/ps1.log"
grep -q 'restored from .*/step-0 (step 0, version 0,' "$WORK/ps1.log" || fail "ps 1 did not restore step-0"

wait_until 60 "the chief's rollback" grep -q 'rolled back from step' "$WORK/worker0.log"
grep 'rolled back from step' "$WORK/worker0.log"
for i in 0 1; do
  grep -q 'rolled back from version [0-9]*: restored .*/step-0 (step 0, version 0' "$WORK/ps$i.log" ||
    fail "ps $i did not roll back to step 0"
done

rc=0
for i in 2 3 0 1; do wait_pid "${PIDS[$i]}" 300 || { rc=$?; echo "process $i exited $rc" >&2; }; done
[ "$rc" = 0 ] || fail "a process exited non-zero"
[ -f "$WORK/ckpt/step0/step-6000/manifest.json" ] || fail "the job did not reach max_steps"
for i in 0 1; do # one version on every ps after the rollback
  grep -q 'job step0 done at version 6000' "$WORK/ps$i.log" || fail "ps $i did not end at version 6000"
done
acc=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$WORK/worker0.out")
[ -n "$acc" ] || fail "no final accuracy: $(cat "$WORK/worker0.out")"
in_range "$acc" 0.84 1 || fail "final accuracy $acc below the example's target 0.84"
pass "ps 1 restarted before any periodic checkpoint: every ps rolled back to step-0; job done at one version, accuracy $acc"
