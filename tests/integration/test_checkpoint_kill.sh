#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 600
# A ps killed (kill -9) in the middle of writing a checkpoint, then started again: the job
# rolls every ps back to one complete checkpoint, goes on, and completes; every step-<N>
# folder with a manifest holds values of version N in every ps file (the version each file
# records in its metadata is compared with the folder's name). "In the middle of a write"
# is made certain by the test-only hook PSFLOW_TEST_PAUSE_CHECKPOINT=<step>: ps 1 stops
# right before writing its file of step-800 and leaves a marker, and the test kills it
# there. Real processes on 127.0.0.1 (TF_CONFIG + --job): the Fashion-MNIST softmax
# example, sync, 2 ps, 2 workers, a checkpoint every 400 steps, 3000 steps.
source "$(dirname "$0")/lib.sh"

python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "ckkill"
d["replicas"] = {"ps": 2, "worker": 2}
d["training"]["eval_every_steps"] = 0
d["training"]["max_steps"] = 3000
d["placement"] = {"partitioner": {"type": "fixed_shards", "num_shards": 2}}
d["checkpoint"] = {"every_steps": 400, "every_secs": 0, "keep": 20}
json.dump(d, sys.stdout)
PY

read -r -a PORTS <<<"$(free_ports 4)"
PS_PORTS="${PORTS[0]},${PORTS[1]}"
W_PORTS="${PORTS[2]},${PORTS[3]}"
CK="$WORK/ckpt/ckkill"
PIDS=()
start_ps() { # INDEX [ENV=VALUE...]
  local i=$1
  shift
  env "$@" TF_CONFIG="$(tf_config ps "$i" "$PS_PORTS" "$W_PORTS")" "$PSFLOW_BIN" ps --job job.json \
    --checkpoint-dir "$WORK/ckpt" --exit-grace 2 2>>"$WORK/ps$i.log" &
  PIDS[$i]=$!
}
start_ps 0
start_ps 1 PSFLOW_TEST_PAUSE_CHECKPOINT=800
for i in 0 1; do
  TF_CONFIG=$(tf_config worker "$i" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" worker --job job.json \
    --checkpoint-dir "$WORK/ckpt" --log-every 100 >"$WORK/worker$i.out" 2>"$WORK/worker$i.log" &
  PIDS[$((2 + i))]=$!
done

wait_until 180 "ps 1 paused writing step-800" test -f "$CK/step-800/.paused-ps-1"
[ -f "$CK/step-800/manifest.json" ] && fail "step-800 is complete although ps 1 has not written it"
kill -9 "${PIDS[1]}"
wait "${PIDS[1]}" 2>/dev/null || true
echo "ps 1 killed while writing step-800"
start_ps 1
wait_until 60 "ps 1 restored" grep -q 'restored from' "$WORK/ps1.log"
grep 'restored from' "$WORK/ps1.log"
grep -q 'restored from .*/step-400 (step 400, version 400,' "$WORK/ps1.log" ||
  fail "ps 1 did not restore step-400, the newest complete checkpoint"

# Progress resumes: the chief rolls every ps back to step 400 and passes step 800 again.
wait_until 20 "the chief's rollback within 20 s of the restore" grep -q 'rolled back from step' "$WORK/worker0.log"
grep 'rolling every ps back\|rolled back from step' "$WORK/worker0.log"
grep -q 'rolling every ps back to checkpoint step 400' "$WORK/worker0.log" ||
  fail "the chief did not roll back to step 400"
for i in 0 1; do
  grep -q 'rolled back from version [0-9]*: restored .*/step-400 (step 400, version 400' \
    "$WORK/ps$i.log" || fail "ps $i did not roll back to step 400"
done
wait_until 120 "step-800 complete after the rollback" test -f "$CK/step-800/manifest.json"

rc=0
for i in 2 3 0 1; do wait_pid "${PIDS[$i]}" 300 || { rc=$?; echo "process $i exited $rc" >&2; }; done
[ "$rc" = 0 ] || fail "a process exited non-zero"
for i in 0 1; do
  grep -q 'job ckkill done at version 3000' "$WORK/ps$i.log" || fail "ps $i did not end at version 3000"
done

# Every complete checkpoint holds values of version N on every ps.
checkpoint_versions "$CK" 2 9 || fail "a checkpoint does not hold its step's version"
acc=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$WORK/worker0.out")
pass "ps 1 killed writing step-800: every ps rolled back to step-400, job done (accuracy $acc), every step-N at version N"
