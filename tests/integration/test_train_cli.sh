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

# --- dynamic tables: statistics in the result, the tables in the saved file, the cap checked --
cat >dyn.json <<'JSON'
{"name": "dyn", "model": {"type": "mlp", "hidden": [8], "outputs": 2,
 "embeddings": [{"name": "user", "kind": "dynamic", "max_rows": 100000, "dim": 4, "min_count": 2},
                {"name": "item", "vocab": 100, "dim": 4}]},
 "data": {"format": "synthetic_ctr", "n": 20000, "distinct_ids": 5000},
 "optimizer": {"type": "adagrad", "learning_rate": 0.1},
 "training": {"batch_size": 100, "max_steps": 200}}
JSON
"$PSFLOW_BIN" train dyn.json --save dyn.safetensors --output json >dyn-result.json 2>dyn.txt ||
  { cat dyn.txt; fail "dynamic tables: psflow train failed"; }
rows=$(json_field dyn-result.json 'd["tables"][0]["rows"]')
[ "$(json_field dyn-result.json 'd["tables"][0]["name"]')" = user ] || fail "tables names user"
[ "$(json_field dyn-result.json 'len(d["tables"])')" = 1 ] || fail "one dynamic table listed"
[ "$(json_field dyn-result.json 'd["tables"][0]["refused"] > 0 and 0 < d["tables"][0]["rows"] <= 5000')" = True ] ||
  fail "min_count 2 refuses first sightings, rows within the ids ($rows)"
grep -q '^psflow train: dynamic table user: at most 100000 rows of 4' dyn.txt || fail "the plan line"
grep -q '^psflow train: table user: ' dyn.txt || fail "the statistics line"
python3 - dyn.safetensors "$rows" <<'PY' || fail "the saved file holds the table's ids and rows"
import json, struct, sys
data = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack('<Q', data[:8])
h = json.loads(data[8:8 + n])
rows = int(sys.argv[2])
assert h["user/embeddings/ids"]["dtype"] == "U64" and h["user/embeddings/ids"]["shape"] == [rows]
assert h["user/embeddings"]["shape"] == [rows, 4] and h["item/embeddings"]["shape"] == [100, 4]
assert h["user/embeddings/ids"]["data_offsets"][0] % 8 == 0  # 8-byte tensors aligned
PY
expect_exit 65 "$PSFLOW_BIN" train dyn.json --memory 2M
grep -q 'of it for the dynamic tables at their max_rows' stderr || fail "the cap's memory named"
expect_exit 0 "$PSFLOW_BIN" plan dyn.json
grep -q 'user/embeddings  *dynamic up to 100000 rows of 4' "$WORK/stdout" ||
  fail "plan shows each ps's share of the dynamic table: $(cat "$WORK/stdout")"
pass "dynamic tables: $rows rows, statistics, saved ids, the cap's memory checked, planned"
