#!/usr/bin/env bash
# labels: slow
# timeout: 400
# data.format synthetic_ctr: clicks drawn from a known logistic model over three embedding
# features (111,000 ids, Zipf exponent 1.6, dimension 16), a softmax over the embeddings:
#  1. `psflow train` prints the Bayes-optimal test AUC (the true model on the test labels)
#     and reaches a test AUC within 0.01 of it after 6000 steps; its result has a
#     test_calibration (mean prediction / mean label) in (0.5, 2) and a test_logloss equal
#     to its test_loss, and so has the chief's in 2;
#  2. async, 2 ps + 2 workers (each table split over both ps by fixed_shards 2): the chief
#     generates the same test set from the seed, and its final test AUC is within 0.01 of
#     the same Bayes-optimal AUC;
#     (a sanitizer build trains 1 and 2 for a sixth of the steps, 1000, and checks each AUC
#     within 0.02 of the Bayes-optimal; it says so in its output)
#  3. `psflow train` with 2 in-graph replicas of 600 examples (a step names more rows than an
#     evaluation batch) trains and evaluates;
#  4. sync, 2 ps + 2 workers, with one example fed as NaN (PSFLOW_TEST_NAN_POSITION): the NaN
#     reaches a table's rows on a ps, which finds it among the rows the step changed; every ps
#     rolls back to the last checkpoint (step 500), the step's data is skipped and the job
#     completes its 800 steps.
source "$(dirname "$0")/lib.sh"

STEPS=6000 TOL=0.01
if sanitized_build; then
  STEPS=1000 TOL=0.02
  echo "sanitizer build: $STEPS steps in 1 and 2, AUC within $TOL of the Bayes-optimal"
fi

cat >ctr.json <<'JSON'
{
  "name": "ctr",
  "replicas": {"ps": 2, "worker": 2},
  "model": {"type": "softmax", "outputs": 2,
            "embeddings": [{"name": "user", "vocab": 100000, "dim": 16},
                           {"name": "item", "vocab": 10000, "dim": 16},
                           {"name": "site", "vocab": 1000, "dim": 16}]},
  "data": {"format": "synthetic_ctr", "n": 500000, "zipf": 1.6},
  "optimizer": {"type": "adagrad", "learning_rate": 0.5},
  "training": {"mode": "async", "batch_size": 500, "max_steps": STEPS},
  "placement": {"strategy": "greedy", "partitioner": {"type": "fixed_shards", "num_shards": 2}}
}
JSON
sed -i "s/STEPS/$STEPS/" ctr.json

# --- 1. one process ----------------------------------------------------------------------
"$PSFLOW_BIN" train ctr.json --output json >train.out 2>train.log ||
  fail "psflow train exited $?: $(tail -n 3 train.log)"
bayes=$(json_field train.out 'd["bayes_auc"]')
auc=$(json_field train.out 'd["test_auc"]')
grep -q "synthetic_ctr: Bayes-optimal test auc" train.log || fail "no Bayes line: $(head -n 5 train.log)"
echo "one process, $STEPS steps: test auc $auc, Bayes-optimal $bayes"
in_range "$bayes" 0.6 0.99 || fail "Bayes-optimal auc $bayes"
in_range "$(python3 -c "print($bayes - $auc)")" "-$TOL" "$TOL" ||
  fail "psflow train: auc $auc is not within $TOL of the Bayes-optimal $bayes"

# calibrated OUT: OUT's test_calibration lies in (0.5, 2) and its test_logloss is its test_loss.
calibrated() {
  json_field "$1" '"%.4f" % d["test_calibration"] if 0.5 < d["test_calibration"] < 2 and d["test_logloss"] == d["test_loss"] else ""' | grep -q . ||
    fail "$1: no plausible test_calibration or test_logloss: $(cat "$1")"
  json_field "$1" '"%.4f" % d["test_calibration"]'
}
cal=$(calibrated train.out)
echo "one process: test calibration $cal"

# --- 2. 2 ps + 2 workers, async ------------------------------------------------------------
run_static_cluster ctr.json 2 >/dev/null
grep -rqa 'user/embeddings/part_1' "$WORK/ckpt/ctr" || fail "the user table was not split in two"
dauc=$(json_field worker0.out 'd["test_auc"]')
dcal=$(calibrated worker0.out)
echo "async 2 ps + 2 workers, $STEPS steps: test auc $dauc, Bayes-optimal $bayes, calibration $dcal"
in_range "$(python3 -c "print($bayes - $dauc)")" "-$TOL" "$TOL" ||
  fail "async: auc $dauc is not within $TOL of the Bayes-optimal $bayes"

# --- 3. in-graph replicas: a step's rows are every replica's ---------------------------------
python3 - ctr.json >replicas.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d.update(name="ctr-replicas", replicas_per_worker=2, device="cpu")
d["training"].update(mode="sync", batch_size=600, max_steps=100)
json.dump(d, sys.stdout)
PY
"$PSFLOW_BIN" train replicas.json --output json >replicas.out 2>replicas.log ||
  fail "psflow train with 2 replicas exited $?: $(tail -n 3 replicas.log)"
rauc=$(json_field replicas.out 'd["test_auc"]')
in_range "$rauc" 0.6 1 || fail "2 replicas x 600: test auc $rauc"
echo "psflow train, 2 in-graph replicas x 600: test auc $rauc after 100 steps"

# --- 4. a NaN in a row pushed, sync ----------------------------------------------------------
python3 - ctr.json >nan.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "ctr-nan"
d["training"].update(mode="sync", max_steps=800)
d["checkpoint"] = {"every_steps": 500}
json.dump(d, sys.stdout)
PY
PSFLOW_TEST_NAN_POSITION=700123 run_static_cluster nan.json 2 >/dev/null
grep -q "non-finite value: every ps rolled back from step 700 to checkpoint step 500" worker0.log ||
  fail "no rollback after the NaN example: $(grep -i non-finite worker0.log | head -3)"
grep -q "embeddings/part_[01] became non-finite" worker0.log || fail "the NaN was not found in a table"
[ "$(json_field worker0.out 'd["steps"]')" = 800 ] || fail "the job did not complete: $(cat worker0.out)"
echo "a NaN example: the ps found it in a table's rows, every ps rolled back to step 500, the job completed"
pass "synthetic_ctr: one process $auc, async 2 ps + 2 workers $dauc, Bayes-optimal $bayes; a NaN rolled back"
