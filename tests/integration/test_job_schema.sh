#!/usr/bin/env bash
# api/schemas/job.schema.json agrees with the parser: every spec the parser accepts
# (tests/data/spec/valid and examples/) validates against the schema, and the invalid
# cases that a schema can express (no cross-field rules) are rejected by it too.
# labels: sanitizer-only
source "$(dirname "$0")/lib.sh"

python3 - "$PSFLOW_SRC" <<'PY'
import glob, json, os, sys
import jsonschema

src = sys.argv[1]
schema = json.load(open(os.path.join(src, "api/schemas/job.schema.json")))
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)

accepted = sorted(glob.glob(os.path.join(src, "tests/data/spec/valid/*.json")) +
                  glob.glob(os.path.join(src, "examples/*.json")))
assert accepted, "no valid specs found"
for path in accepted:
    errors = list(validator.iter_errors(json.load(open(path))))
    assert not errors, f"{path}: {errors[0].message}"

# Invalid cases whose problem is local to one field (unknown field, type, range, enum).
local = ["unknown_top_level", "batch_size_zero", "name_uppercase", "replicas_ps_zero",
         "model_type_unknown", "device_tpu", "replicas_worker_too_many",
         "learning_rate_negative", "hidden_zero_width", "unknown_nested",
         "device_cuda_leading_zero", "device_cuda_negative", "device_cuda_too_big",
         "device_cuda_empty", "device_auto_index", "replicas_per_worker_zero",
         "replicas_per_worker_too_many", "device_list_empty", "device_list_too_long",
         "device_list_auto", "device_list_mixed", "device_list_bad_entry",
         "device_list_not_string", "device_object"]
checked = 0
for path in sorted(glob.glob(os.path.join(src, "tests/data/spec/invalid/*.json"))):
    stem = os.path.basename(path)[:-5]
    if stem not in local:
        continue
    try:
        doc = json.load(open(path))
    except ValueError:
        continue
    assert list(validator.iter_errors(doc)), f"{path}: schema accepts an invalid spec"
    checked += 1
print(f"ok: {len(accepted)} accepted specs validate, {checked} invalid specs rejected")
assert checked >= 4, f"only {checked} of the named invalid cases exist"
PY
