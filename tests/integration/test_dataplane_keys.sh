#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 300
# Data-plane keys by role in managed mode (docs/security.md "The data plane"), against
# `psflow up` without an API token (a real coordinator with its SQLite file and real agents on
# 127.0.0.1), with a 1-ps, 2-worker async job (worker 0 is the chief):
#  - the coordinator keeps its own data-plane secret (DB.data-plane-secret, mode 0600) and its
#    ps logs no "unauthenticated": the data plane is authenticated without an API token;
#  - a compromised worker host: the test asks the heartbeat route, as worker 1's agent (with
#    the agent's credential, if the coordinator has one), for that agent's assignment. It
#    carries worker 1's own task key (checked against the secret), not the job key; the ps's
#    assignment carries the job key;
#  - with that key, a raw client (tests/integration/rawps.py) proving a HELLO as the chief is
#    answered UNAUTHENTICATED and disconnected, while the same key proves worker 1's own HELLO
#    (HELLO_ACK: the client can pass the handshake, so the refusal is the key's);
#  - the job runs on to Succeeded.
source "$(dirname "$0")/lib.sh"
export PYTHONPATH="$PSFLOW_SRC/tests/integration"

unset PSFLOW_TOKEN PSFLOW_TOKEN_FILE
export PSFLOW_PUSH_DELAY_MS=10 # the job runs long enough to be probed while it trains
up_start --ps 1 --workers 2
SECRET="$WORK/up/psflow.db.data-plane-secret"
[ -f "$SECRET" ] || fail "no data-plane secret beside the database ($(ls "$WORK/up"))"
[ "$(stat -c %a "$SECRET")" = 600 ] || fail "the data-plane secret's mode is $(stat -c %a "$SECRET"), not 600"
AUTH=()
[ -f "$WORK/up/agent-token" ] && AUTH=(-H "Authorization: Bearer $(cat "$WORK/up/agent-token")")

python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" >"$WORK/keys.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "keys"
d["replicas"] = {"ps": 1, "worker": 2}
d["training"].update(batch_size=50, max_steps=1500, mode="async", eval_every_steps=0)
d["training"].pop("replicas_to_aggregate", None)
json.dump(d, sys.stdout)
PY
code=$(curl -s -o "$WORK/created.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  --data-binary @"$WORK/keys.json" "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "POST /api/v1/jobs: $code $(cat "$WORK/created.json")"
past() { [ "$(jget "$URL/api/v1/jobs/keys" "int(d['status']['global_step'] > 50)")" = 1 ]; }
wait_until 120 "job keys past step 50" past
! grep -rq "data plane is unauthenticated" "$WORK/up/logs" ||
  fail "a managed ps served an unauthenticated data plane"
pass "managed without an API token: the ps requires a proof; the secret is $SECRET (0600)"

# As worker 1's agent: the heartbeat it sends, and the assignment it is answered.
assignment() { # NODE-ID TYPE INDEX -> the heartbeat answer in $WORK/hb-NODE.json
  local node=$1 inc gen
  inc=$(jget "$URL/api/v1/jobs/keys/tasks" "[t['incarnation'] for t in d['items'] if t['node_id'] == '$node'][0]")
  gen=$(jget "$URL/api/v1/jobs/keys" "d['status']['generation']")
  code=$(curl -s -o "$WORK/hb-$node.json" -w '%{http_code}' -X POST "${AUTH[@]}" \
    -H 'Content-Type: application/json' "$URL/api/v1/nodes/$node/heartbeat" \
    --data "{\"state\":\"running\",\"job\":\"keys\",\"generation\":$gen,\"type\":\"$2\",\"index\":$3,\"incarnation\":$inc}")
  [ "$code" = 200 ] || fail "heartbeat as $node: HTTP $code $(cat "$WORK/hb-$node.json")"
}
node_of() { jget "$URL/api/v1/nodes" "[n['id'] for n in d['items'] if n['job'] == 'keys' and n['type'] == '$1' and n['index'] == $2][0]"; }
W1=$(node_of worker 1) || fail "no node runs worker 1"
PS0=$(node_of ps 0) || fail "no node runs ps 0"
assignment "$W1" worker 1
assignment "$PS0" ps 0

python3 - "$WORK/hb-$W1.json" "$WORK/hb-$PS0.json" "$SECRET" <<'PY' || fail "raw client with worker 1's key"
import json, sys
import rawps
from rawps import Conn, authed_hello, error_code
w_as = json.load(open(sys.argv[1]))["assignment"]
ps_as = json.load(open(sys.argv[2]))["assignment"]
secret = bytes.fromhex(open(sys.argv[3]).read().strip())
job = "keys"
jkey = rawps.job_key(secret, job)
wkey = bytes.fromhex(w_as["key"])
assert (w_as["type"], w_as["index"]) == ("worker", 1), w_as
assert wkey == rawps.task_key(jkey, "worker", 1), "worker 1's key is not its task key"
assert wkey != jkey and wkey != rawps.task_key(jkey, "chief", 0), "worker 1 was given more"
assert bytes.fromhex(ps_as["key"]) == jkey, "the ps was not given the job key"
print("ok: worker 1's assignment carries its own task key only; the ps's the job key")
port = int(json.loads(w_as["tf_config"])["cluster"]["ps"][0].rsplit(":", 1)[1])
inc = w_as["incarnation"]

c = Conn(port)
ans = authed_hello(c, "chief", 0, inc, job, None, forge=wkey)
assert error_code(ans) == "UNAUTHENTICATED", (ans[0], error_code(ans), rawps.error_text(ans))
assert c.closed_by_peer(), "connection left open"
print("ok: HELLO as the chief proven with worker 1's key: UNAUTHENTICATED, connection closed")

c = Conn(port)
ans = authed_hello(c, "worker", 1, inc, job, None, forge=wkey)
assert ans[0] == "HELLO_ACK", (ans[0], error_code(ans))
c.close()
print("ok: HELLO as worker 1 proven with the same key: AUTH_OK (ps's proof verified), HELLO_ACK")
PY
pass "a worker's credentials cannot prove the chief; they prove the worker itself"

succeeded() { phase_is keys Succeeded; }
wait_until 240 "job keys succeeds" succeeded
grep -rq 'refused (UNAUTHENTICATED' "$WORK/up/logs" || fail "the ps did not log the refusal"
up_stop
pass "the job succeeded after the refused proof; the refusal was logged"

# --- static mode: each worker given only its own key (psflow key, --task-key-file) -------
python3 - "$WORK/keys.json" >"$WORK/static.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "static-keys"
d["training"]["max_steps"] = 200
json.dump(d, sys.stdout)
PY
for i in 0 1; do
  PSFLOW_TOKEN=tok-static "$PSFLOW_BIN" key --job "$WORK/static.json" --task "worker:$i" >"$WORK/w$i.key" ||
    fail "psflow key --task worker:$i"
done
echo nothex >"$WORK/bad.key"
TF_CONFIG='{"cluster":{"ps":["127.0.0.1:1"],"worker":["127.0.0.1:2","127.0.0.1:3"]},"task":{"type":"worker","index":1}}' \
  expect_exit 65 "$PSFLOW_BIN" worker --job "$WORK/static.json" --task-key-file "$WORK/bad.key"
grep -q "not 64 hex digits" "$WORK/stderr" || fail "a bad key file was not named as such"
read -r -a ports <<<"$(free_ports 3)"
W_PORTS="${ports[1]},${ports[2]}"
TF_CONFIG=$(tf_config ps 0 "${ports[0]}" "$W_PORTS") PSFLOW_TOKEN=tok-static \
  "$PSFLOW_BIN" ps --job "$WORK/static.json" --checkpoint-dir "$WORK/ckpt" 2>"$WORK/sps.log" &
SPS=$!
for i in 0 1; do
  TF_CONFIG=$(tf_config worker $i "${ports[0]}" "$W_PORTS") "$PSFLOW_BIN" worker --job "$WORK/static.json" \
    --checkpoint-dir "$WORK/ckpt" --task-key-file "$WORK/w$i.key" >/dev/null 2>"$WORK/sw$i.log" &
  SW[$i]=$!
done
for i in 0 1; do wait_pid "${SW[$i]}" 120 || { cat "$WORK/sw$i.log" >&2; fail "static worker $i exited non-zero"; }; done
wait_pid "$SPS" 60 || fail "the static ps exited non-zero"
! grep -q 'unauthenticated' "$WORK/sps.log" || fail "the static ps was unauthenticated"
pass "static: workers with only their own key files (psflow key) train to the end; a bad key file is refused"
