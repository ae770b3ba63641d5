#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 300
# A raw data-plane client (tests/integration/rawps.py: RFC 6455 and api/wire.md in Python,
# not psflow's codec) against real ps processes on 127.0.0.1:
#  1. without a secret: every request type before HELLO is refused (UNEXPECTED) and changes
#     nothing; HELLO with task_index 2^31 and 2^32-1 gets BAD_VALUE and the ps keeps
#     serving; a PUSH naming another task or incarnation than its connection's HELLO is
#     refused (FORBIDDEN) and the variables are byte-identical afterwards; a tool may not
#     pull; a worker's CHECKPOINT (even final = 1) is refused while two real workers train,
#     and the job still finishes normally (every process exits 0, final checkpoint written).
#     A worker with PSFLOW_TOKEN refuses this ps, which cannot prove the key (no downgrade).
#  2. with PSFLOW_TOKEN (static mode): a HELLO followed by no proof, a wrong token's proof,
#     another job's, a worker's key claiming the chief, a zero proof or a replayed one is
#     refused with UNAUTHENTICATED and the connection is closed; a right proof is answered
#     with the ps's own proof (checked) and HELLO_ACK; real workers with the token train to
#     the end, a worker without it is refused.
source "$(dirname "$0")/lib.sh"
export PYTHONPATH="$PSFLOW_SRC/tests/integration"

spec() { # NAME STEPS
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$@" <<'PY'
import json, sys
src, name, steps = sys.argv[1:4]
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": 1, "worker": 2}
d["training"].update(batch_size=50, max_steps=int(steps), mode="async", eval_every_steps=0)
d["placement"] = {"partitioner": {"type": "fixed_shards", "num_shards": 2}}
json.dump(d, sys.stdout)
PY
}

read -r -a ports <<<"$(free_ports 3)"
PS_PORT=${ports[0]}
W_PORTS="${ports[1]},${ports[2]}"
PIDS=()

start_ps() { # JOB LOG
  TF_CONFIG=$(tf_config ps 0 "$PS_PORT" "$W_PORTS") \
    "$PSFLOW_BIN" ps --job "$1" --checkpoint-dir "$WORK/ckpt" 2>>"$2" &
  PS_PID=$!
  wait_until 30 "the ps listens on $PS_PORT" python3 -c "import rawps; rawps.Conn($PS_PORT)"
}

start_worker() { # JOB INDEX LOG
  TF_CONFIG=$(tf_config worker "$2" "$PS_PORT" "$W_PORTS") \
    "$PSFLOW_BIN" worker --job "$1" --checkpoint-dir "$WORK/ckpt" --log-every 10 --push-delay-ms 20 \
    >/dev/null 2>>"$3" &
  PIDS[$2]=$!
}

chief_past() { logged_step_past "$WORK/w0.log" "$1"; } # the chief logged a step >= $1

# --- 1. no secret: authorisation by role and range checks --------------------------------
spec open 600 >open.json
start_ps open.json "$WORK/ps.log"
grep -q 'data plane is unauthenticated' "$WORK/ps.log" || fail "no warning about the open data plane"

python3 - "$PS_PORT" <<'PY' || fail "raw client (no secret)"
import struct, sys
import rawps
from rawps import Conn, error_code, hello, pull, push, checkpoint
port = int(sys.argv[1])

# Every request type before HELLO is refused; a final CHECKPOINT ends nothing.
c = Conn(port)
for name, payload in [("PULL", pull([0, 1])), ("PUSH", push(0, 1, 1, 0, [])),
                      ("PUSH_PULL", push(0, 1, 1, 0, []) + pull([0])), ("STATS", b""),
                      ("CHECKPOINT", checkpoint(1, 1)), ("AUTH_PROOF", bytes(64))]:
    got = error_code(c.request(name, payload))
    assert got == "UNEXPECTED", (name, got)
print("ok: PULL, PUSH, PUSH_PULL, STATS, CHECKPOINT, AUTH_PROOF before HELLO: UNEXPECTED")

# HELLO with task_index 2^31 and 2^32-1 (and other indices the job lacks): BAD_VALUE.
for role, task in [("worker", 1 << 31), ("worker", (1 << 32) - 1), ("chief", 1 << 31),
                   ("worker", 2), ("chief", 1), ("evaluator", 0), ("tool", 7)]:
    got = error_code(c.request("HELLO", hello(role, task, 1, "open")))
    assert got == "BAD_VALUE", (role, task, got)
print("ok: HELLO task_index 2^31, 2^32-1 (worker, chief) and other absent tasks: BAD_VALUE")
c.close()

# The ps still serves: a tool reads STATS and nothing else.
t = Conn(port)
assert t.request("HELLO", hello("tool", 0, 1, "open"))[0] == "HELLO_ACK"
assert t.request("STATS", b"")[0] == "STATS_REPLY"
assert error_code(t.request("PULL", pull([0]))) == "FORBIDDEN"
assert error_code(t.request("PUSH", push(0, 1, 1, 0, []))) == "FORBIDDEN"
assert error_code(t.request("CHECKPOINT", checkpoint(1, 1))) == "FORBIDDEN"
print("ok: the ps keeps serving; a tool gets STATS, and PULL/PUSH/CHECKPOINT are FORBIDDEN")

# A worker pulls every shard; pushes naming another task or incarnation are refused and
# the variables stay byte-identical.
w = Conn(port)
ack = rawps.hello_ack(w.request("HELLO", hello("worker", 1, 7, "open"))[2])
ids = list(range(ack["n_shards"]))
ans = w.request("PULL", pull(ids))
assert ans[0] == "PULL_REPLY", ans
v0, before = rawps.pull_reply(ans[2])
grads = [(i, struct.pack("<%df" % (len(d) // 4), *([0.5] * (len(d) // 4)))) for i, d in before]
for task, inc in [(0, 7), (1, 8), (1, 6), (0, 1 << 62)]:
    got = error_code(w.request("PUSH", push(task, inc, 1, v0, grads)))
    assert got == "FORBIDDEN", (task, inc, got)
    got = error_code(w.request("PUSH_PULL", push(task, inc, 2, v0, grads) + pull(ids)))
    assert got == "FORBIDDEN", (task, inc, got)
got = error_code(w.request("CHECKPOINT", checkpoint(5, 1)))
assert got == "FORBIDDEN", got
v1, after = rawps.pull_reply(w.request("PULL", pull(ids))[2])
assert v1 == v0 and after == before, "variables changed"
print("ok: PUSH/PUSH_PULL as task 0, incarnation 8, 6, 2^62: FORBIDDEN; worker CHECKPOINT:"
      " FORBIDDEN; %d shards (%d bytes) byte-identical at version %d"
      % (len(after), sum(len(d) for _, d in after), v1))
PY

# A task that has a key refuses a ps that answers HELLO without proving it (no downgrade).
TF_CONFIG=$(tf_config worker 1 "$PS_PORT" "$W_PORTS") PSFLOW_TOKEN=tok \
  expect_exit 70 "$PSFLOW_BIN" worker --job open.json --checkpoint-dir "$WORK/ckpt" --retry-seconds 5
grep -q "answered HELLO without proving the job's key" "$WORK/stderr" ||
  { cat "$WORK/stderr" >&2; fail "the worker did not say why it refused the ps"; }
pass "a worker with PSFLOW_TOKEN refuses a ps without a key"

# Real workers train; meanwhile a raw worker's final CHECKPOINT is refused.
start_worker open.json 0 "$WORK/w0.log"
start_worker open.json 1 "$WORK/w1.log"
wait_until 120 "the chief reaches step 50" chief_past 50
python3 - "$PS_PORT" <<'PY' || fail "non-chief CHECKPOINT during training"
import sys
from rawps import Conn, error_code, hello, checkpoint
c = Conn(int(sys.argv[1]))
assert c.request("HELLO", hello("worker", 1, 1, "open"))[0] == "HELLO_ACK"
got = error_code(c.request("CHECKPOINT", checkpoint(1, 1)))
assert got == "FORBIDDEN", got
print("ok: a worker's CHECKPOINT final=1 during training: FORBIDDEN")
PY
for i in 0 1; do wait_pid "${PIDS[$i]}" 180 || fail "worker $i exited non-zero"; done
wait_pid "$PS_PID" 60 || fail "ps exited non-zero"
grep -q 'job open done at version' "$WORK/ps.log" || fail "the ps did not finish the job"
ls "$WORK"/ckpt/open/step-600/ps-0.safetensors >/dev/null || fail "no final checkpoint at step 600"
pass "the job finished normally: workers and ps exited 0, final checkpoint at step 600"

# --- 2. static mode with PSFLOW_TOKEN: the proof of the job's key ------------------------
spec locked 300 >locked.json
rm -f "$WORK/w0.log" "$WORK/w1.log"
PSFLOW_TOKEN=tok-1234 start_ps locked.json "$WORK/ps2.log"
! grep -q 'unauthenticated' "$WORK/ps2.log" || fail "a ps with a key says it is unauthenticated"

python3 - "$PS_PORT" <<'PY' || fail "raw client (PSFLOW_TOKEN)"
import os, struct, sys
import rawps
from rawps import Conn, error_code, hello, authed_hello
port, token, job = int(sys.argv[1]), b"tok-1234", "locked"
jkey = rawps.job_key(token, job)

def refused(what, conn, ans):
    got = error_code(ans)
    assert got == "UNAUTHENTICATED", (what, got, rawps.error_text(ans))
    assert conn.closed_by_peer(), (what, "connection left open")
    print("ok: %s: UNAUTHENTICATED, connection closed" % what)

# HELLO, then anything but a proof.
c = Conn(port)
ans = c.request("HELLO", hello("worker", 1, 3, job))
assert ans[0] == "AUTH_CHALLENGE" and len(ans[2]) == 32, ans
refused("HELLO then STATS instead of a proof", c, c.request("STATS", b"", request_id=ans[1]))

# Wrong token, another job's key, a worker's key claiming the chief.
c = Conn(port)
refused("proof with a wrong token", c,
        authed_hello(c, "worker", 1, 3, job, None,
                     forge=rawps.task_key(rawps.job_key(b"wrong", job), "worker", 1)))
c = Conn(port)
refused("proof with another job's key", c,
        authed_hello(c, "worker", 1, 3, job, None,
                     forge=rawps.task_key(rawps.job_key(token, "other"), "worker", 1)))
c = Conn(port)
refused("chief HELLO proven with worker 1's key", c,
        authed_hello(c, "chief", 0, 3, job, None, forge=rawps.task_key(jkey, "worker", 1)))
c = Conn(port)
refused("an all-zero proof", c, (c.request("HELLO", hello("worker", 1, 3, job)),
                                 c.request("AUTH_PROOF", bytes(64)))[1])

# A replayed proof: a valid transcript's HELLO and proof on a new connection.
c = Conn(port)
ans = c.request("HELLO", hello("worker", 1, 3, job))
old_hello, nonce_ps = c.last_sent, ans[2]
nonce_task = os.urandom(32)
tkey = rawps.task_key(jkey, "worker", 1)
old_proof = nonce_task + rawps.proof(tkey, rawps.LABEL_PROOF, old_hello, nonce_ps, nonce_task)
assert c.request("AUTH_PROOF", old_proof, request_id=ans[1])[0] == "AUTH_OK"
rawps.start_integrity(c, tkey, old_hello, nonce_ps, nonce_task)
assert c.recv()[0] == "HELLO_ACK"
c.close()
r = Conn(port)
ans = r.request("HELLO", hello("worker", 1, 3, job), request_id=1)
assert r.last_sent == old_hello and ans[2] != nonce_ps, "the ps's nonce repeated"
refused("a replayed proof", r, r.request("AUTH_PROOF", old_proof, request_id=ans[1]))

# The right key: AUTH_OK carries the ps's proof (checked in authed_hello), then HELLO_ACK.
t = Conn(port)
ans = authed_hello(t, "tool", 0, 3, job, token)
assert ans[0] == "HELLO_ACK", ans
assert t.request("STATS", b"")[0] == "STATS_REPLY"
print("ok: the right proof: AUTH_OK with the ps's proof (verified), HELLO_ACK, STATS served")
PY

# A worker without the token is refused; workers with it train to the end.
TF_CONFIG=$(tf_config worker 1 "$PS_PORT" "$W_PORTS") \
  expect_exit 70 "$PSFLOW_BIN" worker --job locked.json --checkpoint-dir "$WORK/ckpt" --retry-seconds 5
grep -q "requires a proof of the job's key" "$WORK/stderr" ||
  { cat "$WORK/stderr" >&2; fail "the worker without a token did not say why"; }
pass "a worker without PSFLOW_TOKEN is refused by a ps with one"
PSFLOW_TOKEN=tok-1234 start_worker locked.json 0 "$WORK/w0.log"
PSFLOW_TOKEN=tok-1234 start_worker locked.json 1 "$WORK/w1.log"
for i in 0 1; do wait_pid "${PIDS[$i]}" 180 || fail "worker $i (with the token) exited non-zero"; done
wait_pid "$PS_PID" 60 || fail "ps (with the token) exited non-zero"
ls "$WORK"/ckpt/locked/step-300/ps-0.safetensors >/dev/null || fail "no final checkpoint at step 300"
grep -q 'refused (UNAUTHENTICATED' "$WORK/ps2.log" || fail "the ps did not log the refusals"
pass "with PSFLOW_TOKEN: workers authenticated and the job finished; refusals logged"

# --- 3. managed mode: psflow up with PSFLOW_TOKEN; its agents' tasks prove the key ------
export PSFLOW_TOKEN=up-token-5678
up_start --ps 1 --workers 2
spec managed 200 >managed.json
code=$(curl -s -o "$WORK/created.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $PSFLOW_TOKEN" \
  -H 'Content-Type: application/json' --data-binary @managed.json "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "POST /api/v1/jobs: $code $(cat "$WORK/created.json")"
succeeded() { [ "$(jget_auth "$URL/api/v1/jobs/managed" 'd["status"]["phase"]')" = Succeeded ]; }
jget_auth() {
  curl -sf --max-time 5 -H "Authorization: Bearer $PSFLOW_TOKEN" "$1" >"$WORK/jget.json" || return 1
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$WORK/jget.json" "$2"
}
wait_until 180 "the managed job succeeds" succeeded
grep -rq "serving .* of job managed" "$WORK/up/logs" || fail "no ps of the managed job in the logs"
! grep -rq "data plane is unauthenticated" "$WORK/up/logs" ||
  fail "a managed ps with PSFLOW_TOKEN served an unauthenticated data plane"
up_stop
pass "managed (psflow up with PSFLOW_TOKEN): the job succeeded over an authenticated data plane"
