#!/usr/bin/env bash
# ps_memory.sh - the peak RSS of each ps task of a real static cluster on 127.0.0.1,
# against the bound the ps states at start (pf_footprint_ps_bytes, psflow/footprint.h).
#
#   bench/ps_memory.sh [-b BUILD] [-o sgd|adam] [-p N_PS] [-w WORKERS] [-m sync|async]
#                      [-s STEPS] HIDDEN...
#
# e.g. `bench/ps_memory.sh -o adam -p 2 8192 8192` runs a 784-8192-8192-10 MLP on two ps
# tasks and one worker for 5 steps of Fashion-MNIST. Each ps runs under /usr/bin/time,
# whose "maximum resident set size" is the kernel's ru_maxrss (the VmHWM of
# /proc/PID/status at exit). Prints one line per ps: held bytes, bound, its CPU time (user
# + system) per training step, peak, peak/bound; and each worker's wall time per step.
set -euo pipefail
build=build opt=sgd n_ps=1 workers=1 mode=async steps=5
while getopts b:o:p:w:m:s: f; do
  case $f in
  b) build=$OPTARG ;;
  o) opt=$OPTARG ;;
  p) n_ps=$OPTARG ;;
  w) workers=$OPTARG ;;
  m) mode=$OPTARG ;;
  s) steps=$OPTARG ;;
  *) exit 64 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [options] HIDDEN..." >&2; exit 64; }
bin=$(cd "$build" && pwd)/psflow
work=$(mktemp -d)
pids=()
# On exit, every process started from this run's folder (the tasks under /usr/bin/time).
trap 'pkill -f -- "$work" 2>/dev/null || true; rm -rf "$work"' EXIT

python3 - "$work/job.json" "$opt" "$n_ps" "$workers" "$mode" "$steps" "$@" <<'PY'
import json, sys
out, opt, n_ps, workers, mode, steps, *hidden = sys.argv[1:]
d = "/usr/share/datasets/fashion-mnist/"
json.dump({
    "name": "psmem",
    "replicas": {"ps": int(n_ps), "worker": int(workers)},
    "model": {"type": "mlp", "inputs": 784, "hidden": [int(h) for h in hidden],
              "outputs": 10, "activation": "relu"},
    "data": {"format": "idx",
             "train": [d + "train-images-idx3-ubyte.gz", d + "train-labels-idx1-ubyte.gz"],
             "test": [d + "t10k-images-idx3-ubyte.gz", d + "t10k-labels-idx1-ubyte.gz"]},
    "optimizer": {"type": opt, "learning_rate": 0.001},
    "training": {"mode": mode, "batch_size": 100, "max_steps": int(steps), "seed": 1,
                 "eval_every_steps": 0},
}, open(out, "w"))
PY

ports=$(python3 -c '
import socket, sys
s = [socket.socket() for _ in range(int(sys.argv[1]))]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))' $((n_ps + workers)))
read -r -a port <<<"$ports"
ps_addr=$(for i in $(seq 0 $((n_ps - 1))); do printf '"127.0.0.1:%s",' "${port[$i]}"; done)
w_addr=$(for i in $(seq 0 $((workers - 1))); do printf '"127.0.0.1:%s",' "${port[$((n_ps + i))]}"; done)
tf() { printf '{"cluster":{"ps":[%s],"worker":[%s]},"task":{"type":"%s","index":%d}}' \
  "${ps_addr%,}" "${w_addr%,}" "$1" "$2"; }

for i in $(seq 0 $((n_ps - 1))); do
  TF_CONFIG=$(tf ps "$i") /usr/bin/time -f '%U %S %M' -o "$work/ps$i.rss" ${PS_WRAP:-} \
    "$bin" ps --job "$work/job.json" --checkpoint-dir "$work/ckpt" --exit-grace 30 \
    2>"$work/ps$i.log" &
  pids+=($!)
done
for i in $(seq 0 $((workers - 1))); do
  TF_CONFIG=$(tf worker "$i") /usr/bin/time -f '%e %M' -o "$work/worker$i.rss" \
    "$bin" worker --job "$work/job.json" --checkpoint-dir "$work/ckpt" \
    >/dev/null 2>"$work/worker$i.log" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
pids=()
if [ "$rc" != 0 ]; then
  tail -n 20 "$work"/*.log >&2
  echo "a task failed ($rc)" >&2
  exit 1
fi
model="784-$(IFS=-; echo "$*")-10"
for i in $(seq 0 $((n_ps - 1))); do
  # "serving N shards (B bytes) ... memory bound M bytes"
  held=$(sed -n 's/.*serving [0-9]* shards (\([0-9]*\) bytes).*/\1/p' "$work/ps$i.log")
  bound=$(sed -n 's/.*memory bound \([0-9]*\) bytes.*/\1/p' "$work/ps$i.log")
  read -r user sys peak < <(tail -n 1 "$work/ps$i.rss")
  python3 -c 'import sys
m, o, md, i, h, b, p, u, s, n = sys.argv[1:]
h, p = int(h), int(p) * 1024
b = int(b) if b else 0
cpu = (float(u) + float(s)) / int(n) * 1000
print("%s %s %s ps %s: holds %.1f MB, bound %s, cpu %.2f ms/step, peak RSS %.1f MiB, "
      "peak/bound %s" % (m, o, md, i, h / 1e6, "%.1f MiB" % (b / 2**20) if b else "(not logged)",
                          cpu, p / 2**20, "%.2f" % (p / b) if b else "-"))' \
    "$model" "$opt" "$mode" "$i" "$held" "$bound" "$peak" "$user" "$sys" "$steps"
done
for i in $(seq 0 $((workers - 1))); do
  read -r wall peak < <(tail -n 1 "$work/worker$i.rss")
  echo "$model $opt $mode worker $i: wall $(python3 -c "print('%.1f' % ($wall / $steps * 1000))") ms/step (start included), peak RSS $((peak / 1024)) MiB"
done
