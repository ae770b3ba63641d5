#!/usr/bin/env bash
# labels: sanitizer-only
# DNS rebinding (docs/security.md "Host names"): a page of evil.example whose name is rebound
# to the coordinator's address sends `Host: evil.example:PORT` with a matching Origin, which
# the Origin check alone takes for the coordinator's own dashboard. The coordinator answers
# only to its own names: every route but /livez and /readyz answers such a request 421
# before it runs (a POST creates nothing, a DELETE deletes nothing, a GET reads nothing),
# while 127.0.0.1, localhost, [::1] and the names of --allowed-hosts / PSFLOW_ALLOWED_HOSTS
# keep working; `--allowed-hosts '*'` turns the check off; a malformed name is a usage error.
source "$(dirname "$0")/lib.sh"

read -r p1 p2 p3 <<<"$(free_ports 3)"
pids=()
"$PSFLOW_BIN" coordinator --listen "127.0.0.1:$p1" --db "$WORK/c1.db" \
  --allowed-hosts psflow.test,Coord.Example 2>"$WORK/c1.log" &
pids+=($!)
PSFLOW_ALLOWED_HOSTS=coord.internal "$PSFLOW_BIN" coordinator --listen "127.0.0.1:$p2" \
  --db "$WORK/c2.db" 2>"$WORK/c2.log" &
pids+=($!)
"$PSFLOW_BIN" coordinator --listen "127.0.0.1:$p3" --db "$WORK/c3.db" --allowed-hosts '*' \
  2>"$WORK/c3.log" &
pids+=($!)
wait_until 30 "the coordinators ready" sh -c "curl -sf http://127.0.0.1:$p1/readyz &&
  curl -sf http://127.0.0.1:$p2/readyz && curl -sf http://127.0.0.1:$p3/readyz"

job() { printf '{"name": "%s", "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"}}' "$1"; }
# code PORT HOST METHOD PATH [BODY]: the status of a request sent to 127.0.0.1:PORT with
# `Host: HOST` and a matching `Origin: http://HOST`, as a rebound page's would be.
code() {
  local port=$1 host=$2 method=$3 path=$4 body=${5:-}
  local args=(-s -o "$WORK/body" -w '%{http_code}' --max-time 5 -X "$method"
    -H "Host: $host" -H "Origin: http://$host")
  [ -z "$body" ] || args+=(-H 'Content-Type: application/json' --data "$body")
  curl "${args[@]}" "http://127.0.0.1:$port$path"
}
jobs_in() { sqlite3 "$1" 'SELECT COUNT(*) FROM jobs'; }

# The coordinator's own names: the job made through one of them is the one to attack.
[ "$(code "$p1" "127.0.0.1:$p1" POST /api/v1/jobs "$(job keep)")" = 201 ] ||
  fail "POST with Host 127.0.0.1:$p1: $(cat "$WORK/body")"
before=$(jobs_in "$WORK/c1.db")

# 1. The rebound name: refused 421 on every route, nothing created, deleted or read.
evil="evil.example:$p1"
c=$(code "$p1" "$evil" POST /api/v1/jobs "$(job rebound)")
[ "$c" = 421 ] || fail "a POST with a foreign Host and matching Origin answered $c"
grep -q -- '--allowed-hosts' "$WORK/body" || fail "the 421 does not say what to do: $(cat "$WORK/body")"
c=$(code "$p1" "$evil" DELETE /api/v1/jobs/keep)
[ "$c" = 421 ] || fail "a DELETE with a foreign Host answered $c"
c=$(code "$p1" "$evil" POST /api/v1/jobs/keep/cancel '{}')
[ "$c" = 421 ] || fail "a cancel with a foreign Host answered $c"
for path in /api/v1/jobs /api/v1/jobs/keep /api/v1/nodes /api/v1/events /metrics /version /; do
  c=$(code "$p1" "$evil" GET "$path")
  [ "$c" = 421 ] || fail "GET $path with a foreign Host answered $c"
done
c=$(curl -s -o /dev/null -w '%{http_code}' -X OPTIONS -H "Host: $evil" -H "Origin: http://$evil" \
  -H 'Access-Control-Request-Method: POST' "http://127.0.0.1:$p1/api/v1/jobs")
[ "$c" = 421 ] || fail "a preflight with a foreign Host answered $c"
for host in "evil.example" "127.0.0.1.evil.example:$p1" "localhost.evil.example:$p1" \
  "psflow.test.evil:$p1" "127.0.0.1@evil.example:$p1" "[::1" "[zz]:$p1" "psflow.test:x"; do
  c=$(code "$p1" "$host" GET /api/v1/jobs)
  [ "$c" = 421 ] || fail "GET /api/v1/jobs with Host '$host' answered $c"
done
[ "$(jobs_in "$WORK/c1.db")" = "$before" ] || fail "a refused request changed the job table"
[ "$(sqlite3 "$WORK/c1.db" "SELECT COUNT(*) FROM jobs WHERE name = 'keep'")" = 1 ] ||
  fail "the refused DELETE deleted the job"
[ "$(sqlite3 "$WORK/c1.db" "SELECT COUNT(*) FROM jobs WHERE name = 'rebound'")" = 0 ] ||
  fail "the refused POST stored its job"
[ "$(jget "http://127.0.0.1:$p1/api/v1/jobs/keep" 'd["status"]["phase"]')" != Cancelled ] ||
  fail "the refused cancel cancelled the job"
# Probes (kubelet sends Host: <pod IP>:port, a load balancer may send anything) still work.
for path in /livez /readyz; do
  c=$(code "$p1" "$evil" GET "$path")
  [ "$c" = 200 ] || fail "GET $path with a foreign Host answered $c"
done
grep -q "refused POST /api/v1/jobs .*421" "$WORK/c1.log" || fail "the 421 was not logged"
pass "a rebound name is refused 421 before any route runs; nothing changed"

# 2. The coordinator's own names, any case, with or without a trailing dot or the port.
n=0
for host in "127.0.0.1:$p1" "localhost:$p1" "LOCALHOST" "localhost.:$p1" "[::1]:$p1" \
  "psflow.test:$p1" "PSFLOW.TEST:8080" "coord.example" "10.1.2.3:$p1" "[fd00::1]:8080"; do
  c=$(code "$p1" "$host" GET /api/v1/jobs)
  [ "$c" = 200 ] || fail "GET /api/v1/jobs with Host '$host' answered $c: $(cat "$WORK/body")"
  n=$((n + 1))
  [ "$(code "$p1" "$host" POST /api/v1/jobs "$(job "own-$n")")" = 201 ] ||
    fail "POST from the dashboard's origin http://$host answered $(cat "$WORK/body")"
done
[ "$(code "$p1" "localhost:$p1" DELETE /api/v1/jobs/own-1)" = 204 ] ||
  fail "DELETE with Host localhost: $(cat "$WORK/body")"
[ "$(jobs_in "$WORK/c1.db")" = $((before + n - 1)) ] || fail "the own names' requests did not land"
pass "127.0.0.1, localhost, [::1], IP literals and --allowed-hosts names are served"

# 3. PSFLOW_ALLOWED_HOSTS; '*' turns the check off; a bad name is a usage error.
[ "$(code "$p2" "coord.internal:$p2" GET /api/v1/jobs)" = 200 ] ||
  fail "a name of PSFLOW_ALLOWED_HOSTS was refused"
[ "$(code "$p2" "psflow.test:$p2" GET /api/v1/jobs)" = 421 ] ||
  fail "a name another coordinator allows was served"
[ "$(code "$p3" "evil.example:$p3" GET /api/v1/jobs)" = 200 ] ||
  fail "--allowed-hosts '*' still refused a foreign Host"
expect_exit 64 "$PSFLOW_BIN" coordinator --listen 127.0.0.1:0 --db "$WORK/bad.db" \
  --allowed-hosts 'bad name'
expect_exit 64 "$PSFLOW_BIN" coordinator --listen 127.0.0.1:0 --db "$WORK/bad.db" \
  --allowed-hosts 'evil.example:8080'
pass "PSFLOW_ALLOWED_HOSTS and '*' work; a malformed name is refused at start"
for pid in "${pids[@]}"; do
  kill -TERM "$pid"
  wait_pid "$pid" 30 || fail "a coordinator did not stop on SIGTERM"
done
