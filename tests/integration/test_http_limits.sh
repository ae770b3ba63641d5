#!/usr/bin/env bash
# The coordinator's connection limits (`--max-connections`, `--connection-timeout`): slow
# clients that open connections and then send nothing, or drip a request byte by byte, do
# not keep others from being served; the coordinator closes idle connections after the
# timeout; clients beyond the cap are turned away and service comes back once the slow
# ones are cut off.
source "$(dirname "$0")/lib.sh"

read -r port <<<"$(free_ports 1)"
URL=http://127.0.0.1:$port
"$PSFLOW_BIN" coordinator --listen "127.0.0.1:$port" --db "$WORK/psflow.db" \
  --max-connections 8 --connection-timeout 2 2>"$WORK/coordinator.log" &
COORD=$!
wait_until 30 "the coordinator ready" curl -sf "$URL/readyz"

python3 - "$port" <<'PY' || fail "connection limits"
import socket, subprocess, sys, time
port = int(sys.argv[1])
url = "http://127.0.0.1:%d" % port

def served():
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                        url + "/livez"], capture_output=True, text=True)
    return r.stdout == "200"

def closed_by_server(s):
    """True when the server has closed s (EOF, possibly after an error answer)."""
    s.settimeout(0.5)
    try:
        while s.recv(4096):
            pass
        return True
    except socket.timeout:
        return False
    except OSError:  # reset by the server
        return True

# 1. Four silent clients and two that drip a request: others are still served.
slow = []
for _ in range(4):
    slow.append(socket.create_connection(("127.0.0.1", port)))
drip = []
for _ in range(2):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /livez HT")
    drip.append(s)
assert served(), "a GET /livez was not answered while 6 slow clients were connected"
print("ok: served while 4 silent and 2 dripping clients hold connections")

# 2. The coordinator cuts them off after --connection-timeout (2 s) of silence.
time.sleep(3.5)
open_ = [s for s in slow + drip if not closed_by_server(s)]
assert not open_, "%d slow connections still open after the 2 s timeout" % len(open_)
print("ok: every slow connection closed by the coordinator after the timeout")
for s in slow + drip:
    s.close()

# 3. More silent clients than the cap: the ones over it are turned away at once, and once
# the timeout cuts the silent ones off the coordinator serves again.
hog = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
time.sleep(0.3)
turned_away = 0
for _ in range(3):
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
deadline = time.time() + 10
while not served():
    assert time.time() < deadline, "service did not come back after the silent clients timed out"
    time.sleep(0.2)
print("ok: connections over the cap of 8 turned away; served again once the silent ones timed out")
for s in hog:
    s.close()
PY

kill -TERM "$COORD"
wait_pid "$COORD" 30 || fail "the coordinator did not stop on SIGTERM"
pass "connection cap and timeout protect the coordinator from slow clients"
