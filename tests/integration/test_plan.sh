#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 120
# psflow plan, as a user runs it before submitting: every example plans (text and -o json),
# its figures agree with each other (the imbalance is the largest ps task's bytes over the
# mean, the agents' line names the largest ps task), and the table of examples/README.md
# lists every example once with the figures `psflow plan` prints; the ```text block of
# docs/job-spec.md is what it prints for examples/fashion-mnist-mlp.json, whose greedy
# placement of max_size shards keeps the imbalance at 1.2 at most. A bad field exits 65
# naming its JSON pointer (a spec the parser accepts but the footprint check refuses too),
# a missing file 66, a missing argument 64; --help describes the command.
source "$(dirname "$0")/lib.sh"

expect_exit 0 "$PSFLOW_BIN" plan --help
grep -q '^usage: psflow plan FILE' "$WORK/stdout" || fail "plan --help: $(head -1 "$WORK/stdout")"
grep -q -- '--output' "$WORK/stdout" || fail "plan --help does not list --output"
expect_exit 64 "$PSFLOW_BIN" plan
expect_exit 64 "$PSFLOW_BIN" plan "$PSFLOW_SRC/examples/linear.json" -o yaml
pass "--help, and usage errors exit 64"

expect_exit 66 "$PSFLOW_BIN" plan "$WORK/missing.json"
grep -q 'missing.json' "$WORK/stderr" || fail "the missing file is not named: $(cat "$WORK/stderr")"
cat >bad.json <<'JSON'
{"name": "bad", "model": {"type": "mlp", "inputs": 4, "hidden": [0], "outputs": 2}}
JSON
expect_exit 65 "$PSFLOW_BIN" plan bad.json
grep -q '^psflow plan: bad.json: /model/hidden/0: ' "$WORK/stderr" ||
  fail "bad field: $(cat "$WORK/stderr")"
cat >shards.json <<'JSON'
{"name": "shards", "model": {"type": "softmax", "outputs": 2,
 "embeddings": [{"name": "ids", "vocab": 100000, "dim": 1}]},
 "data": {"format": "synthetic_ctr"},
 "placement": {"partitioner": {"type": "max_size", "max_shard_bytes": 4}}}
JSON
expect_exit 65 "$PSFLOW_BIN" plan shards.json -o json
grep -q '/placement/partitioner: ' "$WORK/stderr" || fail "too many shards: $(cat "$WORK/stderr")"
[ ! -s "$WORK/stdout" ] || fail "a refused spec printed a plan"
pass "a missing file exits 66; a bad field, or too many shards, exits 65 naming it"

# Every example: text and JSON, kept for the checks below.
mkdir plans
for spec in "$PSFLOW_SRC"/examples/*.json; do
  name=$(basename "$spec")
  expect_exit 0 "$PSFLOW_BIN" plan "$spec"
  cp "$WORK/stdout" "plans/$name.txt"
  expect_exit 0 "$PSFLOW_BIN" plan -o json "$spec"
  cp "$WORK/stdout" "plans/$name.json"
done
pass "every example plans, as text and as JSON"

python3 - "$PSFLOW_SRC" plans <<'PY' || fail "psflow plan disagrees with itself or examples/README.md"
import glob, json, os, re, sys
src, plans = sys.argv[1:3]
errors = []

def fmt(n):  # pf_footprint_format_bytes
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    v, u = float(n), 0
    while v >= 1024 and u < 6:
        v, u = v / 1024, u + 1
    return "%d B" % n if u == 0 else "%.*f %s" % (1 if v < 10 else 0, v, units[u])

examples = sorted(os.path.basename(p) for p in glob.glob(os.path.join(src, "examples", "*.json")))
got = {}
for name in examples:
    spec = json.load(open(os.path.join(src, "examples", name)))
    d = json.load(open(os.path.join(plans, name + ".json")))  # -o json parses
    text = open(os.path.join(plans, name + ".txt")).read()
    got[name] = (spec, d)
    ps = d["ps"]
    n_ps = spec.get("replicas", {}).get("ps", 1)
    if len(ps) != n_ps:
        errors.append("%s: %d ps tasks planned, the spec has %d" % (name, len(ps), n_ps))
    by_task = [0] * len(ps)
    for s in d["shards"]:
        by_task[s["ps_task"]] += s["bytes"]
    if by_task != [p["bytes"] for p in ps] or sum(by_task) != d["total_bytes"]:
        errors.append("%s: the shards' bytes do not add up to the ps tasks'" % name)
    mean = d["total_bytes"] / len(ps)
    want = max(p["bytes"] for p in ps) / mean if mean > 0 else 1.0
    if abs(d["imbalance"] - want) > 1e-9:
        errors.append("%s: imbalance %s, largest over mean is %s" % (name, d["imbalance"], want))
    largest = max(ps, key=lambda p: p["memory_bytes"])
    a = d["agents"]
    if a["ps_memory_bytes"] != largest["memory_bytes"]:
        errors.append("%s: the agents' ps figure is not the largest ps task's" % name)
    if a["worker_memory_bytes"] != d["training"]["memory_bytes"]:
        errors.append("%s: the agents' worker figure is not the training task's" % name)
    line = "agent memory needed: ps %s (ps task %d), worker %s" % (
        fmt(a["ps_memory_bytes"]), a["ps_task"], fmt(a["worker_memory_bytes"]))
    if line not in text.splitlines():
        errors.append("%s: the text does not say '%s'" % (name, line))
    if "imbalance %.2f" % d["imbalance"] not in text:
        errors.append("%s: the text gives another imbalance than the JSON" % name)

# examples/README.md: one row per example, its figures as psflow plan prints them.
readme = open(os.path.join(src, "examples", "README.md")).read()
rows = [[c.strip() for c in re.split(r"(?<!\\)\|", l)[1:-1]]
        for l in readme.splitlines() if l.startswith("| [`")]
header = [c.strip() for c in re.split(r"\|", next(l for l in readme.splitlines()
                                                    if l.startswith("| example |")))[1:-1]]
col = {h: i for i, h in enumerate(header)}
listed = [re.match(r"\[`([^`]+)`\]", r[0]).group(1) for r in rows]
for name in examples:
    if listed.count(name) != 1:
        errors.append("examples/README.md lists %s %d times" % (name, listed.count(name)))
for name in listed:
    if name not in examples:
        errors.append("examples/README.md lists %s, which is not in examples/" % name)
for row, name in zip(rows, listed):
    if name not in got:
        continue
    spec, d = got[name]
    r = spec.get("replicas", {})
    want = {
        "ps × workers": "%d × %d" % (r.get("ps", 1), r.get("worker", 1)),
        "variables + optimizer slots": fmt(d["model_bytes"]),
        "memory per ps task": fmt(d["agents"]["ps_memory_bytes"]),
        "memory per training task": fmt(d["training"]["memory_bytes"]),
    }
    for h, w in want.items():
        if row[col[h]] != w:
            errors.append("examples/README.md, %s: %s is '%s', psflow plan says '%s'"
                          % (name, h, row[col[h]], w))
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY
pass "the figures agree (imbalance = largest / mean), examples/README.md lists every example with them"

# The MLP example's placement stays balanced, and docs/job-spec.md shows what plan prints.
imbalance=$(json_field plans/fashion-mnist-mlp.json.json 'd["imbalance"]')
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1.2 else 1)" "$imbalance" ||
  fail "examples/fashion-mnist-mlp.json plans with imbalance $imbalance, more than 1.2"
python3 - "$PSFLOW_SRC/docs/job-spec.md" plans/fashion-mnist-mlp.json.txt <<'PY' ||
import re, sys
page, printed = open(sys.argv[1]).read(), open(sys.argv[2]).read()
cmd = "$ build/psflow plan examples/fashion-mnist-mlp.json\n"
blocks = [b for b in re.findall(r"^```text\n(.*?)^```", page, re.S | re.M) if b.startswith(cmd)]
sys.exit(0 if len(blocks) == 1 and blocks[0][len(cmd):] == printed else 1)
PY
  fail "docs/job-spec.md does not show what 'psflow plan examples/fashion-mnist-mlp.json' prints"
pass "fashion-mnist-mlp: imbalance $imbalance (at most 1.2); docs/job-spec.md shows its plan"
