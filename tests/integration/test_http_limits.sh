#!/usr/bin/env bash
# labels: sanitizer-only
# The coordinator's connection limits (`--max-connections`, `--connection-timeout`,
# `--max-streams`; coordinator/http.c "Capacity"): slow clients that open connections and
# then send nothing, or drip a request byte by byte, do not keep others from being served;
# once they hold every ordinary slot, the reserve still serves /livez, /readyz and the
# agents' routes, and any other whole request takes the slot of the slow client that has
# waited longest; with nobody to give way it is answered 503 with Retry-After and
# Connection: close; silent connections in the reserve are cut off
# long before ordinary ones; idle
# connections are closed after the timeout; clients beyond the cap are turned away and
# service comes back once the slow ones are cut off. Event streams beyond --max-streams are
# answered 503 with Retry-After while /livez and heartbeats go on being served.
source "$(dirname "$0")/lib.sh"

read -r port <<<"$(free_ports 1)"
URL=http://127.0.0.1:$port
# 8 connections: 6 ordinary slots and a reserve of 2. Eviction of the clients that have
# waited longest for their request is put off for a minute, so the silent clients here hold
# their slots as long as this test needs (test_slowloris.sh checks eviction).
"$PSFLOW_BIN" coordinator --listen "127.0.0.1:$port" --db "$WORK/psflow.db" \
  --max-connections 8 --connection-timeout 10 --max-streams 2 --evict-after-ms 60000 \
  2>"$WORK/coordinator.log" &
COORD=$!
wait_until 30 "the coordinator ready" curl -sf "$URL/readyz"
curl -sf -X POST "${AGENT_AUTH[@]}" -H 'Content-Type: application/json' \
  --data '{"id": "agent-1", "role": "worker", "address": "127.0.0.1:2999"}' \
  "$URL/api/v1/nodes" >/dev/null || fail "registering an agent"

python3 - "$port" <<'PY' || fail "connection limits"
import os, socket, subprocess, sys, time
port = int(sys.argv[1])
url = "http://127.0.0.1:%d" % port

def curl(path, method="GET", body=None, extra=()):
    """(status, headers) of one request on a new connection."""
    args = ["curl", "-s", "-o", "/dev/null", "-D", "-", "--max-time", "5", "-X", method, *extra]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data", body]
    r = subprocess.run(args + [url + path], capture_output=True, text=True)
    lines = r.stdout.splitlines()
    status = lines[0].split()[1] if lines and len(lines[0].split()) > 1 else "000"
    return status, "\n".join(lines).lower()

def served():
    return curl("/livez")[0] == "200"

def heartbeat():
    return curl("/api/v1/nodes/agent-1/heartbeat", "POST", '{"state": "idle"}',
                ["-H", "Authorization: Bearer " + os.environ["PSFLOW_AGENT_TOKEN"]])[0] == "200"

def closed_by_server(s, wait=0.5):
    """True when the server has closed s (EOF, possibly after an error answer)."""
    s.settimeout(wait)
    try:
        while s.recv(4096):
            pass
        return True
    except socket.timeout:
        return False
    except OSError:  # reset by the server
        return True

def wait_closed(s, limit):
    deadline = time.time() + limit
    while time.time() < deadline:
        if closed_by_server(s, 0.2):
            return True
    return False

# 1. Four silent clients and two that drip a request fill the 6 ordinary slots: /livez and
# an agent's heartbeat are still served (from the reserve); an ordinary API call, whole at
# once, takes the slot of the client that has waited longest (the first silent one), even
# with eviction at accept put off for a minute.
slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
time.sleep(0.1)
drip = []
for _ in range(2):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /livez HT")
    drip.append(s)
time.sleep(0.3)
assert served(), "a GET /livez was not answered while 6 slow clients held the ordinary slots"
assert heartbeat(), "a heartbeat was not answered while 6 slow clients held the ordinary slots"
status, headers = curl("/api/v1/jobs")
assert status == "200", "GET /api/v1/jobs from the reserve answered %s, expected 200" % status
assert wait_closed(slow[0], 2), "the longest-waiting silent client kept its slot"
assert not any(closed_by_server(s, 0.05) for s in slow[1:] + drip), "a younger one was closed"
slow[0].close()
slow[0] = socket.create_connection(("127.0.0.1", port))  # the ordinary slots full again
time.sleep(0.3)
print("ok: ordinary slots full: /livez and a heartbeat served, GET /api/v1/jobs took the "
      "longest-waiting client's slot")

# 2. A silent client that lands in the reserve is cut off after a couple of seconds, while
# the ordinary ones are kept until --connection-timeout (10 s).
extra = socket.create_connection(("127.0.0.1", port))
assert wait_closed(extra, 8), "a silent connection in the reserve was kept for 8 s"
open_ = [s for s in slow if not closed_by_server(s, 0.05)]
assert len(open_) == len(slow), "ordinary connections closed before --connection-timeout"
extra.close()
print("ok: a silent connection in the reserve closed before the ordinary ones")

# 3. The coordinator cuts the ordinary ones off after --connection-timeout of silence.
for s in slow + drip:
    assert wait_closed(s, 15), "a slow connection still open 15 s after the 10 s timeout"
    s.close()
print("ok: every slow connection closed by the coordinator after the timeout")

# 4. Every slot taken (6 silent, 2 in the reserve that keep dripping a request): the
# connections over the cap are turned away at once; once the drips stop and the silent
# ones time out, the coordinator serves again.
hog = [socket.create_connection(("127.0.0.1", port)) for _ in range(6)]
time.sleep(0.3)
drippers = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
request = b"GET /livez HTTP/1.1\r\n"
for s in drippers:
    s.sendall(request[:1])
turned_away = 0
for i in range(3):
    for s in drippers:  # a byte now and then keeps a reserve connection alive
        s.sendall(request[i + 1:i + 2])
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\n\r\n")
    s.settimeout(1.0)
    try:
        data = s.recv(4096)
        turned_away += not data.startswith(b"HTTP/1.1 200")
    except (socket.timeout, OSError):
        turned_away += 1
    s.close()
assert turned_away == 3, "only %d of 3 connections over the cap were turned away" % turned_away
for s in drippers:
    s.close()
deadline = time.time() + 20
while not served():
    assert time.time() < deadline, "service did not come back after the silent clients timed out"
    time.sleep(0.2)
print("ok: connections over the cap of 8 turned away; served again once the slow ones left")
for s in hog:
    s.close()

def open_connections():
    """The gauge, or None while /metrics is not served (from the reserve: 503)."""
    r = subprocess.run(["curl", "-sf", "--max-time", "5", url + "/metrics"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        return None
    for line in r.stdout.splitlines():
        if line.startswith("psflow_http_connections "):
            return int(line.split()[1])
    raise AssertionError("/metrics has no psflow_http_connections")

deadline = time.time() + 10
while open_connections() != 1:  # the /metrics request itself
    assert time.time() < deadline, "the coordinator still counts closed connections"
    time.sleep(0.1)
print("ok: psflow_http_connections back to 1 once the clients left")

# 5. Event streams: two are allowed (--max-streams 2); a third is answered 503 with
# Retry-After at once, while /livez and heartbeats are served; when one stream ends, a new
# one opens.
def open_stream():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
    s.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return s, data

streams = []
for _ in range(2):
    s, data = open_stream()
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    streams.append(s)
s, data = open_stream()
text = data.decode("latin-1").lower()
assert text.startswith("http/1.1 503"), "a third stream answered %r" % text[:100]
assert "retry-after:" in text and "application/problem+json" in text, text[:400]
s.close()
assert served() and heartbeat(), "/livez or a heartbeat failed with the streams at their cap"
streams.pop().close()
# The coordinator looks for a subscriber that left every second (STREAM_PEER_CHECK); the
# deadline leaves room for a slow sanitizer build.
freed_at = time.time()
deadline = freed_at + 30
while True:
    s, data = open_stream()
    if data.startswith(b"HTTP/1.1 200"):
        streams.append(s)
        break
    s.close()
    assert time.time() < deadline, "no stream could open after one ended"
    time.sleep(0.2)
for s in streams:
    s.close()
print("ok: streams over --max-streams 2 answered 503 + Retry-After; a freed place is reused "
      "(%.1f s after its subscriber left)" % (time.time() - freed_at))

# 6. Nobody to give way: the 6 ordinary connections have each been answered since the
# reserve connection opened (kept alive, they wait for their next request for less time
# than it has), so its ordinary API call is told to come back later.
deadline = time.time() + 10
while open_connections() != 1:
    assert time.time() < deadline, "the streams' connections are still counted"
    time.sleep(0.1)
hold = [socket.create_connection(("127.0.0.1", port)) for _ in range(6)]
time.sleep(0.3)
late = socket.create_connection(("127.0.0.1", port))
time.sleep(0.2)

def answer(s, request):
    """The head of the answer to request on s (its body read too, so s stays usable)."""
    s.settimeout(5)
    s.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.decode("latin-1").lower().splitlines():
        if line.startswith("content-length:"):
            while len(body) < int(line.split(":")[1]):
                body += s.recv(4096)
    return head.decode("latin-1").lower()

for s in hold:
    assert answer(s, b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").startswith("http/1.1 200")
head = answer(late, b"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
assert head.startswith("http/1.1 503"), "GET /api/v1/jobs from the reserve: %r" % head[:100]
assert "retry-after:" in head and "connection: close" in head, head
assert served(), "a GET /livez was not answered with the ordinary slots all taken"
for s in hold + [late]:
    s.close()
print("ok: nobody to give way: /livez served, GET /api/v1/jobs 503 + Retry-After + close")
PY

kill -TERM "$COORD"
wait_pid "$COORD" 30 || fail "the coordinator did not stop on SIGTERM"
grep -q 'refused GET /api/v1/jobs .*503' "$WORK/coordinator.log" ||
  fail "the coordinator did not log the 503 it answered"
pass "the reserve, the stream budget, the connection cap and timeout protect the coordinator"
