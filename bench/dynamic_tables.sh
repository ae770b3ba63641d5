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
# With --cluster each run is 2 ps + 2 workers on 127.0.0.1 instead (TF_CONFIG + --job, sync,
# a batch of B a worker, one pass), each dynamic table held half by each ps; then each ps's
# peak RSS is printed against the memory bound it states at its start (pf_footprint_ps_bytes),
# and the chief's figures are the run's.
#
# usage: bench/dynamic_tables.sh [BUILD_DIR] [--distinct N] [--examples N] [--max-rows N] [--min-count C] [--zipf S] [--batch B] [--cluster]
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
CLUSTER=
while [ $# -gt 0 ]; do
  case $1 in
    --distinct) DISTINCT=$2; shift 2 ;;
    --examples) EXAMPLES=$2; shift 2 ;;
    --max-rows) MAX_ROWS=$2; shift 2 ;;
    --min-count) MIN_COUNT=$2; shift 2 ;;
    --zipf) ZIPF=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --cluster) CLUSTER=1; shift ;;
    -h | --help) sed -n 's/^# usage: bench\/\(.*\)$/usage: \1/p' "$0"; exit 0 ;;
    *) echo "dynamic_tables.sh: unknown option $1" >&2; exit 64 ;;
  esac
done
PSFLOW=$(cd "$(dirname "$BUILD/psflow")" && pwd)/psflow
[ -x "$PSFLOW" ] || { echo "dynamic_tables.sh: $PSFLOW is missing: build first" >&2; exit 66; }
DIR=$(mktemp -d)
PIDS=()
# PIDS may be /usr/bin/time's: their children go too
trap 'for p in "${PIDS[@]}"; do pkill -9 -P "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done; rm -rf "$DIR"' EXIT

job() { # KIND -> the job spec (dynamic | hashed)
  python3 - "$1" "$DISTINCT" "$EXAMPLES" "$MAX_ROWS" "$MIN_COUNT" "$ZIPF" "$BATCH" "$CLUSTER" <<'PY'
import json, sys
kind, distinct, n, max_rows, min_count, zipf, batch, cluster = sys.argv[1:]
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
                        "seed": 11},
           **({"replicas": {"ps": 2, "worker": 2},
               "training": {"mode": "sync", "batch_size": int(batch),
                            "max_steps": int(n) // (2 * int(batch)), "seed": 11},
               "checkpoint": {"every_steps": 0, "every_secs": 0}} if cluster else {})},
          sys.stdout)
PY
}

# cluster KIND: 2 ps + 2 workers of $DIR/KIND.json; the chief's result in $DIR/KIND.out, each
# ps's peak RSS (KiB) in $DIR/KIND-ps<i>.rss and its log in $DIR/KIND-ps<i>.log
cluster() {
  local kind=$1 i P
  read -r -a P <<<"$(python3 -c '
import socket
s = [socket.socket() for _ in range(4)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))')"
  tf() { printf '{"cluster":{"ps":["127.0.0.1:%s","127.0.0.1:%s"],"worker":["127.0.0.1:%s","127.0.0.1:%s"]},"task":{"type":"%s","index":%s}}' "${P[0]}" "${P[1]}" "${P[2]}" "${P[3]}" "$1" "$2"; }
  PIDS=()
  for i in 0 1; do
    TF_CONFIG=$(tf ps $i) /usr/bin/time -f '%M' -o "$DIR/$kind-ps$i.rss" "$PSFLOW" ps \
      --job "$DIR/$kind.json" --checkpoint-dir "$DIR/ck" 2>"$DIR/$kind-ps$i.log" &
    PIDS+=($!)
  done
  for i in 0 1; do
    TF_CONFIG=$(tf worker $i) "$PSFLOW" worker --job "$DIR/$kind.json" --checkpoint-dir "$DIR/ck" \
      --output json --log-every 1000000000 >"$DIR/$kind-w$i.out" 2>"$DIR/$kind-w$i.err" &
    PIDS+=($!)
  done
  # the workers first: a sync ps whose worker died would wait for it for good
  for pid in "${PIDS[@]:2}" "${PIDS[@]:0:2}"; do
    wait "$pid" || { tail -n 5 "$DIR/$kind"-w*.err "$DIR/$kind"-ps*.log >&2; exit 1; }
  done
  cp "$DIR/$kind-w0.out" "$DIR/$kind.out"
  cat "$DIR/$kind"-w*.err >"$DIR/$kind.err"
  for i in 0 1; do
    { grep -o 'memory bound [0-9]* bytes' "$DIR/$kind-ps$i.log" || true; } | head -n 1 | tr -dc 0-9 \
      >"$DIR/$kind-ps$i.bound"
    grep -h 'dynamic table' "$DIR/$kind-ps$i.log" | sed 's/^psflow /  /' || true
  done
  rm -rf "$DIR/ck"
}

echo "dynamic_tables: $EXAMPLES examples (and $((EXAMPLES / 5)) test ones), 2 features of $DISTINCT ids each from a 2^40 space (zipf $ZIPF), tables of $MAX_ROWS rows, min_count $MIN_COUNT"
[ -n "$CLUSTER" ] && echo "dynamic_tables: each run on 2 ps + 2 workers (sync, batch $BATCH a worker)"
for kind in dynamic hashed; do
  job "$kind" > "$DIR/$kind.json"
  if [ -n "$CLUSTER" ]; then
    cluster "$kind"
    continue
  fi
  /usr/bin/time -f '%M' -o "$DIR/$kind.rss" "$PSFLOW" train "$DIR/$kind.json" --output json --log-every 1000000000 \
    > "$DIR/$kind.out" 2> "$DIR/$kind.err" || { cat "$DIR/$kind.err" >&2; exit 1; }
  grep -E "dynamic table|table (user|item):" "$DIR/$kind.err" | sed 's/^psflow train: /  /' || true
done
BATCH=$BATCH python3 - "$DIR" "$CLUSTER" <<'PY'
import json, os, sys
d, cluster = sys.argv[1], sys.argv[2]
res = {k: json.load(open(f"{d}/{k}.out")) for k in ("dynamic", "hashed")}
if cluster:
    for k in res:
        for i in (0, 1):
            peak = int(open(f"{d}/{k}-ps{i}.rss").read().split()[-1]) * 1024
            bound = int(open(f"{d}/{k}-ps{i}.bound").read() or 0)
            print(f"  {k:8s} ps {i}: peak RSS {peak / 2**20:,.0f} MiB, stated bound {bound / 2**20:,.0f} MiB"
                  f" ({'within' if peak <= bound else 'OVER'} it)")
rss = {k: (0 if cluster else int(open(f"{d}/{k}.rss").read().split()[-1]) / 1024) for k in res}
bayes = res["dynamic"].get("bayes_auc")
print(f"  Bayes-optimal test AUC {bayes:.4f}" if bayes is not None else "  Bayes-optimal AUC: unknown")
def speed(r):  # psflow train's examples/s, or a chief's steps over its seconds
    if "examples_per_sec" in r:
        return r["examples_per_sec"]
    return r["steps"] * 2 * int(os.environ.get("BATCH", "1")) / r["seconds"] if r.get("seconds") else float("nan")
for k, r in res.items():
    print(f"  {k:8s} test auc {r['test_auc']:.4f}  logloss {r.get('test_logloss', float('nan')):.4f}  "
          f"{speed(r):,.0f} examples/s" + ("" if cluster else f"  peak RSS {rss[k]:,.0f} MiB"))
print(f"  dynamic - hashed test auc: {res['dynamic']['test_auc'] - res['hashed']['test_auc']:+.4f}; "
      f"examples/s dynamic / hashed: {speed(res['dynamic']) / speed(res['hashed']):.2f}")
PY
