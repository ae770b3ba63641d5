#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 600
# data.splits dynamic: the training tasks of an async job lease the input's splits from the
# work queue ps task 0 keeps (api/wire.md, LEASE), trained as users train them (TF_CONFIG +
# --job, real processes on 127.0.0.1). `psflow data gen criteo` writes 65 files; 64 are the
# training folder (64 splits, one per file), the last the test set. training.epochs 2.
#  1. 1 ps + 2 workers, worker 1 slowed (--push-delay-ms): the job ends by itself after 2
#     epochs; the ps logs each epoch's splits per task, 64 in all, worker 1 fewer than the
#     chief; every task's log of the completions ps 0 recorded agrees with the ps's
#     counts, epoch by epoch; the test AUC is that of a trained model.
#  2. the same with worker 1 killed (kill -9) while it reads its first splits and started
#     again: ps 0 gives its leased splits back to the queue, each epoch still ends
#     with 64 splits done, and the completions recorded in the workers' logs (both
#     incarnations of worker 1) agree with the ps's counts, but for completions ps 0
#     recorded that the killed incarnation did not live to log (at most the 2 it held).
#  3. ps 0 killed (kill -9) after checkpoints and started again: it restores the queue's
#     state from its checkpoint (metadata psflow_input_queue), the chief rolls back, and both
#     epochs still end with 64 splits done.
#  4. managed (psflow up, 1 ps + 2 worker agents): the job succeeds and its status shows ps
#     0's queue, finished after its 2 epochs.
#  5. dynamic splits in a sync job, and epochs with static splits, are refused.
source "$(dirname "$0")/lib.sh"

"$PSFLOW_BIN" data gen criteo --rows 52000 --files 65 --seed 11 --out "$WORK/gen" >gen.out 2>gen.err ||
  fail "data gen exited $?"
mkdir "$WORK/train"
mv "$WORK"/gen/part-000[0-5][0-9].tsv "$WORK"/gen/part-0006[0-3].tsv "$WORK/train/"
[ "$(ls "$WORK/train" | wc -l)" = 64 ] || fail "expected 64 training files"

spec() { # NAME MODE [SPLITS]
  python3 - "$PSFLOW_SRC/examples/criteo-mlp.json" "$WORK" "$@" <<'PY'
import json, sys
src, work, name, mode = sys.argv[1:5]
splits = sys.argv[5] if len(sys.argv) > 5 else "dynamic"
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": 1, "worker": 2}
m = d["model"]
for e in m["embeddings"]:
    e.update(vocab=min(e["vocab"], 5000), dim=4)
m.update(hidden=[16], activation="tanh")
d["data"] = {"format": "criteo", "streaming": True, "splits": splits,
             "train": [work + "/train"], "test": [work + "/gen/part-00064.tsv"]}
d["training"] = {"mode": mode, "batch_size": 64, "max_steps": 1000000, "eval_every_steps": 0}
if splits == "dynamic" and mode == "async":
    d["training"]["epochs"] = 2
d["checkpoint"] = {"every_steps": 0, "every_secs": 0}
json.dump(d, sys.stdout)
PY
}

# The ps's per-epoch counts ("input epoch E done: 64 splits; splits per task: 0:a 1:b") as
# lines "E a b", and the workers' recorded completions summed per epoch and task, the same.
ps_counts() {
  sed -n 's/.*input epoch \([0-9]*\) done: \([0-9]*\) splits; splits per task: 0:\([0-9]*\) 1:\([0-9]*\).*/\1 \3 \4 \2/p' "$1"
}
worker_counts() { # LOG0 LOG1...
  python3 - "$@" <<'PY'
import re, sys
counts = {}
for path in sys.argv[1:]:
    for line in open(path, errors="replace"):
        m = re.search(r"psflow (chief|worker) (\d+): (\d+) split\(s\) of epoch (\d+) recorded done", line)
        if m:
            key = (int(m.group(4)), int(m.group(2)))
            counts[key] = counts.get(key, 0) + int(m.group(3))
for e in sorted({k[0] for k in counts}):
    a, b = counts.get((e, 0), 0), counts.get((e, 1), 0)
    print(e, a, b, a + b)
PY
}

start_cluster() { # JOB CKPT DELAY: ps 0, chief and worker 1 in the background (pids in PIDS)
  local job=$1 ckpt=$2 delay=$3
  read -r -a PORTS <<<"$(free_ports 3)"
  PSC="${PORTS[0]}"
  WC="${PORTS[1]},${PORTS[2]}"
  TF_CONFIG=$(tf_config ps 0 "$PSC" "$WC") "$PSFLOW_BIN" ps --job "$job" \
    --checkpoint-dir "$ckpt" 2>"$WORK/ps0.log" &
  PS_PID=$!
  TF_CONFIG=$(tf_config worker 0 "$PSC" "$WC") "$PSFLOW_BIN" worker --job "$job" \
    --checkpoint-dir "$ckpt" --output json >"$WORK/worker0.out" 2>"$WORK/worker0.log" &
  CHIEF_PID=$!
  start_worker1 "$job" "$ckpt" "$delay" "$WORK/worker1.log"
}
start_worker1() { # JOB CKPT DELAY LOG
  TF_CONFIG=$(tf_config worker 1 "$PSC" "$WC") "$PSFLOW_BIN" worker --job "$1" \
    --checkpoint-dir "$2" --push-delay-ms "$3" 2>"$4" &
  W1_PID=$!
}
finish_cluster() { # [late]: worker 1 may come after the job ended (it then exits 69)
  wait_pid "$CHIEF_PID" 300 || fail "the chief exited $?"
  local rc=0
  wait_pid "$W1_PID" 300 || rc=$?
  if [ "$rc" = 69 ] && [ "${1:-}" = late ] && grep -q "cannot reach ps 0" "$WORK/worker1.log"; then
    echo "worker 1 started after the chief had trained every split"
  elif [ "$rc" != 0 ]; then
    fail "worker 1 exited $rc"
  fi
  wait_pid "$PS_PID" 60 || fail "the ps exited $?"
}

# check_counts exact|killed WORKER_LOGS...: 64 splits per epoch, and the ps's counts agree
# with the workers' logs. "killed": worker 1 was killed (kill -9), so ps 0 may have recorded a
# completion whose answer that worker never lived to log: its logged count may fall short of
# the ps's by the splits it held (the one it read and the next leased), never exceed it.
check_counts() {
  local mode=$1
  shift
  ps_counts "$WORK/ps0.log" >ps.counts
  worker_counts "$@" >workers.counts
  [ "$(wc -l <ps.counts)" = 2 ] || fail "the ps logged $(wc -l <ps.counts) epochs: $(cat ps.counts)"
  awk '$4 != 64 { exit 1 }' ps.counts || fail "an epoch without 64 splits: $(cat ps.counts)"
  awk '$2 + $3 != 64 { exit 1 }' ps.counts || fail "per-task counts do not add up: $(cat ps.counts)"
  if [ "$mode" = exact ]; then
    diff ps.counts workers.counts >/dev/null
  else
    paste -d' ' ps.counts workers.counts |
      awk '$1 != $5 || $2 != $6 || $7 > $3 || $3 - $7 > 2 { exit 1 }'
  fi || fail "the ps's record ($(tr '\n' ';' <ps.counts)) differs from the workers' ($(tr '\n' ';' <workers.counts))"
}

# --- 1. a slow worker takes fewer splits ------------------------------------------------
spec dyn async >dyn.json
start_cluster dyn.json "$WORK/ck1" 20
finish_cluster
grep -q "input work queue: 64 splits, 2 epoch(s)" ps0.log || fail "ps: $(grep -m1 'work queue' ps0.log)"
grep -q "leased from ps 0 (data.splits dynamic, training.epochs counted there)" worker1.log ||
  fail "worker 1: $(grep -m1 streaming worker1.log)"
grep -q "training.epochs reached" ps0.log || fail "the ps never said the epochs were done"
check_counts exact worker0.log worker1.log
awk '$3 >= $2 { exit 1 }' ps.counts || fail "the slowed worker took as many splits: $(cat ps.counts)"
AUC=$(json_field worker0.out 'd["test_auc"]')
in_range "$AUC" 0.55 1 || fail "test AUC $AUC"
echo "slowed worker 1: splits per epoch (epoch chief worker1 total): $(tr '\n' ';' <ps.counts) test AUC $AUC"

# --- 2. a worker killed while it holds splits -------------------------------------------
mkdir part1 && mv ps0.log worker0.log worker1.log part1/ # the waits below read the new ones
start_cluster dyn.json "$WORK/ck2" 20
wait_until 60 "worker 1's first lease" grep -q "worker 1: leased its first split" "$WORK/worker1.log"
sleep 0.1 # reading its first split (12 or 13 steps of at least 20 ms), the next one leased
kill -9 "$W1_PID"
wait "$W1_PID" 2>/dev/null || true
mv worker1.log worker1-killed.log
wait_until 30 "ps 0 giving worker 1's splits back" \
  grep -q "leased to worker 1 go back to the queue" "$WORK/ps0.log"
start_worker1 dyn.json "$WORK/ck2" 20 "$WORK/worker1.log"
# The chief alone may finish both epochs before the replacement reaches ps 0 (on a fast
# machine it needs about a second): the replacement then finds no ps and exits 69, which is
# right; the splits must still add up.
finish_cluster late
check_counts killed worker0.log worker1-killed.log worker1.log
echo "worker 1 killed mid-split: $(grep -m1 'go back to the queue' ps0.log | sed 's/^psflow ps 0: //'); splits per epoch: $(tr '\n' ';' <ps.counts)"

# --- 3. ps 0 killed: the queue comes back from its checkpoint ----------------------------
mkdir part2 && mv ps0.log worker0.log worker1.log worker1-killed.log part2/
python3 -c 'import json; d=json.load(open("dyn.json")); d["checkpoint"]={"every_steps":150,"every_secs":0}; json.dump(d,open("ck.json","w"))'
start_cluster ck.json "$WORK/ck3" 5
wait_until 60 "a checkpoint after the first completions" \
  sh -c '[ "$(grep -c "checkpoint written at step [1-9]" "$0")" -ge 2 ]' "$WORK/ps0.log"
kill -9 "$PS_PID"
wait "$PS_PID" 2>/dev/null || true
TF_CONFIG=$(tf_config ps 0 "$PSC" "$WC") "$PSFLOW_BIN" ps --job ck.json \
  --checkpoint-dir "$WORK/ck3" 2>>"$WORK/ps0.log" &
PS_PID=$!
finish_cluster
grep -q "input work queue restored: epoch [01], [0-9]* of 64 splits done" ps0.log ||
  fail "the restarted ps did not restore the queue: $(grep -m2 'restored\|work queue' ps0.log)"
for e in 0 1; do
  last=$(ps_counts ps0.log | awk -v e=$e '$1 == e' | tail -1)
  [ "$(echo "$last" | awk '{ print $4 }')" = 64 ] || fail "epoch $e after the restart: '$last'"
done
grep -q "training.epochs reached" ps0.log || fail "the epochs never ended after the ps restart"
echo "ps 0 killed and restarted: $(grep -m1 'input work queue restored' ps0.log | sed 's/^psflow ps 0: //' | cut -c1-60)...; both epochs ended with 64 splits"

# --- 4. managed: psflow up, the queue in the job's status ------------------------------
up_start --ps 1 --workers 2
python3 -c 'import json; d=json.load(open("dyn.json")); d["name"]="dynup"; json.dump(d,open("up.json","w"))'
code=$(curl -s -o created.json -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  --data @up.json "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "submitting the job: HTTP $code $(cat created.json)"
wait_until 120 "dynup Succeeded" phase_is dynup Succeeded
wait_until 20 "the finished queue in the status" \
  jget "$URL/api/v1/jobs/dynup" 'd["status"]["input"]["finished"] or exit(1)'
INPUT=$(jget "$URL/api/v1/jobs/dynup" 'json.dumps(d["status"]["input"], sort_keys=True)')
[ "$INPUT" = '{"done": 0, "epoch": 2, "epochs": 2, "finished": true, "leased": 0, "splits": 64}' ] ||
  fail "status.input: $INPUT"
up_stop
echo "managed: status.input $INPUT"

# --- 5. refusals ---------------------------------------------------------------------------
spec sync sync >sync.json
expect_exit 65 "$PSFLOW_BIN" plan sync.json
grep -q "/data/splits: dynamic splits go to whichever worker asks first" stderr ||
  fail "sync refusal: $(cat stderr)"
spec static async static >static.json
python3 -c 'import json,sys; d=json.load(open("static.json")); d["training"]["epochs"]=2; json.dump(d,open("epochs.json","w"))'
expect_exit 65 "$PSFLOW_BIN" plan epochs.json
grep -q "/training/epochs: epochs are counted by the work queue of dynamic splits" stderr ||
  fail "epochs refusal: $(cat stderr)"
pass
