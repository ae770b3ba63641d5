#!/usr/bin/env bash
# labels: slow
# timeout: 600
# Issue 32's scale path, scaled down for CI: bench/criteo_scale.sh generates 1 GB of
# Criteo-layout training data (about 4 M rows in 2 files, cut into byte-range splits) and a
# test file numbered after them, and 2 ps + 2 sync workers train the DLRM-style model over
# it for one epoch, each worker streaming its splits under `prlimit --data=1000000000`.
# Checked: the job ends, each worker's peak RSS stays under 400 MiB, the chief reports the
# test AUC, logloss and calibration, and the model learned the data's interactions: its
# test AUC is above the generator's first-order AUC on the same rows (the true model without
# its interactions, about 0.72) and within 0.04 of the Bayes-optimal AUC (about 0.88; one
# epoch of 4 M rows reaches about 0.85 with the example's tables, 0.82 when they had one or
# two rows per id of the small columns). The sanitizer build runs the same path on 0.05 GB
# without the memory figures (its shadow memory makes RSS meaningless and the data limit
# unusable) and with a lower bar (0.6) for its few rows.
source "$(dirname "$0")/lib.sh"

if sanitized_build; then
  args=(--gb 0.05 --test-rows 20000 --data-limit unlimited)
  min_bytes=50000000 min_auc=0.6
else
  args=(--gb 1 --test-rows 200000)
  min_bytes=1000000000 min_auc=interactions
fi
TMPDIR=$WORK bash "$PSFLOW_SRC/bench/criteo_scale.sh" "$(dirname "$PSFLOW_BIN")" "${args[@]}" \
  >scale.out 2>scale.log || { tail -20 scale.log >&2; fail "bench/criteo_scale.sh exited $?"; }
cat scale.out
result=$(grep '^result: ' scale.out) || fail "no result line"
python3 - "$result" "$min_bytes" "$min_auc" "$(sanitized_build && echo 1 || echo 0)" <<'PY' || fail "scale run"
import sys
fields = dict(kv.split("=", 1) for kv in sys.argv[1].split()[1:])
min_bytes, sanitized = int(sys.argv[2]), sys.argv[4] == "1"
auc, bayes = float(fields["test_auc"]), float(fields["bayes_auc"])
if sys.argv[3] == "interactions":
    min_auc = max(float(fields["first_order_auc"]), bayes - 0.04)
else:
    min_auc = float(sys.argv[3])
assert int(fields["data_bytes"]) >= min_bytes, "only %s bytes of training data" % fields["data_bytes"]
if not sanitized:
    for kib in fields["rss_kib"].split(","):
        assert int(kib) < 400 * 1024, "a worker's peak RSS is %s KiB (bound: 400 MiB)" % kib
assert min_auc < auc <= bayes + 0.005, "test auc %.4f (at least %.4f; Bayes-optimal %.4f)" % (
    auc, min_auc, bayes)
assert 0 < float(fields["test_logloss"]) < 0.7, fields["test_logloss"]
assert 0.8 < float(fields["test_calibration"]) < 1.25, fields["test_calibration"]
PY
grep -q "streaming 2 training file(s) in [0-9]* splits as 2 streams" scale.log ||
  fail "the workers did not stream the files: $(grep -m1 streaming scale.log)"
pass "$(grep '^data:' scale.out); $(grep "peak RSS" scale.out); $(grep '^test auc' scale.out)"
