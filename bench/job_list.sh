#!/usr/bin/env bash
# Job-list benchmark: a coordinator on a temporary database holding JOBS jobs (10,000 by
# default, all waiting for agents), then GET /api/v1/jobs?limit=100 (the first page, and a
# page from the middle through a continue token) and GET /api/v1/jobs?limit=1000, each
# timed over keep-alive requests next to GET /livez of the same run.
#
# usage: bench/job_list.sh [BUILD_DIR]     (default: build; JOBS=10000 REQUESTS=200)
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
psflow=$build/psflow
[ -x "$psflow" ] || { echo "job_list.sh: $psflow not built" >&2; exit 1; }
jobs=${JOBS:-10000}
requests=${REQUESTS:-200}

work=$(mktemp -d "${TMPDIR:-/tmp}/psflow-bench.XXXXXX")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$psflow" coordinator --listen "127.0.0.1:$port" --db "$work/psflow.db" >"$work/coordinator.log" 2>&1 &
coord=$!
trap 'kill "$coord" 2>/dev/null; wait "$coord" 2>/dev/null; rm -rf "$work"' EXIT
deadline=$((SECONDS + 15))
until [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz")" = 200 ]; do
  if ! kill -0 "$coord" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
    cat "$work/coordinator.log" >&2
    echo "job_list.sh: the coordinator did not become ready" >&2
    exit 1
  fi
  sleep 0.05
done

python3 - "$port" "$jobs" "$requests" <<'PY'
import http.client, json, statistics, sys, time

port, jobs, requests = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

def call(method, path, body=None):
    c.request(method, path, body, {"Content-Type": "application/json"} if body else {})
    r = c.getresponse()
    data = r.read()
    assert r.status in (200, 201), (path, r.status, data[:200])
    return data

t0 = time.monotonic()
for i in range(jobs):
    call("POST", "/api/v1/jobs", json.dumps({
        "name": "bench-%05d" % i, "model": {"type": "linear", "inputs": 1},
        "data": {"format": "synthetic_linear"}}))
print("== %d jobs submitted in %.1f s" % (jobs, time.monotonic() - t0))
middle = ""  # the token after the newest half of the jobs
for _ in range(max(1, jobs // 2000)):
    page = json.loads(call("GET", "/api/v1/jobs?limit=1000" + ("&continue=" + middle if middle else "")))
    middle = page["metadata"]["continue"]

def timed(path):
    ms = []
    size = 0
    for _ in range(requests):
        t = time.monotonic()
        size = len(call("GET", path))
        ms.append((time.monotonic() - t) * 1000)
    ms.sort()
    return statistics.mean(ms), ms[len(ms) // 2], ms[int(len(ms) * 0.99) - 1], size

rows = [("GET /livez (baseline)", "/livez"),
        ("GET /api/v1/jobs?limit=100", "/api/v1/jobs?limit=100"),
        ("GET /api/v1/jobs?limit=100&continue=<middle>", "/api/v1/jobs?limit=100&continue=" + middle),
        ("GET /api/v1/jobs?limit=1000", "/api/v1/jobs?limit=1000")]
base = None
print("%-48s %9s %9s %9s %9s %8s" % ("request (%d each)" % requests, "mean ms", "p50 ms", "p99 ms",
                                       "bytes", "x livez"))
for name, path in rows:
    mean, p50, p99, size = timed(path)
    base = base or mean
    print("%-48s %9.2f %9.2f %9.2f %9d %8.1f" % (name, mean, p50, p99, size, mean / base))
PY
