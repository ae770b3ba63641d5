#!/usr/bin/env bash
# labels: sanitizer-only
# Defaults that do not trust the network (docs/security.md, "Defaults"), against the real
# binary with real SQLite files and real agents on 127.0.0.1:
#  a. a coordinator without an API token on 127.0.0.1 still keeps its agent routes closed:
#     it creates an agent token beside its database (mode 0600, the same on a restart); a
#     stranger's registration, heartbeat or metric report without it is answered 401
#     problem+json and registers nothing; an agent without it exits refused; an agent given
#     the file registers;
#  b. `--listen 0.0.0.0:PORT` without an API token refuses to start (exit 64, naming the
#     fixes) and listens on nothing; with --insecure (or PSFLOW_INSECURE=1) it starts and
#     logs a WARNING, as it does on loopback;
#  c. with an API token, the agent token registers and reports but cannot submit, change,
#     cancel or list jobs (403), while the API token still does everything;
#  d. a static ps whose TF_CONFIG names 127.0.0.1:PORT binds 127.0.0.1, not every interface.
source "$(dirname "$0")/lib.sh"

read -r pa pb pc pd ps_port w_port <<<"$(free_ports 6)"
unset PSFLOW_AGENT_TOKEN # (a) and (b): the coordinator's own file

# status METHOD URL [BODY] [CURL ARGS...]: the HTTP status; the answer in $WORK/body, its
# headers in $WORK/headers.
status() {
  local method=$1 url=$2 body=${3:-}
  shift 3 || shift $#
  local args=(-s -o "$WORK/body" -D "$WORK/headers" -w '%{http_code}' --max-time 5 -X "$method")
  [ -z "$body" ] || args+=(-H 'Content-Type: application/json' --data "$body")
  curl "${args[@]}" "$@" "$url"
}
nodes() { jget "$1/api/v1/nodes" 'len(d["items"])'; }

# --- a. no API token, loopback: the agent routes still need the agent token ---------------
A=http://127.0.0.1:$pa
mkdir -p "$WORK/a"
"$PSFLOW_BIN" coordinator --listen "127.0.0.1:$pa" --db "$WORK/a/psflow.db" 2>"$WORK/a.log" &
coord_a=$!
wait_until 30 "coordinator a ready" curl -sf "$A/readyz"
[ -f "$WORK/a/agent-token" ] || fail "no agent token beside the database: $(cat "$WORK/a.log")"
[ "$(stat -c %a "$WORK/a/agent-token")" = 600 ] ||
  fail "the agent token file has mode $(stat -c %a "$WORK/a/agent-token"), not 600"
grep -Eq '^[0-9a-f]{64}$' "$WORK/a/agent-token" || fail "the agent token is not 64 hex digits"
grep -q "created a new agent token in $WORK/a/agent-token" "$WORK/a.log" ||
  fail "the coordinator does not say where the agent token is: $(cat "$WORK/a.log")"
grep -q "WARNING: the API has no token: anyone who reaches 127.0.0.1:$pa can submit and cancel jobs" \
  "$WORK/a.log" || fail "no WARNING about the open API: $(cat "$WORK/a.log")"

reg='{"id": "rogue", "role": "ps", "address": "127.0.0.1:'"$ps_port"'"}'
for auth in none wrong api; do
  extra=()
  [ "$auth" = wrong ] && extra=(-H "Authorization: Bearer 0123456789abcdef")
  [ "$auth" = api ] && extra=(-H "Authorization: Bearer ") # an empty bearer is no token
  code=$(status POST "$A/api/v1/nodes" "$reg" "${extra[@]}")
  [ "$code" = 401 ] || fail "a stranger's registration ($auth) was answered $code: $(cat "$WORK/body")"
  grep -qi '^content-type: application/problem+json' "$WORK/headers" ||
    fail "the 401 is not problem+json"
  grep -q 'agent token' "$WORK/body" || fail "the 401 does not name the agent token"
done
code=$(status POST "$A/api/v1/nodes/rogue/heartbeat" '{"state": "idle"}')
[ "$code" = 401 ] || fail "a stranger's heartbeat was answered $code"
code=$(status DELETE "$A/api/v1/nodes/rogue" '')
[ "$code" = 401 ] || fail "a stranger's deregistration was answered $code"
# A job (the API itself is open here): a stranger cannot report its metrics or checkpoints.
job='{"name": "open", "replicas": {"ps": 1, "worker": 1}, "model": {"type": "linear", "inputs": 1},
  "data": {"format": "synthetic_linear"}, "training": {"max_steps": 100000}}'
[ "$(status POST "$A/api/v1/jobs" "$job")" = 201 ] || fail "submitting to the open API: $(cat "$WORK/body")"
code=$(status POST "$A/api/v1/jobs/open/metrics" '{"task": "worker-0", "incarnation": 1, "points": [{"step": 1, "time": 1, "loss": 0.5}]}')
[ "$code" = 401 ] || fail "a stranger's metric report was answered $code"
code=$(status POST "$A/api/v1/jobs/open/checkpoints" '{"task": "worker-0", "incarnation": 1, "step": 1, "time": 1}')
[ "$code" = 401 ] || fail "a stranger's checkpoint report was answered $code"
[ "$(nodes "$A")" = 0 ] || fail "the node list is not empty after the refused registrations"
pass "no API token: a stranger's registration, heartbeat, deregistration and reports are 401 problem+json, nothing registered"

# An agent without the agent token is refused and says why; one given the file registers.
expect_exit 77 timeout 30 env -u PSFLOW_TOKEN -u PSFLOW_TOKEN_FILE "$PSFLOW_BIN" worker \
  --coordinator "$A" \
  --node-id tokenless --advertise "127.0.0.1:$w_port"
grep -q 'registration refused: HTTP 401' "$WORK/stderr" ||
  fail "the tokenless agent does not say it was refused: $(cat "$WORK/stderr")"
"$PSFLOW_BIN" ps --coordinator "$A" --agent-token-file "$WORK/a/agent-token" --node-id good-ps \
  --listen "127.0.0.1:$ps_port" --advertise "127.0.0.1:$ps_port" --checkpoint-dir "$WORK/ckpt" \
  2>"$WORK/agent.log" &
agent=$!
wait_until 30 "the agent with the token registered" \
  sh -c "curl -sf $A/api/v1/nodes | grep -q good-ps"
[ "$(nodes "$A")" = 1 ] || fail "the node list holds $(nodes "$A") agents, expected 1"
kill "$agent" && wait_pid "$agent" 30 || true
kill "$coord_a" && wait_pid "$coord_a" 30 || true
before=$(cat "$WORK/a/agent-token")
"$PSFLOW_BIN" coordinator --listen "127.0.0.1:$pa" --db "$WORK/a/psflow.db" 2>"$WORK/a2.log" &
coord_a=$!
wait_until 30 "coordinator a ready again" curl -sf "$A/readyz"
[ "$(cat "$WORK/a/agent-token")" = "$before" ] || fail "a restart changed the agent token"
grep -q "agents authenticate with the agent token in $WORK/a/agent-token" "$WORK/a2.log" ||
  fail "the restarted coordinator does not say where the agent token is: $(cat "$WORK/a2.log")"
kill "$coord_a" && wait_pid "$coord_a" 30 || true
pass "an agent without the agent token exits refused (77); one given the file registers; a restart keeps the token"

# --- b. no API token on an address other hosts reach: refused unless --insecure -----------
# (timeout: a coordinator that starts instead would serve until killed, exit 124)
expect_exit 64 timeout 30 "$PSFLOW_BIN" coordinator --listen "0.0.0.0:$pb" --db "$WORK/b.db"
for fix in PSFLOW_TOKEN --generate-token --insecure; do
  grep -q -- "$fix" "$WORK/stderr" || fail "the refusal does not name $fix: $(cat "$WORK/stderr")"
done
! ss -ltnH "sport = :$pb" | grep -q . || fail "the refused coordinator listens on $pb"
[ ! -e "$WORK/b.db" ] || fail "the refused coordinator created its database"
"$PSFLOW_BIN" coordinator --listen "0.0.0.0:$pb" --db "$WORK/b.db" --insecure 2>"$WORK/b.log" &
coord_b=$!
wait_until 30 "the --insecure coordinator ready" curl -sf "http://127.0.0.1:$pb/readyz"
grep -q "WARNING: the API has no token: anyone who reaches 0.0.0.0:$pb can submit and cancel jobs" \
  "$WORK/b.log" || fail "--insecure logs no WARNING: $(cat "$WORK/b.log")"
kill "$coord_b" && wait_pid "$coord_b" 30 || true
PSFLOW_INSECURE=1 "$PSFLOW_BIN" coordinator --listen "0.0.0.0:$pb" --db "$WORK/b.db" \
  2>"$WORK/b2.log" &
coord_b=$!
wait_until 30 "the PSFLOW_INSECURE=1 coordinator ready" curl -sf "http://127.0.0.1:$pb/readyz"
kill "$coord_b" && wait_pid "$coord_b" 30 || true
pass "0.0.0.0 without an API token: exit 64 naming the fixes; --insecure / PSFLOW_INSECURE=1 start with a WARNING"

# --- c. with an API token, the agent token grants only the agent routes -------------------
C=http://127.0.0.1:$pc
API=api-secret-0123456789 AGENT=agent-secret-0123456789
PSFLOW_TOKEN=$API PSFLOW_AGENT_TOKEN=$AGENT "$PSFLOW_BIN" coordinator --listen "127.0.0.1:$pc" \
  --db "$WORK/c.db" 2>"$WORK/c.log" &
coord_c=$!
wait_until 30 "coordinator c ready" curl -sf "$C/readyz"
! grep -q WARNING "$WORK/c.log" || fail "a coordinator with a token warns: $(cat "$WORK/c.log")"
as_agent=(-H "Authorization: Bearer $AGENT")
as_api=(-H "Authorization: Bearer $API")
job='{"name": "guarded", "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"}}'
code=$(status POST "$C/api/v1/jobs" "$job" "${as_agent[@]}")
[ "$code" = 403 ] || fail "the agent token submitting a job was answered $code: $(cat "$WORK/body")"
grep -q 'API token' "$WORK/body" || fail "the 403 does not say the API token is needed"
code=$(status GET "$C/api/v1/jobs" '' "${as_agent[@]}")
[ "$code" = 403 ] || fail "the agent token listing jobs was answered $code"
[ "$(status POST "$C/api/v1/jobs" "$job" "${as_api[@]}")" = 201 ] ||
  fail "the API token submitting a job: $(cat "$WORK/body")"
code=$(status PATCH "$C/api/v1/jobs/guarded" '{"suspend": true}' "${as_agent[@]}")
[ "$code" = 403 ] || fail "the agent token changing a job was answered $code"
code=$(status POST "$C/api/v1/jobs/guarded/cancel" '' "${as_agent[@]}")
[ "$code" = 403 ] || fail "the agent token cancelling a job was answered $code"
code=$(status DELETE "$C/api/v1/jobs/guarded" '' "${as_agent[@]}")
[ "$code" = 403 ] || fail "the agent token deleting a job was answered $code"
[ "$(status GET "$C/api/v1/jobs/guarded" '' "${as_api[@]}")" = 200 ] || fail "the job is gone"
phase=$(json_field "$WORK/body" 'd["status"]["phase"]')
case $phase in Suspended | Cancelled | Failed) fail "the refused requests made the job $phase" ;; esac
code=$(status POST "$C/api/v1/nodes" '{"id": "w1", "role": "worker", "address": "127.0.0.1:'"$w_port"'"}' "${as_agent[@]}")
[ "$code" = 201 ] || fail "the agent token registering an agent was answered $code: $(cat "$WORK/body")"
code=$(status POST "$C/api/v1/nodes/w1/heartbeat" '{"state": "idle"}' "${as_agent[@]}")
[ "$code" = 200 ] || fail "the agent token's heartbeat was answered $code"
code=$(status POST "$C/api/v1/nodes" '{"id": "w2", "role": "worker", "address": "127.0.0.1:'"$pd"'"}' "${as_api[@]}")
[ "$code" = 201 ] || fail "the API token registering an agent (as agents did before) was answered $code"
code=$(status POST "$C/api/v1/nodes" '{"id": "w3", "role": "worker", "address": "127.0.0.1:1"}')
[ "$code" = 401 ] || fail "a registration without a token was answered $code"
kill "$coord_c" && wait_pid "$coord_c" 30 || true
pass "with an API token: the agent token registers and beats but cannot submit, list, change, cancel or delete jobs (403)"

# --- d. a static ps binds the host its TF_CONFIG names -----------------------------------
printf '{"name": "bindtest", "replicas": {"ps": 1, "worker": 1}, "model": {"type": "linear", "inputs": 1},
  "data": {"format": "synthetic_linear"}}' >"$WORK/bind.json"
TF_CONFIG=$(tf_config ps 0 "$pd" "$w_port") "$PSFLOW_BIN" ps --job "$WORK/bind.json" \
  --checkpoint-dir "$WORK/ckpt-d" 2>"$WORK/ps-d.log" &
ps_d=$!
wait_until 30 "the static ps listening" grep -q 'listening on' "$WORK/ps-d.log"
ss -ltnH "sport = :$pd" >"$WORK/ss.txt"
[ -s "$WORK/ss.txt" ] || fail "nothing listens on port $pd"
awk '{print $4}' "$WORK/ss.txt" | grep -qv "^127\.0\.0\.1:$pd$" &&
  fail "the static ps binds more than 127.0.0.1: $(cat "$WORK/ss.txt")"
grep -q "listening on 127.0.0.1:$pd" "$WORK/ps-d.log" || fail "the ps says: $(cat "$WORK/ps-d.log")"
kill "$ps_d" && wait_pid "$ps_d" 30 || true
pass "a static ps whose TF_CONFIG names 127.0.0.1:$pd listens on 127.0.0.1:$pd only"
