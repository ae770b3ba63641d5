#!/usr/bin/env bash
# labels: sanitizer-only
# Verified restore, with real ps and worker processes on 127.0.0.1 (TF_CONFIG + --job): the
# ps is killed (kill -9) once two checkpoints are complete, one byte of the newest one's
# ps-0.safetensors is flipped (in the tensor data, so only the CRC-32 can tell), and the ps
# is started again. It names the bad file, sets the checkpoint aside as
# step-<N>.corrupt-<time> (not deleted), restores the previous complete checkpoint, and the
# job completes: both processes exit 0 and the final checkpoint exists.
source "$(dirname "$0")/lib.sh"

python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "verify"
d["replicas"] = {"ps": 1, "worker": 1}
d["training"].update(mode="async", max_steps=1500, eval_every_steps=0)
d["training"].pop("replicas_to_aggregate", None)
d["checkpoint"] = {"every_steps": 100, "keep": 5}
json.dump(d, sys.stdout)
PY

read -r PS_PORT W_PORT <<<"$(free_ports 2)"
start_ps() {
  TF_CONFIG=$(tf_config ps 0 "$PS_PORT" "$W_PORT") "$PSFLOW_BIN" ps --job job.json \
    --checkpoint-dir "$WORK/ckpt" --exit-grace 1 2>>"$WORK/ps.log" &
  PS_PID=$!
}
start_ps
# 5 ms before each push: the whole job otherwise takes 0.4 s on a fast machine, and pruning
# (keep 5) had removed step-200 before the test saw it.
TF_CONFIG=$(tf_config worker 0 "$PS_PORT" "$W_PORT") "$PSFLOW_BIN" worker --job job.json \
  --checkpoint-dir "$WORK/ckpt" --log-every 50 --push-delay-ms 5 >"$WORK/chief.out" \
  2>"$WORK/chief.log" &
CHIEF_PID=$!

wait_until 120 "two complete checkpoints" test -f "$WORK/ckpt/verify/step-200/manifest.json"
kill -9 "$PS_PID"
wait "$PS_PID" 2>/dev/null || true
complete=$(cd "$WORK/ckpt/verify" && ls -d step-*/manifest.json | sed 's|step-\([0-9]*\)/.*|\1|' | sort -n)
newest=$(echo "$complete" | tail -1)
previous=$(echo "$complete" | tail -2 | head -1)
[ "$newest" -gt "$previous" ] || fail "expected two complete checkpoints, found: $complete"
bad="$WORK/ckpt/verify/step-$newest/ps-0.safetensors"
python3 - "$bad" <<'PY'
import os, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    f.seek(os.path.getsize(path) - 5)  # a byte of the last tensor's data
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x10]))
PY
echo "ps killed; flipped one byte of step-$newest/ps-0.safetensors (previous complete: step-$previous)"
start_ps

wait_until 60 "the ps restored a checkpoint" grep -q 'restored from' "$WORK/ps.log"
grep -q "checkpoint .*/step-$newest is bad (.*ps-0.safetensors.*); set aside as .*/step-$newest\.corrupt-" \
  "$WORK/ps.log" || { cat "$WORK/ps.log" >&2; fail "no line naming the bad file and where it went"; }
grep 'is bad' "$WORK/ps.log"
grep -q "restored from .*/step-$previous (step $previous," "$WORK/ps.log" ||
  { grep 'restored from' "$WORK/ps.log" >&2; fail "did not restore step-$previous"; }
ls -d "$WORK/ckpt/verify/step-$newest.corrupt-"* >/dev/null || fail "the bad checkpoint is not set aside"
[ -f "$WORK/ckpt/verify/step-$newest.corrupt-"*/ps-0.safetensors ] || fail "the set-aside copy lost its file"

wait_pid "$CHIEF_PID" 300 || { tail "$WORK/chief.log" >&2; fail "the chief failed"; }
wait_pid "$PS_PID" 60 || fail "the ps failed"
[ -f "$WORK/ckpt/verify/step-1500/manifest.json" ] || fail "the job did not reach max_steps"
grep -q 'test accuracy' "$WORK/chief.out" || fail "no final result: $(cat "$WORK/chief.out")"
pass "bad step-$newest set aside, step-$previous restored, job done: $(cat "$WORK/chief.out")"
