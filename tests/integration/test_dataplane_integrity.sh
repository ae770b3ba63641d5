#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 240
# Integrity of the data plane without TLS (api/wire.md "Integrity"): a ps and two workers
# with PSFLOW_TOKEN, the chief's connections through a relay on 127.0.0.1
# (tests/integration/dataplane_relay.py) that passes the WebSocket upgrade and the
# authentication through untouched and then, on the chief's first four connections:
#  0. injects a forged CHECKPOINT final (the attack that ended a job at step 304 of 3000),
#  1. drops a push-pull and replays the one before in its place,
#  2. changes one byte of a push-pull,
#  3. sets 64 bytes in the middle of the ps's reply to NaN: the values of a push-pull, which
#     the chief receives in place, straight into its parameters, before their tag verifies.
# Each is refused by the side that receives it (the log names the tag that does not
# verify), the connection is closed, the chief reconnects and resends, and the job runs to
# max_steps: every process exits 0 and the final checkpoint is at the last step. With
# on_nonfinite "fail", a NaN the chief computed with would have failed the job: the resent
# request's verified reply rewrote the values the refused one had left.
source "$(dirname "$0")/lib.sh"
export PYTHONPATH="$PSFLOW_SRC/tests/integration"

STEPS=200
python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$STEPS" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "relayed"
d["replicas"] = {"ps": 1, "worker": 2}
d["training"].update(batch_size=50, max_steps=int(sys.argv[2]), mode="async",
                     eval_every_steps=0, on_nonfinite="fail")
json.dump(d, sys.stdout)
PY

read -r -a ports <<<"$(free_ports 4)"
PS_PORT=${ports[0]}
RELAY_PORT=${ports[1]}
W_PORTS="${ports[2]},${ports[3]}"
export PSFLOW_TOKEN=tok-integrity PSFLOW_SHM=off

TF_CONFIG=$(tf_config ps 0 "$PS_PORT" "$W_PORTS") \
  "$PSFLOW_BIN" ps --job job.json --checkpoint-dir "$WORK/ckpt" 2>"$WORK/ps.log" &
PS_PID=$!
wait_until 30 "the ps listens on $PS_PORT" python3 -c "import rawps; rawps.Conn($PS_PORT)"

# Message 4 up is the chief's 3rd request after HELLO and AUTH_PROOF; message 5 down the
# 3rd reply after AUTH_CHALLENGE, AUTH_OK and HELLO_ACK.
python3 "$PSFLOW_SRC/tests/integration/dataplane_relay.py" "$RELAY_PORT" "$PS_PORT" \
  0:up:inject:4 1:up:replay:4 2:up:flip:4 3:down:poison:5 2>"$WORK/relay.log" &
RELAY_PID=$!
wait_until 10 "the relay listens" python3 -c "import socket; socket.create_connection(('127.0.0.1', $RELAY_PORT)).close()"

TF_CONFIG=$(tf_config worker 0 "$RELAY_PORT" "$W_PORTS") \
  "$PSFLOW_BIN" worker --job job.json --checkpoint-dir "$WORK/ckpt" --log-every 10 \
  --push-delay-ms 10 >/dev/null 2>"$WORK/w0.log" &
CHIEF_PID=$!
# The other worker, slower, so the chief takes its share of the steps and every attack.
TF_CONFIG=$(tf_config worker 1 "$PS_PORT" "$W_PORTS") \
  "$PSFLOW_BIN" worker --job job.json --checkpoint-dir "$WORK/ckpt" --log-every 10 \
  --push-delay-ms 40 >/dev/null 2>"$WORK/w1.log" &
WORKER_PID=$!

status=0
wait_pid "$CHIEF_PID" 180 || status=$?
wait_pid "$WORKER_PID" 60 || status=$?
wait_pid "$PS_PID" 60 || status=$?
kill "$RELAY_PID" 2>/dev/null
show() { for f in relay ps w0 w1; do echo "--- $f.log" >&2; tail -n 20 "$WORK/$f.log" >&2; done; }
[ "$status" = 0 ] || { show; fail "a task exited non-zero ($status)"; }

for attack in "conn 0: up message 4: inject" "conn 1: up message 4: replay" \
  "conn 2: up message 4: flip" "conn 3: down message 5: poison"; do
  grep -q "$attack" "$WORK/relay.log" || { show; fail "the relay did not attack ($attack)"; }
done
pass "the relay injected, replayed in place of a dropped message, changed a byte and poisoned a reply"

grep -q "integrity tag does not verify" "$WORK/ps.log" ||
  { show; fail "the ps did not log the messages it refused"; }
grep -q "refused a message from ps 0 whose integrity tag does not verify" "$WORK/w0.log" ||
  { show; fail "the chief did not log the reply it refused"; }
pass "each forged message was refused and logged by the side that received it"
! grep -q "non-finite" "$WORK/w0.log" "$WORK/w1.log" ||
  { show; fail "a worker computed with the NaN values of the refused reply"; }
pass "the values of the refused reply were rewritten before the chief computed with them"

ls "$WORK/ckpt/relayed/step-$STEPS/ps-0.safetensors" >/dev/null ||
  { show; ls -R "$WORK/ckpt" >&2; fail "no final checkpoint at step $STEPS"; }
# The forged CHECKPOINT is a final one (step 1): applied, it would have ended the job there.
# (A checkpoint directory step-1 proves nothing: the chief's own checkpoint at its start is
# written at version 1 when worker 1's first push lands before it.)
grep -qx "psflow ps 0: job relayed done at version $STEPS" "$WORK/ps.log" &&
  [ "$(grep -c "done at version" "$WORK/ps.log")" = 1 ] ||
  { show; fail "the ps ended the job other than at version $STEPS: the forged final CHECKPOINT was applied"; }
pass "the job ran to max_steps ($STEPS): nothing of a forged message was applied"
