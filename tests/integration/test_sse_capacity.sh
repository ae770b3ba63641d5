#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 400
# 300 Server-Sent Events subscribers against a running managed job (coordinator/http.c
# "Capacity"): `psflow up` trains a job that runs throughout; 300 clients keep subscribing to
# GET /api/v1/events for 25 s (two and a half agent leases of 10 s, a dozen rounds of the 2 s
# Retry-After), those over --max-streams retrying after the Retry-After of their 503, every
# stream read as it comes. Meanwhile /livez is probed every 100 ms on a fresh connection.
# Checked: every probe answered 200 (each within a generous 5 s; the worst latency is printed
# as a figure), at least 5 probes a second, exactly --max-streams streams held, the others
# told 503 with Retry-After, no agent lost its lease and the job never restarted (its
# restarts, generation and event log).
source "$(dirname "$0")/lib.sh"

# How long the pressure lasts: longer than two leases, so starved heartbeats would lose an agent.
HOLD=25
# Steps slowed to ~20 ms so that the job outlives the $HOLD s of pressure.
PSFLOW_PUSH_DELAY_MS=20 up_start --ps 1 --workers 1
cat >job.json <<'EOF'
{"name": "sse-load", "replicas": {"ps": 1, "worker": 1},
 "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"},
 "training": {"max_steps": 1000000, "batch_size": 10}}
EOF
code=$(curl -s -o created.json -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  --data-binary @job.json "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "submitting the job: $code $(cat created.json)"
wait_until 60 "the job running with steps reported" \
  jget "$URL/api/v1/jobs/sse-load" 'sys.exit(0 if d["status"]["phase"] == "Running" and d["status"]["global_step"] > 0 else 1)'

# The probe runs in a process of its own, so that the subscribers' work never delays it.
cat >probe.py <<'PY'
import socket, sys, time, urllib.parse

url = urllib.parse.urlparse(sys.argv[1])
end = time.monotonic() + float(sys.argv[2])
probes, worst, failed = 0, 0.0, []
while time.monotonic() < end:
    t0 = time.monotonic()
    try:
        s = socket.create_connection((url.hostname, url.port), timeout=5)
        s.settimeout(5)
        s.sendall(b"GET /livez HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        if not data.startswith(b"HTTP/1.1 200"):
            failed.append("answered %r" % data[:40])
        worst = max(worst, time.monotonic() - t0)
    except OSError as e:
        failed.append("%s after %.2f s" % (e, time.monotonic() - t0))
    probes += 1
    time.sleep(max(0.0, 0.1 - (time.monotonic() - t0)))
print("livez probes %d, failed %d, worst latency %.1f ms" % (probes, len(failed), worst * 1000))
for f in failed[:5]:
    print("FAIL: /livez: %s" % f, file=sys.stderr)
if worst > 5.0:
    print("FAIL: a /livez took %.1f s" % worst, file=sys.stderr)
sys.exit(0 if not failed and worst <= 5.0 and probes >= 5 * float(sys.argv[2]) else 1)
PY
python3 probe.py "$URL" "$HOLD" >probe.txt 2>&1 &
PROBE=$!

python3 - "$URL" "$HOLD" >load.txt 2>&1 <<'PY' || { cat load.txt >&2; fail "300 subscribers"; }
import selectors, socket, sys, time, urllib.parse

url = urllib.parse.urlparse(sys.argv[1])
host, port = url.hostname, url.port
HOLD, CLIENTS = float(sys.argv[2]), 300
REQUEST = b"GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"

sel = selectors.DefaultSelector()
state = {}  # socket -> {"n", "buf", "status"}
held, refused, bytes_read, no_retry_after = set(), 0, 0, 0
retry_queue = []  # (when, client number)

def connect(n):
    s = socket.create_connection((host, port), timeout=5)
    s.setblocking(False)
    s.sendall(REQUEST)
    state[s] = {"n": n, "buf": b"", "status": None}
    sel.register(s, selectors.EVENT_READ)

def drop(s, retry_in):
    n = state.pop(s)["n"]
    sel.unregister(s)
    s.close()
    retry_queue.append((time.monotonic() + retry_in, n))
    retry_queue.sort()

for n in range(CLIENTS):
    connect(n)
end = time.monotonic() + HOLD
while time.monotonic() < end:
    now = time.monotonic()
    while retry_queue and retry_queue[0][0] <= now:
        connect(retry_queue.pop(0)[1])
    for key, _ in sel.select(timeout=0.05):
        s = key.fileobj
        st = state[s]
        try:
            chunk = s.recv(65536)
        except BlockingIOError:
            continue
        except OSError:
            chunk = b""
        bytes_read += len(chunk)
        if st["status"] is None:
            st["buf"] += chunk
            if b"\r\n\r\n" in st["buf"]:
                head = st["buf"].split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
                st["status"] = head.split()[1]
                st["buf"] = b""
                if st["status"] == "200":
                    held.add(s)
                else:
                    refused += 1
                    after = [l.split(":", 1)[1] for l in head.splitlines()
                             if l.startswith("retry-after:")]
                    no_retry_after += not after
                    drop(s, float(after[0]) if after else 2.0)
                    continue
        if not chunk:
            if s in held:
                print("FAIL: a held stream was closed by the coordinator", file=sys.stderr)
                sys.exit(1)
            drop(s, 2.0)
for s in list(state):
    s.close()
print("%.0f s: subscribers %d, streams held %d, 503 answers %d (all with Retry-After: %s), %.1f MB of "
      "events read" % (HOLD, CLIENTS, len(held), refused, no_retry_after == 0, bytes_read / 1e6))
ok = True
if len(held) != 64:
    print("FAIL: %d streams held, expected --max-streams (64)" % len(held), file=sys.stderr)
    ok = False
if refused < CLIENTS - 64 or no_retry_after:
    print("FAIL: %d refusals, %d without Retry-After" % (refused, no_retry_after), file=sys.stderr)
    ok = False
sys.exit(0 if ok else 1)
PY
wait "$PROBE" || { cat probe.txt >&2; fail "/livez during the load"; }
cat load.txt probe.txt

# No agent lost its lease, the job never restarted, and it is still training.
jget "$URL/api/v1/nodes" '[n["state"] for n in d["items"]]' >states.txt
! grep -q lost states.txt || fail "an agent was lost during the load: $(cat states.txt)"
curl -sf "$URL/api/v1/jobs/sse-load" >job-status.json || fail "GET the job"
[ "$(json_field job-status.json 'd["status"]["restarts"]')" = 0 ] ||
  fail "the job restarted: $(json_field job-status.json 'd["status"]')"
[ "$(json_field job-status.json 'd["status"]["generation"]')" = 1 ] || fail "the job's generation moved"
[ "$(json_field job-status.json 'd["status"]["phase"]')" = Running ] ||
  fail "the job is $(json_field job-status.json 'd["status"]["phase"]'), not Running"
curl -sf "$URL/api/v1/jobs/sse-load/events?since_id=0" >log.json || fail "the job's log"
python3 - log.json <<'PY' || fail "the job's log shows a loss or a restart"
import json, sys
bad = [e for e in json.load(open(sys.argv[1]))["items"]
       if e.get("reason") in ("NodeLost", "TaskLost", "TaskFailed", "JobRestarted")]
for e in bad:
    print(e, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
curl -sf -X POST "$URL/api/v1/jobs/sse-load/cancel" >/dev/null || fail "cancelling the job"
up_stop
pass "300 subscribers for $HOLD s: /livez always answered, no lease lost, no restart ($(grep worst probe.txt))"
