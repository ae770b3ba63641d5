#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 600
# A static sync job survives a worker killed (kill -9) and started again 10 times at random
# moments: real processes on 127.0.0.1 (TF_CONFIG + --job), the Fashion-MNIST softmax
# example, 2 ps, a chief and 2 workers, every gradient needed each step
# (replicas_to_aggregate 3), training.stall_timeout_secs 60 so that no wait is unbounded.
# The moments (chief steps) and the workers killed come from a seed, printed; replay a
# failure with SEED=<seed>. Every run must complete: every process exits 0, both ps end at
# version max_steps, and every complete checkpoint holds one version on both ps.
source "$(dirname "$0")/lib.sh"

SEED=${SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -dc 0-9)}
KILLS=${KILLS:-10}
STEPS=4000
echo "seed $SEED (replay: SEED=$SEED), $KILLS kills"
python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$STEPS" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "wrestart"
d["replicas"] = {"ps": 2, "worker": 3}
d["training"].update(mode="sync", max_steps=int(sys.argv[2]), eval_every_steps=0,
                     stall_timeout_secs=60)
d["training"].pop("replicas_to_aggregate", None)
d["placement"] = {"partitioner": {"type": "fixed_shards", "num_shards": 2}}
d["checkpoint"] = {"every_steps": 250, "every_secs": 0, "keep": 100}
json.dump(d, sys.stdout)
PY
# The schedule: KILLS chief steps in (100, STEPS - 300), increasing, and which worker.
read -r -a PLAN <<<"$(python3 -c '
import random, sys
r = random.Random(int(sys.argv[1])); n = int(sys.argv[2]); steps = int(sys.argv[3])
at = sorted(r.sample(range(100, steps - 300), n))
print(" ".join("%d:%d" % (s, r.choice((1, 2))) for s in at))' "$SEED" "$KILLS" "$STEPS")"
echo "schedule (chief step:worker): ${PLAN[*]}"

read -r -a PORTS <<<"$(free_ports 5)"
PS_PORTS="${PORTS[0]},${PORTS[1]}"
W_PORTS="${PORTS[2]},${PORTS[3]},${PORTS[4]}"
PIDS=()
for i in 0 1; do
  TF_CONFIG=$(tf_config ps "$i" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" ps --job job.json \
    --checkpoint-dir "$WORK/ckpt" --exit-grace 5 2>"$WORK/ps$i.log" &
  PIDS[$i]=$!
done
start_worker() { # INDEX
  TF_CONFIG=$(tf_config worker "$1" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" worker --job job.json \
    --checkpoint-dir "$WORK/ckpt" --log-every 10 >>"$WORK/worker$1.out" 2>>"$WORK/worker$1.log" &
  PIDS[$((2 + $1))]=$!
}
for i in 0 1 2; do start_worker "$i"; done
chief_past() { logged_step_past "$WORK/worker0.log" "$1"; } # the chief logged a step >= $1
for kill_at in "${PLAN[@]}"; do
  step=${kill_at%:*}
  w=${kill_at#*:}
  wait_until 120 "chief step $step" chief_past "$step"
  kill -9 "${PIDS[$((2 + w))]}"
  wait "${PIDS[$((2 + w))]}" 2>/dev/null || true
  echo "killed worker $w at chief step $(grep -o 'step [0-9]*/' "$WORK/worker0.log" | tail -1 | tr -dc 0-9)"
  start_worker "$w"
done

rc=0
for i in 2 3 4 0 1; do wait_pid "${PIDS[$i]}" 180 || { rc=$?; echo "process $i exited $rc" >&2; }; done
[ "$rc" = 0 ] || fail "a process exited non-zero (seed $SEED)"
for i in 0 1; do
  grep -q "job wrestart done at version $STEPS" "$WORK/ps$i.log" ||
    fail "ps $i did not end at version $STEPS (seed $SEED): $(grep 'done at' "$WORK/ps$i.log")"
done
checkpoint_versions "$WORK/ckpt/wrestart" 2 2 >versions.txt || fail "a checkpoint mixes versions (seed $SEED)"
acc=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$WORK/worker0.out")
pass "seed $SEED: $KILLS worker kills and restarts, job done at version $STEPS on both ps, accuracy $acc"
