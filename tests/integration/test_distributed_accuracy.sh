#!/usr/bin/env bash
# labels: slow accuracy
# timeout: 900
# 2 ps + 2 workers (real processes, TF_CONFIG) train the Fashion-MNIST examples:
# sync reaches the targets (softmax >= 0.84, MLP >= 0.88) and async reaches the sync
# accuracy within 0.01; the MLP with "replicas_per_worker": 2 (each worker 2 in-graph
# replicas x batch 50) reaches 0.88 in sync mode too. Each job sees 10 epochs: a sync step
# applies both workers' gradients (2 x batch 100, or 2 x 2 x 50, x 3000 steps), an async
# step one worker's (100 x 6000 steps).
source "$(dirname "$0")/lib.sh"

spec() { # EXAMPLE MODE [REPLICAS_PER_WORKER]
  python3 - "$PSFLOW_SRC/examples/$1.json" "$2" "${3:-1}" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = d["name"] + "-" + sys.argv[2]
k = int(sys.argv[3])
if k > 1:  # the same examples a step: batch 100 split over k replicas
    d["name"] += "-replicas"
    d["replicas_per_worker"] = k
    d["training"]["batch_size"] //= k
d["replicas"] = {"ps": 2, "worker": 2}
d["training"].update(mode=sys.argv[2], max_steps=3000 if sys.argv[2] == "sync" else 6000,
                     eval_every_steps=0)
d["training"].pop("replicas_to_aggregate", None)
d["checkpoint"] = {"every_steps": 0}
json.dump(d, sys.stdout)
PY
}

train() { # JOB.json -> prints the chief's test accuracy
  local ports ps_ports w_ports pids=() i rc=0
  read -r -a ports <<<"$(free_ports 4)"
  ps_ports="${ports[0]},${ports[1]}"
  w_ports="${ports[2]},${ports[3]}"
  for i in 0 1; do
    TF_CONFIG=$(tf_config ps $i "$ps_ports" "$w_ports") \
      "$PSFLOW_BIN" ps --job "$1" --checkpoint-dir "$WORK/ckpt" 2>>"$WORK/ps$i.log" &
    pids+=($!)
  done
  for i in 0 1; do
    TF_CONFIG=$(tf_config worker $i "$ps_ports" "$w_ports") \
      "$PSFLOW_BIN" worker --job "$1" --checkpoint-dir "$WORK/ckpt" --output json \
      --log-every 1000 >"$WORK/w$i.json" 2>>"$WORK/w$i.log" &
    pids+=($!)
  done
  for i in 2 3 0 1; do wait_pid "${pids[$i]}" 600 || rc=$?; done
  [ "$rc" = 0 ] || { tail -n 20 "$WORK"/*.log >&2; fail "a process exited $rc"; }
  json_field "$WORK/w0.json" 'd["test_accuracy"]'
}

for example in fashion-mnist-softmax:0.84 fashion-mnist-mlp:0.88; do
  name=${example%%:*}
  target=${example##*:}
  spec "$name" sync >sync.json
  spec "$name" async >async.json
  sync_acc=$(train sync.json)
  async_acc=$(train async.json)
  echo "$name: sync $sync_acc, async $async_acc (target $target)"
  in_range "$sync_acc" "$target" 1 || fail "$name sync accuracy $sync_acc < $target"
  python3 -c "import sys; s,a=map(float,sys.argv[1:]); sys.exit(0 if a >= s - 0.01 else 1)" \
    "$sync_acc" "$async_acc" || fail "$name async accuracy $async_acc not within 0.01 of $sync_acc"
  pass "$name: sync $sync_acc, async $async_acc"
done

# In-graph replicas: each worker averages 2 replicas' gradients before it pushes.
spec fashion-mnist-mlp sync 2 >replicas.json
replicas_acc=$(train replicas.json)
grep -q 'batch 100 (2 in-graph replicas x 50)' "$WORK/w0.log" ||
  fail "the chief does not say it runs 2 replicas of batch 50"
echo "fashion-mnist-mlp, 2 workers x 2 replicas x 50: sync $replicas_acc (target 0.88)"
in_range "$replicas_acc" 0.88 1 || fail "MLP with 2 replicas per worker: accuracy $replicas_acc < 0.88"
pass "fashion-mnist-mlp with replicas_per_worker 2: test accuracy $replicas_acc"
