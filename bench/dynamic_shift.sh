#!/usr/bin/env bash
# dynamic_shift.sh - a dynamic table forgetting the ids that stopped coming: 2 ps + 2 workers
# on 127.0.0.1 (TF_CONFIG + --job, async), synthetic click data whose ids of the dynamic
# table all change at --shift (data.shift_step: every id of a later batch, and of the test
# set, is one no earlier batch had). Four runs of the same job:
#   shifted    --steps steps, the ids change at --shift, rows idle --ttl steps evicted
#   kept       the same without steps_to_live: no row is ever evicted
#   new-only   new ids from step 1 on (shift_step 1: only step 0's batch has old ones), as
#              many steps
#   new-half   the same for only the steps after the shift
# Each prints its test AUC (on the new ids), each ps's resident memory (VmRSS, sampled every
# 0.5 s) before the shift, at its peak and at the end (the final checkpoint's copy aside),
# the dynamic table's rows and evictions on ps 0, and, for the shifted run, how many rows of
# its final checkpoint still hold an id of before the shift.
#
# usage: bench/dynamic_shift.sh [BUILD_DIR] [--steps N] [--shift N] [--ttl N] [--distinct N]
set -euo pipefail
BUILD=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  BUILD=$1
  shift
fi
STEPS=20000 SHIFT=10000 TTL=2000 DISTINCT=20000000
while [ $# -gt 0 ]; do
  case $1 in
    --steps) STEPS=$2; shift 2 ;;
    --shift) SHIFT=$2; shift 2 ;;
    --ttl) TTL=$2; shift 2 ;;
    --distinct) DISTINCT=$2; shift 2 ;;
    -h | --help) sed -n 's/^# usage: bench\/\(.*\)$/usage: \1/p' "$0"; exit 0 ;;
    *) echo "dynamic_shift.sh: unknown option $1" >&2; exit 64 ;;
  esac
done
PSFLOW=$(cd "$(dirname "$BUILD/psflow")" && pwd)/psflow
[ -x "$PSFLOW" ] || { echo "dynamic_shift.sh: $PSFLOW is missing: build first" >&2; exit 66; }
DIR=$(mktemp -d)
PIDS=()
trap 'kill -9 "${PIDS[@]}" 2>/dev/null || true; rm -rf "$DIR"' EXIT
cd "$DIR"

job() { # NAME SHIFT_STEP STEPS TTL(0: none)
  python3 - "$@" "$DISTINCT" <<'PY'
import json, sys
name, shift, steps, ttl, distinct = sys.argv[1:]
user = {"name": "user", "kind": "dynamic", "max_rows": 20000000, "dim": 16}
if int(ttl) > 0:
    user["steps_to_live"] = int(ttl)
json.dump({"name": name, "replicas": {"ps": 2, "worker": 2},
           "model": {"type": "mlp", "hidden": [32], "outputs": 2,
                     "embeddings": [user, {"name": "item", "vocab": 10000, "dim": 16}]},
           "data": {"format": "synthetic_ctr", "n": 8000000, "distinct_ids": int(distinct),
                    "zipf": 0.8, "shift_step": int(shift)},
           "optimizer": {"type": "adagrad", "learning_rate": 0.1},
           "training": {"mode": "async", "batch_size": 2000, "max_steps": int(steps)},
           "checkpoint": {"every_steps": 0, "every_secs": 0}}, sys.stdout)
PY
}

ports() {
  python3 -c '
import socket
s = [socket.socket() for _ in range(4)]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))'
}

tf_config() { # TYPE INDEX
  printf '{"cluster":{"ps":["127.0.0.1:%s","127.0.0.1:%s"],"worker":["127.0.0.1:%s","127.0.0.1:%s"]},"task":{"type":"%s","index":%s}}' \
    "${P[0]}" "${P[1]}" "${P[2]}" "${P[3]}" "$1" "$2"
}

run() { # NAME SHIFT_STEP STEPS TTL
  local name=$1 i
  job "$@" >"$name.json"
  read -r -a P <<<"$(ports)"
  PIDS=()
  for i in 0 1; do
    TF_CONFIG=$(tf_config ps $i) "$PSFLOW" ps --job "$name.json" --checkpoint-dir "$DIR/ck" \
      2>"$name-ps$i.log" &
    PIDS+=($!)
  done
  for i in 0 1; do
    TF_CONFIG=$(tf_config worker $i) "$PSFLOW" worker --job "$name.json" --checkpoint-dir \
      "$DIR/ck" --log-every 100 --output json >"$name-w$i.out" 2>"$name-w$i.log" &
    PIDS+=($!)
  done
  ( set +e
    while kill -0 "${PIDS[0]}" 2>/dev/null; do # step, then each ps's VmRSS in KiB
      s=$(grep -o 'step [0-9]*/' "$name-w0.log" 2>/dev/null | tail -n 1 | tr -dc 0-9)
      echo "${s:-0} $(awk '/VmRSS/{print $2}' "/proc/${PIDS[0]}/status" 2>/dev/null || echo 0)" \
        "$(awk '/VmRSS/{print $2}' "/proc/${PIDS[1]}/status" 2>/dev/null || echo 0)"
      sleep 0.5
    done ) >"$name.rss" &
  local sampler=$!
  # the workers first: a ps whose worker died would wait for it for good
  for pid in "${PIDS[@]:2}" "${PIDS[@]:0:2}"; do
    wait "$pid" || { echo "$name: a task exited $?" >&2; exit 1; }
  done
  wait $sampler
  "$PSFLOW" export "$DIR/ck/$name" --out "$name.safetensors" >/dev/null
  python3 - "$name" "$SHIFT" <<'PY'
import json, re, struct, sys
name, shift = sys.argv[1], int(sys.argv[2])
auc = json.load(open(name + "-w0.out")).get("test_auc")
rss = [tuple(map(int, l.split())) for l in open(name + ".rss") if len(l.split()) == 3]
last = max((x[0] for x in rss), default=0)
rss = [r for r in rss if r[1] > 0 and r[2] > 0 and r[0] < last]  # the end's copy aside
def mib(v): return "%.0f" % (v / 1024)
before = [max(r[1], r[2]) for r in rss if 0 < r[0] < shift] or [0]
after = [max(r[1], r[2]) for r in rss if r[0] >= shift] or [0]
peak = max(max(r[1], r[2]) for r in rss) if rss else 0
end = max(rss[-1][1], rss[-1][2]) if rss else 0
table = re.search(r"dynamic table user: (\d+) rows .*?, (\d+) evicted", open(name + "-ps0.log").read())
data = open(name + ".safetensors", "rb").read()
(n,) = struct.unpack("<Q", data[:8])
t = json.loads(data[8:8 + n])["user/embeddings/ids"]
b, e = t["data_offsets"]
ids = struct.unpack("<%dQ" % ((e - b) // 8), data[8 + n + b:8 + n + e])
old = sum(1 for i in ids if not (i >> 40) & 1)
print("%-9s test auc %.4f | ps RSS MiB (larger ps): steps before %d %s, from it %s, peak %s, end %s"
      " | ps 0: %s rows, %s evicted | rows of ids before the shift: %d of %d"
      % (name, auc, shift, mib(max(before)), mib(max(after)) if max(after) else "-", mib(peak), mib(end),
         table.group(1) if table else "?", table.group(2) if table else "?", old, len(ids)))
PY
  rm -rf "$DIR/ck" "$name.safetensors"
}

echo "dynamic_shift: 2 ps + 2 workers, async, ids of 1 dynamic table (dim 16) from $DISTINCT, Zipf 0.8, batch 2000, the ids change at step $SHIFT of $STEPS, steps_to_live $TTL"
run shifted "$SHIFT" "$STEPS" "$TTL"
run kept "$SHIFT" "$STEPS" 0
run new-only 1 "$STEPS" "$TTL"
run new-half 1 $((STEPS - SHIFT)) "$TTL"
