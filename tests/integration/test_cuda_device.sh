#!/usr/bin/env bash
# "device": "cuda", "cuda:N" and "auto", as a user sees them, with or without a GPU:
#  1. without a usable GPU (no NVIDIA driver, no device, or a psflow built without CUDA):
#     `psflow train` of a job with "cuda" or "cuda:1" exits 69 and says why in exactly one
#     line; a worker (TF_CONFIG + --job) exits 69 the same way before it connects to any
#     ps; `bench/train_throughput --device cuda` exits 69 and prints no figure; "auto" trains
#     on the CPU, says so in one line, and a 1 ps + 1 worker job with "auto" completes;
#  2. with a usable GPU: "cuda" and "auto" train on it (the log names the GPU, the JSON
#     result says backend "cuda"), and "cuda:N" past the last GPU exits 69 naming the
#     GPUs there are.
# Which case applies is decided independently of psflow: a GPU is present when
# `nvidia-smi -L` lists one. PSFLOW_TEST_REQUIRE_GPU=1 fails the test when none is.
source "$(dirname "$0")/lib.sh"

BUILD_DIR=$(cd "$(dirname "$PSFLOW_BIN")" && pwd)

job() { # NAME DEVICE: a small regression job on synthetic data
  python3 - "$@" <<'PY'
import json, sys
name, device = sys.argv[1:3]
json.dump({"name": name, "model": {"type": "linear", "inputs": 1},
           "data": {"format": "synthetic_linear", "n": 2000},
           "optimizer": {"type": "sgd", "learning_rate": 0.01},
           "training": {"batch_size": 50, "max_steps": 60}, "device": device}, sys.stdout)
PY
}
job cuda-job cuda >cuda.json
job cuda-one cuda:1 >cuda1.json
job cuda-far cuda:255 >cuda255.json
job auto-job auto >auto.json

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
if [ "$gpus" = 0 ] && [ -n "${PSFLOW_TEST_REQUIRE_GPU:-}" ] && [ "$PSFLOW_TEST_REQUIRE_GPU" != 0 ]; then
  fail "PSFLOW_TEST_REQUIRE_GPU is set but nvidia-smi lists no GPU"
fi

# one_line FILE PATTERN: FILE holds exactly one line, and it matches PATTERN (grep -E).
one_line() {
  [ "$(wc -l <"$1")" = 1 ] || { cat "$1" >&2; fail "$1: expected exactly one line"; }
  grep -Eq "$2" "$1" || { cat "$1" >&2; fail "$1: the line does not match '$2'"; }
}

"$PSFLOW_BIN" train cuda.json >cuda.out 2>cuda.err && rc=0 || rc=$?
if [ "$rc" = 0 ]; then
  # --- 2. a usable GPU --------------------------------------------------------------------
  [ "$gpus" -gt 0 ] || fail "device cuda trained although nvidia-smi lists no GPU"
  grep -Eq '^psflow train: device cuda:0: .+, sm_[0-9]+, [0-9.]+ GiB$' cuda.err ||
    { cat cuda.err >&2; fail "no line naming the GPU"; }
  pass "device cuda: $(grep 'device cuda:0' cuda.err)"
  expect_exit 0 "$PSFLOW_BIN" train auto.json --output json
  [ "$(json_field "$WORK/stdout" 'd["backend"]')" = cuda ] || fail "auto did not take the GPU"
  grep -q '^psflow train: device cuda:0: ' "$WORK/stderr" || fail "auto: no line naming the GPU"
  pass "device auto takes the GPU"
  job cuda-past "cuda:$gpus" >past.json
  expect_exit 69 "$PSFLOW_BIN" train past.json
  one_line "$WORK/stderr" "^psflow train: device \"cuda:$gpus\" is not usable: only $gpus GPUs? (is|are) visible"
  pass "cuda:$gpus (one past the last GPU) exits 69: $(cat "$WORK/stderr")"
  exit 0
fi

# --- 1. no usable GPU -----------------------------------------------------------------------
[ "$rc" = 69 ] || { cat cuda.err >&2; fail "device cuda without a GPU exited $rc, expected 69"; }
one_line cuda.err '^psflow train: device "cuda" is not usable: .+; use "cpu", or "auto" to fall back to the CPU$'
if [ "$gpus" -gt 0 ] && ! grep -q 'built without CUDA' cuda.err; then
  fail "nvidia-smi lists $gpus GPU(s), but psflow finds none usable: $(cat cuda.err)"
fi
[ ! -s cuda.out ] || fail "device cuda printed a result: $(cat cuda.out)"
reason=$(sed 's/^psflow train: device "cuda" is not usable: \(.*\); use "cpu", or "auto" to fall back to the CPU$/\1/' cuda.err)
pass "device cuda exits 69: $reason"

expect_exit 69 "$PSFLOW_BIN" train cuda1.json
one_line "$WORK/stderr" '^psflow train: device "cuda:1" is not usable: '
expect_exit 69 "$PSFLOW_BIN" train cuda255.json
one_line "$WORK/stderr" '^psflow train: device "cuda:255" is not usable: '
pass "cuda:1 and cuda:255 exit 69 naming the device"

# A worker fails the same way, before it looks for its ps (nothing listens on the port).
read -r ps_port w_port <<<"$(free_ports 2)"
expect_exit 69 env TF_CONFIG="$(tf_config worker 0 "$ps_port" "$w_port")" \
  "$PSFLOW_BIN" worker --job cuda.json --checkpoint-dir "$WORK/ckpt" --retry-seconds 1
want="psflow chief 0: device \"cuda\" is not usable: $reason; use \"cpu\", or \"auto\" to fall back to the CPU"
[ "$(wc -l <"$WORK/stderr")" = 1 ] && grep -qxF "$want" "$WORK/stderr" ||
  { cat "$WORK/stderr" >&2; fail "the worker should say, in one line: $want"; }
pass "a worker with device cuda exits 69 with the reason"

# The GPU benchmark measures nothing without a GPU.
bench="$BUILD_DIR/bench/train_throughput"
(cd "$PSFLOW_SRC" && "$bench" --device cuda --steps 1 --rounds 1) >bench.out 2>bench.err && rc=0 || rc=$?
[ "$rc" = 69 ] || { cat bench.out bench.err >&2; fail "train_throughput --device cuda exited $rc, expected 69"; }
[ ! -s bench.out ] || { cat bench.out >&2; fail "train_throughput printed figures without a GPU"; }
grep -q '^train_throughput: device "cuda" is not usable: ' bench.err &&
  grep -q '^train_throughput: no usable GPU: nothing measured$' bench.err ||
  { cat bench.err >&2; fail "train_throughput does not say that no GPU is usable"; }
pass "train_throughput --device cuda exits 69 and prints no figure"

# "auto" trains on the CPU and says why, in one line, with the same reason.
expect_exit 0 "$PSFLOW_BIN" train auto.json --output json
[ "$(json_field "$WORK/stdout" 'd["backend"]')" = openblas ] || fail "auto: backend is not openblas"
[ "$(json_field "$WORK/stdout" 'd["steps"]')" = 60 ] || fail "auto: did not train 60 steps"
want="psflow train: device \"auto\": no usable GPU ($reason); training on the CPU"
[ "$(grep -c 'device "auto"' "$WORK/stderr")" = 1 ] && grep -qxF "$want" "$WORK/stderr" ||
  { cat "$WORK/stderr" >&2; fail "auto: expected the line: $want"; }
pass "device auto trains on the CPU: $want"

# A 1 ps + 1 worker job with "auto" completes, the chief saying where it trains.
read -r ps_port w_port <<<"$(free_ports 2)"
python3 - auto.json <<'PY' >auto-dist.json
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "auto-dist"
d["training"]["mode"] = "sync"
json.dump(d, sys.stdout)
PY
TF_CONFIG=$(tf_config ps 0 "$ps_port" "$w_port") \
  "$PSFLOW_BIN" ps --job auto-dist.json --checkpoint-dir "$WORK/ckpt" 2>ps.log &
ps_pid=$!
TF_CONFIG=$(tf_config worker 0 "$ps_port" "$w_port") \
  "$PSFLOW_BIN" worker --job auto-dist.json --checkpoint-dir "$WORK/ckpt" --output json \
  >worker.out 2>worker.log &
worker_pid=$!
wait_pid "$worker_pid" 120 || { cat worker.log >&2; fail "the auto worker failed"; }
wait_pid "$ps_pid" 60 || { cat ps.log >&2; fail "the ps failed"; }
[ "$(json_field worker.out 'd["steps"]')" = 60 ] || { cat worker.out >&2; fail "the job did not reach 60 steps"; }
grep -qxF "psflow chief 0: device \"auto\": no usable GPU ($reason); training on the CPU" worker.log ||
  { cat worker.log >&2; fail "the chief does not say why it trains on the CPU"; }
pass "1 ps + 1 worker with device auto complete on the CPU"
