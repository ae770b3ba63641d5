#!/usr/bin/env python3
"""ps_seeds.py - writes the seed conversations of fuzz_ps (tests/fuzz/fuzz_ps.c) into
tests/data/ps/valid/: valid exchanges with and without a key, for the fuzzer to mutate (LEASE
on the dynamic-splits job through to training.epochs' end, and on a static one).
usage: python3 tests/fuzz/ps_seeds.py [OUT_DIR]"""
import os
import struct
import sys

MAGIC = 0x57465350
ROLE = {"worker": 0, "chief": 1, "evaluator": 2, "tool": 3}


def msg(mtype, payload, rid=1):
    return struct.pack("<IHHIIQ", MAGIC, 1, mtype, rid, 0, len(payload)) + payload


def hello(role, task, inc=1, job=b"fuzz", rid=1):
    return msg(1, struct.pack("<B3xIQI", ROLE[role], task, inc, len(job)) + job, rid)


def pull(ids, min_version=0, rid=2):
    return msg(3, struct.pack("<QI", min_version, len(ids)) + struct.pack("<%dI" % len(ids), *ids), rid)


# the fuzz job: softmax 4 x 3, 2 fixed shards per variable: kernel 12 = 6 + 6, bias 3 = 2 + 1
SHARDS = [(0, 6), (1, 6), (2, 2), (3, 1)]


def push_payload(task, inc, seq, step):
    out = struct.pack("<IQQQI", task, inc, seq, step, len(SHARDS))
    for i, n in SHARDS:
        out += struct.pack("<IIQ", i, 1, n) + struct.pack("<%df" % n, *([0.25] * n))
    return out


def push(task, inc, seq, step, rid=3):
    return msg(5, push_payload(task, inc, seq, step), rid)


def push_pull(task, inc, seq, step, ids, rid=4):
    return msg(7, push_payload(task, inc, seq, step) + struct.pack("<QI", step + 1, len(ids)) +
               struct.pack("<%dI" % len(ids), *ids), rid)


def stats(rid=5):
    return msg(8, b"", rid)


def checkpoint(step, final, rid=6):
    return msg(10, struct.pack("<QI", step, final), rid)


def restore(step, lr_factor=1.0, rid=7):
    return msg(16, struct.pack("<Qf", step, lr_factor), rid)


def rec(conn, m):
    return bytes([conn]) + struct.pack("<H", len(m)) + m


def proof(conn, bad=False):
    return bytes([conn | ((3 if bad else 2) << 2)])


def close(conn):
    return bytes([conn | (1 << 2)])


def row_pull(ids, sels, min_version=0, rid=8):
    """ROW_PULL (17): whole shards, then selections (shard, rows)."""
    out = struct.pack("<QI", min_version, len(ids)) + struct.pack("<%dI" % len(ids), *ids)
    out += struct.pack("<I", len(sels))
    for shard, rows in sels:
        out += struct.pack("<II", shard, len(rows)) + struct.pack("<%dI" % len(rows), *rows)
    return msg(17, out, rid)


# the embedding job: table ids [8, 2] in two row shards 0, 1 ([4, 2] each); dense_0/kernel
# [2, 3] as shards 2, 3 ([1, 3] each); bias [3] as shards 4 ([2]) and 5 ([1])
DENSE = [(2, 3), (3, 3), (4, 2), (5, 1)]


def row_push_pull(task, inc, seq, step, rows, ids, sels, rid=9):
    """ROW_PUSH_PULL (18): dense shards whole, rows of the table shards, then a ROW_PULL."""
    out = struct.pack("<IQQQI", task, inc, seq, step, len(DENSE))
    for i, n in DENSE:
        out += struct.pack("<IIQ", i, 1, n) + struct.pack("<%df" % n, *([0.5] * n))
    out += struct.pack("<I", len(rows))
    for shard, rs in rows:
        out += struct.pack("<IIII", shard, 1, 2, len(rs)) + struct.pack("<%dI" % len(rs), *rs)
        out += struct.pack("<%df" % (2 * len(rs)), *([0.25] * (2 * len(rs))))
    tail = row_pull(ids, sels, step + 1)
    return msg(18, out + tail[24:], rid)


# the dynamic table job (byte 0 bits 1 and 3): table ids, dynamic, one shard 0 on the one ps;
# dense_0/kernel [2, 3] as shards 1, 2; bias [3] as shards 3 and 4; a set of 64-bit ids has
# bit 31 of its shard id set (api/wire.md "Rows of a shard")
DYN_DENSE = [(1, 3), (2, 3), (3, 2), (4, 1)]
ID64 = 0x80000000


def dyn_row_pull(ids, sels, min_version=0, rid=14):
    """ROW_PULL (17) whose selections name 64-bit ids: (shard, ids)."""
    out = struct.pack("<QI", min_version, len(ids)) + struct.pack("<%dI" % len(ids), *ids)
    out += struct.pack("<I", len(sels))
    for shard, keys in sels:
        out += struct.pack("<II", shard | ID64, len(keys)) + struct.pack("<%dQ" % len(keys), *keys)
    return msg(17, out, rid)


def dyn_row_push_pull(task, inc, seq, step, keys, sel_keys, rid=15, width=2):
    """ROW_PUSH_PULL (18) of the dynamic job: dense shards whole, the gradients of keys' rows
    (width floats each: 2 is the table's), then a pull of the dense shards and of sel_keys'
    rows."""
    out = struct.pack("<IQQQI", task, inc, seq, step, len(DYN_DENSE))
    for i, n in DYN_DENSE:
        out += struct.pack("<IIQ", i, 1, n) + struct.pack("<%df" % n, *([0.5] * n))
    out += struct.pack("<I", 1)
    out += struct.pack("<IIII", ID64, 1, width, len(keys)) + struct.pack("<%dQ" % len(keys), *keys)
    out += struct.pack("<%df" % (width * len(keys)), *([0.25] * (width * len(keys))))
    tail = dyn_row_pull([i for i, _ in DYN_DENSE], [(0, sel_keys)], step + 1)
    return msg(18, out + tail[24:], rid)


# the shared segment (api/wire.md "Shared segment"): fuzz_ps makes a SEG_ATTACH of pid 0 name
# a real segment of SEG_LIMIT bytes (the size as sent), any other pid its own process; the
# limit of the dense job is a worker's segment for its 15 parameters (pf_segment_bytes):
# a 64-byte head, then params and grads of 60 bytes each, 64-byte aligned
SEG_LIMIT = 64 + 2 * 64


def seg_attach(pid=0, fd=3, size=SEG_LIMIT, token=bytes(range(16)), rid=10):
    """SEG_ATTACH (19): pid, fd, size, token."""
    return msg(19, struct.pack("<IIQ", pid, fd, size) + token, rid)


def seg_records(shards, grads=True, dtype=1, value=64):
    """Segment records: values from `value`, then (grads) the gradients after them."""
    out, at = b"", value
    total = 4 * sum(n for _, n in shards)
    for i, n in shards:
        out += struct.pack("<IIQQQ", i, dtype, n, at + total if grads else 0, at)
        at += 4 * n
    return out


def seg_pull(shards, min_version=0, reserved=0, records=None, rid=11):
    """SEG_PULL (21): min_version, n, reserved, records (grad 0)."""
    body = seg_records(shards, False) if records is None else records
    return msg(21, struct.pack("<QII", min_version, len(shards), reserved) + body, rid)


def seg_push_pull(task, inc, seq, step, shards, reserved=0, records=None, rid=12):
    """SEG_PUSH_PULL (22): task_index, reserved, incarnation, seq, step, then SEG_PULL's."""
    body = seg_records(shards) if records is None else records
    return msg(22, struct.pack("<IIQQQ", task, reserved, inc, seq, step) +
               struct.pack("<QII", step + 1, len(shards), 0) + body, rid)


def lease(epoch, n_splits, want, done, rid=13):
    """LEASE (23): epoch, n_splits, want, n_done, done[n_done]."""
    return msg(23, struct.pack("<QIII", epoch, n_splits, want, len(done)) +
               struct.pack("<%dI" % len(done), *done), rid)


# the dynamic-splits job (byte 0 bit 3): its ps 0 keeps the work queue of LEASE; 3 splits,
# training.epochs 2. A task reports done splits of the epoch it last leased in and asks for
# the next; "all three done" records the one it holds and refuses the others (not its own).
LEASE_JOB = 8
ALL = [0, 1, 2]


def conversation(key, steps, variant=0):
    out = bytes([(1 if key else 0) | variant])
    for s in steps:
        out += s
    return out


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "data", "ps", "valid")
    os.makedirs(out, exist_ok=True)
    seeds = {}
    for variant, mode in ((2 | 8, "sync"), (2 | 4 | 8, "async")):
        big = [(1 << 40) + k for k in range(12)]  # more than max_rows: the oldest evicted
        seeds["dynamic-%s" % mode] = conversation(0, [
            rec(0, hello("chief", 0, 7)), rec(1, hello("worker", 1, 9)),
            rec(0, dyn_row_pull([1, 2, 3, 4], [(0, [5, 1 << 40, (1 << 64) - 1])])),
            rec(0, dyn_row_push_pull(0, 7, 1, 0, [5, 1 << 40], [5])),
            rec(1, dyn_row_push_pull(1, 9, 1, 0, [1 << 40, (1 << 63) + 3], [1 << 40])),
            rec(0, dyn_row_push_pull(0, 7, 2, 1, big, big[:3])),
            rec(1, dyn_row_push_pull(1, 9, 2, 1, big[4:], [])),
            rec(1, row_pull([], [(0, [0])])), rec(1, dyn_row_pull([], [(1, [3])])),
            rec(1, dyn_row_push_pull(1, 9, 3, 2, [5], [], width=3)),
            rec(0, dyn_row_pull([], [(0, [7, 7])])), rec(0, stats()), rec(0, checkpoint(2, 1)),
            close(1), close(0)], variant)
    for key in (0, 1):
        auth = (lambda c: [proof(c)]) if key else (lambda c: [])
        k = "key" if key else "open"
        seeds["%s-train" % k] = conversation(key, [
            rec(0, hello("chief", 0, 7)), *auth(0), rec(1, hello("worker", 1, 9)), *auth(1),
            rec(0, pull([0, 1, 2, 3])), rec(0, push(0, 7, 1, 0)), rec(1, push_pull(1, 9, 1, 0, [0, 1, 2, 3])),
            rec(0, push_pull(0, 7, 2, 1, [3, 2, 1, 0])), rec(1, push(1, 9, 2, 1)), rec(0, stats()),
            rec(0, checkpoint(2, 0)), rec(1, restore(2)), rec(0, restore(2, 0.5)), rec(0, restore(1 << 63)),
            rec(0, restore(2, 0.0)), rec(0, restore(2, float("nan"))), rec(0, restore(2, 2.0)),
            rec(0, msg(16, struct.pack("<Q", 2))),
            rec(0, msg(16, b"\x01")), rec(0, checkpoint(5, 1)), close(1), close(0)])
        seeds["%s-roles" % k] = conversation(key, [
            rec(0, pull([0])), rec(0, hello("tool", 0)), *auth(0), rec(0, stats()),
            rec(0, pull([0])), rec(0, checkpoint(1, 1)), rec(1, hello("evaluator", 0)), *auth(1),
            rec(1, pull([0, 1, 2, 3])), rec(1, push(0, 1, 1, 0)), rec(2, hello("worker", 2, 3)),
            *auth(2), rec(2, push(1, 3, 1, 0)), rec(2, push(2, 4, 1, 0)),
            rec(2, checkpoint(1, 1)), rec(2, hello("worker", 2, 3))])
        seeds["%s-ranges" % k] = conversation(key, [
            rec(0, hello("worker", 1 << 31)), rec(0, hello("worker", (1 << 32) - 1)),
            rec(0, hello("chief", 1)), rec(0, hello("worker", 0)), rec(0, hello("evaluator", 1)),
            rec(0, hello("tool", 3)), rec(0, hello("chief", 0, job=b"other")),
            rec(0, hello("chief", 0, 2)), *auth(0), rec(0, push(0, 2, 1, 0))])
    seeds["key-refused"] = conversation(1, [
        rec(0, hello("worker", 1)), rec(0, stats()), rec(1, hello("chief", 0)), proof(1, True),
        rec(1, stats()), rec(2, hello("worker", 2)), rec(2, msg(14, bytes(64))),
        rec(3, msg(14, bytes(64))), rec(3, hello("worker", 1)), proof(3), proof(3)])
    for variant, mode in ((2, "sync"), (6, "async")):
        seeds["rows-%s" % mode] = conversation(0, [
            rec(0, hello("chief", 0, 7)), rec(1, hello("worker", 1, 9)),
            rec(0, row_pull([2, 3, 4, 5], [(0, [0, 3]), (1, [1])])),
            rec(0, row_push_pull(0, 7, 1, 0, [(0, [0, 3]), (1, [])], [], [])),
            rec(1, row_push_pull(1, 9, 1, 0, [(0, [3]), (1, [0, 1, 2, 3])], [2], [(0, [3])])),
            rec(1, row_pull([], [(1, [0, 4])])), rec(1, row_pull([], [(2, [0])])),
            rec(0, push(0, 7, 2, 1)), rec(0, stats()), rec(0, checkpoint(1, 1)), close(1),
            close(0)], variant)
    for variant, mode in ((2 | 8, "sync"), (2 | 4 | 8, "async")):
        big = [(1 << 40) + k for k in range(12)]  # more than max_rows: the oldest evicted
        seeds["dynamic-%s" % mode] = conversation(0, [
            rec(0, hello("chief", 0, 7)), rec(1, hello("worker", 1, 9)),
            rec(0, dyn_row_pull([1, 2, 3, 4], [(0, [5, 1 << 40, (1 << 64) - 1])])),
            rec(0, dyn_row_push_pull(0, 7, 1, 0, [5, 1 << 40], [5])),
            rec(1, dyn_row_push_pull(1, 9, 1, 0, [1 << 40, (1 << 63) + 3], [1 << 40])),
            rec(0, dyn_row_push_pull(0, 7, 2, 1, big, big[:3])),
            rec(1, dyn_row_push_pull(1, 9, 2, 1, big[4:], [])),
            rec(1, row_pull([], [(0, [0])])), rec(1, dyn_row_pull([], [(1, [3])])),
            rec(1, dyn_row_push_pull(1, 9, 3, 2, [5], [], width=3)),
            rec(0, dyn_row_pull([], [(0, [7, 7])])), rec(0, stats()), rec(0, checkpoint(2, 1)),
            close(1), close(0)], variant)
    for key in (0, 1):
        auth = (lambda c: [proof(c)]) if key else (lambda c: [])
        k = "key" if key else "open"
        seeds["%s-seg" % k] = conversation(key, [
            rec(0, seg_attach()), rec(0, seg_pull(SHARDS)), rec(0, seg_push_pull(0, 7, 1, 0, SHARDS)),
            rec(0, hello("chief", 0, 7)), *auth(0), rec(1, hello("worker", 1, 9)), *auth(1),
            rec(0, seg_pull(SHARDS)), rec(0, seg_push_pull(0, 7, 1, 0, SHARDS)),
            rec(0, seg_attach(size=SEG_LIMIT + 4)), rec(0, seg_attach(size=16)),
            rec(0, seg_attach(size=15)), rec(0, seg_attach(0xffffffff, 0xffffffff)),
            rec(0, seg_attach(1, 0)), rec(0, seg_attach(1, 3, token=bytes(16))),
            rec(0, seg_attach()), rec(0, seg_pull(SHARDS)),
            rec(0, seg_push_pull(0, 7, 1, 0, SHARDS)), rec(0, seg_push_pull(0, 7, 1, 0, SHARDS)),
            rec(0, seg_pull(SHARDS, records=seg_records(SHARDS, False, value=SEG_LIMIT - 4))),
            rec(0, seg_push_pull(0, 7, 2, 1, SHARDS, records=seg_records(SHARDS, value=SEG_LIMIT - 64))),
            rec(0, seg_pull(SHARDS[:1], records=struct.pack("<IIQQQ", 0, 1, 1 << 40, 0, 8))),
            rec(0, seg_pull(SHARDS[:1], records=struct.pack("<IIQQQ", 9, 1, 1, 0, 8))),
            rec(0, seg_pull(SHARDS[:2], records=seg_records(SHARDS[:1], False) * 2)),
            rec(0, seg_push_pull(1, 7, 3, 1, SHARDS)), rec(0, seg_attach()),
            rec(1, seg_pull(SHARDS[:2], 1)), rec(1, seg_push_pull(1, 9, 1, 0, SHARDS[1:])),
            rec(1, seg_push_pull(0, 9, 1, 0, SHARDS)), rec(1, seg_pull(SHARDS, reserved=1)),
            rec(1, seg_pull(SHARDS[:1], records=seg_records(SHARDS[:1], dtype=2))),
            rec(1, seg_pull(SHARDS[:1], records=seg_records(SHARDS[:1], False, value=66))),
            rec(1, seg_pull(SHARDS[:1], records=seg_records(SHARDS[:1], True))),
            rec(1, seg_pull(SHARDS[:1], records=struct.pack("<IIQQQ", 0, 1, 1 << 62, 0, 8))),
            rec(1, seg_push_pull(1, 9, 1, 0, SHARDS, reserved=1)),
            rec(1, seg_push_pull(1, 9, 1, 0, SHARDS[:1], records=b"")),
            rec(0, push(0, 7, 4, 1)), rec(1, push_pull(1, 9, 1, 0, [0, 1, 2, 3])),
            rec(2, hello("tool", 0)), *auth(2), rec(2, seg_attach()), rec(2, seg_pull(SHARDS)),
            rec(3, hello("evaluator", 0)), *auth(3), rec(3, seg_attach()),
            rec(3, seg_push_pull(0, 1, 1, 0, SHARDS)), close(1), rec(1, seg_attach()),
            close(0)])
    seeds["key-seg-unproved"] = conversation(1, [
        rec(0, hello("worker", 1)), rec(0, seg_attach()), rec(0, seg_pull(SHARDS)),
        rec(1, hello("chief", 0)), rec(1, seg_push_pull(0, 1, 1, 0, SHARDS))])
    seeds["rows-seg"] = conversation(0, [
        rec(0, hello("chief", 0, 7)), rec(0, seg_attach(size=1 << 20)), rec(0, seg_attach()),
        rec(0, seg_pull([(0, 8), (2, 3)])), rec(0, seg_pull([(2, 3), (3, 3)])), rec(0, seg_push_pull(0, 7, 1, 0, [(0, 8), (1, 8)] + DENSE)),
        rec(0, row_pull([2, 3, 4, 5], [(0, [0, 3])])), close(0)], 2)
    for variant, mode in ((2 | 8, "sync"), (2 | 4 | 8, "async")):
        big = [(1 << 40) + k for k in range(12)]  # more than max_rows: the oldest evicted
        seeds["dynamic-%s" % mode] = conversation(0, [
            rec(0, hello("chief", 0, 7)), rec(1, hello("worker", 1, 9)),
            rec(0, dyn_row_pull([1, 2, 3, 4], [(0, [5, 1 << 40, (1 << 64) - 1])])),
            rec(0, dyn_row_push_pull(0, 7, 1, 0, [5, 1 << 40], [5])),
            rec(1, dyn_row_push_pull(1, 9, 1, 0, [1 << 40, (1 << 63) + 3], [1 << 40])),
            rec(0, dyn_row_push_pull(0, 7, 2, 1, big, big[:3])),
            rec(1, dyn_row_push_pull(1, 9, 2, 1, big[4:], [])),
            rec(1, row_pull([], [(0, [0])])), rec(1, dyn_row_pull([], [(1, [3])])),
            rec(1, dyn_row_push_pull(1, 9, 3, 2, [5], [], width=3)),
            rec(0, dyn_row_pull([], [(0, [7, 7])])), rec(0, stats()), rec(0, checkpoint(2, 1)),
            close(1), close(0)], variant)
    for key in (0, 1):
        auth = (lambda c: [proof(c)]) if key else (lambda c: [])
        k = "key" if key else "open"
        seeds["%s-lease" % k] = conversation(key, [
            rec(0, lease(0, 3, 1, [])), rec(0, hello("chief", 0, 7)), *auth(0),
            rec(1, hello("worker", 1, 9)), *auth(1), rec(2, hello("evaluator", 0)), *auth(2),
            rec(2, lease(0, 3, 1, [])), rec(1, lease(0, 3, 1, [])), rec(0, lease(0, 3, 1, [])),
            rec(0, lease(0, 4, 1, [])), rec(0, lease(0, 3, 2, [])), rec(0, lease(0, 3, 1, [3])),
            rec(0, lease(0, 0, 1, [])), rec(0, msg(23, struct.pack("<QIII", 0, 3, 1, 2) + bytes(4))),
            rec(0, lease(0, 3, 1, ALL)), rec(0, lease(5, 3, 0, ALL)), close(1),
            rec(0, lease(0, 3, 1, ALL)), rec(0, lease(0, 3, 1, ALL)), rec(0, lease(0, 3, 1, ALL)),
            rec(3, hello("worker", 1, 10)), *auth(3), rec(3, lease(0, 3, 1, [])),
            rec(1, hello("worker", 1, 11)), *auth(1), rec(1, lease(1, 3, 1, [])),
            rec(0, lease(1, 3, 1, ALL)), rec(0, lease(1, 3, 1, ALL)), rec(1, lease(1, 3, 1, ALL)),
            rec(0, lease(1, 3, 1, ALL)), rec(0, lease(1, 3, 1, ALL)), rec(0, lease(2, 3, 1, ALL)),
            rec(0, lease(1 << 63, 3, 0, [])), rec(0, stats()), close(0), close(1), close(3)],
            LEASE_JOB)
    seeds["open-lease-static"] = conversation(0, [
        rec(0, hello("chief", 0, 7)), rec(0, lease(0, 3, 1, [])), rec(0, lease(0, 3, 0, ALL)),
        close(0)])
    for name, data in seeds.items():
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds), out))


main()
