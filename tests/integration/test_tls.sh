#!/usr/bin/env bash
# labels: sanitizer-only
# TLS for the API (docs/security.md): a CA and a server certificate for 127.0.0.1 made with
# the openssl CLI; `psflow up --tls-cert --tls-key --ca-file` runs its coordinator over
# https:// and its agents register trusting the CA; a job is submitted and followed over
# https with the CLI (--ca-file, and PSFLOW_CA_FILE) and with curl --cacert; the dashboard
# and the event stream are served over https; a client that does not trust the CA (no CA
# file, or another CA) is refused by its own verification, and plain http:// to the https
# port gets no API answer. The data plane too: the ps agents of psflow up serve wss with the
# same certificate and the workers verify it; a static ps (--tls-cert) is refused by workers
# that do not trust its CA, and refuses a plain client's upgrade.
source "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || { echo "skipped: openssl is not installed"; exit 77; }

# --- certificates --------------------------------------------------------------------------
make_test_pki "$WORK/tls"

# --- psflow up over https ------------------------------------------------------------------
up_start --ps 1 --workers 1 --tls-cert "$WORK/tls/server.pem" --tls-key "$WORK/tls/server.key" \
  --ca-file "$CA"
case $URL in https://127.0.0.1:*) ;; *) fail "psflow up's URL is not https: $URL" ;; esac
grep -q "^submit: .*--cacert $CA" "$WORK/up.out" || fail "psflow up's curl hint lacks --cacert"
grep -q 'listening on https://' "$WORK/up/logs/coordinator.log" ||
  fail "the coordinator does not say it serves https"
export CURL_CA_BUNDLE=$CA # lib.sh's jget and friends use plain curl
jget "$URL/api/v1/nodes" 'sys.exit(0 if len(d["items"]) == 2 else 1)' ||
  fail "the agents did not register over https"
pass "psflow up: coordinator on https, 2 agents registered trusting the CA"

# A client that does not trust the CA is refused, by curl and by psflow; http:// to the
# https port gets no API answer.
code=0
env -u CURL_CA_BUNDLE curl -s -o /dev/null --max-time 5 "$URL/readyz" || code=$?
[ "$code" = 60 ] || fail "curl without the CA: exit $code, expected 60 (certificate not trusted)"
code=0
env -u CURL_CA_BUNDLE curl -s -o /dev/null --max-time 5 --cacert "$OTHER" "$URL/readyz" || code=$?
[ "$code" = 60 ] || fail "curl trusting another CA: exit $code, expected 60"
plain=$(env -u CURL_CA_BUNDLE curl -s -o /dev/null -w '%{http_code}' --max-time 5 \
  "http://${URL#https://}/readyz" || true)
[ "$plain" != 200 ] || fail "plain http:// to the https port answered 200"
expect_exit 69 "$PSFLOW_BIN" list --coordinator "$URL"
grep -qi 'certificate' "$WORK/stderr" || fail "psflow list without the CA: $(cat "$WORK/stderr")"
grep -q -- '--ca-file' "$WORK/stderr" || fail "the refusal does not point at --ca-file"
expect_exit 69 "$PSFLOW_BIN" health --coordinator "$URL" --ca-file "$OTHER"
grep -qi 'certificate' "$WORK/stderr" || fail "psflow health with another CA: $(cat "$WORK/stderr")"
expect_exit 66 "$PSFLOW_BIN" list --coordinator "$URL" --ca-file "$WORK/no-such.pem"
pass "clients without the CA (curl exit 60, psflow exit 69 naming the certificate) are refused"

# --- a job over https ---------------------------------------------------------------------
cat >job.json <<'EOF'
{"name": "tls-job", "replicas": {"ps": 1, "worker": 1},
 "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear", "n": 2000},
 "training": {"max_steps": 300, "batch_size": 50}}
EOF
code=$(curl -s -o created.json -w '%{http_code}' --cacert "$CA" -X POST \
  -H 'Content-Type: application/json' --data-binary @job.json "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "curl --cacert POST /api/v1/jobs: $code $(cat created.json)"
# curl follows the job's events over https while the CLI waits for it.
curl -sN --cacert "$CA" --max-time 120 "$URL/api/v1/events?job=tls-job&since_id=0" \
  >events.txt 2>/dev/null &
EVENTS=$!
"$PSFLOW_BIN" submit job.json --coordinator "$URL" --ca-file "$CA" --wait \
  >submit.out 2>submit.err || { cat submit.err >&2; fail "psflow submit --wait over https"; }
wait_until 30 "the event stream showing the job succeed" grep -q '"phase":"Succeeded"' events.txt
kill "$EVENTS" 2>/dev/null || true
[ "$(job_phase tls-job)" = Succeeded ] || fail "the job did not succeed"
PSFLOW_CA_FILE=$CA "$PSFLOW_BIN" list --coordinator "$URL" >list.txt ||
  fail "psflow list with PSFLOW_CA_FILE"
grep -q '^tls-job *Succeeded' list.txt || fail "psflow list over https: $(cat list.txt)"
curl -sf --cacert "$CA" "$URL/" | grep -qi '<title>psflow' || fail "the dashboard over https"
pass "a job submitted with curl --cacert and followed with psflow submit --wait and the SSE stream over https"

# --- the data plane over TLS ----------------------------------------------------------------
# psflow up gave its ps agents the certificate: while a job runs, the ps task's data-plane
# port speaks TLS, trusted with the CA and refused by a client that trusts another; the job
# above ran over wss (its worker verified the ps with the CA).
sed -e 's/"tls-job"/"wss-long"/' -e 's/"max_steps": 300/"max_steps": 50000000/' job.json >long.json
code=$(curl -s -o created.json -w '%{http_code}' --cacert "$CA" -X POST \
  -H 'Content-Type: application/json' --data-binary @long.json "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "POST the long job: $code $(cat created.json)"
ps_addr=$(jget "$URL/api/v1/nodes" '[n["address"] for n in d["items"] if n["role"] == "ps"][0]')
[ -n "$ps_addr" ] || fail "no ps agent address"
ps_tls() {
  openssl s_client -connect "$ps_addr" -CAfile "$CA" -verify_return_error -verify_ip 127.0.0.1 \
    </dev/null >s_client.out 2>&1 && grep -q 'Verify return code: 0 (ok)' s_client.out
}
wait_until 60 "a TLS handshake with the ps task at $ps_addr, verified with the CA" ps_tls
if openssl s_client -connect "$ps_addr" -CAfile "$OTHER" -verify_return_error </dev/null \
  >s_client_other.out 2>&1; then
  fail "a client trusting another CA completed a TLS handshake with the ps"
fi
plain=$(python3 - "$ps_addr" <<'PY'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=10)
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
          b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
try:
    print(s.recv(64)[:12].decode("latin-1"))
except OSError:
    print("")
PY
)
case $plain in "HTTP/1.1 101"*) fail "the ps agent accepted a plain WebSocket upgrade" ;; esac
curl -sf --cacert "$CA" -X POST "$URL/api/v1/jobs/wss-long/cancel" >/dev/null ||
  fail "cancel the long job"
pass "psflow up: the ps agents serve the data plane over TLS (trusted with the CA, refused otherwise, no plain upgrade)"
up_stop

# Static mode: psflow ps --tls-cert/--tls-key, psflow worker --ca-file. A worker trusting
# another CA, or none, does not reach the ps (exit 69); with the CA the job runs.
cat >static.json <<'JSON'
{"name": "wss-job", "replicas": {"ps": 1, "worker": 1},
 "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear", "n": 2000},
 "training": {"max_steps": 200, "batch_size": 50}}
JSON
read -r ps_port w_port <<<"$(free_ports 2)"
TF_CONFIG=$(tf_config ps 0 "$ps_port" "$w_port") "$PSFLOW_BIN" ps --job static.json \
  --checkpoint-dir "$WORK/ckpt" --tls-cert "$WORK/tls/server.pem" \
  --tls-key "$WORK/tls/server.key" 2>static-ps.log &
PS_PID=$!
wait_until 30 "the static ps listening" grep -q 'listening on' static-ps.log
export TF_CONFIG
TF_CONFIG=$(tf_config worker 0 "$ps_port" "$w_port")
expect_exit 69 "$PSFLOW_BIN" worker --job static.json --checkpoint-dir "$WORK/ckpt" \
  --ca-file "$OTHER" --retry-seconds 2
grep -q "certificate is not trusted" "$WORK/stderr" ||
  fail "a worker trusting another CA: $(cat "$WORK/stderr")"
expect_exit 69 "$PSFLOW_BIN" worker --job static.json --checkpoint-dir "$WORK/ckpt" \
  --retry-seconds 2
expect_exit 0 "$PSFLOW_BIN" worker --job static.json --checkpoint-dir "$WORK/ckpt" \
  --ca-file "$CA"
unset TF_CONFIG
wait_pid "$PS_PID" 60 || fail "the static TLS ps exited non-zero"
pass "static mode over wss: a worker trusting another CA, or none, is refused; with the CA the job completes"
pass "TLS for the API and the data plane: https and wss, trusted with --ca-file, refused without"
