#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 300
# The job API on an embedding model (managed mode, `psflow up --ps 2 --workers 2`): a
# synthetic_ctr job of two tables (1,000,000 and 1,000 rows, dimension 16, each split over
# both ps), async. While it trains, GET /api/v1/jobs/NAME/placement marks the tables' shards
# "kind": "table" with the rows each holds (the dense ones "dense"), and each ps reports the
# rows it served and received and their rates per second (from its agent's heartbeats),
# above zero on both ps; the counts only grow; the job succeeds. Its chief's evaluation of
# this two-class model reaches the API: test_auc in (0.5, 1] and test_calibration (mean
# prediction / mean label) in (0.5, 2) in the job's status, in the metrics history's evals
# and as psflow_job_test_auc / psflow_job_test_calibration in /metrics, and `psflow get`
# prints them. The data's Bayes-optimal test AUC (synthetic_ctr: the true model's) is
# logged once by the chief, is the job's status.bayes_auc and psflow_job_bayes_auc in
# /metrics, and equals (to 4 decimals) what `psflow train` prints for the same spec.
source "$(dirname "$0")/lib.sh"

up_start --ps 2 --workers 2
cat >ctr.json <<'JSON'
{
  "name": "ctr-api",
  "replicas": {"ps": 2, "worker": 2},
  "model": {"type": "softmax", "outputs": 2,
            "embeddings": [{"name": "user", "vocab": 1000000, "dim": 16},
                           {"name": "site", "vocab": 1000, "dim": 16}]},
  "data": {"format": "synthetic_ctr", "n": 200000, "zipf": 1.2},
  "optimizer": {"type": "adagrad", "learning_rate": 0.5},
  "training": {"mode": "async", "batch_size": 200, "max_steps": 25000},
  "placement": {"partitioner": {"type": "fixed_shards", "num_shards": 2}}
}
JSON
code=$(curl -s -o "$WORK/created.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  --data-binary @ctr.json "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "submitting the job: HTTP $code $(cat "$WORK/created.json")"

# rows_flowing: the placement shows the tables and both ps serving and receiving rows
rows_flowing() {
  curl -sf "$URL/api/v1/jobs/ctr-api/placement" -o "$WORK/placement.json" &&
    python3 - "$WORK/placement.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
kinds = {s["name"]: (s["kind"], s["rows"]) for s in d["shards"]}
assert kinds["user/embeddings/part_0"] == ("table", 500000), kinds
assert kinds["user/embeddings/part_1"] == ("table", 500000), kinds
assert kinds["site/embeddings/part_1"] == ("table", 500), kinds
assert kinds["dense_0/kernel/part_0"][0] == "dense", kinds
ps = {p["task"]: p for p in d["ps"]}
for t in (0, 1):
    p = ps[t]
    assert p["rows_pulled"] > 0 and p["rows_pushed"] > 0, p
    assert p["rows_pulled_per_sec"] > 0 and p["rows_pushed_per_sec"] > 0, p
print("; ".join("ps %d: %d rows pulled (%.0f/s), %d pushed (%.0f/s)" %
                (t, p["rows_pulled"], p["rows_pulled_per_sec"], p["rows_pushed"],
                 p["rows_pushed_per_sec"]) for t, p in sorted(ps.items())))
PY
}
wait_until 120 "both ps reporting rows pulled and pushed per second" rows_flowing
first=$(rows_flowing)
echo "while training: $first"
pulled0=$(jget "$URL/api/v1/jobs/ctr-api/placement" 'd["ps"][0]["rows_pulled"]')
wait_until 240 "the job to succeed" phase_is ctr-api Succeeded
pulled1=$(jget "$URL/api/v1/jobs/ctr-api/placement" 'd["ps"][0]["rows_pulled"]')
[ "$pulled1" -ge "$pulled0" ] || fail "ps 0's rows pulled went from $pulled0 back to $pulled1"
echo "ps 0 rows pulled: $pulled0 while training, $pulled1 at the end"
curl -sf "$URL/api/v1/jobs/ctr-api" -o "$WORK/job.json" || fail "GET the job"
curl -sf "$URL/api/v1/jobs/ctr-api/metrics" -o "$WORK/history.json" || fail "GET its metrics"
curl -sf "$URL/metrics" -o "$WORK/prom.txt" || fail "GET /metrics"
quality=$(python3 - "$WORK/job.json" "$WORK/history.json" "$WORK/prom.txt" <<'PY'
import json, re, sys
st = json.load(open(sys.argv[1]))["status"]
auc, cal = st["test_auc"], st["test_calibration"]
assert 0.5 < auc <= 1 and 0.5 < cal < 2, st
evals = [e for e in json.load(open(sys.argv[2]))["evals"] if e["task"] == "chief"]
assert evals and all(0.5 < e["test_auc"] <= 1 and 0.5 < e["test_calibration"] < 2
                     for e in evals), evals
prom = open(sys.argv[3]).read()
for name, want in (("test_auc", auc), ("test_calibration", cal)):
    m = re.search(r'^psflow_job_%s\{job="ctr-api"\} (\S+)$' % name, prom, re.M)
    assert m and abs(float(m.group(1)) - want) < 1e-4, (name, m and m.group(0))
print("test auc %.4f, calibration %.4f, logloss %.4f; %d chief evaluations in the history"
      % (auc, cal, st["test_loss"], len(evals)))
PY
) || fail "test_auc / test_calibration missing or implausible"
echo "$quality"

# The Bayes-optimal test AUC: `psflow train` of the same spec (one step: the test set does not
# depend on the training) prints the figure the chief logged and reported.
python3 - ctr.json >ctr-one.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["training"]["max_steps"] = 1
json.dump(d, sys.stdout)
PY
"$PSFLOW_BIN" train ctr-one.json --output json >"$WORK/train.out" 2>"$WORK/train.log" ||
  fail "psflow train exited $?: $(tail -n 3 "$WORK/train.log")"
want=$(json_field "$WORK/train.out" '"%.4f" % d["bayes_auc"]')
grep -rhq "^psflow chief: synthetic_ctr: Bayes-optimal test auc $want (" "$WORK/up/logs" ||
  fail "the chief logged no Bayes-optimal test auc $want: $(grep -rh 'Bayes-optimal' "$WORK/up/logs")"
bayes=$(python3 - "$WORK/job.json" "$WORK/prom.txt" <<'PY'
import json, re, sys
b = json.load(open(sys.argv[1]))["status"]["bayes_auc"]
m = re.search(r'^psflow_job_bayes_auc\{job="ctr-api"\} (\S+)$', open(sys.argv[2]).read(), re.M)
assert m and abs(float(m.group(1)) - b) < 1e-4, m and m.group(0)
print("%.4f" % b)
PY
) || fail "status.bayes_auc or psflow_job_bayes_auc missing: $(grep bayes "$WORK/prom.txt")"
[ "$bayes" = "$want" ] || fail "status.bayes_auc $bayes, psflow train printed $want"
echo "Bayes-optimal test auc $bayes: the chief's log, status.bayes_auc, /metrics and psflow train agree"
PSFLOW_COORDINATOR=$URL "$PSFLOW_BIN" get ctr-api >"$WORK/get.txt" || fail "psflow get ctr-api"
grep -Eq '^Test AUC: +(0\.[5-9]|1\.0)' "$WORK/get.txt" && grep -q '^Calibration: ' "$WORK/get.txt" ||
  fail "psflow get prints no test AUC or calibration: $(cat "$WORK/get.txt")"
grep -q "^Bayes AUC: *$bayes " "$WORK/get.txt" || fail "psflow get prints no Bayes AUC $bayes: $(cat "$WORK/get.txt")"
up_stop
pass "embeddings API: table shards and rows/s per ps in GET .../placement ($first); $quality; Bayes-optimal $bayes"
