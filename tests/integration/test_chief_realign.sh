#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 600
# A chief that starts on a running sync job whose ps tasks are more than a step apart (its
# predecessor died in the middle of a rollback: one ps restored, the other not) rolls every
# ps back to the newest complete checkpoint before it trains, so the job goes on from one
# version on every ps instead of a model mixing two points of training. Real processes on
# 127.0.0.1 (TF_CONFIG + --job), the Fashion-MNIST softmax example, sync, 2 ps, a chief and
# a worker: the chief is killed (kill -9), a raw data-plane client saying HELLO as a newer
# chief restores an old checkpoint on ps 1 only (the half-done rollback), then the chief is
# started again. It realigns both ps on the newest checkpoint; the job completes with both
# ps at max_steps and the example's accuracy.
source "$(dirname "$0")/lib.sh"

python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "realign"
d["replicas"] = {"ps": 2, "worker": 2}
d["training"].update(eval_every_steps=0, max_steps=3000, stall_timeout_secs=120)
d["placement"] = {"partitioner": {"type": "fixed_shards", "num_shards": 2}}
d["checkpoint"] = {"every_steps": 300, "every_secs": 0, "keep": 20}
json.dump(d, sys.stdout)
PY

read -r -a PORTS <<<"$(free_ports 4)"
PS_PORTS="${PORTS[0]},${PORTS[1]}"
W_PORTS="${PORTS[2]},${PORTS[3]}"
CK="$WORK/ckpt/realign"
PIDS=()
for i in 0 1; do
  TF_CONFIG=$(tf_config ps "$i" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" ps --job job.json \
    --checkpoint-dir "$WORK/ckpt" --exit-grace 2 2>>"$WORK/ps$i.log" &
  PIDS[$i]=$!
done
start_worker() { # INDEX
  TF_CONFIG=$(tf_config worker "$1" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" worker --job job.json \
    --checkpoint-dir "$WORK/ckpt" --log-every 100 --push-delay-ms 1 >"$WORK/worker$1.out" \
    2>>"$WORK/worker$1.log" &
  PIDS[$((2 + $1))]=$!
}
start_worker 0
start_worker 1

wait_until 120 "checkpoint step-600" test -f "$CK/step-600/manifest.json"
kill -9 "${PIDS[2]}"
wait "${PIDS[2]}" 2>/dev/null || true
echo "chief killed after step-600"

# The half-done rollback: ps 1 alone restores step-300, told so by a newer chief.
python3 - "$PSFLOW_SRC/tests/integration" "${PORTS[1]}" <<'PY' || fail "the raw RESTORE to ps 1 failed"
import struct, sys, time
sys.path.insert(0, sys.argv[1])
import rawps
c = rawps.Conn(int(sys.argv[2]))
kind, _, payload = c.request("HELLO", rawps.hello("chief", 0, int(time.time() * 1e6), "realign"))
assert kind == "HELLO_ACK", (kind, payload)
kind, _, payload = c.request("RESTORE", struct.pack("<Qf", 300, 1.0))
assert kind == "CHECKPOINT_ACK", (kind, payload)
(step, status) = struct.unpack("<QI", payload[:12])
assert step == 300 and status == 0, (step, status, payload)
print("ps 1 restored step-300 alone")
PY
grep -q 'rolled back from version [0-9]*: restored .*/step-300 ' "$WORK/ps1.log" ||
  fail "ps 1 did not restore step-300"

start_worker 0
wait_until 60 "the new chief's realignment" grep -q 'a rollback left half done' "$WORK/worker0.log"
grep 'a rollback left half done\|rolled back from step' "$WORK/worker0.log"
newest=$(sed -n 's/.*rolling every ps back to checkpoint step \([0-9]*\).*/\1/p' "$WORK/worker0.log" | tail -1)
[ "${newest:-0}" -ge 600 ] || fail "the new chief did not roll back to the newest checkpoint (got '$newest')"
for i in 0 1; do
  grep -q "rolled back from version [0-9]*: restored .*/step-$newest " "$WORK/ps$i.log" ||
    fail "ps $i was not rolled back to step-$newest"
done

rc=0
for i in 2 3 0 1; do wait_pid "${PIDS[$i]}" 300 || { rc=$?; echo "process $i exited $rc" >&2; }; done
[ "$rc" = 0 ] || fail "a process exited non-zero"
for i in 0 1; do
  grep -q 'job realign done at version 3000' "$WORK/ps$i.log" || fail "ps $i did not end at version 3000"
done
checkpoint_versions "$CK" 2 10 || fail "a checkpoint does not hold its step's version"
acc=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$WORK/worker0.out")
in_range "$acc" 0.84 1 || fail "final accuracy $acc below the example's target 0.84"
pass "a new chief found ps 1 at step 300 and ps 0 past 600: every ps rolled back to step-$newest, job done at one version, accuracy $acc"
