#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 300
# Sync checkpoints with backup workers hold one version on every ps: 3 workers,
# replicas_to_aggregate 2, 2 ps, so the ps tasks move on without the chief and are never
# exactly where the chief last saw them (worker 2 pushes 2 ms late, so it is
# mostly the backup and the chief keeps stepping). The chief checkpoints every 20 steps; every
# complete step-<N> folder must hold values of version N in both ps files (the version each
# file records in its metadata, read with Python, against the folder's name), and the job
# completes: the chief trains on while a checkpoint waits for a ps to reach its step (a
# chief that stopped pushing meanwhile could leave the other two workers each waiting on a
# different ps, every step one gradient short, until the stall timeout). Real processes on 127.0.0.1 (TF_CONFIG + --job), the linear example.
source "$(dirname "$0")/lib.sh"

python3 - "$PSFLOW_SRC/examples/linear.json" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "ckver"
d["replicas"] = {"ps": 2, "worker": 3}
d["training"].update(mode="sync", replicas_to_aggregate=2, max_steps=1500, eval_every_steps=0)
d["checkpoint"] = {"every_steps": 20, "every_secs": 0, "keep": 1000}
json.dump(d, sys.stdout)
PY

read -r -a PORTS <<<"$(free_ports 5)"
PS_PORTS="${PORTS[0]},${PORTS[1]}"
W_PORTS="${PORTS[2]},${PORTS[3]},${PORTS[4]}"
PIDS=()
for i in 0 1; do
  TF_CONFIG=$(tf_config ps "$i" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" ps --job job.json \
    --checkpoint-dir "$WORK/ckpt" --exit-grace 2 2>"$WORK/ps$i.log" &
  PIDS[$i]=$!
done
for i in 0 1 2; do # worker 2 pushes late: mostly the backup, so the chief keeps stepping
  delay=0
  [ "$i" = 2 ] && delay=2
  TF_CONFIG=$(tf_config worker "$i" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" worker --job job.json \
    --checkpoint-dir "$WORK/ckpt" --push-delay-ms "$delay" >"$WORK/worker$i.out" \
    2>"$WORK/worker$i.log" &
  PIDS[$((2 + i))]=$!
done
rc=0
for i in 2 3 4 0 1; do wait_pid "${PIDS[$i]}" 200 || { rc=$?; echo "process $i exited $rc" >&2; }; done
[ "$rc" = 0 ] || fail "a process exited non-zero"

checkpoint_versions "$WORK/ckpt/ckver" 2 20 >versions.txt || fail "a checkpoint mixes versions"
grep -q '^step-1500: ' versions.txt || fail "no final checkpoint step-1500"
echo "$(wc -l <versions.txt) complete checkpoints, every ps file at the folder's version"
later=$(grep -c 'asking at step' "$WORK/worker0.log" || true)
pass "backup workers: every step-N holds version N on both ps ($later checkpoints asked again later)"
