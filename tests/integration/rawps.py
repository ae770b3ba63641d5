"""rawps.py - a raw data-plane client for integration tests: RFC 6455 over a plain socket and
the message layouts of api/wire.md, written from the document and not from psflow's codec.

Used as a module by tests/integration/test_dataplane_auth.sh (python3 -c 'import rawps ...').
Message tags after the handshake (api/wire.md "Integrity") are ChaCha20-Poly1305 from the
system's libcrypto through ctypes (Python's standard library has no AEAD).
"""
import ctypes
import ctypes.util
import hashlib
import hmac
import os
import socket
import struct

MAGIC = 0x57465350
TYPES = {"HELLO": 1, "HELLO_ACK": 2, "PULL": 3, "PULL_REPLY": 4, "PUSH": 5, "PUSH_ACK": 6,
         "PUSH_PULL": 7, "STATS": 8, "STATS_REPLY": 9, "CHECKPOINT": 10, "CHECKPOINT_ACK": 11,
         "ERROR": 12, "AUTH_CHALLENGE": 13, "AUTH_PROOF": 14, "AUTH_OK": 15, "RESTORE": 16}
NAMES = {v: k for k, v in TYPES.items()}
CODES = ["OK", "BAD_MAGIC", "BAD_VERSION", "BAD_TYPE", "BAD_FLAGS", "TRUNCATED", "BAD_LENGTH",
         "TOO_LARGE", "BAD_VALUE", "BAD_DTYPE", "UNKNOWN_SHARD", "BAD_SHAPE",
         "STALE_INCARNATION", "NOT_READY", "UNEXPECTED", "INTERNAL", "FORBIDDEN",
         "UNAUTHENTICATED", "NONFINITE", "VERSION_PASSED"]
ROLES = {"worker": 0, "chief": 1, "evaluator": 2, "tool": 3, "reader": 4}


class Closed(Exception):
    pass


_crypto = None


def tag_of(key, direction, seq, msg):
    """The tag of message `seq` of a direction (0: task to ps, 1: ps to task):
    ChaCha20-Poly1305 under key, nonce u32 direction + u64 seq little-endian, msg as
    additional data only."""
    global _crypto
    if _crypto is None:
        _crypto = ctypes.CDLL(ctypes.util.find_library("crypto") or "libcrypto.so.3")
        _crypto.EVP_CIPHER_CTX_new.restype = ctypes.c_void_p
        _crypto.EVP_chacha20_poly1305.restype = ctypes.c_void_p
        for f in ("EVP_EncryptInit_ex", "EVP_EncryptUpdate", "EVP_EncryptFinal_ex",
                  "EVP_CIPHER_CTX_ctrl"):
            getattr(_crypto, f).restype = ctypes.c_int
        _crypto.EVP_CIPHER_CTX_free.argtypes = [ctypes.c_void_p]
    c = _crypto
    ctx = ctypes.c_void_p(c.EVP_CIPHER_CTX_new())
    n, tag, iv = ctypes.c_int(0), ctypes.create_string_buffer(16), struct.pack("<IQ", direction, seq)
    ok = (c.EVP_EncryptInit_ex(ctx, ctypes.c_void_p(c.EVP_chacha20_poly1305()), None, None, None) == 1
          and c.EVP_CIPHER_CTX_ctrl(ctx, 0x9, 12, None) == 1  # EVP_CTRL_AEAD_SET_IVLEN
          and c.EVP_EncryptInit_ex(ctx, None, None, key, iv) == 1
          and (not msg or c.EVP_EncryptUpdate(ctx, None, ctypes.byref(n), msg, len(msg)) == 1)
          and c.EVP_EncryptFinal_ex(ctx, ctypes.create_string_buffer(16), ctypes.byref(n)) == 1
          and c.EVP_CIPHER_CTX_ctrl(ctx, 0x10, 16, tag) == 1)  # EVP_CTRL_AEAD_GET_TAG
    c.EVP_CIPHER_CTX_free(ctx)
    assert ok, "libcrypto's ChaCha20-Poly1305 failed"
    return tag.raw


class Conn:
    def __init__(self, port, host="127.0.0.1", timeout=10):
        self.s = socket.create_connection((host, port), timeout=timeout)
        key = "cHNmbG93LXJhdy10ZXN0IQ=="
        self.s.sendall(("GET / HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n" % (host, port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.s.recv(4096)
            if not chunk:
                raise Closed("closed during the handshake")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head
        self.next_id = 1
        self.tx = self.rx = None  # [key, direction, next seq] once the proofs are done

    def close(self):
        self.s.close()

    def send_frame(self, payload):
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x82, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x82, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x82, 0x80 | 127, n)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.s.sendall(head + mask + body)

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(65536)
            if not chunk:
                raise Closed("connection closed by the ps")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_frame(self):
        """The next binary message (continuation frames joined); Closed on a close frame."""
        data = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", self._read(8))
            payload = self._read(n)
            op = b0 & 0x0F
            if op == 8:
                raise Closed("close frame")
            if op in (9, 10):
                continue
            data += payload
            if b0 & 0x80:
                return data

    def request(self, mtype, payload, request_id=None):
        """Sends one message; returns (type name, request_id, payload) of the answer."""
        rid = request_id if request_id is not None else self.next_id
        self.next_id += 1
        msg = struct.pack("<IHHIIQ", MAGIC, 1, TYPES[mtype], rid, 0, len(payload)) + payload
        self.last_sent = msg
        self.send_frame(self.seal(msg))
        return self.recv()

    def seal(self, msg):
        """msg with its tag appended, once the proofs are done; msg as it is before."""
        if not self.tx:
            return msg
        tag = tag_of(self.tx[0], self.tx[1], self.tx[2], msg)
        self.tx[2] += 1
        return msg + tag

    def recv(self):
        msg = self.recv_frame()
        if self.rx:
            body, tag = msg[:-16], msg[-16:]
            assert len(msg) >= 16 and hmac.compare_digest(
                tag, tag_of(self.rx[0], self.rx[1], self.rx[2], body)), "the ps's tag is wrong"
            self.rx[2] += 1
            msg = body
        magic, ver, mtype, rid, flags, plen = struct.unpack("<IHHIIQ", msg[:24])
        assert magic == MAGIC and len(msg) == 24 + plen, msg[:24]
        return NAMES.get(mtype, str(mtype)), rid, msg[24:]

    def closed_by_peer(self):
        """True when the ps closes the connection (a close frame or EOF) within the timeout."""
        try:
            while True:
                self.recv_frame()
        except Closed:
            return True
        except (socket.timeout, ConnectionError):
            return False


def error_code(answer):
    name, _, payload = answer
    if name != "ERROR":
        return name
    code, n = struct.unpack("<II", payload[:8])
    return CODES[code] if code < len(CODES) else str(code)


def error_text(answer):
    return answer[2][8:].decode("utf-8", "replace") if answer[0] == "ERROR" else ""


def hello(role, task, incarnation, job):
    j = job.encode()
    return struct.pack("<B3xIQI", ROLES[role], task, incarnation, len(j)) + j


def pull(ids, min_version=0):
    return struct.pack("<QI", min_version, len(ids)) + struct.pack("<%dI" % len(ids), *ids)


def tensors(pairs):
    """pairs: [(id, bytes of float32 values)]"""
    out = b""
    for i, data in pairs:
        out += struct.pack("<IIQ", i, 1, len(data) // 4) + data
    return out


def push(task, incarnation, seq, step, pairs):
    return struct.pack("<IQQQI", task, incarnation, seq, step, len(pairs)) + tensors(pairs)


def checkpoint(step, final):
    return struct.pack("<QI", step, final)


def restore(step, lr_factor=1.0):
    return struct.pack("<Qf", step, lr_factor)


def hello_ack(payload):
    ps_task, inc, version, n = struct.unpack("<IQQI", payload)
    return {"ps_task": ps_task, "incarnation": inc, "version": version, "n_shards": n}


def pull_reply(payload):
    """[(id, bytes)] of a PULL_REPLY payload."""
    version, result, n = struct.unpack("<QII", payload[:16])
    pos, out = 16, []
    for _ in range(n):
        i, dtype, count = struct.unpack("<IIQ", payload[pos:pos + 16])
        out.append((i, payload[pos + 16:pos + 16 + 4 * count]))
        pos += 16 + 4 * count
    return version, out


# --- authentication (api/wire.md, "Authentication") ------------------------------------------

LABEL_JOB = b"psflow data plane v1 job key"
LABEL_TASK = b"psflow data plane v1 task key"
LABEL_PROOF = b"psflow data plane v1 task proof"
LABEL_PS = b"psflow data plane v1 ps proof"
LABEL_TO_PS = b"psflow data plane v1 task-to-ps mac key"
LABEL_TO_TASK = b"psflow data plane v1 ps-to-task mac key"


def job_key(token, job):
    return hmac.new(token, LABEL_JOB + b"\0" + job.encode(), hashlib.sha256).digest()


def task_key(jkey, role, task):
    return hmac.new(jkey, LABEL_TASK + b"\0" + struct.pack("<BI", ROLES[role], task),
                    hashlib.sha256).digest()


def proof(tkey, label, hello_msg, nonce_ps, nonce_task):
    return hmac.new(tkey, label + b"\0" + hello_msg + nonce_ps + nonce_task,
                    hashlib.sha256).digest()


def start_integrity(c, tkey, hello_msg, nonce_ps, nonce_task):
    """After AUTH_OK: every message both ways carries a tag (api/wire.md "Integrity")."""
    t = hello_msg + nonce_ps + nonce_task
    c.tx = [hmac.new(tkey, LABEL_TO_PS + b"\0" + t, hashlib.sha256).digest(), 0, 0]
    c.rx = [hmac.new(tkey, LABEL_TO_TASK + b"\0" + t, hashlib.sha256).digest(), 1, 0]


def authed_hello(c, role, task, incarnation, job, token, forge=None):
    """HELLO plus the proof; returns the answer to the proof (after checking the ps's own
    proof when it answers AUTH_OK). forge: None, or a key to prove with instead."""
    ans = c.request("HELLO", hello(role, task, incarnation, job))
    if ans[0] != "AUTH_CHALLENGE":
        return ans
    nonce_ps = ans[2]
    assert len(nonce_ps) == 32, ans
    hello_msg = c.last_sent
    tkey = forge if forge is not None else task_key(job_key(token, job), role, task)
    nonce_task = os.urandom(32)
    mac = proof(tkey, LABEL_PROOF, hello_msg, nonce_ps, nonce_task)
    ans = c.request("AUTH_PROOF", nonce_task + mac, request_id=ans[1])
    if ans[0] == "AUTH_OK":
        want = proof(tkey, LABEL_PS, hello_msg, nonce_ps, nonce_task)
        assert hmac.compare_digest(ans[2], want), "the ps's proof is wrong"
        start_integrity(c, tkey, hello_msg, nonce_ps, nonce_task)
        ans = c.recv()
    return ans
