#!/usr/bin/env bash
# The `make demo` job: a local psflow cluster (`psflow up`: the coordinator, 2 ps and 2 worker
# agents on 127.0.0.1), the Fashion-MNIST MLP example submitted through the job API and
# followed with a progress line, then the final test accuracy and the dashboard URL.
# The cluster stops when the job ends; PSFLOW_DEMO_KEEP=1 keeps it running (Ctrl-C stops it)
# so the finished job can still be browsed.
#
# usage: scripts/demo.sh [BUILD_DIR]       environment: PSFLOW_DEMO_PORT [8080, else any free]
#                                                        PSFLOW_DEMO_DIR  [./psflow-demo]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PSFLOW=$BUILD/psflow
SPEC=examples/fashion-mnist-mlp.json
DIR=${PSFLOW_DEMO_DIR:-psflow-demo}
PORT=${PSFLOW_DEMO_PORT:-8080}

[ -x "$PSFLOW" ] || { echo "demo: $PSFLOW is missing: run 'make build' first" >&2; exit 1; }

# A port already taken (another coordinator, another program) falls back to a free one.
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  echo "demo: port $PORT is in use, the coordinator takes a free port instead" >&2
  PORT=0
fi

# A fresh database each time: the demo always trains from step 0.
rm -rf "$DIR"
mkdir -p "$DIR"
"$PSFLOW" up --ps 2 --workers 2 --port "$PORT" --dir "$DIR" >"$DIR/up.out" 2>"$DIR/up.err" &
UP=$!
stop() {
  kill -INT "$UP" 2>/dev/null || true
  wait "$UP" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT TERM

URL=
for _ in $(seq 1 150); do
  URL=$(sed -n 's|^dashboard: \(http://[^ ]*\)/$|\1|p' "$DIR/up.out")
  [ -n "$URL" ] && break
  kill -0 "$UP" 2>/dev/null || { cat "$DIR/up.err" >&2; echo "demo: psflow up failed" >&2; exit 1; }
  sleep 0.2
done
[ -n "$URL" ] || { cat "$DIR/up.err" >&2; echo "demo: psflow up did not start in 30 s" >&2; exit 1; }

echo "== psflow demo: coordinator, 2 ps and 2 workers on 127.0.0.1 (logs in $DIR/logs/)"
echo "== dashboard: $URL/   (open it to watch the job train)"
echo "== submitting $SPEC"
status=0
"$PSFLOW" submit "$SPEC" --wait --coordinator "$URL" || status=$?

NAME=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$SPEC")
ACC=$("$PSFLOW" get "$NAME" -o json --coordinator "$URL" |
  python3 -c 'import json,sys; a=json.load(sys.stdin)["status"].get("accuracy"); print("n/a" if a is None else "%.4f" % a)')
echo "== final test accuracy: $ACC"
# How the ps tasks share the model: the coordinator's placement (bytes per ps, imbalance).
python3 - "$URL/api/v1/jobs/$NAME/placement" <<'PY' || echo "== placement: not available"
import json, sys, urllib.request
p = json.load(urllib.request.urlopen(sys.argv[1], timeout=10))
print("== placement: %d ps, %s bytes, imbalance %.2f (largest ps over the mean)"
      % (len(p["ps"]), " + ".join(str(t["bytes"]) for t in p["ps"]), p["imbalance"]))
PY
echo "== dashboard: $URL/#/jobs/$NAME"
if [ "${PSFLOW_DEMO_KEEP:-0}" = 1 ]; then
  echo "== the cluster keeps running: Ctrl-C stops it"
  wait "$UP" || true
else
  echo "== the cluster stops now; 'PSFLOW_DEMO_KEEP=1 make demo' keeps it running to browse the job"
fi
exit "$status"
