#!/usr/bin/env python3
"""dataplane_flood.py - a hostile crowd against one ps's data plane, for
test_dataplane_limits.sh (standard library only).

Usage: dataplane_flood.py HOST PORT PS_PID IDLE HALF READY_FILE

Opens IDLE connections that finish the WebSocket upgrade and then say nothing, and HALF
connections that upgrade and send half of the largest frame a peer that has not said HELLO
may send (a 4096-byte binary frame: header and 2048 payload bytes). It also checks that a
frame header announcing 1 GiB, and garbage (NUL bytes) instead of an upgrade request, are
refused at once. Then it writes READY_FILE and waits (up to 120 s) until the ps has closed
every connection. Meanwhile it samples the ps's peak RSS (VmHWM). Prints one JSON line:
{"opened", "closed", "peak_rss_kib", "baseline_rss_kib", "seconds_to_close_all"}; exits 1
if a connection was not closed or a refusal did not happen.
"""
import base64
import json
import os
import selectors
import socket
import struct
import sys
import threading
import time

HOST, PORT, PS_PID = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
N_IDLE, N_HALF, READY = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
UNTRUSTED_MAX = 4096


def rss(field):
    try:
        with open("/proc/%d/status" % PS_PID) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


peak = [0]
sampling = [True]


def sampler():
    while sampling[0]:
        v = rss("VmHWM")
        if v is None:
            return
        peak[0] = max(peak[0], v)
        time.sleep(0.05)


def upgrade(sock):
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(("GET / HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                  "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: psflow-v1\r\n\r\n"
                  % (HOST, PORT, key)).encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("closed during the upgrade")
        answer += chunk
    if not answer.startswith(b"HTTP/1.1 101"):
        raise RuntimeError("upgrade refused: %r" % answer[:40])


def connect():
    s = socket.create_connection((HOST, PORT), timeout=20)
    return s


def frame_header(length):
    mask = os.urandom(4)
    if length < 126:
        return bytes([0x82, 0x80 | length]) + mask
    if length <= 0xFFFF:
        return bytes([0x82, 0x80 | 126]) + struct.pack(">H", length) + mask
    return bytes([0x82, 0x80 | 127]) + struct.pack(">Q", length) + mask


def closed_soon(sock, seconds=20):
    """Whether the peer closes sock within seconds (reading and dropping what comes)."""
    sock.settimeout(seconds)
    data = b""
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True, data
            data += chunk
    except (socket.timeout, TimeoutError):
        return False, data
    except ConnectionResetError:
        return True, data


def main():
    baseline = rss("VmRSS")
    threading.Thread(target=sampler, daemon=True).start()
    problems = []
    # Refusals at once: a frame announcing 1 GiB before HELLO, and NUL bytes.
    s = connect()
    upgrade(s)
    s.sendall(frame_header(1 << 30) + b"\0" * 64)
    ok, _ = closed_soon(s)
    if not ok:
        problems.append("a 1 GiB frame header before HELLO was not refused")
    s.close()
    s = connect()
    s.sendall(b"\0\0\0\0\0\0\0\0 hello?\r\n\r\n")
    ok, data = closed_soon(s)
    if not ok or not data.startswith(b"HTTP/1.1 400"):
        problems.append("garbage before the handshake got %r, closed %s" % (data[:30], ok))
    s.close()

    socks = []
    for i in range(N_IDLE + N_HALF):
        s = connect()
        upgrade(s)
        if i >= N_IDLE:
            s.sendall(frame_header(UNTRUSTED_MAX) + os.urandom(UNTRUSTED_MAX // 2))
        s.setblocking(False)
        socks.append(s)
    opened = len(socks)
    with open(READY, "w") as f:
        f.write("%d\n" % opened)
    start = time.monotonic()
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    closed = 0
    deadline = start + 120
    while closed < opened and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1):
            s = key.fileobj
            try:
                chunk = s.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                sel.unregister(s)
                s.close()
                closed += 1
    took = time.monotonic() - start
    sampling[0] = False
    v = rss("VmHWM")
    if v is not None:
        peak[0] = max(peak[0], v)
    if closed < opened:
        problems.append("%d of %d connections still open after 120 s" % (opened - closed, opened))
    print(json.dumps({"opened": opened, "closed": closed, "peak_rss_kib": peak[0],
                      "baseline_rss_kib": baseline, "seconds_to_close_all": round(took, 2)}))
    for p in problems:
        print("problem: " + p, file=sys.stderr)
    return 1 if problems else 0


sys.exit(main())
