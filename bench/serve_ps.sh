#!/usr/bin/env bash
# Serving from read-only ps tasks (psflow serve --ps, docs/serving.md section 7) against the
# same checkpoint served whole by one process, in the same run.
#
# Trains an embedding model (one table of VOCAB [1,000,000] rows x DIM [16], mean of up to 8
# ids, an MLP [64] on top, two classes) for STEPS [100] steps on 2 ps + 1 worker, ids drawn
# zipf-like over the whole table. Then serves its final checkpoint twice on 127.0.0.1:
#   whole: psflow serve holding the model (the fastest form, while the model fits);
#   ps:    psflow serve --ps over 2 read-only ps tasks restored from the same checkpoint.
# With build/bench/serve_load (bench/serve_load.c), alternately against each: closed loop
# batch 1 (1 connection) and batch 100 (1 connection), and open loop batch 1 at RATE [500]
# requests/s. It prints requests/s, p50 and p99 of each, the ratios ps / whole, and each
# server's resident memory (VmRSS) beside the table's size: the ps form's server holds one
# pass's rows, not the table.
#
# Exits non-zero only on a broken run (a setup error, a request that failed or got another
# status than 200). Timings never fail it.
#
# usage: bench/serve_ps.sh [BUILD_DIR]     (default: build)
#   environment: VOCAB [1000000]; DIM [16]; STEPS [100]; SECONDS_PER_PHASE [5]; RATE [500]
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
psflow=$build/psflow
load=$build/bench/serve_load
vocab=${VOCAB:-1000000}
dim=${DIM:-16}
steps=${STEPS:-100}
phase=${SECONDS_PER_PHASE:-5}
rate=${RATE:-500}
die() {
  echo "serve_ps.sh: $*" >&2
  exit 1
}
[ -x "$psflow" ] || die "$psflow not built"
[ -x "$load" ] || die "$load not built (target bench_serve_load)"

work=$(mktemp -d "${TMPDIR:-/tmp}/psflow-serve-ps-bench.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
export PSFLOW_TOKEN=serve-ps-bench-token
job=serve-ps-bench

free_ports() {
  python3 -c 'import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "$1"
}
# tf_config TYPE INDEX PS_PORTS(comma) WORKER_PORTS(comma, may be empty)
tf_config() {
  python3 -c 'import json, sys
t, i, ps, w = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
addr = lambda ports: ["127.0.0.1:%s" % p for p in ports.split(",") if p]
print(json.dumps({"cluster": {"ps": addr(ps), "worker": addr(w)}, "task": {"type": t, "index": i}}))' "$@"
}
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
wait_healthy() { # ADDR PID LOG
  for _ in $(seq 300); do
    curl -sf "http://$1/healthz" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { cat "$3" >&2; die "psflow serve exited"; }
    sleep 0.1
  done
  die "psflow serve at $1 did not become healthy: $(tail -3 "$3")"
}

echo "== machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); commit $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo '?')"

# --- data and training -------------------------------------------------------------------------
python3 - "$work" "$vocab" <<'PY'
import random, sys
work, vocab = sys.argv[1], int(sys.argv[2])
rng = random.Random(5)
def draw():  # zipf-like over the whole table: a few ids often, most rarely
    return min(vocab - 1, int(vocab ** rng.random()) - 1)
def write(path, n):
    with open(path, "w") as f:
        for _ in range(n):
            ids = sorted(set(draw() for _ in range(rng.randint(1, 8))))
            y = 1 if sum(i % 5 for i in ids) / len(ids) > 2 else 0
            f.write("%d %s\n" % (y, " ".join("%d:1" % i for i in ids)))
write(work + "/train.svm", 20000)
write(work + "/test.svm", 2000)
# request bodies: the first 1 and 100 test examples as named instances
rows = []
for line in open(work + "/test.svm"):
    rows.append([int(t.split(":")[0]) for t in line.split()[1:]])
for b in (1, 100):
    inst = ",".join('{"tokens":[%s]}' % ",".join(map(str, r)) for r in rows[:b])
    open("%s/body-%d.json" % (work, b), "w").write('{"instances":[%s]}' % inst)
PY
cat >"$work/job.json" <<EOF
{"name": "$job", "replicas": {"ps": 2, "worker": 1},
 "model": {"type": "mlp", "hidden": [64], "outputs": 2, "activation": "relu",
           "embeddings": [{"name": "tokens", "vocab": $vocab, "dim": $dim, "combiner": "mean", "max_ids": 8}]},
 "data": {"format": "libsvm", "index_base": 0, "train": ["$work/train.svm"], "test": ["$work/test.svm"]},
 "optimizer": {"type": "adagrad", "learning_rate": 0.05},
 "training": {"mode": "async", "batch_size": 100, "max_steps": $steps, "seed": 1, "eval_every_steps": 0},
 "checkpoint": {"every_steps": $steps, "keep": 2}}
EOF
read -r p0 p1 w0 <<<"$(free_ports 3)"
t0=$SECONDS
for i in 0 1; do
  TF_CONFIG=$(tf_config ps $i "$p0,$p1" "$w0") \
    "$psflow" ps --job "$work/job.json" --checkpoint-dir "$work/ckpt" 2>"$work/ps$i.log" &
  pids+=($!)
done
TF_CONFIG=$(tf_config worker 0 "$p0,$p1" "$w0") \
  "$psflow" worker --job "$work/job.json" --checkpoint-dir "$work/ckpt" --output json \
  >"$work/worker.out" 2>"$work/worker.log" || { tail -5 "$work/worker.log" >&2; die "training failed"; }
wait "${pids[0]}" "${pids[1]}" || die "a ps exited non-zero"
pids=()
ckpt=$work/ckpt/$job/step-$steps
[ -f "$ckpt/manifest.json" ] || die "no checkpoint at $ckpt"
table_mib=$(python3 -c "print('%.1f' % ($vocab * $dim * 4 / 2**20))")
echo "== trained a ${vocab}x${dim} table (${table_mib} MiB of values) + MLP [64] for $steps steps on 2 ps in $((SECONDS - t0)) s"

# --- the two servers ---------------------------------------------------------------------------
read -r r0 r1 whole_port ps_port <<<"$(free_ports 4)"
for i in 0 1; do
  TF_CONFIG=$(tf_config ps $i "$r0,$r1" "") \
    "$psflow" ps --read-only --job "$work/job.json" --checkpoint-dir "$work/ckpt" 2>"$work/ro$i.log" &
  pids+=($!)
done
for _ in $(seq 300); do
  grep -q "listening" "$work/ro0.log" "$work/ro1.log" 2>/dev/null &&
    [ "$(grep -l listening "$work/ro0.log" "$work/ro1.log" | wc -l)" = 2 ] && break
  sleep 0.1
done
"$psflow" serve --model "$job" --checkpoint-dir "$work/ckpt" --listen "127.0.0.1:$whole_port" \
  --max-batch 100 2>"$work/whole.log" &
whole_pid=$!
pids+=("$whole_pid")
"$psflow" serve --model "$job" --checkpoint-dir "$work/ckpt" --listen "127.0.0.1:$ps_port" \
  --max-batch 100 --ps "127.0.0.1:$r0,127.0.0.1:$r1" 2>"$work/ps.log" &
ps_pid=$!
pids+=("$ps_pid")
wait_healthy "127.0.0.1:$whole_port" "$whole_pid" "$work/whole.log"
wait_healthy "127.0.0.1:$ps_port" "$ps_pid" "$work/ps.log"
echo "== whole: $(grep -m1 'serving step' "$work/whole.log" | cut -c1-120)"
echo "== ps:    $(grep -m1 'serving step' "$work/ps.log" | cut -c1-120)"

results=$work/results.txt
: >"$results"
# run FORM NAME BATCH MODE ARGS...
run() {
  local form=$1 name=$2 batch=$3 mode=$4 port line status requests failed
  shift 4
  port=$whole_port
  [ "$form" = ps ] && port=$ps_port
  line=$("$load" "$mode" --addr "127.0.0.1:$port" --model "$job" --body "$work/body-$batch.json" "$@") ||
    die "serve_load failed ($form $name)"
  requests=$(sed -n 's/.* requests=\([0-9]*\).*/\1/p' <<<"$line")
  status=$(sed -n 's/.* status=\([^ ]*\).*/\1/p' <<<"$line")
  failed=$(sed -n 's/.* failed=\([0-9]*\).*/\1/p' <<<"$line")
  if [ "$failed" != 0 ] || [ "$status" != "200:$requests" ]; then
    die "$form $name: status $status, failed $failed"
  fi
  echo "   $form $name: $line"
  echo "$form $name $line" >>"$results"
}
for form in whole ps; do # warm-up
  "$load" closed --addr "127.0.0.1:$([ $form = ps ] && echo "$ps_port" || echo "$whole_port")" \
    --model "$job" --body "$work/body-1.json" --connections 2 --seconds 1 >/dev/null || die "warm-up"
done
echo "== closed loop and open loop, the two forms alternating"
for form in whole ps; do run "$form" closed-b1 1 closed --connections 1 --seconds "$phase"; done
for form in ps whole; do run "$form" closed-b100 100 closed --connections 1 --seconds "$phase"; done
for form in whole ps; do run "$form" "open-b1-$rate" 1 open --rate "$rate" --seconds "$phase"; done
whole_rss=$(rss_kib "$whole_pid")
ps_rss=$(rss_kib "$ps_pid")
ro_rss=$(($(rss_kib "${pids[0]}") + $(rss_kib "${pids[1]}")))

echo
echo "== summary: psflow serve --ps (2 read-only ps) against the model served whole, same run"
python3 - "$results" "$whole_rss" "$ps_rss" "$ro_rss" "$table_mib" <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    form, name, rest = line.split(" ", 2)
    kv = dict(re.findall(r"(\w+)=(\S+)", rest))
    rows[(form, name)] = kv
names = []
for form, name in rows:
    if name not in names:
        names.append(name)
print("%-14s %12s %12s %9s %9s %9s %9s %8s %8s" % ("phase", "whole req/s", "ps req/s", "whole p50",
      "ps p50", "whole p99", "ps p99", "req/s", "p50"))
for n in names:
    w, p = rows[("whole", n)], rows[("ps", n)]
    print("%-14s %12.1f %12.1f %9.3f %9.3f %9.3f %9.3f %8.2f %8.2f" % (
        n, float(w["rps"]), float(p["rps"]), float(w["p50_ms"]), float(p["p50_ms"]),
        float(w["p99_ms"]), float(p["p99_ms"]), float(p["rps"]) / float(w["rps"]),
        float(p["p50_ms"]) / float(w["p50_ms"])))
print("ratios: ps / whole (req/s: higher is better for ps; p50: lower is better for ps); times in ms")
whole, ps, ro, table = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
print("resident memory: whole server %.1f MiB; ps-form server %.1f MiB; its 2 read-only ps "
      "together %.1f MiB; the table's values %.1f MiB" % (whole / 1024, ps / 1024, ro / 1024, table))
PY
echo "== load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
