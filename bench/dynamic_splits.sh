#!/usr/bin/env bash
# Dynamic against static splits with one slow worker: how much sooner an epoch over 64
# splits ends when the training tasks lease splits from ps 0's work queue (data.splits
# dynamic) than when each reads the splits its index names (static).
#
# Generated Criteo-layout data (64 training files, one split each, --rows-per-split rows
# each), an async job of 1 ps + 2 workers on 127.0.0.1 started the way users start one
# (TF_CONFIG + --job). Measured in one run:
#  1. calibration: a dynamic epoch with no worker slowed gives the step time t of a worker
#     (its seconds over its local steps); worker 1 is then slowed with --push-delay-ms
#     3t, so that its steps take about 4t.
#  2. dynamic, worker 1 slowed: the epoch's time is the chief's (from its start to the end
#     of the epoch: the job ends there, training.epochs 1); the splits each task took are
#     ps 0's record; each worker's step time is measured too (the slowdown printed is
#     worker 1's over the chief's).
#  3. static, worker 1 slowed: each worker must read its own 32 splits, so the epoch ends
#     when the slow worker has read its share: (its examples / batch) x its step time,
#     measured in a run of the same job with static splits (in an async job with static
#     splits the stream positions follow the global step, which the fast worker advances,
#     so the slow worker's share is never read through in one run: its step time is what
#     is measured, over the run).
# Printed: both epoch times and their ratio (target >= 1.5), and the splits per task.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/dynamic_splits.sh [BUILD_DIR] [--rows-per-split N]

  --rows-per-split N  rows in each of the 64 training files [1500]
EOF
}

BUILD=build
ROWS=1500
while [ $# -gt 0 ]; do
  case $1 in
  --rows-per-split) ROWS=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  -*) usage >&2; exit 64 ;;
  *) BUILD=$1; shift ;;
  esac
done
BIN=$(cd "$BUILD" && pwd)/psflow
SRC=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$BIN" ] || { echo "no psflow in $BUILD: build first (make build)" >&2; exit 66; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/psflow-dynbench.XXXXXX")
trap 'pkill -9 -f -- "$WORK" 2>/dev/null || true; rm -rf "$WORK"' EXIT
cd "$WORK"

echo "generating 65 files of $ROWS rows (64 to train on, one split each)" >&2
"$BIN" data gen criteo --rows $((ROWS * 65)) --files 65 --seed 21 --out gen >/dev/null 2>gen.err
mkdir train
mv gen/part-000[0-5][0-9].tsv gen/part-0006[0-3].tsv train/

spec() { # NAME SPLITS MAX_STEPS
  python3 - "$SRC/examples/criteo-mlp.json" "$WORK" "$@" <<'PY'
import json, sys
src, work, name, splits, steps = sys.argv[1:6]
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": 1, "worker": 2}
for e in d["model"]["embeddings"]:
    e.update(vocab=min(e["vocab"], 5000))
d["data"] = {"format": "criteo", "streaming": True, "splits": splits,
             "train": [work + "/train"], "test": [work + "/gen/part-00064.tsv"]}
d["training"] = {"mode": "async", "batch_size": 64, "max_steps": int(steps),
                 "eval_every_steps": 0}
if splits == "dynamic":
    d["training"]["epochs"] = 1
d["checkpoint"] = {"every_steps": 0, "every_secs": 0}
json.dump(d, sys.stdout)
PY
}

ports() {
  python3 -c 'import socket
s=[socket.socket() for _ in range(3)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])'
}

run() { # JOB DELAY_MS: 1 ps + 2 workers; logs ps0.log worker0.log worker1.log
  local p w0 w1 tf
  read -r p w0 w1 <<<"$(ports)"
  tf() { echo "{\"cluster\":{\"ps\":[\"127.0.0.1:$p\"],\"worker\":[\"127.0.0.1:$w0\",\"127.0.0.1:$w1\"]},\"task\":{\"type\":\"$1\",\"index\":$2}}"; }
  rm -rf "$WORK/ck"
  TF_CONFIG=$(tf ps 0) "$BIN" ps --job "$1" --checkpoint-dir "$WORK/ck" 2>ps0.log </dev/null >/dev/null &
  local ps=$!
  TF_CONFIG=$(tf worker 0) "$BIN" worker --job "$1" --checkpoint-dir "$WORK/ck" --log-every 100000000 \
    2>worker0.log >/dev/null &
  local a=$!
  TF_CONFIG=$(tf worker 1) "$BIN" worker --job "$1" --checkpoint-dir "$WORK/ck" --log-every 100000000 \
    --push-delay-ms "$2" 2>worker1.log >/dev/null &
  local b=$!
  local rc=0
  wait $a || rc=$?
  [ $rc = 0 ] && { wait $b || rc=$?; }
  [ $rc = 0 ] && { wait $ps || rc=$?; }
  [ $rc = 0 ] || { tail -n 5 ps0.log worker0.log worker1.log >&2; exit 1; }
}

# seconds per local step and seconds of task LOG ("reached step S after L local steps, T s")
step_time() { sed -n 's/.*after \([0-9]*\) local steps, \([0-9.]*\) s$/\2 \1/p' "$1" | awk '{ printf "%.6f", $1 / $2 }'; }
seconds() { sed -n 's/.*after [0-9]* local steps, \([0-9.]*\) s$/\1/p' "$1"; }
local_steps() { sed -n 's/.*after \([0-9]*\) local steps.*/\1/p' "$1"; }

spec calib dynamic 100000000 >dyn.json
run "$WORK/dyn.json" 0
T=$(step_time worker0.log)
DELAY=$(awk -v t="$T" 'BEGIN { d = int(3 * t * 1000 + 0.5); print d < 1 ? 1 : d }')
echo "calibration: a worker's step takes $(awk -v t="$T" 'BEGIN { printf "%.2f", t * 1000 }') ms; worker 1 slowed by --push-delay-ms $DELAY" >&2

run "$WORK/dyn.json" "$DELAY"
DYN=$(seconds worker0.log)
SLOW_D=$(awk -v a="$(step_time worker1.log)" -v b="$(step_time worker0.log)" 'BEGIN { printf "%.1f", a / b }')
SPLITS=$(sed -n 's/.*input epoch 0 done: \([0-9]*\) splits; splits per task: \([0-9: ]*\).*/\2 (of \1)/p' ps0.log)

spec static static $((ROWS * 64 / 64)) >static.json
run "$WORK/static.json" "$DELAY"
T1=$(step_time worker1.log)
SLOW_S=$(awk -v a="$T1" -v b="$(step_time worker0.log)" 'BEGIN { printf "%.1f", a / b }')
STATIC=$(awk -v t="$T1" -v n=$((ROWS * 32)) 'BEGIN { printf "%.2f", n / 64 * t }')

echo "epoch over 64 splits of $ROWS rows, 1 ps + 2 async workers, worker 1 slowed:"
echo "  dynamic: ${DYN} s (worker 1's steps ${SLOW_D}x the chief's); splits per task ${SPLITS}"
echo "  static:  ${STATIC} s (worker 1's 32 splits at its step time, ${SLOW_S}x the chief's)"
awk -v s="$STATIC" -v d="$DYN" 'BEGIN { printf "  ratio static/dynamic: %.2f (target >= 1.5)\n", s / d }'
