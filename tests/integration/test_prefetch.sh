#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 600
# Async prefetch (training.prefetch): a worker computes its next step while its push-pull
# is in flight. Real processes on 127.0.0.1 (TF_CONFIG + --job):
#  1. the Fashion-MNIST softmax example, async, 2 ps + 2 workers, prefetch on, checkpoints
#     every 1000 steps; ps 1 is killed (kill -9) at chief step >= 1500, while pushes are in
#     flight, and started again. The job completes, every process exits 0, both ps end at
#     version 6000 and the test accuracy meets the example's target (>= 0.84).
#  2. one ps + one worker, prefetch on, against the same job with prefetch off: a single
#     async worker reads the same batches either way and both reach the target.
# A sanitizer build scales 1 and 2 to a quarter: 1500 steps, checkpoints every 250, the kill at
# chief step >= 500, and accuracy >= 0.75 (the target needs the 6000 steps); it says so.
source "$(dirname "$0")/lib.sh"

STEPS=6000 CKPT=1000 KILL_AT=1500 MIN_ACC=0.84
if sanitized_build; then
  STEPS=1500 CKPT=250 KILL_AT=500 MIN_ACC=0.75
  echo "sanitizer build: $STEPS steps, checkpoints every $CKPT, the kill at step $KILL_AT," \
    "accuracy >= $MIN_ACC"
fi

spec() { # NAME PS WORKERS PREFETCH
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$@" "$STEPS" "$CKPT" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = sys.argv[2]
d["replicas"] = {"ps": int(sys.argv[3]), "worker": int(sys.argv[4])}
d["training"].update(mode="async", max_steps=int(sys.argv[6]), eval_every_steps=0,
                     prefetch=sys.argv[5] == "on")
d["placement"] = {"partitioner": {"type": "fixed_shards", "num_shards": 2}}
d["checkpoint"] = {"every_steps": int(sys.argv[7]), "every_secs": 600}
json.dump(d, sys.stdout)
PY
}

# --- 1: a ps killed and restarted under prefetching workers
spec pf-kill 2 2 on >kill.json
read -r -a PORTS <<<"$(free_ports 4)"
PS_PORTS="${PORTS[0]},${PORTS[1]}"
W_PORTS="${PORTS[2]},${PORTS[3]}"
PIDS=()
start_ps() { # INDEX
  TF_CONFIG=$(tf_config ps "$1" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" ps --job kill.json \
    --checkpoint-dir "$WORK/ckpt" --exit-grace 2 2>>"$WORK/ps$1.log" &
  PIDS[$1]=$!
}
for i in 0 1; do start_ps "$i"; done
for i in 0 1; do
  TF_CONFIG=$(tf_config worker "$i" "$PS_PORTS" "$W_PORTS") PSFLOW_PUSH_DELAY_MS=1 \
    "$PSFLOW_BIN" worker --job kill.json --checkpoint-dir "$WORK/ckpt" --log-every 50 \
    >"$WORK/worker$i.out" 2>"$WORK/worker$i.log" &
  PIDS[$((2 + i))]=$!
done
chief_past() { logged_step_past "$WORK/worker0.log" "$1"; } # the chief logged a step >= $1
wait_until 120 "chief step $KILL_AT" chief_past "$KILL_AT"
for i in 0 1; do
  grep -q 'prefetch: the next step is computed during each push-pull' "$WORK/worker$i.log" ||
    fail "worker $i does not say it prefetches: $(head -n 3 "$WORK/worker$i.log")"
done
kill -9 "${PIDS[1]}"
wait "${PIDS[1]}" 2>/dev/null || true
echo "ps 1 killed at chief step $(grep -o 'step [0-9]*/' "$WORK/worker0.log" | tail -1)"
start_ps 1
wait_until 60 "ps 1 restored" grep -q 'restored from' "$WORK/ps1.log"
grep 'restored from' "$WORK/ps1.log"
rc=0
for i in 2 3 0 1; do wait_pid "${PIDS[$i]}" 300 || { rc=$?; echo "process $i exited $rc" >&2; }; done
grep -h 'lost ps\|restarted (incarnation\|not sent again' "$WORK"/worker*.log | head -n 6 || true
[ "$rc" = 0 ] || fail "a process exited non-zero"
for i in 0 1; do
  grep -q "job pf-kill done at version $STEPS" "$WORK/ps$i.log" || fail "ps $i did not end at version $STEPS"
done
acc=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$WORK/worker0.out")
[ -n "$acc" ] || fail "no final accuracy: $(cat "$WORK/worker0.out")"
in_range "$acc" "$MIN_ACC" 1 || fail "final accuracy $acc below $MIN_ACC"
echo "ps 1 killed and restarted under prefetch: job done, accuracy $acc"

# --- 2: one worker, prefetch on and off
one() { # PREFETCH -> the chief's test accuracy
  local ports pids=() i rc=0
  spec "pf-one-$1" 1 1 "$1" >"one-$1.json"
  read -r -a ports <<<"$(free_ports 2)"
  TF_CONFIG=$(tf_config ps 0 "${ports[0]}" "${ports[1]}") "$PSFLOW_BIN" ps --job "one-$1.json" \
    --checkpoint-dir "$WORK/ckpt" 2>>"$WORK/one-ps-$1.log" &
  pids+=($!)
  TF_CONFIG=$(tf_config worker 0 "${ports[0]}" "${ports[1]}") "$PSFLOW_BIN" worker \
    --job "one-$1.json" --checkpoint-dir "$WORK/ckpt" --log-every 1000 \
    >"$WORK/one-w-$1.out" 2>>"$WORK/one-w-$1.log" &
  pids+=($!)
  for i in 1 0; do wait_pid "${pids[$i]}" 300 || rc=$?; done
  [ "$rc" = 0 ] || fail "one worker, prefetch $1: a process exited $rc"
  sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$WORK/one-w-$1.out"
}
on=$(one on)
off=$(one off)
echo "one worker: prefetch on $on, off $off"
grep -q 'prefetch: the next step' "$WORK/one-w-on.log" || fail "prefetch on: the worker does not say so"
grep -q 'prefetch: the next step' "$WORK/one-w-off.log" && fail "prefetch off: the worker says it prefetches"
for a in "$on" "$off"; do in_range "$a" "$MIN_ACC" 1 || fail "one worker: accuracy $a below $MIN_ACC"; done
pass "prefetch: a ps restart survived (accuracy $acc); one worker on $on, off $off"
