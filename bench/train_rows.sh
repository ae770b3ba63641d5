#!/usr/bin/env bash
# train_rows.sh - the fused row step in training: a synthetic click-through job on a static
# cluster of 2 ps + 2 workers on 127.0.0.1, with each step's push also pulling the next
# batch's rows (one round trip a step, the default) against PSFLOW_ROW_FUSE=off (the batch's
# rows pulled in a round trip of their own, then the push: two), sync and async.
#
# The job: 3 tables (user 1,000,000, item 200,000, site 10,000 rows) of dim 16 split over
# both ps, a softmax over their vectors, batch 250 per worker, adagrad, no evaluation until
# the end. Each run prints examples/s over the chief's training time (the seconds of its
# --output json result: examples are steps x batch, and x 2 workers in sync, where each step
# takes both workers' batches). The two settings alternate round by round, so a noisy neighbour slows
# both alike; the figure is each setting's median, and the ratio fused / two round trips.
#
# usage: bench/train_rows.sh [BUILD_DIR] [--steps N] [--rounds R] [--modes sync,async]
set -euo pipefail
BUILD=build
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  BUILD=$1
  shift
fi
STEPS=3000
ROUNDS=3
MODES=sync,async
while [ $# -gt 0 ]; do
  case $1 in
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    -h | --help) sed -n 's/^# usage: bench\/\(.*\)$/usage: \1/p' "$0"; exit 0 ;;
    *) echo "train_rows.sh: unknown option $1" >&2; exit 64 ;;
  esac
done
PSFLOW=$BUILD/psflow
[ -x "$PSFLOW" ] || { echo "train_rows.sh: $PSFLOW is missing: build first" >&2; exit 66; }
DIR=$(mktemp -d)
trap 'pkill -f -- "$DIR" 2>/dev/null || true; rm -rf "$DIR"' EXIT

job() { # MODE -> the job spec
  python3 - "$1" "$STEPS" <<'PY'
import json, sys
mode, steps = sys.argv[1], int(sys.argv[2])
json.dump({"name": "rows-" + mode, "replicas": {"ps": 2, "worker": 2},
           "model": {"type": "softmax", "outputs": 2,
                     "embeddings": [{"name": "user", "vocab": 1000000, "dim": 16},
                                    {"name": "item", "vocab": 200000, "dim": 16},
                                    {"name": "site", "vocab": 10000, "dim": 16}]},
           "data": {"format": "synthetic_ctr", "n": 200000, "zipf": 1.6},
           "optimizer": {"type": "adagrad", "learning_rate": 1.0},
           "training": {"mode": mode, "batch_size": 250, "max_steps": steps},
           "placement": {"strategy": "greedy",
                         "partitioner": {"type": "fixed_shards", "num_shards": 2}}},
          sys.stdout)
PY
}

tf_config() { # TYPE INDEX PS_PORTS WORKER_PORTS
  python3 -c 'import json, sys
t, i, ps, w = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(","), sys.argv[4].split(",")
a = lambda ports: ["127.0.0.1:" + p for p in ports]
print(json.dumps({"cluster": {"ps": a(ps), "worker": a(w)}, "task": {"type": t, "index": i}}))' "$@"
}

run() { # MODE FUSE -> examples/s of one run
  local mode=$1 fuse=$2 run_dir pids=() ports
  run_dir=$(mktemp -d "$DIR/run.XXXXXX")
  read -r -a ports <<<"$(python3 -c 'import socket
s = [socket.socket() for _ in range(4)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')"
  local ps_ports="${ports[0]},${ports[1]}" w_ports="${ports[2]},${ports[3]}"
  for i in 0 1; do
    TF_CONFIG=$(tf_config ps $i "$ps_ports" "$w_ports") PSFLOW_ROW_FUSE=$fuse \
      "$PSFLOW" ps --job "$DIR/$mode.json" --checkpoint-dir "$run_dir/ckpt" 2>"$run_dir/ps$i.log" &
    pids+=($!)
  done
  for i in 0 1; do
    TF_CONFIG=$(tf_config worker $i "$ps_ports" "$w_ports") PSFLOW_ROW_FUSE=$fuse \
      "$PSFLOW" worker --job "$DIR/$mode.json" --checkpoint-dir "$run_dir/ckpt" \
      --log-every 1000000 --output json >"$run_dir/worker$i.out" 2>"$run_dir/worker$i.log" &
    pids+=($!)
  done
  local rc=0
  for pid in "${pids[@]:2}"; do wait "$pid" || rc=$?; done # the workers, then the ps
  [ "$rc" = 0 ] || kill "${pids[@]:0:2}" 2>/dev/null || true
  for pid in "${pids[@]:0:2}"; do wait "$pid" || rc=$?; done
  if [ "$rc" != 0 ]; then
    echo "train_rows.sh: a task of the $mode run (PSFLOW_ROW_FUSE=$fuse) exited $rc:" >&2
    tail -n 5 "$run_dir"/*.log >&2
    exit 1
  fi
  python3 - "$run_dir/worker0.out" "$mode" <<'PY'
import json, sys
r, mode = json.load(open(sys.argv[1])), sys.argv[2]
print(r["steps"] * 250 * (2 if mode == "sync" else 1) / r["seconds"])
PY
  rm -rf "$run_dir"
}

IFS=, read -r -a modes <<<"$MODES"
for mode in "${modes[@]}"; do job "$mode" >"$DIR/$mode.json"; done
echo "2 ps + 2 workers on 127.0.0.1, synthetic CTR (3 tables x dim 16, 1.21 M rows, batch 250 a worker, adagrad), $STEPS steps, $ROUNDS rounds"
for r in $(seq 1 "$ROUNDS"); do
  for mode in "${modes[@]}"; do
    for fuse in on off; do run "$mode" "$fuse" >>"$DIR/rate-$mode-$fuse"; done
  done
  echo "round $r of $ROUNDS done" >&2
done
python3 - "$DIR" "${modes[@]}" <<'PY'
import statistics, sys
d, modes = sys.argv[1], sys.argv[2:]
print("%-6s %16s %16s %8s   (each run: fused / two)" % ("mode", "fused ex/s", "two trips ex/s", "ratio"))
for m in modes:
    on = [float(x) for x in open("%s/rate-%s-on" % (d, m))]
    off = [float(x) for x in open("%s/rate-%s-off" % (d, m))]
    pairs = " ".join("%.2f" % (a / b) for a, b in zip(on, off))
    print("%-6s %16.0f %16.0f %8.2f   (%s)" % (m, statistics.median(on), statistics.median(off),
                                              statistics.median(on) / statistics.median(off), pairs))
PY
