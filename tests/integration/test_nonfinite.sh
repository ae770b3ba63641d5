#!/usr/bin/env bash
# A job that diverges (learning rate 1000 on the linear example: loss inf, then NaN) stops
# cleanly, the same way in every mode (training.on_nonfinite "fail", the default):
#  1. `psflow train` exits 65 with one line naming the step; --output json prints one
#     object with null numbers and reason NonFiniteLoss (no crash);
#  2. training.on_nonfinite "rollback" is refused as not supported yet (65, and 422 below);
#  3. static mode: the chief refuses to push, exits 65, its --output json names the step;
#     no checkpoint on disk holds a non-finite value;
#  4. managed mode: the job ends Failed with reason NonFiniteLoss, the message naming the
#     step, through the API.
source "$(dirname "$0")/lib.sh"

diverging() { # NAME [EXTRA-TRAINING-JSON]: the linear example with learning rate 1000
  python3 - "$PSFLOW_SRC/examples/linear.json" "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = sys.argv[2]
d["optimizer"] = {"type": "sgd", "learning_rate": 1000}
d["training"].update(max_steps=400, eval_every_steps=0)
if len(sys.argv) > 3:
    d["training"].update(json.loads(sys.argv[3]))
d["checkpoint"] = {"every_steps": 1, "keep": 50}
json.dump(d, sys.stdout)
PY
}

# --- 1. psflow train --------------------------------------------------------------------
diverging nan >nan.json
expect_exit 65 "$PSFLOW_BIN" train nan.json --output json
grep -q 'non-finite loss (inf) at step [0-9]*; stopping' stderr || { cat stderr; fail "no line naming the step"; }
[ "$(json_field stdout 'd["reason"]')" = NonFiniteLoss ] || fail "reason: $(cat stdout)"
[ "$(json_field stdout '[d[k] for k in ("loss", "test_loss", "test_accuracy")]')" = "[None, None, None]" ] ||
  fail "numbers not null: $(cat stdout)"
json_field stdout 'd["message"]' | grep -q 'at step [0-9]' || fail "message: $(cat stdout)"
expect_exit 65 "$PSFLOW_BIN" train nan.json --save model.safetensors
grep -q 'stopped at step [0-9]*: non-finite loss' stdout || fail "text result: $(cat stdout)"
[ ! -e model.safetensors ] || fail "--save wrote non-finite variables"
pass "psflow train: exit 65, null numbers and reason NonFiniteLoss in JSON, nothing saved"

diverging rb '{"on_nonfinite": "rollback"}' >rollback.json
expect_exit 65 "$PSFLOW_BIN" train rollback.json
grep -q '/training/on_nonfinite: "rollback" is not supported yet' stderr || fail "$(cat stderr)"
pass "on_nonfinite rollback refused as not supported yet"

# --- 3. static mode ----------------------------------------------------------------------
read -r PS_PORT W_PORT <<<"$(free_ports 2)"
TF_CONFIG=$(tf_config ps 0 "$PS_PORT" "$W_PORT") "$PSFLOW_BIN" ps --job nan.json \
  --checkpoint-dir "$WORK/ckpt" 2>"$WORK/ps.log" &
PS_PID=$!
got=0
TF_CONFIG=$(tf_config worker 0 "$PS_PORT" "$W_PORT") timeout 120 "$PSFLOW_BIN" worker \
  --job nan.json --checkpoint-dir "$WORK/ckpt" --output json >chief.json 2>"$WORK/chief.log" || got=$?
kill -9 "$PS_PID" 2>/dev/null || true
[ "$got" = 65 ] || { cat "$WORK/chief.log" >&2; fail "static chief exited $got, expected 65"; }
[ "$(json_field chief.json 'd["reason"]')" = NonFiniteLoss ] || fail "chief JSON: $(cat chief.json)"
[ "$(json_field chief.json '[d["test_loss"], d["test_accuracy"]]')" = "[None, None]" ] ||
  fail "chief JSON numbers: $(cat chief.json)"
json_field chief.json 'd["message"]' | grep -q 'non-finite loss (inf) at step [0-9]*; nothing pushed' ||
  fail "chief message: $(cat chief.json)"
ls -d "$WORK"/ckpt/nan/step-* >/dev/null 2>&1 || fail "no checkpoint written before the divergence"
python3 - "$WORK/ckpt" <<'PY' || fail "a checkpoint holds a non-finite value"
import glob, json, math, struct, sys
files = glob.glob(sys.argv[1] + "/*/step-*/ps-*.safetensors")
assert files, "no checkpoint files"
for path in files:
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    for name, t in json.loads(data[8:8 + n]).items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        vals = struct.unpack("<%df" % ((e - b) // 4), data[8 + n + b:8 + n + e])
        bad = [v for v in vals if not math.isfinite(v)]
        assert not bad, (path, name, bad[:3])
print("scanned %d checkpoint files" % len(files))
PY
pass "static chief: exit 65, JSON with reason NonFiniteLoss, every checkpoint finite"

# --- 4. managed mode ---------------------------------------------------------------------
up_start --ps 1 --workers 1
code=$(curl -s -o rb.out -w '%{http_code}' -H 'Content-Type: application/json' \
  --data-binary @rollback.json "$URL/api/v1/jobs")
[ "$code" = 422 ] && grep -q 'not supported yet' rb.out || fail "rollback submit: $code $(cat rb.out)"
code=$(curl -s -o nan.out -w '%{http_code}' -H 'Content-Type: application/json' \
  --data-binary @nan.json "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "submit: $code $(cat nan.out)"
wait_until 120 "job nan Failed" phase_is nan Failed
[ "$(jget "$URL/api/v1/jobs/nan" '[c["reason"] for c in d["status"]["conditions"] if c["type"] == "Failed"]')" = "['NonFiniteLoss']" ] ||
  fail "reason: $(cat "$WORK/jget.json")"
jget "$URL/api/v1/jobs/nan" 'd["status"]["message"]' | grep -q 'non-finite loss (inf) at step [0-9]' ||
  fail "message: $(cat "$WORK/jget.json")"
[ "$(jget "$URL/api/v1/jobs/nan" 'd["status"].get("restarts", 0)')" = 0 ] ||
  fail "the job was restarted: $(cat "$WORK/jget.json")"
up_stop
pass "managed: Failed/NonFiniteLoss naming the step, 422 for rollback"
