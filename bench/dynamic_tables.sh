#!/usr/bin/env bash
# dynamic_tables.sh - what collisions cost: the same synthetic click data trained by
# `psflow train` once with dynamic tables (a row per 64-bit id, ids admitted at their
# min_count-th sighting, at most max_rows rows a table) and once with fixed tables of
# max_rows rows each, every id hashed into them (`"hash": true`: ids share rows).
#
# The data: 2 features (user, item), one id each per example, drawn Zipf-distributed from
# --distinct ids each spread over a 2^40 space; a click with probability sigmoid(bias + the
# ids' true weights). Both runs read exactly the same examples (the generator draws the same
# ids and labels; only the rows the ids go to differ). The model: dim 16 tables, an MLP of
# 32, adagrad, one pass over the training set. Each run prints its test AUC (and the
# Bayes-optimal one, from the dynamic run's true ids), examples/s, peak RSS and, for the
# dynamic run, each table's rows, admissions, refusals and evictions and the distinct ids the
# training set has.
#
# usage: bench/dynamic_tables.sh [BUILD_DIR] [--distinct N] [--examples N] [--max-rows N] [--min-count C] [--zipf S] [--batch B]
set -euo pipefail
BUILD=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  BUILD=$1
  shift
fi
DISTINCT=5000000
EXAMPLES=4000000
MAX_ROWS=1000000
MIN_COUNT=2
ZIPF=1.05
BATCH=1000
while [ $# -gt 0 ]; do
  case $1 in
    --distinct) DISTINCT=$2; shift 2 ;;
    --examples) EXAMPLES=$2; shift 2 ;;
    --max-rows) MAX_ROWS=$2; shift 2 ;;
    --min-count) MIN_COUNT=$2; shift 2 ;;
    --zipf) ZIPF=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    -h | --help) sed -n 's/^# usage: bench\/\(.*\)$/usage: \1/p' "$0"; exit 0 ;;
    *) echo "dynamic_tables.sh: unknown option $1" >&2; exit 64 ;;
  esac
done
PSFLOW=$BUILD/psflow
[ -x "$PSFLOW" ] || { echo "dynamic_tables.sh: $PSFLOW is missing: build first" >&2; exit 66; }
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

job() { # KIND -> the job spec (dynamic | hashed)
  python3 - "$1" "$DISTINCT" "$EXAMPLES" "$MAX_ROWS" "$MIN_COUNT" "$ZIPF" "$BATCH" <<'PY'
import json, sys
kind, distinct, n, max_rows, min_count, zipf, batch = sys.argv[1:]
def table(name):
    if kind == "dynamic":
        t = {"name": name, "kind": "dynamic", "max_rows": int(max_rows), "dim": 16}
        if int(min_count) > 1:
            t["min_count"] = int(min_count)
        return t
    return {"name": name, "vocab": int(max_rows), "dim": 16, "hash": True}
json.dump({"name": "tables-" + kind,
           "model": {"type": "mlp", "hidden": [32], "outputs": 2,
                     "embeddings": [table("user"), table("item")]},
           "data": {"format": "synthetic_ctr", "n": int(n), "distinct_ids": int(distinct),
                    "zipf": float(zipf), "signal": 1.0, "bias": -1.5},
           "optimizer": {"type": "adagrad", "learning_rate": 0.1},
           "training": {"batch_size": int(batch), "max_steps": int(n) // int(batch),
                        "seed": 11}},
          sys.stdout)
PY
}

echo "dynamic_tables: $EXAMPLES examples (and $((EXAMPLES / 5)) test ones), 2 features of $DISTINCT ids each from a 2^40 space (zipf $ZIPF), tables of $MAX_ROWS rows, min_count $MIN_COUNT"
for kind in dynamic hashed; do
  job "$kind" > "$DIR/$kind.json"
  /usr/bin/time -f '%M' -o "$DIR/$kind.rss" "$PSFLOW" train "$DIR/$kind.json" --output json --log-every 1000000000 \
    > "$DIR/$kind.out" 2> "$DIR/$kind.err" || { cat "$DIR/$kind.err" >&2; exit 1; }
  grep -E "dynamic table|table (user|item):" "$DIR/$kind.err" | sed 's/^psflow train: /  /' || true
done
python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
res = {k: json.load(open(f"{d}/{k}.out")) for k in ("dynamic", "hashed")}
rss = {k: int(open(f"{d}/{k}.rss").read().split()[-1]) / 1024 for k in res}
bayes = res["dynamic"].get("bayes_auc")
print(f"  Bayes-optimal test AUC {bayes:.4f}" if bayes is not None else "  Bayes-optimal AUC: unknown")
for k, r in res.items():
    print(f"  {k:8s} test auc {r['test_auc']:.4f}  logloss {r['test_logloss']:.4f}  "
          f"{r['examples_per_sec']:,.0f} examples/s  peak RSS {rss[k]:,.0f} MiB")
print(f"  dynamic - hashed test auc: {res['dynamic']['test_auc'] - res['hashed']['test_auc']:+.4f}; "
      f"examples/s dynamic / hashed: {res['dynamic']['examples_per_sec'] / res['hashed']['examples_per_sec']:.2f}")
PY
