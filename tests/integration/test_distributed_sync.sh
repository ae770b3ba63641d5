#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 600
# Real ps and worker processes on 127.0.0.1, started the TFJob way (TF_CONFIG + --job):
#  1. sync equivalence: 2 workers x batch 50, replicas_to_aggregate 2, 200 steps give the
#     same variables as `psflow train` with batch 100 (max |diff| <= 1e-5), also when
#     worker 0 waits before every push so its gradient arrives second at every step, and
#     with the shared segment off (PSFLOW_SHM=off: everything over the socket);
#  2. 2 ps + 2 workers train Fashion-MNIST softmax in sync mode to test accuracy >= 0.84,
#     the ps tasks checkpoint and exit 0 and no process is left.
source "$(dirname "$0")/lib.sh"

spec() { # NAME WORKERS BATCH STEPS MODE
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$@" <<'PY'
import json, sys
src, name, workers, batch, steps, mode = sys.argv[1:7]
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": 2, "worker": int(workers)}
d["training"].update(batch_size=int(batch), max_steps=int(steps), mode=mode,
                     eval_every_steps=0)
d["placement"] = {"strategy": "greedy", "partitioner": {"type": "fixed_shards", "num_shards": 2}}
d["checkpoint"] = {"every_steps": 100}
json.dump(d, sys.stdout)
PY
}

# run_cluster JOB.json WORKERS [stop]: 2 ps + WORKERS workers; prints the chief's result.
run_cluster() {
  local job=$1 nw=$2 mode=${3:-} ports ps_ports w_ports pids=() i delay
  read -r -a ports <<<"$(free_ports $((2 + nw)))"
  ps_ports="${ports[0]},${ports[1]}"
  w_ports=$(IFS=,; echo "${ports[*]:2}")
  for i in 0 1; do
    TF_CONFIG=$(tf_config ps $i "$ps_ports" "$w_ports") \
      "$PSFLOW_BIN" ps --job "$job" --checkpoint-dir "$WORK/ckpt" 2>>"$WORK/ps$i.log" &
    pids+=($!)
  done
  for i in $(seq 0 $((nw - 1))); do
    delay=0
    [ "$mode" = delayed ] && [ "$i" = 0 ] && delay=5
    TF_CONFIG=$(tf_config worker $i "$ps_ports" "$w_ports") \
      "$PSFLOW_BIN" worker --job "$job" --checkpoint-dir "$WORK/ckpt" --output json \
      --log-every 50 --push-delay-ms "$delay" >"$WORK/worker$i.out" 2>>"$WORK/worker$i.log" &
    pids+=($!)
  done
  # Workers first: if one fails, stop the ps tasks instead of waiting for a job that
  # cannot finish.
  local rc=0 n_ps=2
  for pid in "${pids[@]:n_ps}"; do wait_pid "$pid" 300 || rc=$?; done
  if [ "$rc" != 0 ]; then
    kill "${pids[@]:0:n_ps}" 2>/dev/null || true
    tail -n 20 "$WORK"/*.log >&2
    fail "a worker exited $rc"
  fi
  for pid in "${pids[@]:0:n_ps}"; do wait_pid "$pid" 60 || rc=$?; done
  [ "$rc" = 0 ] || { tail -n 20 "$WORK"/*.log >&2; fail "a ps exited $rc"; }
  cat "$WORK/worker0.out"
}

# --- 1. sync equivalence ---------------------------------------------------------------
spec equiv 2 50 200 sync >equiv.json
spec single 1 100 200 sync >single.json
"$PSFLOW_BIN" train single.json --save single.safetensors >/dev/null 2>train.log ||
  { cat train.log; fail "psflow train failed"; }
# plain and delayed: the workers share their segments with the ps tasks (one host);
# socket: PSFLOW_SHM=off, every byte over the WebSocket connections.
for variant in plain delayed socket; do
  rm -rf "$WORK/ckpt"
  : >"$WORK/worker0.log"
  if [ "$variant" = socket ]; then
    PSFLOW_SHM=off run_cluster equiv.json 2 "$variant" >/dev/null
    grep -q "share its memory" "$WORK/worker0.log" && fail "PSFLOW_SHM=off still shared a segment"
  else
    run_cluster equiv.json 2 "$variant" >/dev/null
    grep -q "2 of 2 ps share its memory" "$WORK/worker0.log" ||
      { cat "$WORK/worker0.log"; fail "worker 0 did not share its segment with both ps"; }
  fi
  "$PSFLOW_BIN" export "$WORK/ckpt/equiv" --out "dist-$variant.safetensors" ||
    fail "export failed"
  diff=$(max_abs_diff single.safetensors "dist-$variant.safetensors")
  echo "sync equivalence ($variant): max |single - distributed| = $diff"
  in_range "$diff" 0 1e-5 || fail "distributed sync differs from psflow train by $diff"
done
same=$(max_abs_diff dist-plain.safetensors dist-delayed.safetensors)
[ "$same" = 0 ] || fail "arrival order changed the result by $same (averaging must be in task order)"
same=$(max_abs_diff dist-plain.safetensors dist-socket.safetensors)
[ "$same" = 0 ] || fail "the shared segment and the socket differ by $same"
pass "sync equivalence holds in both arrival orders and over the socket, and they agree bit for bit"

# --- 2. accuracy -----------------------------------------------------------------------
rm -rf "$WORK/ckpt"
spec fmnist 2 100 3000 sync >fmnist.json
run_cluster fmnist.json 2 >result.json
acc=$(json_field result.json 'd["test_accuracy"]')
in_range "$acc" 0.84 1 || fail "sync softmax accuracy $acc < 0.84"
ls "$WORK"/ckpt/fmnist/step-3000/manifest.json >/dev/null || fail "no final checkpoint"
pass "2 ps + 2 workers sync softmax: test accuracy $acc"
