#!/usr/bin/env bash
# train_vocab.sh - whether `psflow train` on an embedding model costs O(batch) per step
# whatever the size of its tables.
#
# Trains the same synthetic click-through job (3 tables of dim 16, a softmax over their
# vectors, batch 500, adagrad) in one process with V rows per table, for each V of --vocab,
# and prints the examples/s of each (time inside the training steps, as `psflow train`
# reports it) and its ratio to the smallest V's. The sizes alternate round by round, so
# that a noisy neighbour slows all of them alike; each figure is the median over the rounds.
# A step that touched the whole tables (zeroing their gradient, say) would fall with V; one
# that touches the batch's rows only stays near 1.0, less the cache misses of larger tables.
#
# usage: bench/train_vocab.sh [BUILD_DIR] [--vocab 100000,1000000,4000000] [--steps N] [--rounds R]
set -euo pipefail
BUILD=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  BUILD=$1
  shift
fi
VOCABS=100000,1000000,4000000
STEPS=3000
ROUNDS=3
while [ $# -gt 0 ]; do
  case $1 in
    --vocab) VOCABS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    -h | --help) sed -n 's/^# usage: bench\/\(.*\)$/usage: \1/p' "$0"; exit 0 ;;
    *) echo "train_vocab.sh: unknown option $1" >&2; exit 64 ;;
  esac
done
PSFLOW=$BUILD/psflow
[ -x "$PSFLOW" ] || { echo "train_vocab.sh: $PSFLOW is missing: build first" >&2; exit 66; }
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

IFS=, read -r -a vocabs <<<"$VOCABS"
for v in "${vocabs[@]}"; do
  python3 - "$v" "$STEPS" >"$DIR/ctr-$v.json" <<'PY'
import json, sys
v, steps = int(sys.argv[1]), int(sys.argv[2])
json.dump({"name": "vocab-%d" % v, "replicas": {"ps": 1, "worker": 1},
           "model": {"type": "softmax", "outputs": 2,
                     "embeddings": [{"name": n, "vocab": v, "dim": 16}
                                    for n in ("user", "item", "site")]},
           "data": {"format": "synthetic_ctr", "n": 200000, "zipf": 1.6},
           "optimizer": {"type": "adagrad", "learning_rate": 1.0},
           "training": {"mode": "sync", "batch_size": 500, "max_steps": steps,
                        "eval_every_steps": 0}}, sys.stdout)
PY
done

echo "psflow train, synthetic CTR (3 tables x dim 16, batch 500, adagrad), $STEPS steps, $ROUNDS rounds"
for r in $(seq 1 "$ROUNDS"); do
  for v in "${vocabs[@]}"; do
    "$PSFLOW" train "$DIR/ctr-$v.json" --output json 2>/dev/null |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["examples_per_sec"])' >>"$DIR/rate-$v"
  done
  echo "round $r of $ROUNDS done" >&2
done
python3 - "$DIR" "${vocabs[@]}" <<'PY'
import statistics, sys
d, vocabs = sys.argv[1], sys.argv[2:]
med = {v: statistics.median(float(x) for x in open("%s/rate-%s" % (d, v))) for v in vocabs}
print("%12s %14s %10s" % ("rows/table", "examples/s", "ratio"))
for v in vocabs:
    print("%12s %14.0f %10.2f" % (v, med[v], med[v] / med[vocabs[0]]))
PY
