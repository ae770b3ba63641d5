#!/usr/bin/env python3
"""serve_client.py - a client of `psflow serve` for tests/integration/test_serve.sh.

  serve_client.py evaluate ADDR MODEL idx IMAGES.gz LABELS.gz
  serve_client.py evaluate ADDR MODEL libsvm FILE FEATURE
  serve_client.py evaluate ADDR MODEL lines FILE    (psflow data examples' output)
      sends the test set in requests of 100 instances (and checks that the columnar and
      named forms answer the same), computes the mean cross-entropy, the accuracy and, for
      two classes, the AUC from the predictions, prints them as JSON
  serve_client.py load ADDR MODEL STOPFILE RATE OUT.json [BODY]
      batch-1 requests (BODY, else one Fashion-MNIST-shaped instance) at RATE per second (open loop, several connections) until STOPFILE
      exists; writes the count of answers by status, the versions that answered and failures
  serve_client.py malformed ADDR MODEL N
      N malformed requests of many kinds; each must get 400/413/415 problem+json whose
      detail names the field

The token comes from PSFLOW_TOKEN. Inputs are built exactly as psflow's readers build them
(IDX pixels as float32(p) * float32(1/255), libsvm ids and weights in file order).
"""
import gzip
import http.client
import json
import math
import os
import random
import socket
import struct
import sys
import threading
import time

TOKEN = os.environ.get("PSFLOW_TOKEN", "")


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def connect(addr):
    host, port = addr.rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=30)


def post(conn, model, body, ctype="application/json", path=None):
    headers = {"Content-Type": ctype}
    if TOKEN:
        headers["Authorization"] = "Bearer " + TOKEN
    conn.request("POST", path or "/v1/models/%s:predict" % model, body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    return r.status, r.getheader("Content-Type", ""), r.getheader("PSFlow-Model-Version"), data


def idx_examples(images, labels):
    img = gzip.open(images).read()
    lab = gzip.open(labels).read()
    n, rows, cols = struct.unpack(">III", img[4:16])
    scale = f32(1.0 / 255.0)
    table = [f32(p * scale) for p in range(256)]
    xs = []
    for i in range(n):
        px = img[16 + i * rows * cols:16 + (i + 1) * rows * cols]
        xs.append({"x": [table[p] for p in px]})
    return xs, list(lab[8:8 + n])


def libsvm_examples(path, feature):
    xs, ys = [], []
    opener = gzip.open if path.endswith(".gz") else open
    for line in opener(path, "rt"):
        parts = line.split()
        if not parts:
            continue
        ys.append(int(float(parts[0])))
        ids, weights = [], []
        for item in parts[1:]:
            i, w = item.split(":")
            ids.append(int(i))
            weights.append(f32(float(w)))
        xs.append({feature: {"ids": ids, "weights": weights}})
    return xs, ys


def line_examples(path):
    xs, ys = [], []
    for line in open(path):
        d = json.loads(line)
        xs.append(d["instance"])
        ys.append(int(d["label"]))
    return xs, ys


def auc(scores, labels):
    pairs = sorted(zip(scores, labels))
    pos = sum(labels)
    neg = len(labels) - pos
    rank_sum, i = 0.0, 0
    while i < len(pairs):
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        avg = (i + j + 1) / 2.0
        rank_sum += avg * sum(l for _, l in pairs[i:j])
        i = j
    return (rank_sum - pos * (pos + 1) / 2.0) / (pos * neg)


def evaluate(addr, model, fmt, *args):
    readers = {"idx": idx_examples, "libsvm": libsvm_examples, "lines": line_examples}
    xs, ys = readers[fmt](*args)
    conn = connect(addr)
    preds, versions = [], set()
    for start in range(0, len(xs), 100):
        chunk = xs[start:start + 100]
        status, ctype, version, data = post(conn, model, json.dumps({"instances": chunk}))
        if status != 200:
            sys.exit("HTTP %d: %s" % (status, data[:300]))
        answer = json.loads(data)
        assert answer["model_version"] == version, (answer["model_version"], version)
        versions.add(version)
        preds.extend(answer["predictions"])
        if start == 0 and isinstance(chunk[0], dict):  # the columnar form, by name
            names = list(chunk[0])
            cols = {k: [x[k] for x in chunk] for k in names}
            s2, _, _, d2 = post(conn, model, json.dumps({"inputs": cols}))
            assert s2 == 200, d2[:300]
            assert json.loads(d2)["outputs"] == answer["predictions"], "columnar form differs"
    loss = -sum(math.log(max(p[y], 1e-45)) for p, y in zip(preds, ys)) / len(ys)
    correct = sum(1 for p, y in zip(preds, ys) if max(range(len(p)), key=p.__getitem__) == y)
    out = {"examples": len(ys), "loss": loss, "accuracy": correct / len(ys),
           "versions": sorted(versions)}
    if len(preds[0]) == 2:
        out["auc"] = auc([p[1] for p in preds], ys)
    print(json.dumps(out))


def load(addr, model, stop_file, rate, out_path, body=None):
    rate = float(rate)
    n_threads = 8
    body = body or json.dumps({"instances": [[0.5] * 784]})
    results = {"by_status": {}, "versions": [[] for _ in range(8)], "errors": [], "latencies": []}
    lock = threading.Lock()
    t0 = time.monotonic() + 0.2
    sent = [0] * n_threads

    def worker(k):
        conn = connect(addr)
        i = k
        while not os.path.exists(stop_file):
            due = t0 + i / rate
            i += n_threads
            sent[k] += 1
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            start = time.monotonic()
            try:
                status, _, version, data = post(conn, model, body)
            except Exception as e:  # a dropped connection is a failed request
                with lock:
                    results["errors"].append(repr(e))
                conn = connect(addr)
                continue
            with lock:
                results["by_status"][str(status)] = results["by_status"].get(str(status), 0) + 1
                results["latencies"].append(time.monotonic() - start)
                if status == 200:  # per connection: its requests go one after the other
                    results["versions"][k].append(int(version))
                elif len(results["errors"]) < 10:
                    results["errors"].append(data[:200].decode("utf-8", "replace"))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat = sorted(results.pop("latencies"))
    results["requests"] = sum(sent)
    results["p50_ms"] = 1000 * lat[len(lat) // 2] if lat else None
    results["p99_ms"] = 1000 * lat[int(len(lat) * 0.99)] if lat else None
    per_conn = results.pop("versions")
    results["distinct_versions"] = sorted({v for vs in per_conn for v in vs})
    # a connection's next request is never answered by an older version than its last one
    results["versions_in_order"] = all(a <= b for vs in per_conn for a, b in zip(vs, vs[1:]))
    json.dump(results, open(out_path, "w"))


def malformed(addr, model, n):
    n = int(n)
    good = [0.0] * 784
    cases = [  # (body, content type, want status, want pointer in detail or None)
        (b"{", "application/json", 400, None),
        (b"[1,2]", "application/json", 400, None),
        (b'{"instances": [[1,2,3]]}', "application/json", 400, "/instances/0"),
        (json.dumps({"instances": [good[:783] + ["a"]]}).encode(), "application/json", 400,
         "/instances/0/783"),
        (json.dumps({"instances": [{"x": good[:10]}]}).encode(), "application/json", 400,
         "/instances/0/x"),
        (json.dumps({"instances": [{"y": good}]}).encode(), "application/json", 400,
         "/instances/0/y"),
        (json.dumps({"instances": [{}]}).encode(), "application/json", 400, "/instances/0/x"),
        (json.dumps({"instances": []}).encode(), "application/json", 400, "/instances"),
        (json.dumps({"instances": "x"}).encode(), "application/json", 400, "/instances"),
        (json.dumps({}).encode(), "application/json", 400, "/instances"),
        (json.dumps({"instances": [good], "inputs": [good]}).encode(), "application/json", 400,
         "/inputs"),
        (json.dumps({"instances": [good], "extra": 1}).encode(), "application/json", 400,
         "/extra"),
        (json.dumps({"instances": [good], "signature_name": "other"}).encode(),
         "application/json", 400, "/signature_name"),
        (b'{"instances": [[' + b"1e999," * 783 + b"1]]}", "application/json", 400, None),
        (json.dumps({"instances": [[1e300] * 784]}).encode(), "application/json", 400,
         "/instances/0/0"),
        (b'{"instances": [[NaN]]}', "application/json", 400, None),
        (json.dumps({"instances": [[0] * 784] * 1001}).encode(), "application/json", 413,
         "/instances"),
        (json.dumps({"instances": [good]}).encode(), "text/plain", 415, None),
        (json.dumps({"instances": [good]}).encode(), "application/x-www-form-urlencoded", 415,
         None),
        (json.dumps({"inputs": {"x": [good, good[:3]]}}).encode(), "application/json", 400,
         "/inputs/x/1"),
        (json.dumps({"instances": [[None] * 784]}).encode(), "application/json", 400,
         "/instances/0/0"),
        (b"\xff\xfe{}", "application/json", 400, None),
        # many tiny values: refused before a tree of them is built
        (b'{"instances": [' + b"{}," * 2000000 + b"{}]}", "application/json", 413, "/instances"),
    ]
    conn = connect(addr)
    seen = {}
    for i in range(n):
        body, ctype, want, pointer = cases[i % len(cases)]
        status, rtype, _, data = post(conn, model, body, ctype)
        if status != want:
            sys.exit("case %d: HTTP %d, expected %d: %s" % (i % len(cases), status, want, data[:300]))
        if not rtype.startswith("application/problem+json"):
            sys.exit("case %d: Content-Type %s" % (i % len(cases), rtype))
        problem = json.loads(data)
        assert problem["status"] == want, problem
        if pointer is not None and not problem["detail"].startswith(pointer + ":"):
            sys.exit("case %d: detail %r does not name %s" % (i % len(cases), problem["detail"],
                                                             pointer))
        seen[want] = seen.get(want, 0) + 1
    # A body over --max-body is refused from its Content-Length alone: the answer comes
    # before any of the body is sent (and the server closes the connection).
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(("POST /v1/models/%s:predict HTTP/1.1\r\nHost: %s\r\nContent-Type: "
                  "application/json\r\nContent-Length: %d\r\nAuthorization: Bearer %s\r\n\r\n"
                  % (model, addr, 18 << 20, TOKEN)).encode())
    head = sock.recv(65536).decode("latin-1")
    sock.close()
    assert head.startswith("HTTP/1.1 413 ") and "application/problem+json" in head, head[:300]
    seen[413] = seen.get(413, 0) + 1
    print(json.dumps({"requests": n + 1, "by_status": seen}))


if __name__ == "__main__":
    {"evaluate": evaluate, "load": load, "malformed": malformed}[sys.argv[1]](*sys.argv[2:])
