#!/usr/bin/env bash
# labels: sanitizer-only
# CORS and cross-site requests (api/rest.md "Browsers and CORS"). By default no answer of
# any route carries Access-Control-Allow-Origin, whatever Origin the request names, and a
# request that changes something from another origin is refused 403 even without a token
# (a page of another site could otherwise make the browser send it). With --cors-origin
# (repeated and comma-separated), exactly the named origins get the CORS headers, their
# preflights are answered 204 without a token, and others' preflights 403.
source "$(dirname "$0")/lib.sh"

read -r p1 p2 <<<"$(free_ports 2)"
"$PSFLOW_BIN" coordinator --listen "127.0.0.1:$p1" --db "$WORK/closed.db" \
  2>"$WORK/closed.log" &
PSFLOW_TOKEN=tok "$PSFLOW_BIN" coordinator --listen "127.0.0.1:$p2" --db "$WORK/open.db" \
  --cors-origin https://dash.example --cors-origin 'http://localhost:9999, http://b.example' \
  2>"$WORK/open.log" &
wait_until 30 "both coordinators ready" \
  sh -c "curl -sf http://127.0.0.1:$p1/readyz && curl -sf http://127.0.0.1:$p2/readyz"

JOB='{"name": "cors", "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"}}'
# hdrs PORT ARGS...: the answer's status line and headers, lower-cased.
hdrs() {
  local port=$1
  shift
  curl -s -o /dev/null -D - --max-time 5 "$@" "http://127.0.0.1:$port${CURL_PATH:-/}" |
    tr -d '\r' | tr 'A-Z' 'a-z'
}

# --- closed by default --------------------------------------------------------------------
for path in / /livez /readyz /metrics /version /api/v1/jobs /api/v1/nodes /api/v1/jobs/nope \
  /api/v1/events /no/such/page; do
  for origin in https://dash.example http://evil.example null; do
    out=$(CURL_PATH=$path hdrs "$p1" -H "Origin: $origin" --max-time 1 || true)
    ! grep -q '^access-control-allow-origin' <<<"$out" ||
      fail "GET $path with Origin $origin answered Access-Control-Allow-Origin by default"
  done
done
out=$(CURL_PATH=/api/v1/jobs hdrs "$p1" -X OPTIONS -H 'Origin: https://dash.example' \
  -H 'Access-Control-Request-Method: POST')
grep -q '^http/1.1 403' <<<"$out" || fail "a preflight by default: $(head -1 <<<"$out")"
! grep -q '^access-control' <<<"$out" || fail "a preflight by default got CORS headers"
before=$(sqlite3 "$WORK/closed.db" 'SELECT COUNT(*) FROM jobs')
code=$(curl -s -o "$WORK/body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -H 'Origin: http://evil.example' --data "$JOB" "http://127.0.0.1:$p1/api/v1/jobs")
[ "$code" = 403 ] || fail "a cross-site POST to a token-less coordinator answered $code"
grep -qi origin "$WORK/body" || fail "the 403 does not name the origin: $(cat "$WORK/body")"
[ "$(sqlite3 "$WORK/closed.db" 'SELECT COUNT(*) FROM jobs')" = "$before" ] ||
  fail "the refused cross-site POST stored a job"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -H "Origin: http://127.0.0.1:$p1" --data "$JOB" "http://127.0.0.1:$p1/api/v1/jobs")
[ "$code" = 201 ] || fail "a POST from the coordinator's own origin (its dashboard) answered $code"
pass "by default: no Access-Control-Allow-Origin on any route, cross-site changes refused 403"

# --- --cors-origin ------------------------------------------------------------------------
for origin in https://dash.example http://localhost:9999 http://b.example; do
  out=$(CURL_PATH=/api/v1/jobs hdrs "$p2" -X OPTIONS -H "Origin: $origin" \
    -H 'Access-Control-Request-Method: POST' \
    -H 'Access-Control-Request-Headers: authorization, content-type')
  grep -q '^http/1.1 204' <<<"$out" || fail "preflight from $origin: $(head -1 <<<"$out")"
  grep -qx "access-control-allow-origin: $origin" <<<"$out" || fail "preflight from $origin: no ACAO"
  grep -q '^access-control-allow-methods:.*post' <<<"$out" || fail "preflight: no Allow-Methods"
  grep -q '^access-control-allow-headers:.*authorization.*content-type' <<<"$out" ||
    fail "preflight: Allow-Headers lacks Authorization, Content-Type"
done
out=$(CURL_PATH=/api/v1/jobs hdrs "$p2" -X OPTIONS -H 'Origin: http://evil.example' \
  -H 'Access-Control-Request-Method: POST')
grep -q '^http/1.1 403' <<<"$out" || fail "preflight from another origin: $(head -1 <<<"$out")"
! grep -q '^access-control-allow-origin' <<<"$out" || fail "another origin's preflight got ACAO"

code=$(curl -s -o /dev/null -D "$WORK/h" -w '%{http_code}' -X POST -H 'Authorization: Bearer tok' \
  -H 'Content-Type: application/json' -H 'Origin: https://dash.example' --data "$JOB" \
  "http://127.0.0.1:$p2/api/v1/jobs")
[ "$code" = 201 ] || fail "a POST from an allowed origin answered $code"
grep -qix 'access-control-allow-origin: https://dash.example' <(tr -d '\r' <"$WORK/h") ||
  fail "the allowed origin's POST has no Access-Control-Allow-Origin"
grep -qi '^vary: origin' "$WORK/h" || fail "CORS answers must say Vary: Origin"
out=$(CURL_PATH=/api/v1/jobs hdrs "$p2" -H 'Authorization: Bearer tok' -H 'Origin: http://evil.example')
grep -q '^http/1.1 200' <<<"$out" || fail "a GET from another origin: $(head -1 <<<"$out")"
! grep -q '^access-control-allow-origin' <<<"$out" || fail "another origin's GET got ACAO"
out=$(CURL_PATH=/api/v1/events hdrs "$p2" -H 'Authorization: Bearer tok' \
  -H 'Origin: http://b.example' --max-time 1 || true)
grep -qx 'access-control-allow-origin: http://b.example' <<<"$out" ||
  fail "the event stream has no ACAO for an allowed origin"
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Authorization: Bearer tok' \
  -H 'Origin: http://evil.example' "http://127.0.0.1:$p2/api/v1/jobs/cors/cancel")
[ "$code" = 403 ] || fail "a cancel from another origin answered $code"
[ "$(sqlite3 "$WORK/open.db" "SELECT phase FROM jobs WHERE name = 'cors'")" != Failed ] ||
  fail "the refused cross-site cancel cancelled the job"
pass "--cors-origin: preflights 204 for the named origins only, ACAO and Vary on their answers"
