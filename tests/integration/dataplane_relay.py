"""dataplane_relay.py - a man in the middle of the data plane for integration tests: it
forwards a task's connections to a ps on 127.0.0.1, the WebSocket upgrade and the
authentication exchange untouched, and attacks one message of chosen connections after it.

usage: python3 dataplane_relay.py LISTEN_PORT PS_PORT ATTACK...
  ATTACK = CONN:DIR:ACTION:N, for the CONN-th connection upgraded (from 0; one that closes
  before its upgrade, such as a probe of the port, is not counted), on the N-th data
  message (from 0) in direction DIR ("up": task to ps, "down": ps to task):
    inject   a forged CHECKPOINT final (step 1) is sent before message N
    replay   message N is dropped and message N - 1 is sent again in its place
    flip     one byte in the middle of message N is changed
    poison   64 bytes from the middle of message N are set to 0xff (float32 NaNs, however
             they align with a reply's values)
  Every other message, and every connection not named, is forwarded as it is.
Each attack is logged on stderr ("relay: conn 0: up message 6: inject"). Messages are
re-framed (one frame each; the task's masked with a fresh mask), as RFC 6455 allows.
"""
import os
import socket
import struct
import sys
import threading

CHECKPOINT = 10


def read_exact(s, n, buf):
    while len(buf[0]) < n:
        chunk = s.recv(1 << 16)
        if not chunk:
            raise EOFError
        buf[0] += chunk
    out, buf[0] = buf[0][:n], buf[0][n:]
    return out


def read_http(s, buf):
    while b"\r\n\r\n" not in buf[0]:
        chunk = s.recv(4096)
        if not chunk:
            raise EOFError
        buf[0] += chunk
    head, buf[0] = buf[0].split(b"\r\n\r\n", 1)
    return head + b"\r\n\r\n"


def read_message(s, buf):
    """(opcode, payload) of the next message, continuation frames joined."""
    data, first = b"", None
    while True:
        b0, b1 = read_exact(s, 2, buf)
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", read_exact(s, 2, buf))
        elif n == 127:
            (n,) = struct.unpack("!Q", read_exact(s, 8, buf))
        mask = read_exact(s, 4, buf) if b1 & 0x80 else None
        payload = read_exact(s, n, buf)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        op = b0 & 0x0F
        if op >= 8:
            return op, payload
        first = op if first is None else first
        data += payload
        if b0 & 0x80:
            return first, data


def frame(op, payload, masked):
    n = len(payload)
    b1 = 0x80 if masked else 0
    if n < 126:
        head = struct.pack("!BB", 0x80 | op, b1 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | op, b1 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | op, b1 | 127, n)
    if not masked:
        return head + payload
    mask = os.urandom(4)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def forged_checkpoint():
    payload = struct.pack("<QI", 1, 1)  # step 1, final
    return struct.pack("<IHHIIQ", 0x57465350, 1, CHECKPOINT, 999, 0, len(payload)) + payload


def pump(src, dst, buf, masked, attack, who):
    """Forwards messages src -> dst; attack: None or (action, n)."""
    index, last = 0, None
    try:
        while True:
            op, msg = read_message(src, buf)
            if op >= 8:
                dst.sendall(frame(op, msg, masked))
                if op == 8:
                    return
                continue
            out = [msg]
            if attack and index == attack[1]:
                action = attack[0]
                print("relay: %s message %d: %s" % (who, index, action), file=sys.stderr,
                      flush=True)
                if action == "inject":
                    out = [forged_checkpoint(), msg]
                elif action == "replay" and last is not None:
                    out = [last]
                elif action == "flip":
                    changed = bytearray(msg)
                    changed[len(changed) // 2] ^= 0x40
                    out = [bytes(changed)]
                elif action == "poison":
                    changed = bytearray(msg)
                    mid = len(changed) // 2
                    changed[mid:mid + 64] = b"\xff" * len(changed[mid:mid + 64])
                    out = [bytes(changed)]
            for m in out:
                dst.sendall(frame(op, m, masked))
            last, index = msg, index + 1
    except (EOFError, OSError):
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


upgraded = [0]
upgraded_lock = threading.Lock()


def serve(task, ps_port, attacks):
    try:
        ps = socket.create_connection(("127.0.0.1", ps_port))
    except OSError:
        task.close()
        return
    up_buf, down_buf = [b""], [b""]
    try:
        ps.sendall(read_http(task, up_buf))
        task.sendall(read_http(ps, down_buf))
    except (EOFError, OSError):
        task.close()
        ps.close()
        return
    with upgraded_lock:
        number = upgraded[0]
        upgraded[0] += 1
    mine = {d: (a, n) for c, d, a, n in attacks if c == number}
    t = threading.Thread(target=pump, args=(ps, task, down_buf, False, mine.get("down"),
                                            "conn %d: down" % number), daemon=True)
    t.start()
    pump(task, ps, up_buf, True, mine.get("up"), "conn %d: up" % number)
    t.join()
    task.close()
    ps.close()


def main():
    listen_port, ps_port = int(sys.argv[1]), int(sys.argv[2])
    attacks = []
    for a in sys.argv[3:]:
        c, d, action, n = a.split(":")
        assert d in ("up", "down") and action in ("inject", "replay", "flip", "poison"), a
        attacks.append((int(c), d, action, int(n)))
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", listen_port))
    srv.listen(16)
    while True:
        task, _ = srv.accept()
        threading.Thread(target=serve, args=(task, ps_port, attacks), daemon=True).start()


if __name__ == "__main__":
    main()
