#!/usr/bin/env bash
# CTR models on generated data with interaction effects: the test AUC of the DLRM-style model
# (examples/criteo-dlrm.json) against the embedding + MLP model of similar size
# (examples/criteo-mlp.json: the same tables, the numbers beside them, hidden 64-32) and the
# generator's Bayes-optimal AUC, each trained by `psflow train` for one epoch over the same
# rows, for several data seeds.
#
# `psflow data gen criteo` draws clicks from a logistic model with numeric effects, one
# weight per id and dot products of id factors for six pairs of categorical columns: the
# interactions a model of pairwise dot products can learn directly. Both models read the
# rows streamed (data.streaming), standardised (data.stats), batch 256, adagrad 0.2, tables
# of at most --vocab rows. Printed: each seed's AUCs and the DLRM model's lead.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/ctr_models.sh [BUILD_DIR] [--rows N] [--seeds LIST] [--vocab N]

  --rows N      generated rows per seed, four fifths to train on, one to test [2000000]
  --seeds LIST  data seeds, comma-separated [1,2,3]
  --vocab N     rows of the largest tables (the example's are 200,000) [200000]
EOF
}

BUILD=build
ROWS=2000000
SEEDS=1,2,3
VOCAB=200000
while [ $# -gt 0 ]; do
  case $1 in
  --rows) ROWS=$2; shift 2 ;;
  --seeds) SEEDS=$2; shift 2 ;;
  --vocab) VOCAB=$2; shift 2 ;;
  -h | --help) usage; exit 0 ;;
  -*) usage >&2; exit 64 ;;
  *) BUILD=$1; shift ;;
  esac
done
BIN=$(cd "$BUILD" && pwd)/psflow
SRC=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$BIN" ] || { echo "no psflow in $BUILD: build first (make build)" >&2; exit 66; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/psflow-ctrbench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

spec() { # EXAMPLE DIR STEPS
  python3 - "$SRC/examples/$1.json" "$2" "$3" "$VOCAB" <<'PY'
import json, sys
src, data, steps, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
d = json.load(open(src))
d["replicas"] = {"ps": 1, "worker": 1}
for e in d["model"]["embeddings"]:
    e["vocab"] = min(e["vocab"], vocab)
d["data"] = {"format": "criteo", "streaming": True,
             "train": [data + "/part-0000[0-3].tsv"], "test": [data + "/part-00004.tsv"],
             "stats": [data + "/stats.json"]}
d["optimizer"] = {"type": "adagrad", "learning_rate": 0.2}
d["training"] = {"mode": "sync", "batch_size": 256, "max_steps": steps, "eval_every_steps": 0}
json.dump(d, sys.stdout)
PY
}

printf '%-6s %-10s %-10s %-10s %s\n' seed bayes mlp dlrm "dlrm - mlp"
for seed in ${SEEDS//,/ }; do
  data=$WORK/data-$seed
  "$BIN" data gen criteo --rows "$ROWS" --files 5 --seed "$seed" --out "$data" >"$WORK/gen.out" 2>/dev/null
  "$BIN" data stats "$data"/part-0000[0-3].tsv --out "$data/stats.json" >/dev/null 2>&1
  bayes=$(python3 -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["bayes_auc"])' "$data/truth.json")
  steps=$((ROWS * 4 / 5 / 256))
  declare -A auc
  for m in criteo-mlp criteo-dlrm; do
    spec "$m" "$data" "$steps" >"$WORK/$m.json"
    "$BIN" train "$WORK/$m.json" --output json >"$WORK/$m.out" 2>"$WORK/$m.err" ||
      { tail -3 "$WORK/$m.err" >&2; exit 1; }
    auc[$m]=$(python3 -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["test_auc"])' "$WORK/$m.out")
  done
  printf '%-6s %-10s %-10s %-10s %+.4f\n' "$seed" "$bayes" "${auc[criteo-mlp]}" "${auc[criteo-dlrm]}" \
    "$(python3 -c "print(${auc[criteo-dlrm]} - ${auc[criteo-mlp]})")"
  rm -rf "$data"
done
