#!/usr/bin/env bash
# labels: sanitizer-only
# Slow clients (docs/security.md "Slow clients"): 240 connections that send their request
# headers a byte a second, from 127.0.0.2..127.0.0.9 and from 127.0.0.1 (the address the
# user and the agent share with part of the flood), reopened as the coordinator closes
# them, for SLOWLORIS_SECONDS (25). Throughout, with the coordinator's defaults, every
# route a user and an agent use (GET /api/v1/jobs, GET a job, POST a job, a heartbeat,
# /livez) is answered with success within 1 s (the acceptance bound; the figure is
# printed); the flood really held the coordinator's connections; and the header deadline
# closed the trickling connections. Then one address's 40 silent connections are cut to
# --max-pending-per-address (32) while a request from it is still served.
source "$(dirname "$0")/lib.sh"

read -r port <<<"$(free_ports 1)"
URL=http://127.0.0.1:$port
"$PSFLOW_BIN" coordinator --listen "127.0.0.1:$port" --db "$WORK/psflow.db" \
  2>"$WORK/coordinator.log" &
COORD=$!
wait_until 30 "the coordinator ready" curl -sf "$URL/readyz"
curl -sf -X POST "${AGENT_AUTH[@]}" -H 'Content-Type: application/json' \
  --data '{"id": "agent-1", "role": "worker", "address": "127.0.0.1:2999"}' \
  "$URL/api/v1/nodes" >/dev/null || fail "registering an agent"
curl -sf -X POST -H 'Content-Type: application/json' --data '{"name": "steady", "model":
  {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"}}' \
  "$URL/api/v1/jobs" >/dev/null || fail "creating a job"

python3 - "$port" "${SLOWLORIS_SECONDS:-25}" <<'PY' || fail "slow clients"
import os, socket, sys, threading, time

port, seconds = int(sys.argv[1]), float(sys.argv[2])
SOURCES = ["127.0.0.%d" % i for i in range(2, 10)] * 28 + ["127.0.0.1"] * 16  # 240
REQUEST = b"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\nX-Pad: " + b"a" * 4096
stop = threading.Event()
stats = {"opened": 0, "closed_by_server": 0}

def dial(src):
    s = socket.socket()
    s.bind((src, 0))
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    stats["opened"] += 1
    return [s, src, 0]

def attack():
    conns = [dial(src) for src in SOURCES]
    while not stop.is_set():
        for c in conns:
            s = c[0]
            try:
                if s.recv(1024, socket.MSG_DONTWAIT) == b"":
                    raise ConnectionResetError
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:  # closed by the coordinator (or refused): open it again
                s.close()
                stats["closed_by_server"] += 1
                c[:] = dial(c[1])
                continue
            try:
                s.send(REQUEST[c[2]:c[2] + 1])
                c[2] = min(c[2] + 1, len(REQUEST) - 1)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                s.close()
                stats["closed_by_server"] += 1
                c[:] = dial(c[1])
        stop.wait(1.0)
    for c in conns:
        c[0].close()

AGENT_TOKEN = os.environ.get("PSFLOW_AGENT_TOKEN")

def request(method, path, body=None):
    """(status, seconds) of one request on a new connection from 127.0.0.1."""
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n" % (method, path, port)
    if "/nodes/" in path and AGENT_TOKEN:
        head += "Authorization: Bearer %s\r\n" % AGENT_TOKEN
    if body is not None:
        head += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    data = (head + "\r\n" + (body or "")).encode()
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(data)
            reply = b""
            while b"\r\n" not in reply:
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        status = int(reply.split()[1]) if reply.startswith(b"HTTP/1.1 ") else 0
    except OSError:
        status = 0
    return status, time.monotonic() - t0

attacker = threading.Thread(target=attack)
attacker.start()
time.sleep(2.0)  # the flood is in place
routes = [
    ("GET", "/api/v1/jobs", None, 200),
    ("GET", "/api/v1/jobs/steady", None, 200),
    ("POST", "/api/v1/jobs", '{"name": "j-%d", "model": {"type": "linear", "inputs": 1}, '
     '"data": {"format": "synthetic_linear"}}', 201),
    ("POST", "/api/v1/nodes/agent-1/heartbeat", '{"state": "idle"}', 200),
    ("GET", "/livez", None, 200),
]
worst = {}
failures = []
held = []
n = 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    for method, path, body, want in routes:
        status, took = request(method, path, body % n if body and "%d" in body else body)
        n += 1
        worst[method + " " + path] = max(worst.get(method + " " + path, 0.0), took)
        if status != want or took > 1.0:
            failures.append("%s %s: %s after %.2f s" % (method, path, status, took))
    # How many connections the coordinator holds: the flood must really be there.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        text = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            text += chunk
    for line in text.decode("latin-1").splitlines():
        if line.startswith("psflow_http_connections "):
            held.append(int(line.split()[1]))
    time.sleep(0.1)
stop.set()
attacker.join()
print("requests: %d during %.0f s; slowest per route: %s" % (
    n, seconds, ", ".join("%s %.3f s" % (p, t) for p, t in worst.items())))
print("coordinator connections during the flood: max %d, median %d; flood connections "
      "opened %d, closed by the coordinator %d" % (max(held or [0]),
      sorted(held or [0])[len(held or [0]) // 2], stats["opened"], stats["closed_by_server"]))
assert not failures, "%d of %d requests failed or took over 1 s, e.g. %s" % (
    len(failures), n, failures[:5])
assert max(held or [0]) >= 150, "the flood never held 150 connections: the test tests nothing"
assert stats["closed_by_server"] >= 200, "the coordinator closed only %d trickling connections" % (
    stats["closed_by_server"])
print("max latency %.3f s" % max(worst.values()))

# --max-pending-per-address (32): 40 silent connections from one address keep at most 32
# open; a request from that address still gets through (it takes the place of the
# longest-waiting one).
def closed(s):
    try:
        return s.recv(1, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True

silent = []
for _ in range(40):
    s = socket.socket()
    s.bind(("127.0.0.10", 0))
    s.connect(("127.0.0.1", port))
    silent.append(s)
deadline = time.monotonic() + 10
while sum(not closed(s) for s in silent) > 32:
    assert time.monotonic() < deadline, "%d connections of one address still open" % sum(
        not closed(s) for s in silent)
    time.sleep(0.1)
time.sleep(0.6)
s = socket.socket()
s.bind(("127.0.0.10", 0))
s.settimeout(5)
s.connect(("127.0.0.1", port))
s.sendall(b"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
reply = s.recv(64)
assert reply.startswith(b"HTTP/1.1 200"), "a request from a crowded address: %r" % reply
print("ok: one address holds at most 32 waiting connections; its next request was served")
PY

kill -TERM "$COORD"
wait_pid "$COORD" 30 || fail "the coordinator did not stop on SIGTERM"
pass "240 trickling connections from 9 addresses: every route answered within 1 s throughout"
