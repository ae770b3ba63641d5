#!/usr/bin/env bash
# Control-plane benchmark: starts a coordinator on a temporary database, submits one job,
# runs bench/coordinator_load (1,000 agents registering, then heartbeating as fast as the
# coordinator answers, against a GET /livez baseline of the same run), then wrk on
# GET /api/v1/jobs/{name} next to wrk on GET /livez; then the scale case: 10,000 agents
# heartbeating once a second each with 1,000 jobs waiting in the queue (priorities 0..6), and
# the coordinator's own account of its scheduling rounds (/metrics,
# psflow_scheduling_round_seconds); and stops the coordinator.
# Targets: >= 5000 heartbeats/s with p99 < 20 ms on 2 cores; at scale, heartbeat p99 < 20 ms
# and a scheduling round < 50 ms. The coordinator's lease is 60 s here: the bench registers
# 10,000 agents and submits the jobs before any of them heartbeats.
#
# usage: bench/coordinator.sh [BUILD_DIR]     (default: build; SECONDS_PER_PHASE=5)
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
seconds=${SECONDS_PER_PHASE:-5}
psflow=$build/psflow
bench=$build/bench/coordinator_load
[ -x "$psflow" ] || { echo "coordinator.sh: $psflow not built" >&2; exit 1; }
[ -x "$bench" ] || { echo "coordinator.sh: $bench not built" >&2; exit 1; }
command -v wrk >/dev/null || { echo "coordinator.sh: wrk is missing (apt-get install wrk)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/psflow-bench.XXXXXX")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base=http://127.0.0.1:$port
export PSFLOW_TOKEN=bench-token

"$psflow" coordinator --listen "127.0.0.1:$port" --db "$work/psflow.db" --lease-seconds 60 \
  >"$work/coordinator.log" 2>&1 &
coord=$!
trap 'kill "$coord" 2>/dev/null; wait "$coord" 2>/dev/null; rm -rf "$work"' EXIT

deadline=$((SECONDS + 15))
until [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/readyz")" = 200 ]; do
  if ! kill -0 "$coord" 2>/dev/null || [ "$SECONDS" -ge "$deadline" ]; then
    cat "$work/coordinator.log" >&2
    echo "coordinator.sh: the coordinator did not become ready" >&2
    exit 1
  fi
  sleep 0.05
done

# One job whose ps task no agent can take (the bench registers worker agents only), so it
# stays in phase Created and the agents stay idle: heartbeats measure lease renewal alone.
job="bench-job"
code=$(curl -s -o "$work/job.json" -w '%{http_code}' -X POST "$base/api/v1/jobs" \
  -H "Authorization: Bearer $PSFLOW_TOKEN" -H 'Content-Type: application/json' \
  --data "{\"name\": \"$job\", \"replicas\": {\"ps\": 1, \"worker\": 2}, \"model\": {\"type\": \"linear\", \"inputs\": 1}, \"data\": {\"format\": \"synthetic_linear\"}}")
[ "$code" = 201 ] || { cat "$work/job.json" >&2; echo "coordinator.sh: job submission: $code" >&2; exit 1; }

echo "== agents: registration and heartbeats (bench/coordinator_load)"
"$bench" --url "$base" --agents 1000 --threads 4 --seconds "$seconds"

# wrk_rate OUT: requests/s from a wrk report.
wrk_rate() {
  awk '/^Requests\/sec:/ {print $2}' "$1"
}

echo
echo "== GET /livez (wrk baseline)"
wrk -t2 -c16 -d"${seconds}s" --latency "$base/livez" | tee "$work/wrk-livez.txt"
echo
echo "== GET /api/v1/jobs/$job (wrk)"
wrk -t2 -c16 -d"${seconds}s" --latency -H "Authorization: Bearer $PSFLOW_TOKEN" \
  "$base/api/v1/jobs/$job" | tee "$work/wrk-job.txt"
livez=$(wrk_rate "$work/wrk-livez.txt")
jobs=$(wrk_rate "$work/wrk-job.txt")
# wrk counts non-2xx answers separately; a benchmark of error pages would mislead.
if grep -q 'Non-2xx' "$work/wrk-job.txt" "$work/wrk-livez.txt"; then
  echo "coordinator.sh: wrk saw non-2xx answers" >&2
  exit 1
fi
python3 -c 'import sys; j, l = map(float, sys.argv[1:]); print("GET job throughput = %.2f x livez throughput (%.0f vs %.0f req/s)" % (j / l, j, l))' "$jobs" "$livez"

echo
echo "== scale: 10,000 agents heartbeating once a second, 1,000 waiting jobs (bench/coordinator_load)"
"$bench" --url "$base" --agents 10000 --threads 8 --rate 1 --jobs 1000 --seconds "$seconds"
curl -sf -H "Authorization: Bearer $PSFLOW_TOKEN" "$base/metrics" >"$work/metrics.txt"
python3 - "$work/metrics.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
q = dict(re.findall(r'^psflow_scheduling_round_seconds\{quantile="([0-9.]+)"\} (\S+)$', text, re.M))
n = re.search(r'^psflow_scheduling_round_seconds_count (\d+)$', text, re.M).group(1)
p99, top = float(q["0.99"]) * 1e3, float(q["1"]) * 1e3
print("scheduling rounds (last 1024 of %s): p50 %.2f ms, p99 %.2f ms, max %.2f ms (< 50 ms: %s)"
      % (n, float(q["0.5"]) * 1e3, p99, top, "met" if top < 50 else "MISSED"))
PY
