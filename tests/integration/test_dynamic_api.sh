#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 300
# The job API on a model with a dynamic table (managed mode, `psflow up --ps 2 --workers 2`):
#  1. a synthetic_ctr job of a dynamic "user" table (64-bit ids, max_rows 200,000) and a fixed
#     one, async, is accepted (201). While it trains, GET /api/v1/jobs/NAME/placement lists
#     the table as one shard of "kind": "dynamic" on each ps with its share of max_rows
#     (100,000), and each ps's `tables` its rows, admissions, evictions and lookups, rows
#     above zero and lookups a second above zero on both ps; /metrics has psflow_table_rows
#     and psflow_table_lookups_total for each ps, equal to the placement's lookups or above;
#     the job succeeds, and its ps tasks' rows add up to at most max_rows + 1;
#  2. a job whose dynamic table's cap no agent's memory holds (max_rows 2,000,000,000 of dim
#     64) is refused at submit with a 422 naming the memory and changes nothing;
#  3. a job with a dynamic table and an evaluator task is refused with a 422 naming
#     /replicas/evaluator.
source "$(dirname "$0")/lib.sh"

up_start --ps 2 --workers 2
spec() { # NAME MAX_ROWS DIM [EVALUATORS]
  cat <<JSON
{
  "name": "$1",
  "replicas": {"ps": 2, "worker": 2, "evaluator": ${4:-0}},
  "model": {"type": "softmax", "outputs": 2,
            "embeddings": [{"name": "user", "kind": "dynamic", "max_rows": $2, "dim": $3,
                            "steps_to_live": 300},
                           {"name": "site", "vocab": 1000, "dim": $3}]},
  "data": {"format": "synthetic_ctr", "n": 100000, "distinct_ids": 1000000, "zipf": 1.1},
  "optimizer": {"type": "adagrad", "learning_rate": 0.5},
  "training": {"mode": "async", "batch_size": 200, "max_steps": 30000}
}
JSON
}
submit() { # FILE -> HTTP code, the answer in $WORK/answer.json
  curl -s -o "$WORK/answer.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary @"$1" "$URL/api/v1/jobs"
}

# --- 1. the tables' statistics ------------------------------------------------------------
spec dyn-api 200000 16 >dyn.json
code=$(submit dyn.json)
[ "$code" = 201 ] || fail "submitting the job: HTTP $code $(cat "$WORK/answer.json")"

tables_live() {
  curl -sf "$URL/api/v1/jobs/dyn-api/placement" -o "$WORK/placement.json" &&
    python3 - "$WORK/placement.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
dyn = [s for s in d["shards"] if s["kind"] == "dynamic"]
assert sorted((s["name"], s["ps_task"], s["max_rows"]) for s in dyn) == [
    ("user/embeddings/part_0", 0, 100000), ("user/embeddings/part_1", 1, 100000)], dyn
for p in d["ps"]:
    t = {x["table"]: x for x in p["tables"]}["user"]
    assert t["rows"] > 0 and t["admitted"] >= t["rows"] and t["lookups_per_sec"] > 0, t
    assert t["max_rows"] == 100000 and t["bytes"] > 0, t
print("; ".join("ps %d: %d rows, %d admitted, %d evicted, %.0f lookups/s" % (
    p["task"], p["tables"][0]["rows"], p["tables"][0]["admitted"], p["tables"][0]["evicted"],
    p["tables"][0]["lookups_per_sec"]) for p in d["ps"]))
PY
}
wait_until 120 "both ps reporting their share of the dynamic table" tables_live
echo "while training: $(tables_live)"
curl -sf "$URL/metrics" -o "$WORK/prom.txt" || fail "GET /metrics"
python3 - "$WORK/placement.json" "$WORK/prom.txt" <<'PY' || fail "the table's metrics"
import json, re, sys
d = json.load(open(sys.argv[1]))
prom = open(sys.argv[2]).read()
for p in d["ps"]:
    for family in ("psflow_table_rows", "psflow_table_lookups_total", "psflow_table_evicted_total"):
        m = re.search(r'^%s\{job="dyn-api",ps="%d",table="user"\} (\d+)$' % (family, p["task"]),
                      prom, re.M)
        assert m, (family, p["task"])
    m = re.search(r'^psflow_table_lookups_total\{job="dyn-api",ps="%d",table="user"\} (\d+)$'
                  % p["task"], prom, re.M)
    assert int(m.group(1)) >= p["tables"][0]["lookups"], (m.group(0), p["tables"][0])
PY
wait_until 240 "the job to succeed" phase_is dyn-api Succeeded
rows=$(jget "$URL/api/v1/jobs/dyn-api/placement" 'sum(p["tables"][0]["rows"] for p in d["ps"])')
[ "$rows" -le 200001 ] || fail "the ps tasks hold $rows rows of a table of max_rows 200000"
echo "at the end: $rows rows of the dynamic table over both ps"

# --- 2, 3. refused at submit --------------------------------------------------------------
spec dyn-huge 2000000000 64 >huge.json
code=$(submit huge.json)
[ "$code" = 422 ] || fail "a cap no agent holds: HTTP $code $(cat "$WORK/answer.json")"
grep -q 'dynamic table at its max_rows' "$WORK/answer.json" || fail "the refusal names no memory: $(cat "$WORK/answer.json")"
echo "max_rows 2e9: 422, $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["detail"])' "$WORK/answer.json")"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/api/v1/jobs/dyn-huge")
[ "$code" = 404 ] || fail "the refused job exists: HTTP $code"
spec dyn-eval 200000 16 1 >eval.json
code=$(submit eval.json)
[ "$code" = 422 ] && grep -q '/replicas/evaluator' "$WORK/answer.json" ||
  fail "a dynamic table with an evaluator: HTTP $code $(cat "$WORK/answer.json")"
pass "dynamic tables through the job API: placement, metrics, refusals"
