#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 600
# psflow serve --ps (docs/serving.md "Tables bigger than one server"): an embedding model
# trained on 2 ps is served from 3 read-only ps tasks restored from its checkpoint
# (repartitioned), each pass pulling its rows over the authenticated data plane as a reader:
#  1. the served predictions give the evaluator's loss, accuracy and AUC (<= 1e-6);
#  2. under a steady load, five newer checkpoints are switched in on every ps without a failed
#     request; one with a flipped byte is refused by the ps tasks and the old version keeps
#     answering;
#  3. a read-only ps killed and restarted on a newer checkpoint is put back on the serving step
#     before the next answer; with a ps gone during a switch the server answers 503 (no mixed
#     versions), does not refuse the checkpoint, and switches once the ps is back;
#  4. a read-only ps refuses writes from every role (a raw client: PUSH and CHECKPOINT with the
#     chief's key, a reader's PUSH; a reader index the job lacks), a training
#     ps refuses a reader's RESTORE, and a read-only ps without a checkpoint does not start.
source "$(dirname "$0")/lib.sh"

export PSFLOW_TOKEN=serve-ps-test-token
CLIENT="$PSFLOW_SRC/tests/integration/serve_client.py"
export PYTHONPATH="$PSFLOW_SRC/tests/integration${PYTHONPATH:+:$PYTHONPATH}"

python3 - <<'PY'
import random
rng = random.Random(11)
def write(path, n):
    with open(path, "w") as f:
        for _ in range(n):
            ids = sorted(rng.sample(range(3000), rng.randint(1, 6)))
            y = 1 if sum(i % 7 for i in ids) / len(ids) > 3 else 0
            f.write("%d %s\n" % (y, " ".join("%d:%g" % (i, rng.choice([1, 0.5, 2])) for i in ids)))
write("train.svm", 6000)
write("test.svm", 1000)
PY
cat >emb.json <<'EOF'
{"name": "tokens-ps", "replicas": {"ps": 2, "worker": 1},
 "model": {"type": "mlp", "hidden": [16], "outputs": 2, "activation": "relu",
           "embeddings": [{"name": "tokens", "vocab": 3000, "dim": 8, "combiner": "mean", "max_ids": 6}]},
 "data": {"format": "libsvm", "index_base": 0, "train": ["train.svm"], "test": ["test.svm"]},
 "optimizer": {"type": "adagrad", "learning_rate": 0.1},
 "training": {"mode": "sync", "batch_size": 50, "max_steps": 200, "seed": 3, "eval_every_steps": 0},
 "checkpoint": {"every_steps": 100, "keep": 3}}
EOF
run_static_cluster emb.json 1 2 "$WORK/ckpt" >/dev/null
FINAL=$(ls "$WORK/ckpt/tokens-ps" | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -1)
[ -n "$FINAL" ] || fail "no checkpoint written"
port=$(free_ports 1)
TF_CONFIG=$(printf '{"cluster":{"evaluator":["127.0.0.1:%s"],"ps":["127.0.0.1:1","127.0.0.1:2"],"worker":["127.0.0.1:1"]},"task":{"type":"evaluator","index":0}}' "$port") \
  "$PSFLOW_BIN" evaluator --job emb.json --checkpoint-dir "$WORK/ckpt" --idle-timeout 30 \
  --output json >eval.json 2>"$WORK/evaluator.log" || fail "the evaluator: $(cat "$WORK/evaluator.log")"
pass "trained on 2 ps to step $FINAL; the evaluator evaluated it"

# The checkpoints the server sees: the final one, newer copies appear later.
LIVE="$WORK/live"
mkdir -p "$LIVE/tokens-ps"
cp -r "$WORK/ckpt/tokens-ps/step-$FINAL" "$LIVE/tokens-ps/"

# --- 3 read-only ps tasks and the server ----------------------------------------------------
read -r -a RO <<<"$(free_ports 3)"
RO_LIST=$(IFS=,; echo "${RO[*]}")
RO_ADDRS=127.0.0.1:${RO[0]},127.0.0.1:${RO[1]},127.0.0.1:${RO[2]}
RO_PIDS=()
for i in 0 1 2; do
  TF_CONFIG=$(tf_config ps "$i" "$RO_LIST" "") \
    "$PSFLOW_BIN" ps --read-only --job emb.json --checkpoint-dir "$LIVE" 2>"$WORK/ro$i.log" &
  RO_PIDS+=($!)
done
for i in 0 1 2; do
  wait_until 30 "read-only ps $i listens" python3 -c "import rawps; rawps.Conn(${RO[$i]})"
done
grep -q "repartitioned" "$WORK/ro0.log" && grep -q "read-only: serving these values" "$WORK/ro0.log" ||
  fail "read-only ps 0: $(cat "$WORK/ro0.log")"

ADDR=127.0.0.1:$(free_ports 1)
"$PSFLOW_BIN" serve --listen "$ADDR" --model tokens-ps --checkpoint-dir "$LIVE" --ps "$RO_ADDRS" \
  2>>"$WORK/serve.log" &
SERVE_PID=$!
wait_until 30 "psflow serve is healthy" curl -sf "http://$ADDR/healthz"
grep -q "values on 3 read-only ps tasks" "$WORK/serve.log" || fail "serve: $(cat "$WORK/serve.log")"
grep -q "serving step $FINAL of .* from 3 read-only ps tasks" "$WORK/serve.log" ||
  fail "serve: $(cat "$WORK/serve.log")"

python3 "$CLIENT" evaluate "$ADDR" tokens-ps libsvm test.svm tokens >served.json ||
  fail "serving from the ps tasks: $(tail -5 "$WORK/serve.log")"
python3 - eval.json served.json <<'PY' || fail "served predictions differ from the evaluator's"
import json, sys
e, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print("step %d: evaluator loss %.9f accuracy %.4f auc %.6f; served from 3 read-only ps: loss %.9f "
      "accuracy %.4f auc %.6f" % (e["step"], e["eval_loss"], e["eval_accuracy"], e["eval_auc"],
                                  s["loss"], s["accuracy"], s["auc"]))
assert abs(e["eval_loss"] - s["loss"]) <= 1e-6 and e["eval_accuracy"] == s["accuracy"]
assert abs(e["eval_auc"] - s["auc"]) <= 1e-6
PY
AUTH=(-H "Authorization: Bearer $PSFLOW_TOKEN")
code=$(curl -s -o bad.json -w '%{http_code}' "${AUTH[@]}" -H 'Content-Type: application/json' \
  -d '{"instances":[{"tokens":[3, 3000]}]}' "http://$ADDR/v1/models/tokens-ps:predict")
[ "$code" = 400 ] && grep -q '/instances/0/tokens/1' bad.json || fail "an id past the table: $code $(cat bad.json)"
pass "served from 3 read-only ps tasks (a 2-ps checkpoint repartitioned): the evaluator's loss, accuracy and AUC; an id past the table is 400"

# --- newer checkpoints switched in on every ps under load; a flipped byte refused -------------
# new_version STEP [flip]: a copy of the final checkpoint as step STEP, the manifest last.
new_version() {
  python3 - "$WORK/ckpt/tokens-ps/step-$FINAL" "$LIVE/tokens-ps" "$1" "${2:-}" <<'PY'
import json, os, shutil, sys
src, root, step, flip = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "flip"
dst = os.path.join(root, "step-%d" % step)
os.makedirs(dst)
for f in ("ps-0.safetensors", "ps-1.safetensors"):
    shutil.copy(os.path.join(src, f), dst)
if flip:
    p = os.path.join(dst, "ps-1.safetensors")
    data = bytearray(open(p, "rb").read())
    data[len(data) - 100] ^= 0x10
    open(p, "wb").write(bytes(data))
m = json.load(open(os.path.join(src, "manifest.json")))
m["step"] = step
open(os.path.join(dst, "manifest.json.tmp"), "w").write(json.dumps(m))
os.rename(os.path.join(dst, "manifest.json.tmp"), os.path.join(dst, "manifest.json"))
PY
}
RATE=100
python3 "$CLIENT" load "$ADDR" tokens-ps "$WORK/load.stop" "$RATE" load.json \
  '{"instances": [{"tokens": [1, 17, 2999]}]}' &
LOAD_PID=$!
sleep 1.5
for k in 1 2 3 4 5; do
  new_version $((FINAL + k))
  wait_until 30 "step $((FINAL + k)) served" grep -q "serving step $((FINAL + k)) " "$WORK/serve.log"
  sleep 0.5
done
new_version $((FINAL + 6)) flip
wait_until 60 "step $((FINAL + 6)) refused" grep -q "refusing checkpoint step-$((FINAL + 6)) " "$WORK/serve.log"
wait_until 30 "the old step kept" grep -q "still serving step $((FINAL + 5))" "$WORK/serve.log"
sleep 1
touch "$WORK/load.stop"
wait_pid "$LOAD_PID" 60 || fail "the load generator failed"
python3 - load.json "$FINAL" <<'PY' || fail "requests failed during reloads: $(cat load.json)"
import json, sys
r = json.load(open(sys.argv[1]))
base = int(sys.argv[2])
print("load: %d requests, by status %s, p50 %.2f ms, p99 %.2f ms, versions %s"
      % (r["requests"], r["by_status"], r["p50_ms"], r["p99_ms"], r["distinct_versions"]))
assert r["by_status"] == {"200": r["requests"]} and not r["errors"], r
assert r["versions_in_order"], "a connection got an older version than its previous answer"
assert r["distinct_versions"][-1] == base + 5, r["distinct_versions"]
assert len(r["distinct_versions"]) >= 4, r["distinct_versions"]
PY
grep -i "refusing checkpoint step-$((FINAL + 6)) " "$WORK/serve.log" | grep -qi "crc" ||
  fail "the flipped byte: $(grep refusing "$WORK/serve.log")"
version=$(curl -sf "${AUTH[@]}" "http://$ADDR/v1/models/tokens-ps" | python3 -c \
  'import json,sys; print(json.load(sys.stdin)["model_version_status"][0]["version"])')
[ "$version" = $((FINAL + 5)) ] || fail "serving version $version after the flipped byte"
python3 "$CLIENT" evaluate "$ADDR" tokens-ps libsvm test.svm tokens >served2.json ||
  fail "serving after the refusal"
python3 - served.json served2.json <<'PY' || fail "the answers changed after the refusal"
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert abs(a["loss"] - b["loss"]) <= 1e-9 and a["accuracy"] == b["accuracy"], (a, b)
PY
pass "five newer checkpoints switched in on 3 ps under $RATE requests/s without a failed request; a flipped byte refused by the ps: $(grep "refusing checkpoint" "$WORK/serve.log" | head -1 | cut -c1-160)..."
kill -TERM "$SERVE_PID"
wait_pid "$SERVE_PID" 20 || fail "psflow serve exited $? on SIGTERM"

# --- a ps that restarts, a ps that is gone during a switch ---------------------------------------
# The server reads its own view of the folder (VIEW), the ps tasks read LIVE, so that a ps can
# hold a checkpoint the server does not serve: step FINAL+7 holds step 100's values.
VIEW="$WORK/view"
mkdir -p "$VIEW/tokens-ps"
cp -r "$LIVE/tokens-ps/step-$((FINAL + 5))" "$VIEW/tokens-ps/"
python3 - "$WORK/ckpt/tokens-ps/step-100" "$LIVE/tokens-ps/step-$((FINAL + 7))" "$((FINAL + 7))" <<'PY'
import json, os, shutil, sys
src, dst, step = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst)
for f in ("ps-0.safetensors", "ps-1.safetensors"):
    shutil.copy(os.path.join(src, f), dst)
m = json.load(open(os.path.join(src, "manifest.json")))
m["step"] = step
json.dump(m, open(os.path.join(dst, "manifest.json"), "w"))
PY
ADDR=127.0.0.1:$(free_ports 1)
"$PSFLOW_BIN" serve --listen "$ADDR" --model tokens-ps --checkpoint-dir "$VIEW" --ps "$RO_ADDRS" \
  --request-timeout-ms 3000 2>>"$WORK/serve2.log" &
SERVE_PID=$!
wait_until 30 "psflow serve is healthy" curl -sf "http://$ADDR/healthz"
restart_ro() { # INDEX: kill -9 read-only ps INDEX and start it again
  kill -KILL "${RO_PIDS[$1]}"
  wait "${RO_PIDS[$1]}" 2>/dev/null || true
  TF_CONFIG=$(tf_config ps "$1" "$RO_LIST" "") \
    "$PSFLOW_BIN" ps --read-only --job emb.json --checkpoint-dir "$LIVE" 2>>"$WORK/ro$1.log" &
  RO_PIDS[$1]=$!
  wait_until 30 "read-only ps $1 listens again" python3 -c "import rawps; rawps.Conn(${RO[$1]})"
}
restart_ro 1
grep -q "restored .*step-$((FINAL + 7))" "$WORK/ro1.log" || fail "ps 1 did not restore step $((FINAL + 7)): $(tail -3 "$WORK/ro1.log")"
python3 "$CLIENT" evaluate "$ADDR" tokens-ps libsvm test.svm tokens >served3.json ||
  fail "serving after a ps restart: $(tail -5 "$WORK/serve2.log")"
python3 - served.json served3.json <<'PY' || fail "a restarted ps answered with its own checkpoint"
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert abs(a["loss"] - b["loss"]) <= 1e-9 and a["accuracy"] == b["accuracy"], (a, b)
PY
grep -q "ps 1 restarted .*back to step $((FINAL + 5))" "$WORK/serve2.log" || fail "serve: $(cat "$WORK/serve2.log")"
pass "ps 1 killed and restarted on a newer checkpoint (step $((FINAL + 7))): the server put it back on step $((FINAL + 5)) before answering; answers unchanged"

# ps 2 gone while a newer checkpoint appears: not refused, no answers until it is back.
kill -KILL "${RO_PIDS[2]}"
wait "${RO_PIDS[2]}" 2>/dev/null || true
cp -r "$LIVE/tokens-ps/step-$((FINAL + 7))" "$VIEW/tokens-ps/"
wait_until 30 "the switch given up for now" grep -q "cannot switch the ps tasks to step $((FINAL + 7)) now" "$WORK/serve2.log"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$ADDR/healthz")
[ "$code" = 503 ] || fail "/healthz answered $code while the ps tasks hold no one step"
code=$(curl -s -o /dev/null -w '%{http_code}' "${AUTH[@]}" -H 'Content-Type: application/json' \
  -d '{"instances":[{"tokens":[3]}]}' "http://$ADDR/v1/models/tokens-ps:predict")
[ "$code" = 503 ] || fail "a predict answered $code while the ps tasks hold no one step"
TF_CONFIG=$(tf_config ps 2 "$RO_LIST" "") \
  "$PSFLOW_BIN" ps --read-only --job emb.json --checkpoint-dir "$LIVE" 2>>"$WORK/ro2.log" &
RO_PIDS[2]=$!
wait_until 60 "step $((FINAL + 7)) served" grep -q "serving step $((FINAL + 7)) " "$WORK/serve2.log"
wait_until 10 "healthy again" curl -sf "http://$ADDR/healthz"
! grep -q "refusing checkpoint step-$((FINAL + 7))" "$WORK/serve2.log" || fail "a good checkpoint was refused for a ps that was down"
version=$(curl -sf "${AUTH[@]}" "http://$ADDR/v1/models/tokens-ps" | python3 -c \
  'import json,sys; print(json.load(sys.stdin)["model_version_status"][0]["version"])')
[ "$version" = $((FINAL + 7)) ] || fail "serving version $version once ps 2 is back"
pass "ps 2 gone during a switch: 503 (and /healthz 503) rather than mixed versions; the checkpoint not refused; switched once it was back"

# A second server on the same ps tasks (a rolling update): the newer one takes them over, the
# older one stops answering (503, /healthz 503) instead of serving values it did not choose.
ADDR_B=127.0.0.1:$(free_ports 1)
"$PSFLOW_BIN" serve --listen "$ADDR_B" --model tokens-ps --checkpoint-dir "$VIEW" --ps "$RO_ADDRS" \
  2>>"$WORK/serve3.log" &
SERVE_B=$!
wait_until 30 "the newer server is healthy" curl -sf "http://$ADDR_B/healthz"
code=$(curl -s -o old.json -w '%{http_code}' "${AUTH[@]}" -H 'Content-Type: application/json' \
  -d '{"instances":[{"tokens":[3]}]}' "http://$ADDR/v1/models/tokens-ps:predict")
[ "$code" = 503 ] || fail "the replaced server answered $code: $(cat old.json)"
wait_until 10 "the replaced server unready" sh -c "[ \"\$(curl -s -o /dev/null -w '%{http_code}' http://$ADDR/healthz)\" = 503 ]"
grep -q "STALE_INCARNATION" "$WORK/serve2.log" || fail "serve: $(tail -3 "$WORK/serve2.log")"
python3 "$CLIENT" evaluate "$ADDR_B" tokens-ps libsvm test.svm tokens >/dev/null || fail "the newer server"
pass "a newer server on the same ps tasks took them over; the older one answers 503 and /healthz 503: $(grep -m1 -o 'ps [0-9]: STALE_INCARNATION.*' "$WORK/serve2.log" | cut -c1-90)..."
kill -TERM "$SERVE_B"
wait_pid "$SERVE_B" 20 || fail "psflow serve exited $? on SIGTERM"
kill -TERM "$SERVE_PID"
wait_pid "$SERVE_PID" 20 || fail "psflow serve exited $? on SIGTERM"

# --- what a read-only ps refuses ----------------------------------------------------------------
python3 - "${RO[0]}" "$PSFLOW_TOKEN" "$FINAL" <<'PY' || fail "the read-only ps's refusals"
import struct, sys, time
import rawps
from rawps import Conn, authed_hello, error_code, error_text, push, pull, checkpoint, restore
port, token, final = int(sys.argv[1]), sys.argv[2].encode(), int(sys.argv[3])
job = "tokens-ps"

def conn(role, task, incarnation=5):
    c = Conn(port)
    ans = authed_hello(c, role, task, incarnation, job, token)
    return c, ans

c, ans = conn("chief", 0)
assert ans[0] == "HELLO_ACK", ans
ack = rawps.hello_ack(ans[2])
# The shards this ps holds (shard ids are the job's): those a PULL of one id answers.
held = [i for i in range(64) if c.request("PULL", pull([i]))[0] == "PULL_REPLY"]
assert len(held) == ack["n_shards"], (held, ack)
before = c.request("PULL", pull(held))
assert before[0] == "PULL_REPLY", before
_, vals = rawps.pull_reply(before[2])
grads = [(i, struct.pack("<%df" % (len(d) // 4), *([0.5] * (len(d) // 4)))) for i, d in vals]
ans = c.request("PUSH", push(0, 5, 1, 0, grads))
assert error_code(ans) == "FORBIDDEN" and "read-only" in error_text(ans), ans
after = c.request("PULL", pull(held))
assert rawps.pull_reply(after[2])[1] == vals, "a refused push changed the values"
print("ok: the chief's PUSH: FORBIDDEN (%s...); the values are unchanged" % error_text(ans)[:60])
ans = c.request("CHECKPOINT", checkpoint(1, 1))
assert error_code(ans) == "FORBIDDEN", ans
ans = c.request("RESTORE", restore(final))
assert error_code(ans) == "FORBIDDEN", ans
print("ok: the chief's final CHECKPOINT and its RESTORE: FORBIDDEN")

old, ans = conn("reader", 0)  # an older server than the one that served
assert ans[0] == "HELLO_ACK", ans
ans = old.request("RESTORE", restore(final))
assert error_code(ans) == "STALE_INCARNATION", ans
print("ok: RESTORE from a reader older than the newest: STALE_INCARNATION (%s...)" % error_text(ans)[:70])
ans = old.request("PULL", pull(held))
assert error_code(ans) == "STALE_INCARNATION", ans
print("ok: its PULL too: STALE_INCARNATION")
_, ans = conn("reader", 0, 1 << 62)
assert error_code(ans) == "BAD_VALUE", ans
print("ok: a reader incarnation far in the future: BAD_VALUE (%s)" % error_text(ans)[:70])
now = int(time.time() * 1e6) + 10 ** 6
c, ans = conn("reader", 0, now)
assert ans[0] == "HELLO_ACK", ans
ans = c.request("PUSH", push(0, now, 1, 0, grads))
assert error_code(ans) == "FORBIDDEN", ans
ans = c.request("RESTORE", restore(10 ** 9))
assert ans[0] == "CHECKPOINT_ACK" and struct.unpack_from("<QI", ans[2])[1] != 0, ans
print("ok: a reader's PUSH: FORBIDDEN; its RESTORE of a step that does not exist: refused (%s...)"
      % ans[2][16:90].decode(errors="replace"))
ans = c.request("PULL", pull(held))
assert rawps.pull_reply(ans[2])[1] == vals, "a refused RESTORE changed the values"

c = Conn(port)
ans = authed_hello(c, "reader", 1, 5, job, token)
assert error_code(ans) == "BAD_VALUE", ans
print("ok: reader 1 of a job without a serving section: BAD_VALUE")
PY
for pid in "${RO_PIDS[@]}"; do kill -TERM "$pid"; done
for pid in "${RO_PIDS[@]}"; do wait_pid "$pid" 20 || fail "a read-only ps exited $? on SIGTERM"; done
grep -q "FORBIDDEN" "$WORK/ro0.log" || fail "ps 0 logged no refusal: $(tail -5 "$WORK/ro0.log")"

# A training ps does not take a reader's RESTORE.
TRAIN_PORT=$(free_ports 1)
TF_CONFIG=$(tf_config ps 0 "$TRAIN_PORT,1" "1") \
  "$PSFLOW_BIN" ps --job emb.json --checkpoint-dir "$WORK/ckpt" 2>"$WORK/train-ps.log" &
TRAIN_PID=$!
wait_until 30 "the training ps listens" python3 -c "import rawps; rawps.Conn($TRAIN_PORT)"
python3 - "$TRAIN_PORT" "$PSFLOW_TOKEN" "$FINAL" <<'PY' || fail "a training ps took a reader's RESTORE"
import sys
import rawps
from rawps import Conn, authed_hello, error_code, restore, pull
c = Conn(int(sys.argv[1]))
ans = authed_hello(c, "reader", 0, 5, "tokens-ps", sys.argv[2].encode())
assert ans[0] == "HELLO_ACK", ans
ans = c.request("RESTORE", restore(int(sys.argv[3])))
assert error_code(ans) == "FORBIDDEN", ans
print("ok: a reader's RESTORE on a training ps: FORBIDDEN")
PY
kill -TERM "$TRAIN_PID"
wait_pid "$TRAIN_PID" 20 || true

# A model that does not fit the server without --ps is refused at start, naming --ps.
expect_exit 65 "$PSFLOW_BIN" serve --model tokens-ps --checkpoint-dir "$LIVE" --listen 127.0.0.1:1 --memory 64K
grep -q "more than this process may use (64.*: serve it from read-only ps tasks with --ps" "$WORK/stderr" || fail "--memory 64K: $(cat "$WORK/stderr")"
pass "without --ps, a model bigger than --memory is refused: '$(cut -c1-150 "$WORK/stderr")...'"

# A read-only ps without a checkpoint does not start.
expect_exit 69 env TF_CONFIG="$(tf_config ps 0 "$(free_ports 1)" "")" \
  "$PSFLOW_BIN" ps --read-only --job emb.json --checkpoint-dir "$WORK/empty"
grep -q "no complete checkpoint of job tokens-ps" "$WORK/stderr" || fail "no checkpoint: $(cat "$WORK/stderr")"
pass "a read-only ps refuses PUSH (chief, reader), CHECKPOINT (chief) and an index the job lacks; a training ps refuses a reader's RESTORE; no checkpoint, no read-only ps: '$(grep -o 'read-only: no complete.*' "$WORK/stderr" | cut -c1-80)...'"
