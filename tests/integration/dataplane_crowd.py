#!/usr/bin/env python3
"""dataplane_crowd.py - a persistent crowd of strangers against one ps's data plane, for
test_dataplane_crowd.sh (standard library only).

Usage: dataplane_crowd.py HOST PORT PS_PID N READY_FILE STOP_FILE

Keeps N connections open from 127.0.0.1 .. 127.0.0.9 (the client socket bound to each in
turn), none of which ever says HELLO: a third say nothing, a third send half of a WebSocket
upgrade request, a third finish the upgrade and send half of the largest frame a peer may
send before HELLO (a 4096-byte binary frame: header and 2048 payload bytes). Whenever the ps
closes one, or refuses it, it is opened again (at most RATE new connections a second), like
an attacker that wants its seats back. READY_FILE is written once N connections have been
tried; the crowd stops when STOP_FILE exists (or after 300 s). Meanwhile it samples the ps's
peak RSS (VmHWM). Prints one JSON line: {"tried", "closed_by_ps", "connect_failures",
"open_at_end", "upgraded", "peak_rss_kib", "baseline_rss_kib", "seconds"}.
"""
import base64
import errno
import json
import os
import selectors
import socket
import struct
import sys
import time

HOST, PORT, PS_PID = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
N, READY, STOP = int(sys.argv[4]), sys.argv[5], sys.argv[6]
SOURCES = ["127.0.0.%d" % i for i in range(1, 10)]
UNTRUSTED_MAX = 4096
RATE = int(os.environ.get("CROWD_RATE", "500"))  # new connections a second, at most
IDLE, HALF_HANDSHAKE, HALF_FRAME = 0, 1, 2


def rss(field):
    try:
        with open("/proc/%d/status" % PS_PID) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def upgrade_request():
    key = base64.b64encode(os.urandom(16)).decode()
    return ("GET / HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: psflow-v1\r\n\r\n"
            % (HOST, PORT, key)).encode()


def half_frame():
    mask = os.urandom(4)
    head = bytes([0x82, 0x80 | 126]) + struct.pack(">H", UNTRUSTED_MAX) + mask
    return head + os.urandom(UNTRUSTED_MAX // 2)


class Slot:
    def __init__(self, i):
        self.i = i
        self.kind = (i // 9) % 3  # each address has every kind
        self.source = SOURCES[i % len(SOURCES)]
        self.sock = None
        self.phase = None  # "connecting", "upgrading", "holding"
        self.answer = b""


def main():
    baseline = rss("VmRSS")
    peak = baseline or 0
    sel = selectors.DefaultSelector()
    slots = [Slot(i) for i in range(N)]
    todo = list(slots)  # slots to (re)open, in order
    stats = {"tried": 0, "closed_by_ps": 0, "connect_failures": 0, "upgraded": 0}
    start = time.monotonic()
    ready = False
    budget, last = 0.0, start

    def close(slot, by_ps):
        if slot.sock is not None:
            try:
                sel.unregister(slot.sock)
            except (KeyError, ValueError):
                pass
            slot.sock.close()
            slot.sock = None
        if by_ps:
            stats["closed_by_ps"] += 1
        todo.append(slot)

    def open_slot(slot):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((slot.source, 0))
        except OSError:
            s.close()
            stats["connect_failures"] += 1
            todo.append(slot)
            return
        s.setblocking(False)
        stats["tried"] += 1
        rc = s.connect_ex((HOST, PORT))
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            stats["connect_failures"] += 1
            todo.append(slot)
            return
        slot.sock, slot.phase, slot.answer = s, "connecting", b""
        sel.register(s, selectors.EVENT_WRITE, slot)

    def on_event(slot, mask):
        s = slot.sock
        if slot.phase == "connecting":
            err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                stats["connect_failures"] += 1
                close(slot, False)
                return
            try:
                if slot.kind == HALF_HANDSHAKE:
                    s.send(upgrade_request()[:40])
                elif slot.kind == HALF_FRAME:
                    s.send(upgrade_request())
            except OSError:
                close(slot, True)
                return
            slot.phase = "upgrading" if slot.kind == HALF_FRAME else "holding"
            sel.modify(s, selectors.EVENT_READ, slot)
            return
        try:
            chunk = s.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            close(slot, True)
            return
        if slot.phase == "upgrading":
            slot.answer += chunk
            if b"\r\n\r\n" in slot.answer:
                if not slot.answer.startswith(b"HTTP/1.1 101"):
                    close(slot, True)
                    return
                stats["upgraded"] += 1
                slot.phase = "holding"
                try:
                    s.send(half_frame())
                except OSError:
                    close(slot, True)

    while not os.path.exists(STOP) and time.monotonic() - start < 300:
        now = time.monotonic()
        budget = min(budget + (now - last) * RATE, RATE / 10)
        last = now
        while todo and budget >= 1:
            budget -= 1
            open_slot(todo.pop(0))
        if not ready and stats["tried"] >= N:
            with open(READY, "w") as f:
                f.write("%d\n" % stats["tried"])
            ready = True
        for key, mask in sel.select(timeout=0.02):
            on_event(key.data, mask)
        v = rss("VmHWM")
        if v is None:
            break  # the ps has exited
        peak = max(peak, v)
    open_at_end = sum(1 for s in slots if s.sock is not None)
    for s in slots:
        if s.sock is not None:
            s.sock.close()
    stats.update(open_at_end=open_at_end, peak_rss_kib=peak, baseline_rss_kib=baseline,
                 seconds=round(time.monotonic() - start, 1))
    print(json.dumps(stats))
    return 0


sys.exit(main())
