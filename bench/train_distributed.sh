#!/usr/bin/env bash
# Distributed step efficiency: examples/s of `psflow train` (one process) against a static
# cluster on 127.0.0.1 started the way users start one (`psflow ps` + `psflow worker` with
# TF_CONFIG and --job), on the same job (Fashion-MNIST, batch 100 per worker, SGD unless
# --optimizer says otherwise; or, with --models ctr, bench/train_vocab.sh's click-through
# job at 1,000,000 rows per table, batch 500, adagrad). Runs are interleaved: one process, then the cluster, repeated
# --repeats times; the ratio printed is the median over those pairs of (cluster's examples/s
# over the one process's of the same pair). Each side's rate is measured between two of its
# own progress lines (after the first fifth of the run, to the end), so start-up, data
# loading, the first pull and the step-0 checkpoint are not counted on either side; a
# cluster's rate is the sum of its workers' rates.
#
# Peak RSS (VmHWM, from /usr/bin/time) of every process is printed next to its bound: a
# worker against one process's peak (the same pair's) + 1.5 x the model bytes (4 bytes per
# parameter); a ps against the memory formula `psflow ps` checks itself against
# (pf_footprint_ps_bytes, read from the refusal `psflow ps --memory 1` prints).
#
# The workers share their memory with the ps on this host (docs/distributed.md "Same host", --shm off:
# everything over the socket); --ps N spreads the model over N ps tasks, each measured
# against its own formula. --isolate pid runs every ps and worker in a PID namespace of its
# own (unshare, root), as the pods of one node run: the segment then reaches a ps only handed
# over through PSFLOW_SHM_DIR (a folder of the run). --isolate net adds a network namespace
# per task, joined by a bridge in a namespace of the run's own (veth pairs, 10.231.0.0/24),
# as Docker Compose runs its services: each task then sees the others at addresses that are
# not its own.
#
# --baseline profile-off measures the step breakdown's cost instead (docs/profile.md): each
# pair is the same cluster twice, first with PSFLOW_PROFILE=off (no phase counted, no clock
# read for it), then as users run it; the ratio is on / off (target: >= 0.99).
#
# Targets (issue 20): 1 ps + 1 worker >= 0.7 of one process on 784-1024-1024-10 and
# 784-4096-4096-10, >= 0.6 on 784-256-256-10; async 1 ps + 2 workers >= 0.7 on
# 784-256-256-10; every worker within its bound.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/train_distributed.sh [BUILD_DIR] [options]

  --models LIST     hidden widths, comma-separated, each an MLP 784-W-W-10, or ctr: the
                    synthetic click-through job (3 tables of 1,000,000 rows of dim 16, a
                    softmax over their vectors, batch 500, adagrad whatever --optimizer
                    says; workers pull and push the batch's rows) [256,1024,4096]
  --modes LIST      cluster shapes: 1w (1 ps + 1 worker), 2w-async, 2w-sync [1w,2w-async,2w-sync]
  --repeats N       interleaved pairs per model and mode; the median is printed [3]
  --steps-scale X   multiply each model's step count by X (0.01 for a smoke run) [1]
  --optimizer NAME  sgd or adam [sgd]
  --ps N            ps tasks of every cluster, the model spread over them (greedy) [1]
  --prefetch on|off the async clusters' training.prefetch (docs/distributed.md "Overlap") [off]
  --shm on|off      the shared segment of a worker and a ps on one host (PSFLOW_SHM,
                    docs/distributed.md "Overlap") [on]
  --baseline one|profile-off
                    what each cluster run is measured against: one process (`psflow train`),
                    or the same cluster with the step breakdown off (PSFLOW_PROFILE=off) [one]
  --isolate none|pid|net
                    pid: every cluster task in a PID namespace of its own, the segment
                    handed over through PSFLOW_SHM_DIR (needs root: unshare); net: in a
                    network namespace of its own as well, the Compose layout (ip netns) [none]
  --help            this text

BUILD_DIR defaults to build/. The default run takes about 5 minutes on 2 cores.
Each model's step count: 256: 800, 1024: 150, 4096 and wider: 20, ctr: 3000 (times
--steps-scale, at least 10). 784-8192-8192-10 on --ps 2 is the 300 MB model of the memory criterion.
EOF
}

src=$(cd "$(dirname "$0")/.." && pwd)
build=$src/build
models=256,1024,4096
modes=1w,2w-async,2w-sync
repeats=3
scale=1
optimizer=sgd
nps=1
prefetch=off
shm=on
isolate=none
baseline=one
while [ $# -gt 0 ]; do
  case $1 in
  --help | -h) usage; exit 0 ;;
  --models) models=${2:?--models needs a value}; shift 2 ;;
  --modes) modes=${2:?--modes needs a value}; shift 2 ;;
  --repeats) repeats=${2:?--repeats needs a value}; shift 2 ;;
  --steps-scale) scale=${2:?--steps-scale needs a value}; shift 2 ;;
  --optimizer) optimizer=${2:?--optimizer needs a value}; shift 2 ;;
  --ps) nps=${2:?--ps needs a value}; shift 2 ;;
  --prefetch) prefetch=${2:?--prefetch needs a value}; shift 2 ;;
  --shm) shm=${2:?--shm needs a value}; shift 2 ;;
  --isolate) isolate=${2:?--isolate needs a value}; shift 2 ;;
  --baseline) baseline=${2:?--baseline needs a value}; shift 2 ;;
  -*) echo "train_distributed.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
  *) build=$1; shift ;;
  esac
done
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "train_distributed.sh: --repeats must be a positive integer" >&2; exit 64; }
[[ $nps =~ ^[1-8]$ ]] || { echo "train_distributed.sh: --ps must be 1 to 8" >&2; exit 64; }
[[ $scale =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "train_distributed.sh: --steps-scale must be a positive number" >&2; exit 64; }
case $optimizer in sgd | adam) ;; *) echo "train_distributed.sh: --optimizer must be sgd or adam" >&2; exit 64 ;; esac
case $prefetch in on | off) ;; *) echo "train_distributed.sh: --prefetch must be on or off" >&2; exit 64 ;; esac
case $shm in on | off) ;; *) echo "train_distributed.sh: --shm must be on or off" >&2; exit 64 ;; esac
case $baseline in one | profile-off) ;; *) echo "train_distributed.sh: --baseline must be one or profile-off" >&2; exit 64 ;; esac
case $isolate in none | pid | net) ;; *) echo "train_distributed.sh: --isolate must be none, pid or net" >&2; exit 64 ;; esac
export PSFLOW_SHM=$shm
for m in ${models//,/ }; do
  [ "$m" = ctr ] || [[ $m =~ ^[1-9][0-9]{0,4}$ ]] || { echo "train_distributed.sh: bad model width '$m'" >&2; exit 64; }
done
for m in ${modes//,/ }; do
  case $m in 1w | 2w-async | 2w-sync) ;; *) echo "train_distributed.sh: bad mode '$m'" >&2; exit 64 ;; esac
done
build=$(cd "$build" && pwd)
psflow=$build/psflow
[ -x "$psflow" ] || { echo "train_distributed.sh: $psflow not built" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "train_distributed.sh: /usr/bin/time is missing (apt-get install time)" >&2; exit 1; }
data=/usr/share/datasets/fashion-mnist
[ -r "$data/train-images-idx3-ubyte.gz" ] || { echo "train_distributed.sh: Fashion-MNIST not found in $data" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/psflow-bench.XXXXXX")
pids=()
netns=() # --isolate net: the namespaces this run made, the bridge's first
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${netns[@]}"; do ip netns del "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
pidns=()
if [ "$isolate" != none ]; then
  pidns=(unshare --pid --fork --kill-child --mount-proc)
  "${pidns[@]}" true 2>/dev/null || { echo "train_distributed.sh: --isolate $isolate: unshare cannot make a PID namespace (root?)" >&2; exit 1; }
  mkdir -m 700 "$work/segments"
  export PSFLOW_SHM_DIR=$work/segments
fi

# --isolate net: namespace NAME holding one end of a veth pair at 10.231.0.HOST/24, the other
# end on the run's bridge.
add_netns() {
  local name=$1 host=$2 hub=${netns[0]}
  ip netns add "$name" && netns+=("$name")
  ip link add "v$host" netns "$hub" type veth peer name eth0 netns "$name"
  ip -n "$hub" link set "v$host" master br0 up
  ip -n "$name" link set lo up
  ip -n "$name" addr add "10.231.0.$host/24" dev eth0
  ip -n "$name" link set eth0 up
}
if [ "$isolate" = net ]; then
  command -v ip >/dev/null || { echo "train_distributed.sh: --isolate net needs ip (iproute2)" >&2; exit 1; }
  hub=pfbench-$$-hub
  ip netns add "$hub" || { echo "train_distributed.sh: --isolate net: cannot make a network namespace (root?)" >&2; exit 1; }
  netns+=("$hub")
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" link set br0 up
  for k in $(seq 0 $((nps - 1))); do add_netns "pfbench-$$-ps$k" $((10 + k)); done
  for i in 0 1; do add_netns "pfbench-$$-w$i" $((100 + i)); done
fi

# task_wrap TYPE INDEX: the command prefix of a cluster task, in wrap[].
task_wrap() {
  wrap=("${pidns[@]}")
  [ "$isolate" = net ] || return 0
  local ns=pfbench-$$-ps$2
  [ "$1" = ps ] || ns=pfbench-$$-w$2
  wrap=(ip netns exec "$ns" "${pidns[@]}")
}

# spec OUT WIDTH STEPS WORKERS MODE: the job, one process's (WORKERS 1) or a cluster's.
spec() {
  python3 - "$@" "$optimizer" "$data" "$prefetch" "$nps" <<'PY'
import json, sys
out, width, steps, workers, mode, opt, data, prefetch, nps = sys.argv[1:10]
d = {"name": "bench-%s-%s" % (width, mode if int(workers) > 1 else "1w"),
     "replicas": {"ps": int(nps), "worker": int(workers)},
     "training": {"mode": mode, "batch_size": 100, "max_steps": int(steps), "seed": 1,
                  "eval_every_steps": 0},
     "checkpoint": {"every_steps": 0}}
if width == "ctr":  # bench/train_vocab.sh's job at 1,000,000 rows per table
    d["model"] = {"type": "softmax", "outputs": 2,
                  "embeddings": [{"name": n, "vocab": 1000000, "dim": 16}
                                 for n in ("user", "item", "site")]}
    d["data"] = {"format": "synthetic_ctr", "n": 200000, "zipf": 1.6}
    d["optimizer"] = {"type": "adagrad", "learning_rate": 1.0}
    d["training"]["batch_size"] = 500
else:
    w = int(width)
    d["model"] = {"type": "mlp", "inputs": 784, "hidden": [w, w], "outputs": 10,
                  "activation": "relu"}
    d["data"] = {"format": "idx",
                 "train": [data + "/train-images-idx3-ubyte.gz", data + "/train-labels-idx1-ubyte.gz"],
                 "test": [data + "/t10k-images-idx3-ubyte.gz", data + "/t10k-labels-idx1-ubyte.gz"]}
    d["optimizer"] = {"type": opt, "learning_rate": 0.01 if opt == "sgd" else 0.001}
if mode == "async":
    d["training"]["prefetch"] = prefetch == "on"
if int(nps) > 1:
    d["placement"] = {"strategy": "greedy"}
json.dump(d, open(out, "w"))
PY
}

# rate LOG BATCH EVERY: examples/s between the progress line after the first fifth of the
# run and the last one. Each line's rate is cumulative (steps x batch / time since its
# start), so the time at line k is k x EVERY x BATCH / rate_k.
rate() {
  python3 - "$@" <<'PY'
import re, sys
log, batch, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rates = [float(m.group(1)) for m in
         re.finditer(r"(?:step \d+/\d+ +loss \S+ +)(\d+) examples/s", open(log).read())]
if len(rates) < 3 or min(rates) <= 0:
    print("nan"); sys.exit()
k0 = max(1, len(rates) // 5)
t = [(i + 1) * every * batch / r for i, r in enumerate(rates)]
print("%.1f" % ((len(rates) - k0) * every * batch / (t[-1] - t[k0 - 1])))
PY
}

free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

tf_config() { # TYPE INDEX PS_PORT WORKER_PORTS [NET]: with NET, each task at its namespace's address
  python3 -c 'import json,sys; t,i,ps,w=sys.argv[1:5]; net=len(sys.argv) > 5
a=lambda p,base:[("10.231.0.%d:" % (base + k) if net else "127.0.0.1:")+x for k,x in enumerate(p.split(","))]
print(json.dumps({"cluster":{"ps":a(ps,10),"worker":a(w,100)},"task":{"type":t,"index":int(i)}}))' "$@"
}

# ps_formula JOB WORKERS TASK: the bytes `psflow ps` would need for ps task TASK (its own
# estimate).
ps_formula() {
  local line w=20 p
  [ "$2" = 1 ] || w=20,21
  p=$(seq -s, 1 "$nps")
  line=$(TF_CONFIG=$(tf_config ps "$3" "$p" "$w") "$psflow" ps --job "$1" --memory 1 2>&1 >/dev/null || true)
  python3 - "$line" <<'PY'
import re, sys
m = re.search(r"needs about ([0-9.]+) ?([KMGT]?i?B)", sys.argv[1])
units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
         "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
print(int(float(m.group(1)) * units[m.group(2)]) if m and m.group(2) in units else 0)
PY
}

# one_process JOB STEPS: prints "RATE PEAK_KB".
one_process() {
  local job=$1 steps=$2 every=$(($2 / 10))
  /usr/bin/time -f %M -o "$work/train.rss" "$psflow" train "$job" --log-every "$every" \
    >/dev/null 2>"$work/train.log" || { tail -n 5 "$work/train.log" >&2; echo "nan 0"; return; }
  echo "$(rate "$work/train.log" "$batch" "$every") $(tail -n 1 "$work/train.rss")"
}

# cluster JOB STEPS WORKERS: prints "RATE PS_PEAK_KB... WORKER_PEAK_KB..." (a worker's rate is
# over its own steps: with 2 async workers each takes about half).
cluster() {
  local job=$1 steps=$2 nw=$3 every ports p_ports w_ports i k rc=0 total=0 r
  every=$((steps / nw / 10))
  [ "$every" -ge 1 ] || every=1
  read -r -a ports <<<"$(free_ports $((nps + nw)))"
  p_ports=$(IFS=,; echo "${ports[*]:0:nps}")
  w_ports=$(IFS=,; echo "${ports[*]:nps}")
  pids=()
  rm -f "$work"/w*.log "$work"/ps*.log # this cluster's logs only (the segment line reads them)
  local net=()
  [ "$isolate" = net ] && net=(net)
  for k in $(seq 0 $((nps - 1))); do
    task_wrap ps "$k"
    TF_CONFIG=$(tf_config ps "$k" "$p_ports" "$w_ports" "${net[@]}") /usr/bin/time -f %M -o "$work/ps$k.rss" \
      "${wrap[@]}" "$psflow" ps --job "$job" --checkpoint-dir "$work/ckpt" 2>"$work/ps$k.log" &
    pids+=($!)
  done
  for i in $(seq 0 $((nw - 1))); do
    task_wrap worker "$i"
    TF_CONFIG=$(tf_config worker "$i" "$p_ports" "$w_ports" "${net[@]}") /usr/bin/time -f %M -o "$work/w$i.rss" \
      "${wrap[@]}" "$psflow" worker --job "$job" --checkpoint-dir "$work/ckpt" --log-every "$every" \
      >/dev/null 2>"$work/w$i.log" &
    pids+=($!)
  done
  for i in $(seq "$nps" $((nps + nw - 1))); do wait "${pids[$i]}" || rc=$?; done
  if [ "$rc" != 0 ]; then
    kill "${pids[@]:0:nps}" 2>/dev/null || true
    tail -n 5 "$work"/w*.log >&2
  fi
  for k in $(seq 0 $((nps - 1))); do wait "${pids[$k]}" || true; done
  pids=()
  rm -rf "$work/ckpt"
  [ "$rc" = 0 ] || { echo nan; return; }
  for i in $(seq 0 $((nw - 1))); do
    r=$(rate "$work/w$i.log" "$batch" "$every")
    total=$(python3 -c 'import sys; print("%.1f" % (float(sys.argv[1]) + float(sys.argv[2])))' "$total" "$r")
  done
  local out="$total"
  for k in $(seq 0 $((nps - 1))); do out="$out $(tail -n 1 "$work/ps$k.rss")"; done
  for i in $(seq 0 $((nw - 1))); do out="$out $(tail -n 1 "$work/w$i.rss")"; done
  echo "$out"
}

steps_for() { # WIDTH (or ctr)
  python3 -c 'import sys; w,s=sys.argv[1],float(sys.argv[2]); base=3000 if w=="ctr" else {256:800,1024:150}.get(int(w), 20 if int(w)>=4096 else 100)
print(max(10, int(base*s)))' "$1" "$scale"
}

echo "train_distributed: $(nproc) cores, $nps ps, optimizer $optimizer, async prefetch $prefetch, shared segment $shm, isolation $isolate, baseline $baseline, $repeats interleaved pair(s) per row; load: $(uptime | sed 's/.*load average/load average/')"
base_name="1 proc ex/s"
[ "$baseline" = one ] || base_name="prof off ex/s"
printf '%-18s %-9s %6s %12s %12s %7s  %-28s %s\n' model cluster steps "$base_name" "cluster ex/s" ratio "ratio of each pair" "peak RSS MiB (bound): 1 proc; ps; workers"
for width in ${models//,/ }; do
  steps=$(steps_for "$width")
  if [ "$width" = ctr ]; then
    batch=500 params=$((3 * 1000000 * 16 + 48 * 2 + 2)) name="ctr-3x1M-d16"
  else
    batch=100 params=$((784 * width + width + width * width + width + width * 10 + 10))
    name="784-$width-$width-10"
  fi
  spec "$work/one.json" "$width" "$steps" 1 async
  for mode in ${modes//,/ }; do
    case $mode in
    1w) nw=1 m=async ;;
    2w-async) nw=2 m=async ;;
    2w-sync) nw=2 m=sync ;;
    esac
    spec "$work/cl.json" "$width" "$steps" "$nw" "$m"
    ps_bounds=""
    for k in $(seq 0 $((nps - 1))); do ps_bounds="$ps_bounds${ps_bounds:+,}$(ps_formula "$work/cl.json" "$nw" "$k")"; done
    ratios=() ones=() cls=() rss_line=""
    for rep in $(seq 1 "$repeats"); do
      if [ "$baseline" = one ]; then
        read -r one one_kb <<<"$(one_process "$work/one.json" "$steps")"
      else # the same cluster without the breakdown; no memory line
        read -r -a off <<<"$(PSFLOW_PROFILE=off cluster "$work/cl.json" "$steps" "$nw")"
        one=${off[0]} one_kb=0
      fi
      read -r -a c <<<"$(cluster "$work/cl.json" "$steps" "$nw")"
      ones+=("$one")
      cls+=("${c[0]}")
      ratios+=("$(python3 -c 'import sys; a,b=map(float,sys.argv[1:]); print("%.2f" % (b/a) if a>0 else "nan")' "$one" "${c[0]}")")
      if [ "$rep" = "$repeats" ] && [ "${#c[@]}" -gt 1 ] && [ "$baseline" = one ]; then # the last pair's memory
        rss_line=$(python3 - "$one_kb" "$params" "$ps_bounds" "${c[@]:1}" <<'PY'
import sys
one, params = int(sys.argv[1]) * 1024, int(sys.argv[2])
bounds = [int(b) for b in sys.argv[3].split(",")]
peaks = [int(x) * 1024 for x in sys.argv[4:]]
pss, workers = peaks[:len(bounds)], peaks[len(bounds):]
mib = lambda b: b / 2**20
wb = one + 1.5 * 4 * params
parts = ["%.0f" % mib(one)]
parts += ["ps%s %.0f (%.0f)%s" % (k if len(bounds) > 1 else "", mib(ps), mib(b), "" if ps <= 1.5 * b else " OVER 1.5x")
          for k, (ps, b) in enumerate(zip(pss, bounds))]
parts += ["w%d %.0f (%.0f)%s" % (i, mib(w), mib(wb), "" if w <= wb else " OVER") for i, w in enumerate(workers)]
print("; ".join(parts))
PY
)
      fi
    done
    python3 - "$name" "$mode" "$steps" "${#ratios[@]}" "${ones[@]}" "${cls[@]}" "${ratios[@]}" "$rss_line" <<'PY'
import statistics, sys
name, mode, steps, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
vals = sys.argv[5:5 + 3 * n]
ones, cls, ratios = [float(v) for v in vals[:n]], [float(v) for v in vals[n:2 * n]], [float(v) for v in vals[2 * n:]]
rss = sys.argv[5 + 3 * n]
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("%-18s %-9s %6s %12.0f %12.0f %7.2f  %-28s %s" % (name, mode, steps, med(ones), med(cls), med(ratios),
      " ".join("%.2f" % r for r in ratios), rss))
PY
    if [ "$isolate" != none ]; then # the last cluster's workers: did the segment reach the ps?
      echo "  isolated tasks, last cluster: $(grep -ho '[0-9]* of [0-9]* ps share its memory' "$work"/w*.log | sort | uniq -c | tr -s ' ' | paste -sd ';')"
    fi
  done
done
