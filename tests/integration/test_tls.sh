#!/usr/bin/env bash
# TLS for the API (README "Security"): a CA and a server certificate for 127.0.0.1 made with
# the openssl CLI; `psflow up --tls-cert --tls-key --ca-file` runs its coordinator over
# https:// and its agents register trusting the CA; a job is submitted and followed over
# https with the CLI (--ca-file, and PSFLOW_CA_FILE) and with curl --cacert; the dashboard
# and the event stream are served over https; a client that does not trust the CA (no CA
# file, or another CA) is refused by its own verification, and plain http:// to the https
# port gets no API answer.
source "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || { echo "skipped: openssl is not installed"; exit 77; }

# --- certificates --------------------------------------------------------------------------
mkdir tls
cd tls
make_ca() { # make_ca NAME: NAME.key, NAME.pem, a self-signed CA
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$1.key" -out "$1.pem" -subj "/CN=psflow test $1" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null || fail "openssl: making CA $1"
}
make_ca ca
make_ca other
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key \
  -out server.csr -subj "/CN=127.0.0.1" 2>/dev/null || fail "openssl: server key"
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
  -extfile server.ext -out server.pem 2>/dev/null || fail "openssl: signing the server certificate"
openssl verify -CAfile ca.pem server.pem >/dev/null || fail "the test certificate does not verify"
cd "$WORK"
CA=$WORK/tls/ca.pem
OTHER=$WORK/tls/other.pem

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

up_stop
pass "TLS for the API: https coordinator, trusted with --ca-file, refused without"
