#!/usr/bin/env bash
# labels: sanitizer-only
# GET /metrics of a coordinator that has a job and a registered agent: the text passes
# `promtool check metrics` without a single remark, is served without the token, every
# family is psflow_-prefixed with HELP and TYPE, counters end in _total, and the families
# an operator needs exist with samples for this job and node: jobs by phase, tasks by
# state, HTTP requests by route and code (routes as templates, so a job name never becomes
# a label value), heartbeat age, global step, examples/s.
# labels: integration
source "$(dirname "$0")/lib.sh"

command -v promtool >/dev/null || fail "promtool is missing (Debian package prometheus; scripts/deps.sh)"

TOKEN=secret
PORT=$(free_ports 1)
BASE=http://127.0.0.1:$PORT
AUTH=(-H "Authorization: Bearer $TOKEN")

PSFLOW_TOKEN=$TOKEN "$PSFLOW_BIN" coordinator --listen "127.0.0.1:$PORT" --db "$WORK/psflow.db" \
  >"$WORK/coordinator.log" 2>&1 &
COORD_PID=$!
trap 'rc=$?; kill "$COORD_PID" 2>/dev/null; wait "$COORD_PID" 2>/dev/null; (exit $rc); cleanup' EXIT

deadline=$((SECONDS + 15))
until [ "$(curl -s -o /dev/null -w '%{http_code}' "$BASE/readyz")" = 200 ]; do
  kill -0 "$COORD_PID" 2>/dev/null || { cat "$WORK/coordinator.log" >&2; fail "coordinator exited"; }
  [ "$SECONDS" -lt "$deadline" ] || { cat "$WORK/coordinator.log" >&2; fail "coordinator not ready after 15 s"; }
  sleep 0.05
done

# expect_http STATUS CURL ARGS...: one request whose status must be STATUS.
expect_http() {
  local want=$1 got
  shift
  got=$(curl -s -o "$WORK/body" -w '%{http_code}' "$@") || true
  [ "$got" = "$want" ] || { cat "$WORK/body" >&2; fail "curl $*: status $got, expected $want"; }
}

expect_http 201 "${AUTH[@]}" -H 'Content-Type: application/json' -X POST "$BASE/api/v1/jobs" \
  --data '{"name": "prom-job", "replicas": {"ps": 1, "worker": 2}, "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"}}'
expect_http 201 "${AUTH[@]}" -H 'Content-Type: application/json' -X POST "$BASE/api/v1/nodes" \
  --data '{"id": "prom-node-1", "role": "worker", "address": "127.0.0.1:2301", "version": "0.1.0"}'
expect_http 200 "${AUTH[@]}" -H 'Content-Type: application/json' -X POST \
  "$BASE/api/v1/nodes/prom-node-1/heartbeat" --data '{"state": "idle"}'
expect_http 200 "${AUTH[@]}" "$BASE/api/v1/jobs/prom-job"
expect_http 404 "${AUTH[@]}" "$BASE/api/v1/jobs/no-such-job"
expect_http 401 "$BASE/api/v1/jobs"

# The scrape needs no token (api/rest.md "Authentication").
curl -s -D "$WORK/headers" -o "$WORK/metrics1.txt" -w '%{http_code}' "$BASE/metrics" >"$WORK/code"
[ "$(cat "$WORK/code")" = 200 ] || fail "GET /metrics without a token: status $(cat "$WORK/code")"
grep -qi '^content-type: text/plain; version=0.0.4' "$WORK/headers" ||
  fail "GET /metrics Content-Type is not text/plain; version=0.0.4: $(grep -i '^content-type' "$WORK/headers")"
# A second scrape after one more request: counters must not go backwards.
expect_http 200 "${AUTH[@]}" "$BASE/api/v1/jobs/prom-job"
curl -s -o "$WORK/metrics2.txt" "$BASE/metrics"

promtool check metrics <"$WORK/metrics1.txt" >"$WORK/promtool.txt" 2>&1 || {
  cat "$WORK/promtool.txt" >&2
  fail "promtool check metrics found problems"
}
[ ! -s "$WORK/promtool.txt" ] || { cat "$WORK/promtool.txt" >&2; fail "promtool check metrics has remarks"; }
pass "promtool check metrics: clean"

python3 - "$WORK/metrics1.txt" "$WORK/metrics2.txt" <<'PY'
import re, sys

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(path):
    """{family: {"type", "help", "samples": [(name, {labels}, value)]}}"""
    fams, problems = {}, []
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            f = fams.setdefault(parts[2], {"type": None, "help": None, "samples": []})
            f["help" if parts[1] == "HELP" else "type"] = parts[3] if len(parts) > 3 else ""
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            problems.append(f"unparsable line {line!r}")
            continue
        name, labels, value = m.group(1), dict(LABEL.findall(m.group(3) or "")), float(m.group(4))
        family = next((f for f in (name, re.sub(r'_(bucket|sum|count)$', '', name)) if f in fams), name)
        fams.setdefault(family, {"type": None, "help": None, "samples": []})["samples"].append(
            (name, labels, value))
    return fams, problems


fams, problems = parse(sys.argv[1])
later, _ = parse(sys.argv[2])
for name, f in sorted(fams.items()):
    if not name.startswith("psflow_"):
        problems.append(f"{name}: no psflow_ prefix")
    if f["type"] is None or not f["help"]:
        problems.append(f"{name}: no TYPE or no HELP")
    if f["type"] == "counter" and not name.endswith("_total"):
        problems.append(f"{name}: a counter without _total")
    if f["type"] == "counter":
        for sname, labels, value in f["samples"]:
            after = [v for n, l, v in later.get(name, {"samples": []})["samples"]
                     if n == sname and l == labels]
            if after and after[0] < value:
                problems.append(f"{sname}{labels}: counter went down ({value} -> {after[0]})")


def find(what, name_re, need_labels=(), want=None):
    """The first family whose name matches and whose samples carry need_labels; with want,
    its samples [(labels, value)] must also satisfy want(samples)."""
    for name, f in sorted(fams.items()):
        if not re.search(name_re, name):
            continue
        samples = [(l, v) for n, l, v in f["samples"] if all(k in l for k in need_labels)]
        if not samples:
            continue
        if want and not want(samples):
            problems.append(f"{what}: {name} has no sample for this test's job or node: "
                            f"{samples[:5]}")
        print(f"  {what:28s} {name} ({f['type']}) labels {sorted(set(k for l, _ in samples for k in l))}")
        return name
    problems.append(f"{what}: no family matching /{name_re}/ with labels {list(need_labels)}")
    return None


print("families:")
def total(samples, **labels):
    return sum(v for l, v in samples if all(l.get(k) == w for k, w in labels.items()))


# The job waits in Created with its 3 tasks (1 ps, 2 workers) Pending: no ps agent exists.
find("jobs by phase", r"job", ("phase",), lambda s: total(s, phase="Created") == 1)
find("tasks by state", r"task", ("state",), lambda s: total(s, state="Pending") == 3)
http = find("HTTP requests by route+code", r"http.*requests.*_total$", ("route", "code"),
            lambda s: total(s, code="201") >= 2)
find("heartbeat age", r"heartbeat.*age|age.*heartbeat", (),
     lambda s: any("prom-node-1" in l.values() and 0 <= v < 60 for l, v in s))
find("global step", r"global_step", (), lambda s: total(s, job="prom-job") == 0)
find("examples/s", r"examples_per_s", (), lambda s: any(l.get("job") == "prom-job" for l, _ in s))

if http:
    routes = {l["route"] for _, l, _ in fams[http]["samples"]}
    codes = {l["code"] for _, l, _ in fams[http]["samples"]}
    print(f"  HTTP routes seen: {sorted(routes)}; codes: {sorted(codes)}")
    for r in routes:
        if "prom-job" in r or "no-such-job" in r or "prom-node-1" in r:
            problems.append(f"route label {r!r} holds a name, not a template")
    for c in ("200", "201", "401", "404"):
        if c not in codes:
            problems.append(f"no HTTP request counted with code {c}")

for p in problems:
    print("FAIL:", p, file=sys.stderr)
sys.exit(1 if problems else 0)
PY
pass "families present, psflow_ prefix, HELP/TYPE, _total counters, templated routes"
