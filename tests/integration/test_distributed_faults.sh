#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 600
# Faults, with real ps and worker processes on 127.0.0.1 (TF_CONFIG + --job):
#  1. backup workers: 3 workers, replicas_to_aggregate 2; worker 2 is stopped (SIGSTOP) for
#     3 s: the global step keeps advancing meanwhile, and the gradients it pushes late are
#     dropped and counted as stale by the ps;
#  2. kill -9 of a ps mid-training, restarted with the same TF_CONFIG: it restores the
#     newest complete checkpoint (the values it serves equal the file byte for byte), the
#     workers reconnect and the job reaches max_steps;
#  3. async: kill -9 of a non-chief worker, restarted: the job completes.
# Every process of every job exits 0 and none is left running.
source "$(dirname "$0")/lib.sh"

spec() { # NAME WORKERS AGGREGATE STEPS MODE
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$@" <<'PY'
import json, sys
src, name, workers, aggregate, steps, mode = sys.argv[1:7]
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": 2, "worker": int(workers)}
d["training"].update(batch_size=100, max_steps=int(steps), mode=mode, eval_every_steps=0)
if mode == "sync":
    d["training"]["replicas_to_aggregate"] = int(aggregate)
d["placement"] = {"partitioner": {"type": "fixed_shards", "num_shards": 2}}
d["checkpoint"] = {"every_steps": 100, "keep": 20}  # the restored one is read after the run goes on
json.dump(d, sys.stdout)
PY
}

PIDS=()
cleanup_cluster() { kill -9 "${PIDS[@]}" 2>/dev/null || true; }
trap 'rc=$?; cleanup_cluster; (exit $rc); cleanup' EXIT

start_ps() { # JOB INDEX
  TF_CONFIG=$(tf_config ps "$2" "$PS_PORTS" "$W_PORTS") \
    "$PSFLOW_BIN" ps --job "$1" --checkpoint-dir "$WORK/ckpt" 2>>"$WORK/ps$2.log" &
  PIDS[$2]=$!
}

start_worker() { # JOB INDEX
  TF_CONFIG=$(tf_config worker "$2" "$PS_PORTS" "$W_PORTS") \
    "$PSFLOW_BIN" worker --job "$1" --checkpoint-dir "$WORK/ckpt" --log-every 10 \
    --push-delay-ms 2 >"$WORK/worker$2.out" 2>>"$WORK/worker$2.log" &
  PIDS[$((2 + $2))]=$!
}

start_cluster() { # JOB WORKERS
  local ports
  rm -rf "$WORK/ckpt" "$WORK"/*.log
  read -r -a ports <<<"$(free_ports $((2 + $2)))"
  PS_PORTS="${ports[0]},${ports[1]}"
  W_PORTS=$(IFS=,; echo "${ports[*]:2}")
  PIDS=()
  start_ps "$1" 0
  start_ps "$1" 1
  for i in $(seq 0 $(($2 - 1))); do start_worker "$1" "$i"; done
}

finish_cluster() { # every process exits 0
  local rc=0 i
  for i in "${!PIDS[@]}"; do
    [ "$i" -lt 2 ] && continue
    wait_pid "${PIDS[$i]}" 300 || { rc=$?; echo "worker $((i - 2)) exited $rc" >&2; }
  done
  for i in 0 1; do wait_pid "${PIDS[$i]}" 60 || { rc=$?; echo "ps $i exited $rc" >&2; }; done
  [ "$rc" = 0 ] || { tail -n 15 "$WORK"/*.log >&2; fail "a process exited non-zero"; }
}

chief_step() { # the last global step the chief logged
  grep -o 'step [0-9]*/' "$WORK/worker0.log" 2>/dev/null | tail -1 | tr -dc 0-9 || true
}

wait_for() { # SECONDS CONDITION...
  local limit=$1 t=0
  shift
  until "$@"; do
    [ "$t" -lt $((limit * 10)) ] || fail "timed out waiting for: $*"
    sleep 0.1
    t=$((t + 1))
  done
}

chief_past() { local s; s=$(chief_step); [ -n "$s" ] && [ "$s" -ge "$1" ]; }

# --- 1. backup workers ----------------------------------------------------------------
spec backup 3 2 4000 sync >backup.json
start_cluster backup.json 3
wait_for 60 chief_past 200
kill -STOP "${PIDS[4]}"
before=$(chief_step)
sleep 3 # the stop itself is what is being tested; progress is checked below
during=$(chief_step)
kill -CONT "${PIDS[4]}"
echo "backup workers: chief at step $before when worker 2 stopped, $during 3 s later"
[ "$during" -gt $((before + 50)) ] || fail "training stalled while a backup worker was stopped"
finish_cluster
stale=$(grep -o 'stale [0-9]*' "$WORK/ps0.log" | tail -1 | tr -dc 0-9)
echo "ps 0 dropped $stale stale gradients"
[ "${stale:-0}" -ge 1 ] || fail "no stale gradient was counted"
pass "backup workers: training advanced ($before -> $during) while one was stopped; $stale stale dropped"

# --- 2. kill -9 of a ps ------------------------------------------------------------------
spec pskill 2 2 1500 sync >pskill.json
start_cluster pskill.json 2
wait_for 60 test -f "$WORK/ckpt/pskill/step-300/manifest.json"
kill -9 "${PIDS[1]}"
wait "${PIDS[1]}" 2>/dev/null || true
echo "ps 1 killed at chief step $(chief_step)"
start_ps pskill.json 1
wait_for 30 grep -q 'restored from' "$WORK/ps1.log"
line=$(grep 'restored from' "$WORK/ps1.log" | tail -1)
echo "$line"
dir=$(echo "$line" | sed -E 's/.*restored from ([^ ]*) \(.*/\1/')
served=$(echo "$line" | sed -E 's/.*values crc32 ([0-9a-f]{8}).*/\1/')
file_crc=$(python3 - "$dir/ps-1.safetensors" <<'PY'
import json, struct, sys, zlib
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
crc = 0
for shard in json.loads(header["__metadata__"]["psflow_shards"]):
    b, e = header[shard["name"]]["data_offsets"]
    crc = zlib.crc32(data[8 + n + b:8 + n + e], crc)
print("%08x" % crc)
PY
)
[ "$served" = "$file_crc" ] || fail "restored values crc32 $served != checkpoint file $file_crc"
finish_cluster
grep -q 'reconnected\|restarted' "$WORK/worker0.log" || fail "the chief never reconnected"
[ -f "$WORK/ckpt/pskill/step-1500/manifest.json" ] || fail "the job did not reach max_steps"
pass "ps killed and restarted: restored values match the checkpoint (crc32 $served); job done"

# --- 3. async: kill -9 of a non-chief worker ---------------------------------------------
spec asynckill 2 0 2000 async >async.json
start_cluster async.json 2
wait_for 60 chief_past 300
kill -9 "${PIDS[3]}"
wait "${PIDS[3]}" 2>/dev/null || true
start_worker async.json 1
finish_cluster
[ -f "$WORK/ckpt/asynckill/step-2000/manifest.json" ] || fail "async job did not finish"
pass "async worker killed and restarted: the job completed"
