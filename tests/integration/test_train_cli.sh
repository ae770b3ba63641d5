#!/usr/bin/env bash
# `psflow train` as a user runs it: the linear example recovers y = 2x + 10, the saved
# safetensors file is readable by an independent reader, --output json is one object, and
# bad input gives one clear line and the documented exit code.
# labels: sanitizer-only
source "$(dirname "$0")/lib.sh"

"$PSFLOW_BIN" train "$PSFLOW_SRC/examples/linear.json" --save m.safetensors --output json \
  >result.json 2>progress.txt || { cat progress.txt; fail "linear example failed"; }
w=$(safetensors_values m.safetensors dense_0/kernel)
b=$(safetensors_values m.safetensors dense_0/bias)
echo "linear: w=$w b=$b"
in_range "$w" 1.98 2.02 || fail "weight $w not within 2 +- 0.02"
in_range "$b" 9.95 10.05 || fail "bias $b not within 10 +- 0.05"
[ "$(json_field result.json 'd["steps"]')" = 3000 ] || fail "steps in JSON result"
[ "$(json_field result.json 'd["test_accuracy"]')" = None ] || fail "regression has no accuracy"
json_field result.json '[d[k] for k in ("loss","test_loss","examples_per_sec","seconds")]' >/dev/null
grep -q '^epoch .* step 3000/3000 ' progress.txt || fail "no plain progress lines without a tty"
pass "linear example: w=$w b=$b"

# --- bad input ------------------------------------------------------------------------------
expect_exit 64 "$PSFLOW_BIN" train
expect_exit 64 "$PSFLOW_BIN" train x.json --bogus
expect_exit 64 "$PSFLOW_BIN" train x.json --output yaml
expect_exit 0 "$PSFLOW_BIN" train --help
grep -q 'usage: psflow train' stdout || fail "--help prints usage"

expect_exit 66 "$PSFLOW_BIN" train missing.json
grep -q 'missing.json' stderr || fail "missing spec file is named"

echo '{"name": "x", "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"}, "training": {"batch_size": 0}}' >zero.json
expect_exit 65 "$PSFLOW_BIN" train zero.json
grep -q '/training/batch_size' stderr || fail "invalid batch size names the field"
[ "$(wc -l <stderr)" = 1 ] || fail "an invalid spec gives one line"

echo '{"name": "x", "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"}, "trainig": {}}' >typo.json
expect_exit 65 "$PSFLOW_BIN" train typo.json
grep -q 'trainig' stderr || fail "unknown field is named"

echo '{"name": "x",' >broken.json
expect_exit 65 "$PSFLOW_BIN" train broken.json

cat >nodata.json <<'JSON'
{"name": "x", "model": {"type": "softmax", "inputs": 784, "outputs": 10},
 "data": {"format": "idx", "train": ["/nonexistent/images.gz", "/nonexistent/labels.gz"]}}
JSON
expect_exit 66 "$PSFLOW_BIN" train nodata.json
grep -q '/nonexistent/images.gz' stderr || fail "missing data file is named"

printf 'label,a,b\n1,0.5,0.25\n0,0.1\n' >ragged.csv
cat >ragged.json <<JSON
{"name": "x", "model": {"type": "softmax", "inputs": 2, "outputs": 2},
 "data": {"format": "csv", "train": ["$WORK/ragged.csv"]}}
JSON
expect_exit 65 "$PSFLOW_BIN" train ragged.json
grep -q 'ragged.csv' stderr && grep -q 'line 3' stderr || fail "ragged csv names file and line"

expect_exit 73 "$PSFLOW_BIN" train "$PSFLOW_SRC/examples/linear.json" --save /nonexistent/m.safetensors
# A worker whose ps never answers gives up after --retry-seconds with exit 69 (unavailable).
port=$(free_ports 1)
TF_CONFIG="{\"cluster\":{\"ps\":[\"127.0.0.1:$port\"],\"worker\":[\"127.0.0.1:1\"]},\"task\":{\"type\":\"worker\",\"index\":0}}" \
  expect_exit 69 "$PSFLOW_BIN" worker --job "$PSFLOW_SRC/examples/linear.json" --retry-seconds 1
grep -q "cannot reach ps 0 at 127.0.0.1:$port" stderr || fail "unreachable ps is named"
pass "bad input gives the documented exit codes"
