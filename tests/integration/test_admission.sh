#!/usr/bin/env bash
# labels: sanitizer-only
# Spec admission limits (coordinator/admission.h, psflow/footprint.h), against the real
# binary: a coordinator with custom --data-root and size limits refuses what is outside
# them with a 422 naming the field (a Criteo folder or glob pattern, or one of streamed csv:
# each file it stands for), and stores nothing (the jobs table unchanged); agents
# register the memory their tasks may use (--memory, else the machine's), and a job whose
# ps share or training task cannot fit the largest agent is refused, also when PATCH adds
# workers; in static mode `psflow train`, `psflow ps --job` and `psflow worker --job` refuse
# absurd jobs (max_steps 2^63-1, a 17 GB model) with a clear message and exit 65 before
# allocating anything.
source "$(dirname "$0")/lib.sh"

read -r port ps_port w_port <<<"$(free_ports 3)"
URL=http://127.0.0.1:$port
mkdir -p data other
printf '1,0.5\n2,1.0\n' >data/ok.csv
printf '1,0.5\n' >other/secret.csv
ln -s "$WORK/other/secret.csv" data/escape.csv
"$PSFLOW_BIN" coordinator --listen "127.0.0.1:$port" --db "$WORK/psflow.db" \
  --data-root "$WORK/data" --max-steps-limit 5000 --max-model-bytes 1M --max-shards 8 \
  --max-replicas 4 2>"$WORK/coordinator.log" &
wait_until 30 "the coordinator ready" curl -sf "$URL/readyz"

# The jobs and their specs (phases move on their own once agents run the admitted job).
jobs_digest() { sqlite3 "$WORK/psflow.db" 'SELECT name, spec FROM jobs ORDER BY name' | sha256sum; }

# submit SPEC_JSON: POSTs it; the status in $code, the body in body.json.
submit() {
  code=$(curl -s -o body.json -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data "$1" "$URL/api/v1/jobs")
}
# refused POINTER SPEC_JSON: the spec is answered 422 naming POINTER, and nothing is stored.
refused() {
  local before
  before=$(jobs_digest)
  submit "$2"
  [ "$code" = 422 ] || fail "expected 422 naming $1, got $code: $(cat body.json)"
  [ "$(json_field body.json '[e["pointer"] for e in d["errors"]]')" = "['$1']" ] ||
    fail "expected the problem to name $1: $(cat body.json)"
  [ "$(jobs_digest)" = "$before" ] || fail "a refused job ($1) changed the jobs table"
}
base() { # base [EXTRA FIELDS]: a small linear job on synthetic data
  echo "{\"name\": \"${NAME:-a}\", \"model\": {\"type\": \"linear\", \"inputs\": 1},
         \"data\": {\"format\": \"synthetic_linear\"}${1:+, $1}}"
}

refused /data/train/0 '{"name": "a", "model": {"type": "linear", "inputs": 1},
  "data": {"format": "csv", "train": ["'"$WORK"'/other/secret.csv"]}}'
refused /data/train/0 '{"name": "a", "model": {"type": "linear", "inputs": 1},
  "data": {"format": "csv", "train": ["'"$WORK"'/data/escape.csv"]}}'
refused /data/train/0 '{"name": "a", "model": {"type": "linear", "inputs": 1},
  "data": {"format": "csv", "train": ["'"$WORK"'/data/../other/secret.csv"]}}'
refused /data/train/0 '{"name": "a", "model": {"type": "linear", "inputs": 1},
  "data": {"format": "csv", "train": ["/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"]}}'
# Criteo entries may be folders and glob patterns: every file they stand for must be inside.
mkdir -p data/clicks
printf '0\t1\n' >data/clicks/a.tsv
ln -s "$WORK/other/secret.csv" data/clicks/b.tsv
criteo() { # criteo ENTRY: a Criteo-layout job reading ENTRY
  echo '{"name": "c", "model": {"type": "mlp", "inputs": 13, "hidden": [4], "outputs": 2},
         "data": {"format": "criteo", "train": ["'"$1"'"]}}'
}
refused /data/train/0 "$(criteo "$WORK/data/clicks")"
refused /data/train/0 "$(criteo "$WORK/data/clicks/*.tsv")"
refused /data/train/0 "$(criteo "$WORK/data/nothing-*.tsv")"
rm data/clicks/b.tsv
submit "$(criteo "$WORK/data/clicks")"
[ "$code" = 201 ] || fail "a Criteo folder inside the data root was refused: $code $(cat body.json)"
code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$URL/api/v1/jobs/c")
[ "$code" = 200 ] || [ "$code" = 204 ] || [ "$code" = 202 ] || fail "DELETE c: $code"
# So may the training entries of streamed csv and libsvm data; read whole, an entry is one file.
mkdir -p data/rows
printf '1,0.5\n' >data/rows/a.csv
ln -s "$WORK/other/secret.csv" data/rows/b.csv
csvjob() { # csvjob ENTRY STREAMING: a linear job on csv rows
  echo '{"name": "s", "model": {"type": "linear", "inputs": 1},
         "data": {"format": "csv", "streaming": '"$2"', "train": ["'"$1"'"],
                  "test": ["'"$WORK"'/data/ok.csv"]}}'
}
refused /data/train/0 "$(csvjob "$WORK/data/rows/*.csv" true)"
rm data/rows/b.csv
refused /data/train/0 "$(csvjob "$WORK/data/rows" false)"
submit "$(csvjob "$WORK/data/rows" true)"
[ "$code" = 201 ] || fail "a streamed csv folder inside the data root was refused: $code $(cat body.json)"
code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$URL/api/v1/jobs/s")
[ "$code" = 200 ] || [ "$code" = 204 ] || [ "$code" = 202 ] || fail "DELETE s: $code"
refused /training/max_steps "$(base '"training": {"max_steps": 5001}')"
refused /replicas/worker "$(base '"replicas": {"worker": 5}')"
refused /placement/partitioner '{"name": "a", "model": {"type": "softmax", "inputs": 64, "outputs": 10},
  "data": {"format": "csv", "train": ["'"$WORK"'/data/ok.csv"]},
  "placement": {"partitioner": {"type": "fixed_shards", "num_shards": 64}}}'
refused /model '{"name": "a", "model": {"type": "mlp", "inputs": 512, "hidden": [512], "outputs": 10},
  "data": {"format": "csv", "train": ["'"$WORK"'/data/ok.csv"]}}'
submit '{"name": "in-root", "model": {"type": "linear", "inputs": 1},
  "data": {"format": "csv", "train": ["'"$WORK"'/data/ok.csv"]}, "training": {"max_steps": 5000}}'
[ "$code" = 201 ] || fail "a job inside the limits was refused: $code $(cat body.json)"
pass "--data-root, --max-steps-limit, --max-replicas, --max-shards, --max-model-bytes: 422 naming the field, nothing stored"

# --- the agents' memory --------------------------------------------------------------------
# A real worker agent registers the memory it was given; a ps agent the machine's. (Their
# command lines name $WORK, so that the test's cleanup stops them.)
"$PSFLOW_BIN" worker --coordinator "$URL" --node-id w-small --advertise "127.0.0.1:$w_port" \
  --memory 1M --checkpoint-dir "$WORK/ckpt" >"$WORK/worker.log" 2>&1 &
"$PSFLOW_BIN" ps --coordinator "$URL" --node-id ps-big --listen "127.0.0.1:$ps_port" \
  --checkpoint-dir "$WORK/ckpt" >"$WORK/ps.log" 2>&1 &
wait_until 30 "both agents registered" \
  jget "$URL/api/v1/nodes" 'sys.exit(0 if len(d["items"]) == 2 else 1)'
jget "$URL/api/v1/nodes" '{n["id"]: n["memory_bytes"] for n in d["items"]}' >memory.txt
python3 - memory.txt <<'PY' || fail "agents' memory_bytes: $(cat memory.txt)"
import ast, sys
m = ast.literal_eval(open(sys.argv[1]).read())
assert m["w-small"] == 1 << 20, m
assert m["ps-big"] > 64 << 20, m  # the machine's memory or its cgroup's limit
PY
# Each training task of this MLP needs far more than 1 MiB: refused naming /model.
NAME=mlp refused /model '{"name": "mlp", "model": {"type": "softmax", "inputs": 100, "outputs": 10},
  "data": {"format": "csv", "train": ["'"$WORK"'/data/ok.csv"]}}'
pass "agents register their memory; a training task bigger than the largest worker agent is refused"

# in-root (above) runs on the two real agents: let it finish before they are registered again
# by hand (a re-registration means a restarted agent, which restarts its job).
wait_until 120 "job in-root Succeeded" phase_is in-root Succeeded

# A ps agent with little memory (registered by hand, as an agent would): a job whose ps
# share exceeds it is refused naming /replicas/ps; a sync job that fits with 1 worker is
# refused when PATCH asks for 4 (4 pending gradients and push buffers per ps).
curl -sf -X POST "${AGENT_AUTH[@]}" -H 'Content-Type: application/json' \
  --data '{"id": "w-big", "role": "worker", "address": "127.0.0.1:1", "memory_bytes": 1073741824}' \
  "$URL/api/v1/nodes" >/dev/null || fail "registering w-big"
curl -sf -X POST "${AGENT_AUTH[@]}" -H 'Content-Type: application/json' \
  --data '{"id": "ps-big", "role": "ps", "address": "127.0.0.1:'"$ps_port"'", "memory_bytes": '$(((32 << 20) + 10000))'}' \
  "$URL/api/v1/nodes" >/dev/null || fail "registering ps-big again with 32 MiB + 10000 bytes"
refused /replicas/ps '{"name": "wide", "model": {"type": "softmax", "inputs": 100, "outputs": 10},
  "data": {"format": "csv", "train": ["'"$WORK"'/data/ok.csv"]}}'
# softmax 100 x 10: P = 1010, one ps, async, T = 1: 32 MiB + 4 P + 2 (4 P + 88 + 32 n) bytes,
# more than 32 MiB + 10000.
# linear, 1 input, 2 ps: P = 2, one parameter (one shard) each; sync: 32 MiB + 4 (1 + 0 + T)
# + 2 T (4 + 88 + 32) bytes per ps, 32 MiB + 256 with T = 1, 32 MiB + 1012 with T = 4. Two
# ps tasks and one ps agent: it waits, never runs.
curl -sf -X POST "${AGENT_AUTH[@]}" -H 'Content-Type: application/json' \
  --data '{"id": "ps-big", "role": "ps", "address": "127.0.0.1:'"$ps_port"'", "memory_bytes": '$(((32 << 20) + 300))'}' \
  "$URL/api/v1/nodes" >/dev/null || fail "registering ps-big again with 32 MiB + 300 bytes"
submit "$(NAME=tiny base '"replicas": {"ps": 2}, "training": {"mode": "sync", "max_steps": 100}')"
[ "$code" = 201 ] || fail "the tiny sync job was refused: $code $(cat body.json)"
before=$(jobs_digest)
code=$(curl -s -o body.json -w '%{http_code}' -X PATCH -H 'Content-Type: application/json' \
  --data '{"replicas": {"worker": 4}}' "$URL/api/v1/jobs/tiny")
[ "$code" = 422 ] || fail "PATCH to 4 workers answered $code: $(cat body.json)"
[ "$(json_field body.json 'd["errors"][0]["pointer"]')" = /replicas/worker ] ||
  fail "the PATCH refusal names $(json_field body.json 'd["errors"][0]["pointer"]')"
[ "$(jobs_digest)" = "$before" ] || fail "the refused PATCH changed the job"
pass "a ps share over the largest ps agent's memory is refused, at submit and when PATCH adds workers"

# Admission compares with the largest agent; the gang may still land on a smaller one. The
# real 1 MiB worker agent, given a task that needs more, refuses it with a clear message
# instead of allocating (the job's log says so).
for reg in '{"id": "ps-big", "role": "ps", "address": "127.0.0.1:'"$ps_port"'", "memory_bytes": 1073741824}' \
  '{"id": "w-huge", "role": "worker", "address": "127.0.0.1:2", "memory_bytes": 1073741824}'; do
  curl -sf -X POST "${AGENT_AUTH[@]}" -H 'Content-Type: application/json' --data "$reg" \
    "$URL/api/v1/nodes" \
    >/dev/null || fail "registering $reg"
done
submit '{"name": "lands-small", "replicas": {"worker": 2},
  "model": {"type": "softmax", "inputs": 100, "outputs": 10},
  "data": {"format": "csv", "train": ["'"$WORK"'/data/ok.csv"]}, "run_policy": {"restart_policy": "Never"}}'
[ "$code" = 201 ] || fail "lands-small was refused: $code $(cat body.json)"
wait_until 60 "the 1 MiB agent refusing its task of lands-small" \
  grep -q 'this agent offers 1.0 MiB' "$WORK/worker.log"
pass "an agent given a task bigger than its --memory refuses it with a clear message"

# --- static mode -------------------------------------------------------------------------
cat >steps.json <<'EOF'
{"name": "steps", "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"},
 "training": {"max_steps": 9223372036854775807}}
EOF
cat >big.json <<'EOF'
{"name": "big", "model": {"type": "mlp", "inputs": 65536, "hidden": [65536], "outputs": 10},
 "data": {"format": "idx",
          "train": ["/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
                    "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"]}}
EOF
cat >small.json <<'EOF'
{"name": "small", "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"},
 "training": {"max_steps": 10}}
EOF
expect_exit 65 "$PSFLOW_BIN" train steps.json
grep -q '/training/max_steps' "$WORK/stderr" || fail "train: $(cat "$WORK/stderr")"
expect_exit 65 "$PSFLOW_BIN" train big.json
grep -q 'needs about' "$WORK/stderr" || fail "train: $(cat "$WORK/stderr")"
expect_exit 65 "$PSFLOW_BIN" train small.json --memory 1K
grep -q 'needs about.*--memory' "$WORK/stderr" || fail "train --memory: $(cat "$WORK/stderr")"
"$PSFLOW_BIN" train small.json >/dev/null 2>&1 || fail "train of a small job failed"
export TF_CONFIG
TF_CONFIG=$(tf_config ps 0 "$ps_port" "$w_port")
expect_exit 65 "$PSFLOW_BIN" ps --job big.json
grep -q '/replicas/ps' "$WORK/stderr" || fail "ps --job: $(cat "$WORK/stderr")"
expect_exit 65 "$PSFLOW_BIN" ps --job steps.json
grep -q '/training/max_steps' "$WORK/stderr" || fail "ps --job: $(cat "$WORK/stderr")"
TF_CONFIG=$(tf_config worker 0 "$ps_port" "$w_port")
expect_exit 65 "$PSFLOW_BIN" worker --job big.json
grep -q 'needs about' "$WORK/stderr" || fail "worker --job: $(cat "$WORK/stderr")"
pass "static mode: max_steps 2^63-1 and a 17 GB model refused with exit 65 and a clear message"
