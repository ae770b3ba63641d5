#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 120
# Every agent has an address of its own, and the figures about agents count this run's:
# two worker agents started on one host without --advertise register at two addresses (a
# port each keeps bound), the coordinator refuses (409) a registration at the address of a
# live agent of another id (so no TF_CONFIG lists an address twice), psflow up on the
# database of an earlier run that still lists other agents says "2 of 2 agents registered"
# (not the rows of that run), and a TF_CONFIG naming an evaluator task says so grammatically.
# A real coordinator (psflow up) with its SQLite file, real agents on 127.0.0.1.
source "$(dirname "$0")/lib.sh"

post_node() { # BODY: prints the HTTP status of POST /api/v1/nodes
  curl -s -o "$WORK/post.json" -w '%{http_code}' --max-time 5 -X POST "${AGENT_AUTH[@]}" \
    -H 'Content-Type: application/json' --data "$1" "$URL/api/v1/nodes"
}

up_start --ps 1 --workers 1
grep -q 'psflow up: 2 of 2 agents registered' "$WORK/up.err" ||
  fail "first run: $(grep 'agents registered' "$WORK/up.err")"

# A live agent's address is its own.
w0=$(jget "$URL/api/v1/nodes" '[n["address"] for n in d["items"] if n["id"] == "worker-0"][0]')
code=$(post_node '{"id": "intruder", "role": "worker", "address": "'"$w0"'"}')
[ "$code" = 409 ] || fail "a second agent at $w0 got HTTP $code, expected 409"
grep -q "advertised by the live worker agent worker-0" "$WORK/post.json" ||
  fail "the 409 does not name the agent: $(cat "$WORK/post.json")"
code=$(post_node '{"id": "worker-0", "role": "worker", "address": "'"$w0"'"}')
[ "$code" = 200 ] || fail "worker-0 registering again at its own address got HTTP $code"

# Two worker agents of one host, no --advertise: two addresses.
for id in spare-a spare-b; do
  "$PSFLOW_BIN" worker --coordinator "$URL" --node-id "$id" --checkpoint-dir "$WORK/ckpt" \
    2>"$WORK/$id.log" &
done
wait_until 30 "both spare agents registered" jget "$URL/api/v1/nodes" \
  'sys.exit(0 if {"spare-a", "spare-b"} <= {n["id"] for n in d["items"]} else 1)'
jget "$URL/api/v1/nodes" \
  '[n["address"] for n in d["items"] if n["id"] in ("spare-a", "spare-b")]' >spares.txt
python3 -c 'import ast,sys; a=ast.literal_eval(open("spares.txt").read()); sys.exit(0 if len(set(a)) == 2 else 1)' ||
  fail "two worker agents of one host advertise the same address: $(cat spares.txt)"
pass "agents' addresses are their own: $(cat spares.txt), and a duplicate is refused (409)"

# Rows of agents that are not this run's (registered, then left in the database).
for k in 1 2 3; do
  code=$(post_node '{"id": "old-worker-'$k'", "role": "worker", "address": "127.0.0.1:'$k'"}')
  [ "$code" = 201 ] || fail "registering old-worker-$k: HTTP $code"
done
up_stop
up_start --ps 1 --workers 1
grep -q 'psflow up: 2 of 2 agents registered' "$WORK/up.err" ||
  fail "on the earlier run's database: $(grep 'agents registered' "$WORK/up.err")"
up_stop
pass "psflow up on an earlier run's database counts this run's agents: 2 of 2"

# The task type in a message reads as English.
read -r ps_port w_port e_port <<<"$(free_ports 3)"
export TF_CONFIG='{"cluster":{"ps":["127.0.0.1:'$ps_port'"],"worker":["127.0.0.1:'$w_port'"],"evaluator":["127.0.0.1:'$e_port'"]},"task":{"type":"evaluator","index":0}}'
cat >job.json <<'JSON'
{"name": "grammar", "replicas": {"ps": 1, "worker": 1, "evaluator": 1},
 "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear", "n": 200},
 "training": {"max_steps": 10, "batch_size": 10}}
JSON
expect_exit 64 "$PSFLOW_BIN" worker --job job.json --checkpoint-dir "$WORK/ckpt"
grep -q "this task's type is evaluator; run 'psflow evaluator'" "$WORK/stderr" ||
  fail "psflow worker on an evaluator's TF_CONFIG: $(cat "$WORK/stderr")"
expect_exit 64 "$PSFLOW_BIN" ps --job job.json --checkpoint-dir "$WORK/ckpt"
grep -q "this task's type is evaluator, not ps" "$WORK/stderr" ||
  fail "psflow ps on an evaluator's TF_CONFIG: $(cat "$WORK/stderr")"
pass "a TF_CONFIG of another task type is named grammatically"
