#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 600
# In-graph replicas ("replicas_per_worker": K, or "device" as a list) on the CPU, with the
# Fashion-MNIST MLP example (784-256-256-10, adam) over 200 sync steps; every comparison is
# over every variable, max |diff| <= 1e-5, against `psflow train` with batch 100. The MLP
# uses tanh here: a sum of K partial gradients rounds differently from one sum over the whole
# batch (last bits), and with relu a pre-activation that sits at 0 turns that rounding into a
# kink taken on one side or the other, after which the runs part (measured on an AVX-512
# EPYC: 2e-7 up to step 150, then 1.3e-5 at 160 and 2e-4 at 200, with adam and with sgd).
# tanh is smooth, so the rounding stays rounding (3.6e-7 after 200 steps there).
#  1. psflow train with 2 replicas x batch 50 (the single-process form of the same job), and
#     "device": ["cpu", "cpu"] being the same job as "replicas_per_worker": 2, bit for bit;
#  2. sync equivalence: 2 ps + 2 workers x 2 replicas x batch 25, real processes started
#     the TFJob way (TF_CONFIG + --job);
#  3. the managed path: that job submitted to `psflow up` keeps replicas_per_worker in the
#     spec the API returns, the agents' workers run 2 replicas each, and it succeeds with
#     the same variables.
source "$(dirname "$0")/lib.sh"

# spec NAME WORKERS BATCH [KEY=JSON...]: the MLP example for 200 sync steps on 2 ps.
spec() {
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-mlp.json" "$@" <<'PY'
import json, sys
src, name, workers, batch = sys.argv[1:5]
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": 2, "worker": int(workers)}
d["model"]["activation"] = "tanh"
d["training"].update(batch_size=int(batch), max_steps=200, mode="sync", eval_every_steps=0)
d["placement"] = {"strategy": "greedy", "partitioner": {"type": "fixed_shards", "num_shards": 2}}
d["checkpoint"] = {"every_steps": 100}
for item in sys.argv[5:]:
    key, value = item.split("=", 1)
    d[key] = json.loads(value)
json.dump(d, sys.stdout)
PY
}

# figure A B LABEL: max |A - B| over every variable, printed; fails above 1e-5.
figure() {
  local diff
  diff=$(max_abs_diff "$1" "$2")
  echo "$3: max |diff| = $diff"
  in_range "$diff" 0 1e-5 || fail "$3 differs by $diff"
}

# --- 1. psflow train -------------------------------------------------------------------
spec single 1 100 >single.json
spec towers 1 50 replicas_per_worker=2 >towers.json
spec listed 1 50 'device=["cpu","cpu"]' >listed.json
for job in single towers listed; do
  "$PSFLOW_BIN" train "$job.json" --save "$job.safetensors" >"$job.out" 2>"$job.log" ||
    { cat "$job.log"; fail "psflow train $job failed"; }
done
grep -q 'batch 100 (2 in-graph replicas x 50)' towers.log ||
  { cat towers.log; fail "psflow train does not say it runs 2 replicas"; }
figure single.safetensors towers.safetensors "psflow train: 2 replicas x batch 50 vs batch 100"
same=$(max_abs_diff towers.safetensors listed.safetensors)
[ "$same" = 0 ] || fail "device [cpu, cpu] differs from replicas_per_worker 2 by $same"
pass "psflow train: 2 replicas x 50 = batch 100; [\"cpu\",\"cpu\"] = replicas_per_worker 2 exactly"

# --- 2. 2 ps + 2 workers x 2 replicas x batch 25 ----------------------------------------
spec equiv 2 25 replicas_per_worker=2 >equiv.json
read -r -a ports <<<"$(free_ports 4)"
ps_ports="${ports[0]},${ports[1]}"
w_ports="${ports[2]},${ports[3]}"
pids=()
for i in 0 1; do
  TF_CONFIG=$(tf_config ps $i "$ps_ports" "$w_ports") \
    "$PSFLOW_BIN" ps --job equiv.json --checkpoint-dir "$WORK/ckpt" 2>>"$WORK/ps$i.log" &
  pids+=($!)
done
for i in 0 1; do
  TF_CONFIG=$(tf_config worker $i "$ps_ports" "$w_ports") \
    "$PSFLOW_BIN" worker --job equiv.json --checkpoint-dir "$WORK/ckpt" --output json \
    --log-every 50 >"$WORK/worker$i.out" 2>>"$WORK/worker$i.log" &
  pids+=($!)
done
rc=0
for pid in "${pids[@]:2}"; do wait_pid "$pid" 300 || rc=$?; done
if [ "$rc" != 0 ]; then
  kill "${pids[@]:0:2}" 2>/dev/null || true
  fail "a worker exited $rc"
fi
for pid in "${pids[@]:0:2}"; do wait_pid "$pid" 60 || rc=$?; done
[ "$rc" = 0 ] || fail "a ps exited $rc"
for i in 0 1; do
  grep -q "training task $i of 2, batch 50 (2 in-graph replicas x 25)" "worker$i.log" ||
    fail "worker $i does not say it runs 2 replicas of batch 25"
done
"$PSFLOW_BIN" export "$WORK/ckpt/equiv" --out dist.safetensors || fail "export failed"
figure single.safetensors dist.safetensors \
  "sync equivalence: 2 workers x 2 replicas x batch 25 vs psflow train batch 100"
pass "2 ps + 2 workers x 2 replicas x 25 give the variables of psflow train with batch 100"

# --- 3. the managed path -----------------------------------------------------------------
spec managed 2 25 replicas_per_worker=2 >managed.json
up_start --ps 2 --workers 2
code=$(curl -s -o created.json -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  --data-binary @managed.json "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "POST /api/v1/jobs: $code $(cat created.json)"
[ "$(jget "$URL/api/v1/jobs/managed" 'd["spec"]["replicas_per_worker"]')" = 2 ] ||
  fail "the coordinator's spec lost replicas_per_worker: $(cat "$WORK/jget.json")"
[ "$(jget "$URL/api/v1/jobs/managed" 'd["spec"]["device"]')" = cpu ] ||
  fail "the coordinator's spec has another device: $(cat "$WORK/jget.json")"
wait_until 240 "job 'managed' Succeeded" phase_is managed Succeeded
n=$(cat "$WORK"/up/logs/*.log | grep -c 'batch 50 (2 in-graph replicas x 25)' || true)
[ "$n" = 2 ] || fail "$n agents' workers say they run 2 replicas of batch 25, expected 2"
"$PSFLOW_BIN" export "$WORK/up/checkpoints/managed" --out managed.safetensors ||
  fail "export of the managed job failed"
figure single.safetensors managed.safetensors "managed (psflow up): 2 workers x 2 replicas x 25"
up_stop
pass "psflow up passes replicas_per_worker to its agents' workers unchanged"
