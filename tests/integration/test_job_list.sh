#!/usr/bin/env bash
# labels: sanitizer-only
# GET /api/v1/jobs pages as Kubernetes lists do (api/rest.md "Jobs"): `limit` jobs per page,
# newest first, and metadata.continue for the next page until the last. Against a real
# coordinator holding 600 jobs: walking the pages with limits 1, 7 and 100 returns every job
# exactly once, in the order of one unlimited walk; a continue token still works after the
# job it stopped at is deleted and after the coordinator restarts; bad limits and tokens are
# 400; `psflow list` (pages of 500) shows all 600; waiting=true pages through the jobs
# waiting for agents only.
source "$(dirname "$0")/lib.sh"

read -r port <<<"$(free_ports 1)"
URL=http://127.0.0.1:$port
start_coordinator() {
  "$PSFLOW_BIN" coordinator --listen "127.0.0.1:$port" --db "$WORK/psflow.db" \
    2>>"$WORK/coordinator.log" &
  COORD=$!
  wait_until 30 "the coordinator ready" curl -sf "$URL/readyz"
}
start_coordinator

python3 - "$port" <<'PY' || fail "submitting 600 jobs"
import http.client, json, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
for i in range(600):
    spec = {"name": "list-%03d" % i, "model": {"type": "linear", "inputs": 1},
            "data": {"format": "synthetic_linear"}}
    c.request("POST", "/api/v1/jobs", json.dumps(spec), {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    assert r.status == 201, (i, r.status)
PY

# walk LIMIT [TOKEN]: prints the names of every page from TOKEN on, one per line.
walk() {
  python3 - "$port" "$1" "${2:-}" <<'PY'
import http.client, json, sys, urllib.parse
port, limit, token = int(sys.argv[1]), sys.argv[2], sys.argv[3]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
pages = 0
while True:
    q = "limit=%s" % limit + ("&continue=" + urllib.parse.quote(token) if token else "")
    c.request("GET", "/api/v1/jobs?" + q)
    r = c.getresponse()
    d = json.loads(r.read())
    assert r.status == 200, (r.status, d)
    assert len(d["items"]) <= int(limit), "a page of %d for limit %s" % (len(d["items"]), limit)
    for item in d["items"]:
        print(item["name"])
    pages += 1
    token = d.get("metadata", {}).get("continue")
    if not token:
        assert "remainingItemCount" not in d.get("metadata", {}), d["metadata"]
        break
    assert d["metadata"]["remainingItemCount"] > 0, d["metadata"]
    assert pages < 10000, "the pages never end"
PY
}

walk 1000 >all.txt
[ "$(wc -l <all.txt)" = 600 ] || fail "one page of 1000 holds $(wc -l <all.txt) jobs, expected 600"
[ "$(head -1 all.txt)" = list-599 ] && [ "$(tail -1 all.txt)" = list-000 ] ||
  fail "the list is not newest first: $(head -1 all.txt) ... $(tail -1 all.txt)"
[ "$(sort -u all.txt | wc -l)" = 600 ] || fail "the list repeats jobs"
for limit in 1 7 100; do
  walk "$limit" >"pages-$limit.txt"
  cmp -s all.txt "pages-$limit.txt" ||
    fail "pages of $limit do not return every job exactly once in order ($(wc -l <"pages-$limit.txt") lines)"
done
curl -sf "$URL/api/v1/jobs" >default.json || fail "GET /api/v1/jobs without a limit"
[ "$(json_field default.json 'len(d["items"])')" = 500 ] ||
  fail "the default page is not 500 jobs: $(json_field default.json 'len(d["items"])')"
pass "pages of 1, 7, 100 and 1000 return all 600 jobs exactly once, newest first; default 500"

# waiting=true: only the jobs waiting for agents (no agent here: every job not ended), in the
# same order and pages, without remainingItemCount.
for i in $(seq 0 3 27); do printf 'list-%03d\n' "$i"; done >cancelled.txt
while read -r name; do
  curl -sf -o /dev/null -X POST "$URL/api/v1/jobs/$name/cancel" || fail "cancel $name"
done <cancelled.txt
python3 - "$port" <<'PY' >waiting.txt || fail "walking the waiting jobs"
import http.client, json, sys, urllib.parse
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
token = ""
for _ in range(1000):
    c.request("GET", "/api/v1/jobs?waiting=true&limit=7" + ("&continue=" + urllib.parse.quote(token) if token else ""))
    r = c.getresponse()
    d = json.loads(r.read())
    assert r.status == 200, (r.status, d)
    assert "remainingItemCount" not in d["metadata"], d["metadata"]
    for item in d["items"]:
        assert item["queue"] and item["queue"]["position"] > 0, item
        print(item["name"])
    token = d["metadata"].get("continue")
    if not token:
        break
PY
grep -v -x -f cancelled.txt all.txt >want-waiting.txt
cmp -s want-waiting.txt waiting.txt ||
  fail "waiting=true listed $(wc -l <waiting.txt) jobs, not the $(wc -l <want-waiting.txt) not cancelled"
for q in waiting=yes waiting=1 waiting=; do
  code=$(curl -s -o body.json -w '%{http_code}' "$URL/api/v1/jobs?$q")
  [ "$code" = 400 ] && grep -q 'waiting' body.json || fail "GET /api/v1/jobs?$q answered $code"
done
pass "waiting=true pages through the 590 waiting jobs only (cancelled ones left out); a bad value is 400"

# A token names a position: deleting the job it stopped at, or restarting the coordinator,
# leaves the rest of the walk intact.
curl -sf "$URL/api/v1/jobs?limit=50" >page1.json || fail "first page of 50"
token=$(json_field page1.json 'd["metadata"]["continue"]')
last=$(json_field page1.json 'd["items"][-1]["name"]')
curl -sf -X DELETE "$URL/api/v1/jobs/$last" || fail "deleting $last"
walk 50 "$token" >rest.txt
sed -n '51,$p' all.txt | cmp -s - rest.txt ||
  fail "after deleting $last the walk from its token differs from the rest of the list"
kill -TERM "$COORD"
wait_pid "$COORD" 30 || fail "the coordinator did not stop"
start_coordinator
walk 50 "$token" >rest2.txt
cmp -s rest.txt rest2.txt || fail "the token gives other pages after a coordinator restart"
pass "a continue token survives the deletion of its job and a coordinator restart"

for q in limit=0 limit=1001 limit=x continue=nonsense 'continue=zzzzzzzzzzzzzzzz.list-1' \
  'continue=0000000000000000.UPPER'; do
  code=$(curl -s -o body.json -w '%{http_code}' "$URL/api/v1/jobs?$q")
  [ "$code" = 400 ] || fail "GET /api/v1/jobs?$q answered $code, expected 400"
  grep -q '"detail"' body.json || fail "GET /api/v1/jobs?$q: no problem detail"
done
pass "bad limits and continue tokens are 400"

"$PSFLOW_BIN" list --coordinator "$URL" -o json >list.json || fail "psflow list -o json"
[ "$(json_field list.json 'len(d["items"])')" = 599 ] ||
  fail "psflow list -o json shows $(json_field list.json 'len(d["items"])') jobs, expected 599"
"$PSFLOW_BIN" list --coordinator "$URL" >list.txt || fail "psflow list"
[ "$(grep -c '^list-' list.txt)" = 599 ] || fail "psflow list shows $(grep -c '^list-' list.txt) jobs"
pass "psflow list follows the pages: all 599 jobs"
