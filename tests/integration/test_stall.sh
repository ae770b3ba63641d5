#!/usr/bin/env bash
# labels: sanitizer-only
# No silent waits: a ps that stops answering (SIGSTOP) stalls the job; the chief says what
# it waits for, and after training.stall_timeout_secs (2 here) fails with exit 69 and a
# line naming the ps, instead of hanging. Real processes on 127.0.0.1 (TF_CONFIG + --job).
source "$(dirname "$0")/lib.sh"

python3 - "$PSFLOW_SRC/examples/linear.json" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "stall"
d["training"].update(max_steps=1000000000, eval_every_steps=0, stall_timeout_secs=2)
json.dump(d, sys.stdout)
PY
read -r PS_PORT W_PORT <<<"$(free_ports 2)"
TF_CONFIG=$(tf_config ps 0 "$PS_PORT" "$W_PORT") "$PSFLOW_BIN" ps --job job.json \
  --checkpoint-dir "$WORK/ckpt" 2>"$WORK/ps.log" &
PS_PID=$!
TF_CONFIG=$(tf_config worker 0 "$PS_PORT" "$W_PORT") "$PSFLOW_BIN" worker --job job.json \
  --checkpoint-dir "$WORK/ckpt" --log-every 1000 >"$WORK/chief.out" 2>"$WORK/chief.log" &
CHIEF_PID=$!
wait_until 60 "the chief training" grep -q 'step [0-9]*/' "$WORK/chief.log"
kill -STOP "$PS_PID"
got=0
wait_pid "$CHIEF_PID" 60 || got=$?
kill -9 "$PS_PID" 2>/dev/null || true
[ "$got" = 69 ] || { tail "$WORK/chief.log" >&2; fail "the chief exited $got, expected 69"; }
grep -q "waiting [0-9]* s for ps 0 at 127.0.0.1:$PS_PORT (version [0-9]*) to answer its push/pull" \
  "$WORK/chief.log" || { tail "$WORK/chief.log" >&2; fail "no line saying what the chief waits for"; }
grep -q "no answer from ps 0 at 127.0.0.1:$PS_PORT for 2 s (training.stall_timeout_secs)" \
  "$WORK/chief.log" || { tail "$WORK/chief.log" >&2; fail "no line naming the stalled ps"; }
pass "stalled ps: $(grep -o 'no answer from ps 0.*' "$WORK/chief.log" | head -1)"
