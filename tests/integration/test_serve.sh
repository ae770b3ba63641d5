#!/usr/bin/env bash
# timeout: 600
# psflow serve on real checkpoints (docs/serving.md): a static cluster trains the
# Fashion-MNIST MLP and writes checkpoints; psflow evaluator evaluates the final one; psflow
# serve answers the whole test set with predictions whose cross-entropy and accuracy equal
# the evaluator's (the client computes them from the answers); an embedding model (libsvm
# ids) likewise. Then, under a steady load of batch-1 requests: ten newer checkpoints are
# switched in without one failed request, a checkpoint with a flipped byte is refused while
# the old version keeps answering, 1,000 malformed requests get problem+json naming the
# field, and the server's memory stays bounded. The token is required.
source "$(dirname "$0")/lib.sh"

FM=/usr/share/datasets/fashion-mnist
STEPS=600 EVERY=200
if sanitized_build; then STEPS=300 EVERY=100; fi
export PSFLOW_TOKEN=serve-test-token
CLIENT="$PSFLOW_SRC/tests/integration/serve_client.py"

python3 - "$PSFLOW_SRC/examples/fashion-mnist-mlp.json" "$STEPS" "$EVERY" >job.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "fmnist-serve"
d["replicas"] = {"ps": 1, "worker": 1}
d["model"]["hidden"] = [64]
d["training"].update(max_steps=int(sys.argv[2]), eval_every_steps=0)
d["checkpoint"] = {"every_steps": int(sys.argv[3]), "keep": 10}
d.pop("placement", None)
json.dump(d, sys.stdout)
PY
run_static_cluster job.json 1 1 "$WORK/ckpt" >/dev/null
pass "trained $STEPS steps with a checkpoint every $EVERY"

# evaluate_final JOB CKPT_ROOT: the evaluator's --output json result for the final checkpoint
evaluate_final() {
  local port
  port=$(free_ports 1)
  TF_CONFIG=$(printf '{"cluster":{"evaluator":["127.0.0.1:%s"],"ps":["127.0.0.1:1"],"worker":["127.0.0.1:1"]},"task":{"type":"evaluator","index":0}}' "$port") \
    "$PSFLOW_BIN" evaluator --job "$1" --checkpoint-dir "$2" --idle-timeout 30 --output json \
    2>"$WORK/evaluator.log"
}
evaluate_final job.json "$WORK/ckpt" >eval.json || fail "the evaluator: $(cat "$WORK/evaluator.log")"

# start_serve OPTIONS...: psflow serve on a free port; ADDR, SERVE_PID
start_serve() {
  ADDR=127.0.0.1:$(free_ports 1)
  "$PSFLOW_BIN" serve --listen "$ADDR" "$@" 2>>"$WORK/serve.log" &
  SERVE_PID=$!
  for _ in $(seq 100); do
    curl -sf "http://$ADDR/healthz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  fail "psflow serve did not become healthy: $(tail -5 "$WORK/serve.log")"
}
stop_serve() {
  kill -TERM "$SERVE_PID"
  wait_pid "$SERVE_PID" 20 || fail "psflow serve exited $? on SIGTERM"
}

start_serve --job job.json --checkpoint-dir "$WORK/ckpt" --max-body 8M --max-connections 64
AUTH=(-H "Authorization: Bearer $PSFLOW_TOKEN")
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/v1/models/fmnist-serve")
[ "$code" = 401 ] || fail "no token: HTTP $code, expected 401"
code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong' \
  -H 'Content-Type: application/json' -d '{"instances":[[0]]}' "http://$ADDR/v1/models/fmnist-serve:predict")
[ "$code" = 401 ] || fail "a wrong token: HTTP $code, expected 401"
curl -sf "${AUTH[@]}" "http://$ADDR/v1/models/fmnist-serve" >status.json
python3 - status.json "$STEPS" <<'PY' || fail "version status: $(cat status.json)"
import json, sys
s = json.load(open(sys.argv[1]))["model_version_status"][0]
assert s["version"] == sys.argv[2] and s["state"] == "AVAILABLE", s
PY
pass "the token is required (401 without it or with a wrong one); version $STEPS AVAILABLE"

python3 "$CLIENT" evaluate "$ADDR" fmnist-serve idx "$FM/t10k-images-idx3-ubyte.gz" \
  "$FM/t10k-labels-idx1-ubyte.gz" >served.json || fail "serving the test set"
python3 - eval.json served.json "$STEPS" <<'PY' || fail "served predictions differ from the evaluation"
import json, sys
e, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert e["step"] == int(sys.argv[3]) and s["versions"] == [sys.argv[3]], (e, s)
assert s["examples"] == 10000, s
dl, da = abs(e["eval_loss"] - s["loss"]), abs(e["eval_accuracy"] - s["accuracy"])
print("MLP step %d: evaluator loss %.9f accuracy %.4f; served loss %.9f accuracy %.4f; |dloss| %.2g"
      % (e["step"], e["eval_loss"], e["eval_accuracy"], s["loss"], s["accuracy"], dl))
assert dl <= 1e-6 and da == 0, (dl, da)
PY
pass "10,000 served predictions give the evaluator's loss (within 1e-6) and accuracy"

# --- malformed requests: 400/413/415 problem+json naming the field; memory bounded ------------
rss() { awk '/VmRSS/ {print $2}' "/proc/$SERVE_PID/status"; }
python3 "$CLIENT" malformed "$ADDR" fmnist-serve 200 >/dev/null || fail "malformed requests (warm-up)"
before=$(rss)
python3 "$CLIENT" malformed "$ADDR" fmnist-serve 1000 >malformed.json || fail "malformed requests"
after=$(rss)
echo "malformed: $(cat malformed.json); VmRSS $before -> $after KiB"
[ $((after - before)) -lt 65536 ] || fail "VmRSS grew by $((after - before)) KiB over 1,000 malformed requests"
# The model is unchanged: the same version answers.
curl -sf "${AUTH[@]}" -H 'Content-Type: application/json' \
  -d "{\"instances\": [$(python3 -c 'print([0.0] * 784)')]}" \
  "http://$ADDR/v1/models/fmnist-serve:predict" >after.json || fail "predict after malformed requests"
python3 -c 'import json, sys; a = json.load(open(sys.argv[1])); assert a["model_version"] == sys.argv[2], a' \
  after.json "$STEPS" || fail "after malformed requests: $(cat after.json)"
grep -q 'refused POST .*: 415' "$WORK/serve.log" || fail "refusals are not logged"
pass "1,000 malformed requests refused with problem+json naming the field; still serving; VmRSS +$((after - before)) KiB"

# --- slow clients: 200 connections trickling their headers cannot keep others out -----------
python3 - "$ADDR" <<'PY' || fail "slow clients held the server"
import http.client, socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
socks = []
for i in range(200):
    try:
        s = socket.create_connection((host, int(port)), timeout=5)
        s.sendall(b"POST /v1/models/fmnist-serve:predict HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    except OSError:
        pass
took = []
for _ in range(3):
    for s in socks:  # every one trickles a byte now and then
        try:
            s.sendall(b"X")
        except OSError:
            pass
    t0 = time.monotonic()
    c = http.client.HTTPConnection(host, int(port), timeout=20)
    c.request("GET", "/healthz")
    r = c.getresponse()
    r.read()
    assert r.status == 200, r.status
    took.append(time.monotonic() - t0)
    c.close()
print("200 trickling connections (64 slots): /healthz answered 3 times, in %s s"
      % ", ".join("%.2f" % t for t in took))
PY
stop_serve

# --- hot reload under load: ten newer versions, no failed request; a flipped byte refused -----
LIVE="$WORK/live"
mkdir -p "$LIVE/fmnist-serve"
cp -r "$WORK/ckpt/fmnist-serve/step-$STEPS" "$LIVE/fmnist-serve/"
# new_version STEP [flip]: a copy of the final checkpoint as step STEP (its manifest renamed),
# written as the chief writes one: the files, then the manifest by rename.
new_version() {
  python3 - "$WORK/ckpt/fmnist-serve/step-$STEPS" "$LIVE/fmnist-serve" "$1" "${2:-}" <<'PY'
import json, os, shutil, sys
src, root, step, flip = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "flip"
dst = os.path.join(root, "step-%d" % step)
os.makedirs(dst)
shutil.copy(os.path.join(src, "ps-0.safetensors"), dst)
if flip:
    p = os.path.join(dst, "ps-0.safetensors")
    data = bytearray(open(p, "rb").read())
    data[len(data) - 100] ^= 0x10
    open(p, "wb").write(bytes(data))
m = json.load(open(os.path.join(src, "manifest.json")))
m["step"] = step
open(os.path.join(dst, "manifest.json.tmp"), "w").write(json.dumps(m))
os.rename(os.path.join(dst, "manifest.json.tmp"), os.path.join(dst, "manifest.json"))
PY
}
start_serve --job job.json --checkpoint-dir "$LIVE"
RATE=200
sanitized_build && RATE=100
python3 "$CLIENT" load "$ADDR" fmnist-serve "$WORK/load.stop" "$RATE" load.json &
LOAD_PID=$!
sleep 1.5
for k in $(seq 1 10); do
  new_version $((STEPS + k))
  sleep 1.1
done
new_version $((STEPS + 11)) flip
# The load goes on until the last good version served for a while and the flipped one was
# looked at (however slow the machine).
wait_until 60 "step $((STEPS + 10)) served" grep -q "serving step $((STEPS + 10)) " "$WORK/serve.log"
wait_until 60 "step $((STEPS + 11)) refused" grep -q "refusing checkpoint step-$((STEPS + 11)) " "$WORK/serve.log"
sleep 1
touch "$WORK/load.stop"
wait_pid "$LOAD_PID" 60 || fail "the load generator failed"
python3 - load.json "$STEPS" <<'PY' || fail "requests failed during reloads: $(cat load.json)"
import json, sys
r = json.load(open(sys.argv[1]))
base = int(sys.argv[2])
print("load: %d requests, by status %s, p50 %.2f ms, p99 %.2f ms, versions %s"
      % (r["requests"], r["by_status"], r["p50_ms"], r["p99_ms"], r["distinct_versions"]))
assert r["by_status"] == {"200": r["requests"]} and not r["errors"], r
assert r["versions_in_order"], "a connection got an older version than its previous answer"
assert r["distinct_versions"][-1] == base + 10, r["distinct_versions"]
assert len(r["distinct_versions"]) >= 8, r["distinct_versions"]
PY
grep -qi "refusing checkpoint step-$((STEPS + 11)) .*crc" "$WORK/serve.log" ||
  fail "the flipped byte was not refused: $(grep refusing "$WORK/serve.log")"
version=$(curl -sf "${AUTH[@]}" "http://$ADDR/v1/models/fmnist-serve" | python3 -c \
  'import json,sys; print(json.load(sys.stdin)["model_version_status"][0]["version"])')
[ "$version" = $((STEPS + 10)) ] || fail "serving version $version after the flipped byte"
curl -sf "${AUTH[@]}" "http://$ADDR/metrics" >metrics.txt
grep -q '^psflow_serve_refused_checkpoints_total 1$' metrics.txt || fail "metrics: $(cat metrics.txt)"
pass "ten reloads under $RATE requests/s without a failed request; the flipped byte refused: $(grep "refusing checkpoint" "$WORK/serve.log" | head -1)"
stop_serve

# --- an embedding model (libsvm ids, two classes) ---------------------------------------------
python3 - <<'PY'
import random
rng = random.Random(7)
def write(path, n):
    with open(path, "w") as f:
        for _ in range(n):
            ids = sorted(rng.sample(range(40), rng.randint(1, 6)))
            y = 1 if sum(i % 7 for i in ids) / len(ids) > 3 else 0
            f.write("%d %s\n" % (y, " ".join("%d:%g" % (i, rng.choice([1, 0.5, 2])) for i in ids)))
write("train.svm", 4000)
write("test.svm", 1000)
PY
cat >emb.json <<'EOF'
{"name": "tokens-serve", "replicas": {"ps": 1, "worker": 1},
 "model": {"type": "mlp", "hidden": [16], "outputs": 2, "activation": "relu",
           "embeddings": [{"name": "tokens", "vocab": 40, "dim": 8, "combiner": "mean", "max_ids": 6}]},
 "data": {"format": "libsvm", "index_base": 0, "train": ["train.svm"], "test": ["test.svm"]},
 "optimizer": {"type": "adagrad", "learning_rate": 0.1},
 "training": {"mode": "async", "batch_size": 50, "max_steps": 200, "seed": 3, "eval_every_steps": 0},
 "checkpoint": {"every_steps": 100, "keep": 3}}
EOF
run_static_cluster emb.json 1 1 "$WORK/ckpt" >/dev/null
evaluate_final emb.json "$WORK/ckpt" >eval-emb.json || fail "the evaluator (embeddings): $(cat "$WORK/evaluator.log")"
# No --job: the model is the spec the checkpoint records.
start_serve --model tokens-serve --checkpoint-dir "$WORK/ckpt"
python3 "$CLIENT" evaluate "$ADDR" tokens-serve libsvm test.svm tokens >served-emb.json ||
  fail "serving the embedding model"
python3 - eval-emb.json served-emb.json <<'PY' || fail "served embedding predictions differ"
import json, sys
e, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
dl = abs(e["eval_loss"] - s["loss"])
print("embeddings step %d: evaluator loss %.9f accuracy %.4f auc %.6f; served loss %.9f accuracy %.4f auc %.6f"
      % (e["step"], e["eval_loss"], e["eval_accuracy"], e.get("eval_auc", float("nan")),
         s["loss"], s["accuracy"], s["auc"]))
assert dl <= 1e-6 and e["eval_accuracy"] == s["accuracy"], dl
assert abs(e["eval_auc"] - s["auc"]) <= 1e-6, (e["eval_auc"], s["auc"])
PY
code=$(curl -s -o bad.json -w '%{http_code}' "${AUTH[@]}" -H 'Content-Type: application/json' \
  -d '{"instances":[{"tokens":[3, 40]}]}' "http://$ADDR/v1/models/tokens-serve:predict")
[ "$code" = 400 ] && grep -q '/instances/0/tokens/1' bad.json || fail "an id past the table: $code $(cat bad.json)"
stop_serve
pass "an embedding model, its spec read from the checkpoint (--model): served predictions give the evaluator's loss, accuracy and AUC; an id past the table is 400 naming it"

# --- the CTR model: DLRM-style on generated Criteo-layout rows, inputs from psflow data examples --
"$PSFLOW_BIN" data gen criteo --rows 6000 --files 2 --seed 5 --out "$WORK/criteo" >/dev/null ||
  fail "psflow data gen criteo"
python3 - "$PSFLOW_SRC/examples/criteo-dlrm.json" "$WORK/criteo" >dlrm.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "dlrm-serve"
d["replicas"] = {"ps": 1, "worker": 1}
for e in d["model"]["embeddings"]:
    e["vocab"] = min(e["vocab"], 3000)
d["data"].update(streaming=False, train=[sys.argv[2] + "/part-00000.tsv"],
                 test=[sys.argv[2] + "/part-00001.tsv"])
d["training"].update(mode="async", batch_size=100, max_steps=60, eval_every_steps=0)
d["checkpoint"] = {"every_steps": 30, "keep": 2}
d.pop("placement", None)
json.dump(d, sys.stdout)
PY
run_static_cluster dlrm.json 1 1 "$WORK/ckpt" >/dev/null
evaluate_final dlrm.json "$WORK/ckpt" >eval-dlrm.json || fail "the evaluator (dlrm): $(cat "$WORK/evaluator.log")"
"$PSFLOW_BIN" data examples dlrm.json >dlrm-test.jsonl || fail "psflow data examples"
[ "$(wc -l <dlrm-test.jsonl)" = 3000 ] || fail "psflow data examples printed $(wc -l <dlrm-test.jsonl) lines, not 3000"
start_serve --model dlrm-serve --checkpoint-dir "$WORK/ckpt"
python3 "$CLIENT" evaluate "$ADDR" dlrm-serve lines dlrm-test.jsonl >served-dlrm.json ||
  fail "serving the DLRM model"
python3 - eval-dlrm.json served-dlrm.json <<'PY' || fail "served DLRM predictions differ"
import json, sys
e, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
dl = abs(e["eval_loss"] - s["loss"])
print("dlrm step %d: evaluator loss %.9f auc %.6f; served loss %.9f auc %.6f"
      % (e["step"], e["eval_loss"], e["eval_auc"], s["loss"], s["auc"]))
assert dl <= 1e-6 and abs(e["eval_auc"] - s["auc"]) <= 1e-6 and e["eval_accuracy"] == s["accuracy"], dl
PY
stop_serve
pass "the DLRM-style CTR model on Criteo-layout rows (psflow data examples): served loss, accuracy and AUC equal the evaluator's"

# --- refusals at start ---------------------------------------------------------------------------
expect_exit 69 "$PSFLOW_BIN" serve --model nosuchjob --checkpoint-dir "$WORK/ckpt" --wait-first 1 --listen 127.0.0.1:1
grep -q 'no verified checkpoint of nosuchjob appeared' "$WORK/stderr" || fail "--model without checkpoints: $(cat "$WORK/stderr")"
expect_exit 64 "$PSFLOW_BIN" serve --model ../etc --listen 127.0.0.1:1
expect_exit 64 "$PSFLOW_BIN" serve --listen 127.0.0.1:1
expect_exit 64 env -u PSFLOW_TOKEN "$PSFLOW_BIN" serve --job job.json --listen 0.0.0.0:1
grep -q 'refusing to serve a model without a token' "$WORK/stderr" || fail "open serve: $(cat "$WORK/stderr")"
pass "no token on a non-loopback address: exit 64, '$(cut -c1-90 "$WORK/stderr")...'"
