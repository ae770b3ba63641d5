#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 600
# A job's `serving` section, managed by the coordinator (docs/serving.md, "Managed"), on a
# real `psflow up` cluster (1 ps and 3 worker agents): the job trains on one worker agent
# while its two serving tasks take the two spare ones, each listed in status.serving with
# the endpoint it answers at; an endpoint answers predictions of the version the status
# names, and the status counts them with their latency; after the job succeeds both keep
# serving its final checkpoint; a serving agent that is killed gives its task to the agent
# the finished training left idle; deleting the job stops the servers and frees the agents.
source "$(dirname "$0")/lib.sh"

# Every push waits 3 ms (the agents' --push-delay-ms) so that training lasts about 15 s
# after its first checkpoint: long enough to be served while it trains.
STEPS=5000 EVERY=500
if sanitized_build; then
  STEPS=2000 EVERY=250
  echo "sanitizer build: $STEPS steps, a checkpoint every $EVERY"
fi
python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$STEPS" "$EVERY" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "served"
d["replicas"] = {"ps": 1, "worker": 1}
d["training"].update(mode="async", max_steps=int(sys.argv[2]), eval_every_steps=0)
d["training"].pop("replicas_to_aggregate", None)
d["checkpoint"] = {"every_steps": int(sys.argv[3]), "keep": 3}
d["serving"] = {"replicas": 2}
json.dump(d, sys.stdout)
PY
"$PSFLOW_BIN" data examples job.json --limit 3 >examples.jsonl || fail "psflow data examples"

# The spec's serving section is checked like every other field.
bad=$(python3 -c 'import json; d=json.load(open("job.json")); d["serving"]={"replicas":9}; print(json.dumps(d))')
echo "$bad" >bad.json; "$PSFLOW_BIN" plan bad.json >/dev/null 2>"$WORK/bad.err" && fail "serving.replicas 9 accepted"
grep -q "/serving/replicas" "$WORK/bad.err" || fail "serving.replicas 9: $(cat "$WORK/bad.err")"
pass "serving.replicas 9 refused: $(head -1 "$WORK/bad.err")"

PSFLOW_PUSH_DELAY_MS=3 up_start --ps 1 --workers 3
code=$(curl -s -o "$WORK/submit.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  --data-binary @job.json "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "submit with a serving section: HTTP $code $(cat "$WORK/submit.json")"

# serving_ready N: N serving tasks Running with an endpoint and a version.
serving_ready() {
  [ "$(jget "$URL/api/v1/jobs/served" \
    'sum(1 for s in d["status"]["serving"] if s["state"] == "Running" and s["endpoint"] and s["version"] is not None)')" -ge "$1" ]
}
wait_until 120 "two serving tasks answering with a version" serving_ready 2
curl -sf "$URL/api/v1/jobs/served" -o "$WORK/job1.json"
read -r EP0 EP1 <<<"$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["status"]["serving"]; print(s[0]["endpoint"], s[1]["endpoint"])' "$WORK/job1.json")"
[ "$EP0" != "$EP1" ] || fail "both serving tasks at $EP0"

python3 -c '
import json
rows = [json.loads(l)["instance"] for l in open("examples.jsonl")]
print(json.dumps({"instances": rows}))' >"$WORK/body.json"
# predict EP OUT: POSTs the examples to EP's predict route; prints the HTTP status.
predict() {
  curl -s -o "$2" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary @"$WORK/body.json" "$1:predict"
}
PHASE=$(job_phase served)
code=$(predict "$EP0" "$WORK/pred0.json") # the one checked: right after the phase was read
[ "$code" = 200 ] || fail "predict at $EP0 during training: HTTP $code $(cat "$WORK/pred0.json")"
for i in $(seq 19); do
  code=$(predict "$EP0" "$WORK/pred.json")
  [ "$code" = 200 ] || fail "predict at $EP0 during training: HTTP $code $(cat "$WORK/pred.json")"
done
python3 - "$WORK/pred0.json" "$PHASE" "$STEPS" <<'PY' || fail "predictions during training"
import json, sys
p = json.load(open(sys.argv[1]))
assert len(p["predictions"]) == 3 and all(abs(sum(r) - 1) < 1e-4 for r in p["predictions"]), p
assert sys.argv[2] == "Running" and int(p["model_version"]) < int(sys.argv[3]), (
    "not served during training", sys.argv[2], p["model_version"])
print("ok: while the job trained, version %s answered 3 examples" % p["model_version"])
PY
counted() {
  [ "$(jget "$URL/api/v1/jobs/served" \
    'd["status"]["serving"][0]["requests"] >= 20 and d["status"]["serving"][0]["latency_p99_ms"] is not None')" = True ]
}
wait_until 10 "serve 0's 20 requests and their latency in the status" counted
pass "two serving tasks on the spare worker agents ($EP0, $EP1); 20 predictions during training, counted with their latency"

wait_until 300 "job served Succeeded" phase_is served Succeeded
final_version() {
  [ "$(jget "$URL/api/v1/jobs/served" \
    'all(s["state"] == "Running" and s["version"] == d["status"]["max_steps"] for s in d["status"]["serving"])')" = True ]
}
wait_until 30 "both serving tasks on the final checkpoint after the job succeeded" final_version
for ep in "$EP0" "$EP1"; do
  code=$(predict "$ep" "$WORK/pred.json")
  [ "$code" = 200 ] || fail "predict at $ep after the job: HTTP $code"
  v=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model_version"])' "$WORK/pred.json")
  [ "$v" = "$STEPS" ] || fail "$ep answered with version $v after the job, not $STEPS"
done
curl -sf "$URL/api/v1/jobs/served" -o "$WORK/job2.json"
python3 - "$WORK/job2.json" <<'PY' || fail "status after the job"
import json, sys
st = json.load(open(sys.argv[1]))["status"]
for s in st["serving"]:
    print("serve %d: %s at %s, version %s, %d requests, p50 %s ms, p99 %s ms" % (
        s["index"], s["state"], s["endpoint"], s["version"], s["requests"],
        s["latency_p50_ms"], s["latency_p99_ms"]))
assert st["phase"] == "Succeeded"
PY
PSFLOW_COORDINATOR=$URL "$PSFLOW_BIN" get served >"$WORK/get.txt" || fail "psflow get served"
grep -A3 '^Serving:' "$WORK/get.txt"
grep -q "^  serve-0  Running  $STEPS .*$EP0" "$WORK/get.txt" || fail "psflow get: no serve-0 line: $(cat "$WORK/get.txt")"
curl -sf "$URL/metrics" -o "$WORK/metrics.txt" || fail "GET /metrics"
grep -q "^psflow_job_serving_version{job=\"served\",server=\"1\"} $STEPS$" "$WORK/metrics.txt" ||
  fail "/metrics: no serving version: $(grep serving "$WORK/metrics.txt")"
grep -q '^psflow_job_serving_requests_total{job="served",server="0"} [1-9]' "$WORK/metrics.txt" ||
  fail "/metrics: no serving requests: $(grep serving "$WORK/metrics.txt")"
pass "after the job succeeded both serving tasks answer with its final checkpoint (version $STEPS); psflow get and /metrics list them"

# Kill serve 0's agent: its task goes to the agent the training left idle.
NODE0=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"]["serving"][0]["node"])' "$WORK/job2.json")
AGENT_PID=$(pgrep -f -- "--node-id $NODE0( |$)" | head -1)
[ -n "$AGENT_PID" ] || fail "no process for agent $NODE0"
kill -9 "$AGENT_PID"
moved() {
  [ "$(jget "$URL/api/v1/jobs/served" \
    "(lambda s: s['state'] == 'Running' and s['node'] != '$NODE0' and s['version'] == $STEPS)(d['status']['serving'][0])")" = True ]
}
wait_until 90 "serve 0 running again on another agent" moved
EP0B=$(jget "$URL/api/v1/jobs/served" 'd["status"]["serving"][0]["endpoint"]')
code=$(predict "$EP0B" "$WORK/pred.json")
[ "$code" = 200 ] || fail "predict at the moved serve 0 ($EP0B): HTTP $code"
curl -sf "$URL/api/v1/jobs/served/events" -o "$WORK/events.json" || true
pass "agent $NODE0 killed: serve 0 answers again at $EP0B"

code=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$URL/api/v1/jobs/served")
[ "$code" = 200 ] || [ "$code" = 204 ] || fail "delete: HTTP $code"
all_idle() { [ "$(jget "$URL/api/v1/nodes" 'all(n["state"] != "busy" for n in d["items"] if n["role"] == "worker")')" = True ]; }
wait_until 30 "every worker agent idle after the delete" all_idle
gone() { ! curl -s --max-time 2 -o /dev/null "$EP1:predict"; }
wait_until 15 "serve 1 no longer listening after the delete" gone
pass "deleting the job stopped its servers and freed their agents"
up_stop
