#!/usr/bin/env bash
# Training on a generated Criteo-layout data set of any size, as a user runs it: `psflow data
# gen criteo` writes the training files (and, numbered after them, a test file of the same
# model that no training file holds), `psflow data stats` standardises the numbers from the
# first file, and 2 ps + 2 workers (TF_CONFIG, real processes on 127.0.0.1) train the
# DLRM-style model of examples/criteo-dlrm.json for one epoch, sync, each worker streaming
# its static splits (byte ranges of the files) under `prlimit --data` with its peak RSS
# measured. The chief evaluates the test file at the end.
#
# Printed: the data set's size, each worker's peak RSS, examples/s over the epoch, the test
# AUC, logloss and calibration, and the generator's Bayes-optimal AUC on the same test rows
# (no model does better) and first-order AUC (the true model without its interactions: a
# model above it has learned some). Adam at 0.01 by default: on these rows it reaches in one
# epoch what adagrad at 0.2 (the examples' optimizer) does not in five (bench/RESULTS.md). The last line, starting "result:", holds the figures as
# key=value pairs (tests/integration/test_criteo_scale.sh reads it).
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/criteo_scale.sh [BUILD_DIR] [options]

  --gb G            training data to generate, in GB (10^9 bytes) [1]
  --files K         training files (each at least 1 GB at --gb 20 and more) [max(2, G)]
  --test-rows N     rows of the test file [1000000]
  --model NAME      criteo-dlrm or criteo-mlp (examples/NAME.json) [criteo-dlrm]
  --batch B         batch size per worker [1024]
  --optimizer T:LR  the optimizer and its learning rate [adam:0.01]
  --lr-end F        the learning rate at the end of the epoch, a fraction of LR
                    (exponential decay over the run; 1: constant) [1]
  --vocab N         rows of the largest tables (the example's: 200,000) [200000]
  --data-limit B    each worker's data segment limit, prlimit --data [1000000000]
  --seed S          the generating model's seed [1]
  --dir DIR         write the data there and keep it (a later run with the same
                    options and DIR reuses it) [a temporary folder, removed]
EOF
}

BUILD=build
GB=1
FILES=
TEST_ROWS=1000000
MODEL=criteo-dlrm
BATCH=1024
OPTIMIZER=adam:0.01
LR_END=1
VOCAB=200000
DATA_LIMIT=1000000000
SEED=1
DIR=
while [ $# -gt 0 ]; do
  case $1 in
  --gb) GB=$2; shift 2 ;;
  --files) FILES=$2; shift 2 ;;
  --test-rows) TEST_ROWS=$2; shift 2 ;;
  --model) MODEL=$2; shift 2 ;;
  --batch) BATCH=$2; shift 2 ;;
  --optimizer) OPTIMIZER=$2; shift 2 ;;
  --lr-end) LR_END=$2; shift 2 ;;
  --vocab) VOCAB=$2; shift 2 ;;
  --data-limit) DATA_LIMIT=$2; shift 2 ;;
  --seed) SEED=$2; shift 2 ;;
  --dir) DIR=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  -*) usage >&2; exit 64 ;;
  *) BUILD=$1; shift ;;
  esac
done
BIN=$(cd "$BUILD" && pwd)/psflow
SRC=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$BIN" ] || { echo "no psflow in $BUILD: build first (make build)" >&2; exit 66; }
[ -f "$SRC/examples/$MODEL.json" ] || { echo "--model: no examples/$MODEL.json" >&2; exit 64; }
[ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time): apt-get install time" >&2; exit 69; }
# A generated row is about 246 bytes.
ROWS=$(python3 -c "print(int(float('$GB') * 1e9 / 246))")
[ -n "$FILES" ] || FILES=$(python3 -c "import math; print(max(2, math.floor(float('$GB'))))")
WORK=$(mktemp -d "${TMPDIR:-/tmp}/psflow-scale.XXXXXX")
[ -n "$DIR" ] || DIR=$WORK/data
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
mkdir -p "$DIR"
say() { echo "criteo_scale: $*" >&2; }

# --- the data ---------------------------------------------------------------------------
tag="rows=$ROWS files=$FILES test_rows=$TEST_ROWS seed=$SEED"
if [ "$(cat "$DIR/made" 2>/dev/null)" != "$tag" ]; then
  rm -rf "$DIR/train" "$DIR/test" "$DIR/made"
  say "generating $ROWS rows in $FILES files and a test file of $TEST_ROWS rows under $DIR"
  t0=$(date +%s.%N)
  "$BIN" data gen criteo --rows "$ROWS" --files "$FILES" --seed "$SEED" --out "$DIR/train" >/dev/null
  "$BIN" data gen criteo --rows "$TEST_ROWS" --files 1 --first-file "$FILES" --seed "$SEED" \
    --out "$DIR/test" >/dev/null
  "$BIN" data stats "$DIR/train/part-00000.tsv" --out "$DIR/stats.json" >/dev/null 2>&1
  echo "$tag" >"$DIR/made"
  say "generated in $(python3 -c "import time; print('%.0f' % (time.time() - $t0))") s"
fi
BYTES=$(stat -c %s "$DIR"/train/part-*.tsv | awk '{n += $1} END {printf "%.0f\n", n}')
[ "$BYTES" -gt 0 ] || { say "no training data under $DIR/train"; exit 1; }
read -r BAYES FIRST <<<"$(python3 -c 'import json,sys; d = json.load(open(sys.argv[1]))
print("%.4f %.4f" % (d["bayes_auc"], d.get("first_order_auc", float("nan"))))' "$DIR/test/truth.json")"

# --- the job: one epoch, 2 ps + 2 workers, sync --------------------------------------------
STEPS=$((ROWS / (2 * BATCH)))
python3 - "$SRC/examples/$MODEL.json" "$DIR" "$STEPS" "$BATCH" "$VOCAB" "$OPTIMIZER" "$LR_END" \
  >"$WORK/job.json" <<'PY'
import json, sys
src, data, steps, batch, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
kind, lr = sys.argv[6].split(":")
d = json.load(open(src))
d["name"] = "criteo-scale"
d["replicas"] = {"ps": 2, "worker": 2}
for e in d["model"]["embeddings"]:
    e["vocab"] = min(e["vocab"], vocab)
d["data"] = {"format": "criteo", "streaming": True, "train": [data + "/train"],
             "test": [data + "/test/part-*.tsv"], "stats": [data + "/stats.json"]}
d["optimizer"] = {"type": kind, "learning_rate": float(lr)}
if float(sys.argv[7]) != 1:
    d["optimizer"]["decay"] = {"type": "exponential", "decay_steps": steps,
                               "decay_rate": float(sys.argv[7])}
d["training"] = {"mode": "sync", "batch_size": batch, "max_steps": steps, "eval_every_steps": 0}
d["checkpoint"] = {"every_steps": 0, "every_secs": 0}
json.dump(d, sys.stdout)
PY
"$BIN" plan "$WORK/job.json" >"$WORK/plan.out" 2>&1 || { cat "$WORK/plan.out" >&2; exit 1; }

read -r -a ports <<<"$(python3 - <<'PY'
import socket
s = [socket.socket() for _ in range(4)]
for x in s:
    x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))
PY
)"
PS_PORTS="${ports[0]},${ports[1]}"
W_PORTS="${ports[2]},${ports[3]}"
tf_config() { # TYPE INDEX
  python3 -c '
import json, sys
ps, w, kind, i = sys.argv[1:5]
print(json.dumps({"cluster": {"ps": ["127.0.0.1:" + p for p in ps.split(",")],
                              "worker": ["127.0.0.1:" + p for p in w.split(",")]},
                  "task": {"type": kind, "index": int(i)}}))' "$PS_PORTS" "$W_PORTS" "$1" "$2"
}
say "training $MODEL: 2 ps + 2 workers, $OPTIMIZER (to $LR_END of it at the end), batch $BATCH, $STEPS steps (one epoch over $ROWS rows, $((BYTES / 1000000)) MB), workers under prlimit --data=$DATA_LIMIT"
PIDS=()
for i in 0 1; do
  TF_CONFIG=$(tf_config ps $i) "$BIN" ps --job "$WORK/job.json" --checkpoint-dir "$WORK/ckpt" \
    2>"$WORK/ps$i.log" &
  PIDS+=($!)
done
t0=$(date +%s.%N)
for i in 0 1; do
  TF_CONFIG=$(tf_config worker $i) /usr/bin/time -f %M -o "$WORK/worker$i.rss" \
    prlimit --data="$DATA_LIMIT" -- "$BIN" worker --job "$WORK/job.json" \
    --checkpoint-dir "$WORK/ckpt" --output json --log-every 1000 \
    >"$WORK/worker$i.out" 2>"$WORK/worker$i.log" &
  PIDS+=($!)
done
# Progress: the chief's newest step line every minute, while it runs.
(
  last=$(date +%s)
  while kill -0 "${PIDS[2]}" 2>/dev/null; do
    sleep 2
    [ $(($(date +%s) - last)) -ge 60 ] || continue
    last=$(date +%s)
    line=$(grep -o 'step [0-9]*/[0-9]*.*' "$WORK/worker0.log" 2>/dev/null | tail -1 || true)
    [ -z "$line" ] || say "chief: ${line:0:100}"
  done
) &
PROGRESS=$!
rc=0
for i in 2 3; do wait "${PIDS[$i]}" || rc=$?; done
t1=$(date +%s.%N)
for i in 0 1; do wait "${PIDS[$i]}" || rc=$?; done
wait "$PROGRESS" || true
if [ "$rc" != 0 ]; then
  for f in "$WORK"/worker*.log "$WORK"/ps*.log; do echo "--- $f" >&2; tail -5 "$f" >&2; done
  exit 1
fi
grep -h "streaming" "$WORK/worker0.log" | head -1 >&2 || true

python3 - "$WORK" "$BYTES" "$ROWS" "$FILES" "$STEPS" "$BATCH" "$t0" "$t1" "$BAYES" "$MODEL" "$FIRST" <<'PY'
import json, sys
work, nbytes, rows, files, steps, batch, t0, t1, bayes, model, first = sys.argv[1:12]
r = json.load(open(work + "/worker0.out"))
rss = [int(open("%s/worker%d.rss" % (work, i)).read().split()[-1]) for i in (0, 1)]
secs = float(t1) - float(t0)
examples = 2 * int(steps) * int(batch)
print("data: %d training rows in %s files, %.2f GB; %s" % (int(rows), files, int(nbytes) / 1e9, model))
print("workers' peak RSS: %d MiB, %d MiB" % (rss[0] // 1024, rss[1] // 1024))
print("trained %d examples in %.0f s: %.0f examples/s" % (examples, secs, examples / secs))
print("test auc %.4f (Bayes-optimal %s, gap %.4f; first-order %s), logloss %.4f, calibration "
      "%.4f" % (r["test_auc"], bayes, float(bayes) - r["test_auc"], first, r["test_logloss"],
                r["test_calibration"]))
print("result: data_bytes=%s rows=%s files=%s rss_kib=%d,%d seconds=%.1f examples_per_s=%.0f "
      "test_auc=%.6f bayes_auc=%s first_order_auc=%s test_logloss=%.6f test_calibration=%.6f" % (
      nbytes, rows, files, rss[0], rss[1], secs, examples / secs, r["test_auc"], bayes, first,
      r["test_logloss"], r["test_calibration"]))
PY
