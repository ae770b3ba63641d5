#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 600
# Dynamic embedding tables (docs/embeddings.md "Dynamic tables") on ps tasks, with real ps and
# worker processes on 127.0.0.1 (TF_CONFIG + --job): a softmax over a dynamic "user" table
# (64-bit ids from synthetic_ctr, steps_to_live 30: a row unseen for 30 steps is evicted and
# comes back new when its id does) and a fixed "item" table, adagrad.
#  1. sync equivalence: 2 ps + 2 workers x 250 examples export, id by id, the same rows and
#     variables as `psflow train` with batch 500 (max |diff| <= 1e-5), also when ps 1 is
#     killed (kill -9) in the middle and restarted: it restores the newest checkpoint, the
#     chief rolls every ps back to it and the job goes on to the same end; and under adam,
#     whose every row moves every step;
#  2. the final checkpoint of 2 ps restores into 3 ps and into 1 ps (each task takes the ids
#     it owns from every file) and, written again by them, exports exactly the same ids and
#     rows;
#     into 1 ps of a max_rows below the rows, the least recently updated rows make room and
#     the ps says how many it dropped;
#  3. a byte flipped in the dynamic table's section of the newest checkpoint: the restarted
#     ps finds its CRC-32 wrong, sets the checkpoint aside and restores the one before;
#  4. a job with an evaluator task and a dynamic table is refused by psflow ps, naming
#     /replicas/evaluator.
source "$(dirname "$0")/lib.sh"

spec() { # NAME PS WORKERS BATCH STEPS
  cat <<JSON
{
  "name": "$1",
  "replicas": {"ps": $2, "worker": $3},
  "model": {"type": "softmax", "outputs": 2,
            "embeddings": [{"name": "user", "kind": "dynamic", "max_rows": 1000000, "dim": 8,
                            "steps_to_live": 30},
                           {"name": "item", "vocab": 5000, "dim": 8}]},
  "data": {"format": "synthetic_ctr", "n": 20000, "distinct_ids": 200000, "zipf": 1.1},
  "optimizer": {"type": "${OPT:-adagrad}", "learning_rate": ${LR:-0.5}},
  "training": {"mode": "sync", "batch_size": $4, "max_steps": $5},
  "checkpoint": {"every_steps": 50, "every_secs": 0, "keep": 20}
}
JSON
}

# same_rows A B: the largest |a - b| over every variable of two safetensors files, a dynamic
# table's rows matched by id (psflow train saves them least recently updated first, an
# export by id); fails when the variables or a table's ids differ.
same_rows() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    out = {}
    for name, t in json.loads(data[8:8 + n]).items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[8 + n + b:8 + n + e]
        fmt = {"F32": "f", "U64": "Q", "I64": "q", "U8": "B"}[t["dtype"]]
        out[name] = (t["shape"], struct.unpack("<%d%s" % (len(raw) // struct.calcsize(fmt), fmt), raw))
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
tables = [n[:-len("/ids")] for n in b if n.endswith("/ids")]
assert tables, "no dynamic table in %s" % sys.argv[2]
worst = 0.0
for name in b:
    if name.endswith("/ids"):
        continue
    if name in tables:
        dim = b[name][0][1]
        rows = lambda f: {i: f[name][1][k * dim:(k + 1) * dim] for k, i in enumerate(f[name + "/ids"][1])}
        ra, rb = rows(a), rows(b)
        if set(ra) != set(rb):
            sys.exit("%s: %d ids in one, %d in the other, %d in only one"
                     % (name, len(ra), len(rb), len(set(ra) ^ set(rb))))
        pairs = [(p, q) for i in ra for p, q in zip(ra[i], rb[i])]
    else:
        if a[name][0] != b[name][0]:
            sys.exit("%s: shape %s against %s" % (name, a[name][0], b[name][0]))
        pairs = zip(a[name][1], b[name][1])
    worst = max([worst] + [abs(p - q) for p, q in pairs])
print("%.3g %d" % (worst, len(set(b[tables[0] + "/ids"][1]))))
PY
}

PIDS=()
trap 'rc=$?; kill -9 "${PIDS[@]}" 2>/dev/null || true; (exit $rc); cleanup' EXIT

start_ps() { # JOB INDEX CKPT
  TF_CONFIG=$(tf_config ps "$2" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" ps --job "$1" \
    --checkpoint-dir "$3" --exit-grace 2 2>>"$WORK/ps$2.log" &
  PIDS[$2]=$!
}

# cluster JOB N_PS N_WORKERS CKPT [KILL_AT]: a static cluster to the end; with KILL_AT, ps 1
# is killed once the chief has logged that step and started again at once.
cluster() {
  local ports i rc=0
  read -r -a ports <<<"$(free_ports $(($2 + $3)))"
  PS_PORTS=$(IFS=,; echo "${ports[*]:0:$2}")
  W_PORTS=$(IFS=,; echo "${ports[*]:$2}")
  PIDS=()
  for ((i = 0; i < $2; i++)); do start_ps "$1" $i "$4"; done
  for ((i = 0; i < $3; i++)); do
    TF_CONFIG=$(tf_config worker $i "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" worker --job "$1" \
      --checkpoint-dir "$4" --output json --log-every 10 ${5:+--push-delay-ms 4} \
      >"$WORK/worker$i.out" 2>>"$WORK/worker$i.log" &
    PIDS[$(($2 + i))]=$!
  done
  if [ -n "${5:-}" ]; then
    wait_until 120 "the chief's step $5" logged_step_past "$WORK/worker0.log" "$5"
    kill -9 "${PIDS[1]}"
    wait "${PIDS[1]}" 2>/dev/null || true
    start_ps "$1" 1 "$4"
  fi
  for ((i = 0; i < $3; i++)); do wait_pid "${PIDS[$(($2 + i))]}" 300 || rc=$?; done
  [ "$rc" = 0 ] || fail "a worker exited $rc"
  for ((i = 0; i < $2; i++)); do wait_pid "${PIDS[$i]}" 60 || rc=$?; done
  [ "$rc" = 0 ] || fail "a ps exited $rc"
}

# --- 1. sync equivalence, also across a ps kill -------------------------------------------
spec dyn 1 1 500 300 >single.json
"$PSFLOW_BIN" train single.json --save single.safetensors --threads 1 >/dev/null 2>single.log ||
  fail "psflow train: $(tail -n 3 single.log)"
spec dyn 2 2 250 300 >dyn.json
cluster dyn.json 2 2 "$WORK/ckpt"
"$PSFLOW_BIN" export "$WORK/ckpt/dyn" --out dist.safetensors >/dev/null || fail "export failed"
read -r diff rows <<<"$(same_rows single.safetensors dist.safetensors)"
echo "sync equivalence: max |one process - 2 ps + 2 workers| = $diff over $rows rows of the dynamic table"
in_range "$diff" 0 1e-5 || fail "2 ps + 2 workers differ from psflow train by $diff"
evicted=$(grep -o '[0-9]* evicted' single.log | tr -dc 0-9)
[ "${evicted:-0}" -gt 0 ] || fail "no row was evicted: $(grep 'table user' single.log)"
echo "psflow train: $(grep -o 'table user: .*' single.log)"

rm -f "$WORK"/ps*.log "$WORK"/worker*.log
cluster dyn.json 2 2 "$WORK/fault" 120
grep -q 'restored from' "$WORK/ps1.log" || fail "the restarted ps 1 restored nothing"
grep -q 'rolling every ps back' "$WORK/worker0.log" || fail "the chief did not roll the ps back"
"$PSFLOW_BIN" export "$WORK/fault/dyn" --out fault.safetensors >/dev/null || fail "export failed"
read -r diff rows <<<"$(same_rows single.safetensors fault.safetensors)"
echo "across kill -9 of ps 1 after step 120: max |one process - 2 ps + 2 workers| = $diff"
in_range "$diff" 0 1e-5 || fail "the run with a ps kill differs from psflow train by $diff"

# adam: every row moves every step (the rows a batch does not name with a zero gradient)
OPT=adam LR=0.01 spec dyn 1 1 500 100 >adam-single.json
"$PSFLOW_BIN" train adam-single.json --save adam-single.safetensors --threads 1 >/dev/null 2>adam.log ||
  fail "psflow train with adam: $(tail -n 3 adam.log)"
OPT=adam LR=0.01 spec dyn 2 2 250 100 >adam.json
rm -f "$WORK"/ps*.log "$WORK"/worker*.log
cluster adam.json 2 2 "$WORK/adam"
"$PSFLOW_BIN" export "$WORK/adam/dyn" --out adam.safetensors >/dev/null || fail "export failed"
read -r diff rows <<<"$(same_rows adam-single.safetensors adam.safetensors)"
echo "adam: max |one process - 2 ps + 2 workers| = $diff over $rows rows"
in_range "$diff" 0 1e-5 || fail "2 ps + 2 workers under adam differ from psflow train by $diff"

# --- 2. restore into 3 ps and into 1 ps ---------------------------------------------------
for n in 3 1; do
  cp -r "$WORK/ckpt" "$WORK/ckpt$n"
  spec dyn $n 1 250 300 >grow$n.json
  rm -f "$WORK"/ps*.log
  cluster grow$n.json $n 1 "$WORK/ckpt$n"
  grep -q "repartitioned from a checkpoint of 2 ps tasks" "$WORK/ps0.log" ||
    fail "ps 0 of $n did not restore the checkpoint of 2"
  "$PSFLOW_BIN" export "$WORK/ckpt$n/dyn" --out grow$n.safetensors >/dev/null || fail "export failed"
  read -r diff rows <<<"$(same_rows dist.safetensors grow$n.safetensors)"
  echo "2 ps -> $n ps: max |diff| of the exports $diff over $rows ids"
  [ "$diff" = 0 ] || fail "the export after restoring into $n ps differs by $diff"
done

# into 1 ps whose max_rows is below the rows: the least recently updated rows make room, said
cp -r "$WORK/ckpt" "$WORK/ckpt-small"
spec dyn 1 1 250 300 | sed 's/"max_rows": 1000000/"max_rows": 3000/' >small.json
rm -f "$WORK"/ps*.log
cluster small.json 1 1 "$WORK/ckpt-small"
grep -q "dynamic table user: $((rows - 3000)) of the checkpoint's rows over" "$WORK/ps0.log" ||
  fail "the rows over max_rows were not dropped as said: $(grep -i 'user\|restored' "$WORK/ps0.log")"
"$PSFLOW_BIN" export "$WORK/ckpt-small/dyn" --out small.safetensors >/dev/null || fail "export failed"
kept=$(python3 - small.safetensors <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
print(json.loads(data[8:8 + n])["user/embeddings/ids"]["shape"][0])
PY
)
[ "$kept" = 3000 ] || fail "restored into max_rows 3000, the export holds $kept rows"
echo "2 ps -> 1 ps of max_rows 3000: $((rows - 3000)) least recently updated rows dropped, said"

# --- 3. a flipped byte in a dynamic table's section ---------------------------------------
newest=$WORK/ckpt/dyn/step-300
python3 - "$newest/ps-1.safetensors" <<'PY'
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
(n,) = struct.unpack("<Q", data[:8])
b, e = json.loads(data[8:8 + n])["user/embeddings"]["data_offsets"]
data[8 + n + (b + e) // 2] ^= 0x40  # a byte in the middle of the table's rows
open(path, "wb").write(data)
PY
spec dyn 2 2 250 300 >dyn.json
read -r -a ports <<<"$(free_ports 4)"
PS_PORTS="${ports[0]},${ports[1]}" W_PORTS="${ports[2]},${ports[3]}"
rm -f "$WORK"/ps*.log
start_ps dyn.json 1 "$WORK/ckpt"
wait_until 30 "ps 1's restore" grep -q 'restored from\|starting from' "$WORK/ps1.log"
kill -9 "${PIDS[1]}"
wait "${PIDS[1]}" 2>/dev/null || true
grep -q 'step-300 is bad' "$WORK/ps1.log" || fail "the flipped byte went unnoticed: $(cat "$WORK/ps1.log")"
grep -q 'restored from .*step-250' "$WORK/ps1.log" || fail "ps 1 did not fall back to step 250"
echo "a flipped byte in user/embeddings of step 300: $(grep -o 'set aside as [^,]*' "$WORK/ps1.log" | head -n 1), restored step 250"

# --- 4. no evaluator with a dynamic table -------------------------------------------------
python3 - dyn.json >eval.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["replicas"]["evaluator"] = 1
json.dump(d, sys.stdout)
PY
TF_CONFIG=$(tf_config ps 0 "$PS_PORTS" "$W_PORTS") expect_exit 65 "$PSFLOW_BIN" ps --job eval.json \
  --checkpoint-dir "$WORK/none"
grep -q '/replicas/evaluator' "$WORK/stderr" || fail "no field named: $(cat "$WORK/stderr")"
pass "dynamic tables on ps tasks"
