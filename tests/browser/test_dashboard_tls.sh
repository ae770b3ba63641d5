#!/usr/bin/env bash
# The dashboard over https in headless Chromium (docs/security.md): `psflow up --tls-cert
# --tls-key --ca-file` with a test CA (https for the API and the dashboard, wss for the data
# plane), a job training while its page is watched (dashboard_tls.test.js), and a browser that
# does not trust the certificate refused. Skips (77) without chromium or openssl.
#   ctest -R test_dashboard_tls
set -euo pipefail
: "${PSFLOW_SRC:?run through ctest (PSFLOW_SRC unset)}"
chromium=${PSFLOW_CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || { echo "SKIP: no chromium at $chromium"; exit 77; }
command -v openssl >/dev/null || { echo "SKIP: openssl is not installed"; exit 77; }
command -v node >/dev/null || { echo "FAIL: node is not installed" >&2; exit 1; }
source "$PSFLOW_SRC/tests/integration/lib.sh"

for dir in web tests/browser; do # uPlot for the page, playwright-core for the test
  if [ ! -d "$PSFLOW_SRC/$dir/node_modules" ]; then
    (cd "$PSFLOW_SRC/$dir" && npm ci --no-audit --no-fund --loglevel=error && touch node_modules)
  fi
done

make_test_pki "$WORK/tls"
spki=$(openssl x509 -in "$WORK/tls/server.pem" -pubkey -noout | openssl pkey -pubin -outform der |
  openssl dgst -sha256 -binary | base64)
up_start --ps 1 --workers 1 --tls-cert "$WORK/tls/server.pem" --tls-key "$WORK/tls/server.key" \
  --ca-file "$CA"
case $URL in https://127.0.0.1:*) ;; *) fail "psflow up's URL is not https: $URL" ;; esac
export CURL_CA_BUNDLE=$CA

cat >job.json <<'JSON'
{"name": "dash-tls", "replicas": {"ps": 1, "worker": 1},
 "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear", "n": 2000},
 "training": {"max_steps": 50000000, "batch_size": 50}}
JSON
code=$(curl -s -o created.json -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  --data-binary @job.json "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "POST the job over https: $code $(cat created.json)"
PSFLOW_CHROMIUM=$chromium node "$PSFLOW_SRC/tests/browser/dashboard_tls.test.js" "$URL" "$spki" dash-tls ||
  fail "the dashboard over https"
curl -sf -X POST "$URL/api/v1/jobs/dash-tls/cancel" >/dev/null || fail "cancel the job"
wait_until 60 "dash-tls to end cancelled (phase Failed, reason Cancelled)" phase_is dash-tls Failed
up_stop
pass "the dashboard over https in Chromium: refused without trust, live and training with it"
