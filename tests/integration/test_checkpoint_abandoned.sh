#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 120
# Abandoned checkpoint attempts are pruned: a sync job with backup workers (3 workers,
# replicas_to_aggregate 2, 2 ps) asks again at a later step when a ps has passed the step
# asked for, which can leave a step-<N> folder holding one ps's file and no manifest; and a
# folder an earlier run left half written (planted here: step-7, one ps file, no manifest)
# is the same. Once the job is done every step-<N> folder left must be a complete checkpoint
# (keep is large, so nothing complete is pruned), and the final one must be there. Real
# processes on 127.0.0.1 (TF_CONFIG + --job), the linear example.
source "$(dirname "$0")/lib.sh"

python3 - "$PSFLOW_SRC/examples/linear.json" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "ckabandon"
d["replicas"] = {"ps": 2, "worker": 3}
d["training"].update(mode="sync", replicas_to_aggregate=2, max_steps=300, eval_every_steps=0)
d["checkpoint"] = {"every_steps": 5, "every_secs": 0, "keep": 1000}
json.dump(d, sys.stdout)
PY
mkdir -p "$WORK/ckpt/ckabandon/step-7"
printf 'half written' >"$WORK/ckpt/ckabandon/step-7/ps-0.safetensors"

read -r -a PORTS <<<"$(free_ports 5)"
PS_PORTS="${PORTS[0]},${PORTS[1]}"
W_PORTS="${PORTS[2]},${PORTS[3]},${PORTS[4]}"
PIDS=()
for i in 0 1; do
  TF_CONFIG=$(tf_config ps "$i" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" ps --job job.json \
    --checkpoint-dir "$WORK/ckpt" --exit-grace 2 2>"$WORK/ps$i.log" &
  PIDS[i]=$!
done
# The chief pushes late: mostly the backup, so the ps tasks are often past the step it asks
# for and it asks again at a later one. It starts first, and the others push a little late
# too, so that on a busy machine they cannot train all 300 steps before it takes part.
for i in 0 1 2; do
  delay=2
  [ "$i" = 0 ] && delay=6
  TF_CONFIG=$(tf_config worker "$i" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" worker --job job.json \
    --checkpoint-dir "$WORK/ckpt" --push-delay-ms "$delay" >"$WORK/worker$i.out" \
    2>"$WORK/worker$i.log" &
  PIDS[2 + i]=$!
  [ "$i" = 0 ] && wait_until 60 "the chief connected" grep -q 'connected to 2 ps' "$WORK/worker0.log"
done
rc=0
for i in 2 3 4 0 1; do wait_pid "${PIDS[$i]}" 100 || { rc=$?; echo "process $i exited $rc" >&2; }; done
[ "$rc" = 0 ] || fail "a process exited non-zero"

# (the chief steps rarely, and checks its schedule once a step of its own: a few complete
# checkpoints, not one per 5 steps)
checkpoint_versions "$WORK/ckpt/ckabandon" 2 3 >versions.txt || fail "a checkpoint mixes versions"
grep -q '^step-300: ' versions.txt || fail "no final checkpoint step-300"
partial=$(cd "$WORK/ckpt/ckabandon" && for d in step-*; do
  [ -e "$d/manifest.json" ] || echo "$d"
done)
[ -z "$partial" ] || fail "abandoned attempts left behind: $(tr '\n' ' ' <<<"$partial")"
later=$(grep -cE 'asking at (step|a later one)' "$WORK/worker0.log" || true)
pass "$(wc -l <versions.txt) complete checkpoints and no abandoned step folder ($later asked again later)"
