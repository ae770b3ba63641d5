#!/usr/bin/env bash
# labels: sanitizer-only
# Every task in a PID namespace of its own on one host, as Compose containers and the pods
# of one node run (util-linux unshare; skipped, 77, where it cannot make one):
#  1. with PSFLOW_SHM_DIR, a folder all of them reach, each worker hands its segment to both
#     ps tasks as a descriptor ("2 of 2 ps share its memory"), and the ps tasks log that;
#  2. without it the ps cannot open /proc/<pid>/fd of a worker it cannot see: it refuses the
#     segment, the job goes on over the socket, and ends with the same variables bit for bit;
#  3. the sockets are gone once the ps tasks exit.
source "$(dirname "$0")/lib.sh"

isolate=(unshare --pid --fork --kill-child --mount-proc)
"${isolate[@]}" true 2>/dev/null || { echo "SKIP: unshare cannot make a PID namespace here (needs root)"; exit 77; }

python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "handoff"
d["replicas"] = {"ps": 2, "worker": 2}
d["training"].update(batch_size=50, max_steps=60, mode="sync", eval_every_steps=0)
d["placement"] = {"strategy": "greedy", "partitioner": {"type": "fixed_shards", "num_shards": 2}}
d["checkpoint"] = {"every_steps": 30}
json.dump(d, sys.stdout)
PY

# run VARIANT [SHM_DIR]: 2 ps + 2 workers, each task under unshare, checkpoints in
# $WORK/VARIANT; logs in $WORK/VARIANT-{ps,worker}<i>.log.
run() {
  local v=$1 dir=${2:-} ports ps_ports w_ports pids=() i rc=0
  read -r -a ports <<<"$(free_ports 4)"
  ps_ports="${ports[0]},${ports[1]}"
  w_ports="${ports[2]},${ports[3]}"
  for i in 0 1; do
    PSFLOW_SHM_DIR=$dir TF_CONFIG=$(tf_config ps $i "$ps_ports" "$w_ports") \
      "${isolate[@]}" "$PSFLOW_BIN" ps --job job.json --checkpoint-dir "$WORK/$v" \
      2>"$WORK/$v-ps$i.log" &
    pids+=($!)
  done
  local opt=() # the workers take the folder as an option, the ps tasks from the environment
  [ -n "$dir" ] && opt=(--shm-dir "$dir")
  for i in 0 1; do
    TF_CONFIG=$(tf_config worker $i "$ps_ports" "$w_ports") \
      "${isolate[@]}" "$PSFLOW_BIN" worker --job job.json --checkpoint-dir "$WORK/$v" "${opt[@]}" \
      2>"$WORK/$v-worker$i.log" >/dev/null &
    pids+=($!)
  done
  for pid in "${pids[@]:2}"; do wait_pid "$pid" 200 || rc=$?; done
  [ "$rc" = 0 ] || { kill "${pids[@]:0:2}" 2>/dev/null || true; fail "$v: a worker exited $rc"; }
  for pid in "${pids[@]:0:2}"; do wait_pid "$pid" 60 || rc=$?; done
  [ "$rc" = 0 ] || fail "$v: a ps exited $rc"
  "$PSFLOW_BIN" export "$WORK/$v/handoff" --out "$v.safetensors" >/dev/null || fail "$v: export failed"
}

# --- 1. handed over ------------------------------------------------------------------------
mkdir -p "$WORK/segments"
chmod 700 "$WORK/segments"
run handoff "$WORK/segments"
for i in 0 1; do
  grep -q "2 of 2 ps share its memory" "$WORK/handoff-worker$i.log" ||
    fail "worker $i did not share its segment with both ps through PSFLOW_SHM_DIR"
  n=$(grep -c "handed over through PSFLOW_SHM_DIR" "$WORK/handoff-ps$i.log" || true)
  [ "$n" -ge 2 ] || fail "ps $i took $n handed-over segments, expected one per worker"
done
pass "tasks in separate PID namespaces share their segments through PSFLOW_SHM_DIR"

# --- 2. without the folder -------------------------------------------------------------
run proc
for i in 0 1; do
  grep -q " 0 of 2 ps share its memory" "$WORK/proc-worker$i.log" ||
    fail "worker $i shared a segment with a ps that cannot see its processes"
  grep -q "did not take the shared segment" "$WORK/proc-worker$i.log" ||
    fail "worker $i did not say why the segment was not shared"
done
diff=$(max_abs_diff handoff.safetensors proc.safetensors)
[ "$diff" = 0 ] || fail "the handed-over segment and the socket differ by $diff"
pass "without PSFLOW_SHM_DIR the job goes over the socket, to the same variables bit for bit"

# --- 3. cleaned up -----------------------------------------------------------------------
left=$(ls -A "$WORK/segments")
[ -z "$left" ] || fail "sockets left in PSFLOW_SHM_DIR after the ps tasks exited: $left"
pass "the ps tasks removed their sockets"
