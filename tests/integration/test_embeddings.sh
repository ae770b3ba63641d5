#!/usr/bin/env bash
# labels: slow release-only
# timeout: 600
# model.embeddings on Fashion-MNIST read as sparse pixel tokens (scripts/fashion-mnist-tokens.py:
# each non-zero pixel p is one id, 2p light or 2p + 1 dark, weight 1, gzipped LIBSVM with
# ids from 0), trained as examples/fashion-mnist-tokens.json: one embedding "pixels"
# [1568, 64] combined with sqrtn, then an mlp 256-256-10.
# The checks that need no accuracy read a small set, the first 10000 training and 1000 test
# images (one epoch of 100 steps of 100):
#  1. `psflow train`, 3000 sync steps of 100: test accuracy >= 0.85, and the saved
#     variables start with pixels/embeddings [1568, 64];
#  2. sync equivalence (small set): 2 ps (the table split in two row ranges by fixed_shards
#     2) and 2 workers of batch 50 give the variables of `psflow train` with batch 100 after
#     100 steps (max |diff| <= 1e-5);
#  3. async, 2 ps + 2 workers, 3000 steps: the job converges (test accuracy >= 0.84);
#     then its 2-ps checkpoint restores into 3 ps (3 parts) and 1 ps (no partitioner) with
#     identical exports (those two runs train nothing: small set), and continues on 3 ps;
#  4. a line with more ids than max_ids and an id past the table exit 65, naming the file,
#     the line and the rule;
#  5. the same tokens as categorical CSV: integer ids in one cell ("12|57|...") train exactly
#     as the LIBSVM file does (small set: identical loss lines and test loss and accuracy
#     every 25 steps and at the end), and as strings ("p6d|p28l|...") hashed into 4096 rows
#     the model still reaches test accuracy >= 0.84 after 3000 steps.
# Runs that do not depend on each other go at once where timing cannot change what they
# check: section 5's hashed names beside sections 1 and 2 (one-process runs with one BLAS
# thread each), section 2's two runs, section 3b's two restores; the async job runs alone.
# Under a sanitizer build (many times slower) every run reads the small set, the runs train a
# thirtieth of the steps and the accuracy bounds are not checked; equivalence, identical
# exports and refusals still are.
source "$(dirname "$0")/lib.sh"

S=1 DATA=$WORK # DATA: the folder of the runs that check accuracy
if sanitized_build; then
  S=30 DATA=$WORK/small
  echo "sanitizer build: the small set, a thirtieth of the steps, accuracy bounds not checked"
fi
# accurate VALUE MIN: VALUE >= MIN, or a sanitizer build (which trains too few steps to tell)
accurate() { [ "$S" != 1 ] || in_range "$1" "$2" 1; }

python3 "$PSFLOW_SRC/scripts/fashion-mnist-tokens.py" "$WORK" >/dev/null || fail "fashion-mnist-tokens.py exited $?"
# prep small: small/, the first 10000 training and 1000 test lines, and small/*.ids.csv.gz,
# those as categorical CSV of integer ids; prep names: DATA/*.names.csv.gz, DATA's lines as
# hashed strings
prep() {
  python3 - "$WORK" "$DATA" "$1" <<'PY'
import gzip, itertools, os, sys
work, data, part = sys.argv[1:]
names = {str(t): "p%d%s" % (t // 2, "ld"[t % 2]) for t in range(1568)}
def csv(path, lines, cell):
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write("label,pixels\n")
        for line in lines:
            label, _, pairs = line.rstrip("\n").partition(" ")
            out.write("%s,%s\n" % (label, cell(pairs.replace(":1", "").split(" "))))
for name, n in (("train", 10000), ("test", 1000)):
    if part == "small":
        os.makedirs(work + "/small", exist_ok=True)
        with gzip.open("%s/%s.tokens.gz" % (work, name), "rt") as src:
            lines = list(itertools.islice(src, n))
        with gzip.open("%s/small/%s.tokens.gz" % (work, name), "wt", compresslevel=1) as out:
            out.writelines(lines)
        csv("%s/small/%s.ids.csv.gz" % (work, name), lines, "|".join)
    else:
        with gzip.open("%s/%s.tokens.gz" % (data, name), "rt") as src:
            csv("%s/%s.names.csv.gz" % (data, name), src,
                lambda t: "|".join(map(names.__getitem__, t)))
PY
}
prep small || fail "writing the small set failed"

spec() { # NAME PS WORKERS BATCH STEPS MODE DIR [TRAIN]: DIR's train and test tokens
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-tokens.json" "$@" <<'PY'
import json, sys
src, name, ps, workers, batch, steps, mode, work = sys.argv[1:9]
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": int(ps), "worker": int(workers)}
d["data"]["train"] = [sys.argv[9] if len(sys.argv) > 9 else work + "/train.tokens.gz"]
d["data"]["test"] = [work + "/test.tokens.gz"]
d["training"].update(batch_size=int(batch), max_steps=int(steps), mode=mode, eval_every_steps=0)
d["placement"] = {"strategy": "greedy", "partitioner": {"type": "fixed_shards", "num_shards": 2}}
d["checkpoint"] = {"every_steps": 1000}
json.dump(d, sys.stdout)
PY
}
csv_spec() { # FROM NAME KIND STEPS DIR
  python3 - "$@" <<'PY'
import json, sys
src, name, kind, steps, work = sys.argv[1:6]
d = json.load(open(src))
d["name"] = name
d["training"]["max_steps"] = int(steps)
d["data"] = {"format": "csv", "train": [work + "/train.%s.csv.gz" % kind],
             "test": [work + "/test.%s.csv.gz" % kind]}
if kind == "names":
    d["model"]["embeddings"][0].update(vocab=4096, hash=True)
json.dump(d, sys.stdout)
PY
}

# --- 1. one process --------------------------------------------------------------------
# Sections 1 and 2 run while section 5's hashed names are written and trained (until
# section 3): the one-process runs have one BLAS thread each (--threads 1), and all are
# sync, the same steps whatever the timing.
spec tokens 1 1 100 $((3000 / S)) sync "$DATA" >tokens.json
csv_spec tokens.json names names $((3000 / S)) "$DATA" >names.json
(prep names && "$PSFLOW_BIN" train names.json --threads 1 >names.out 2>names.log) &
names=$!
"$PSFLOW_BIN" train tokens.json --save tokens.safetensors --threads 1 >tokens.out \
  2>tokens.log || fail "psflow train exited $?: $(tail -n 3 tokens.log)"
acc=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' tokens.out)
[ -n "$acc" ] || fail "no final accuracy: $(cat tokens.out)"
accurate "$acc" 0.85 || fail "psflow train: test accuracy $acc below 0.85"
first=$(python3 - tokens.safetensors <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
h = json.loads(data[8:8 + n])
t = min((v["data_offsets"][0], k, v["shape"]) for k, v in h.items() if k != "__metadata__")
print(t[1], t[2])
PY
)
[ "$first" = "pixels/embeddings [1568, 64]" ] || fail "first saved variable: $first"
echo "one process: test accuracy $acc after $((3000 / S)) steps; first variable $first"

# --- 2. sync equivalence ---------------------------------------------------------------
spec equiv 2 2 50 100 sync "$WORK/small" >equiv.json
spec single 1 1 100 100 sync "$WORK/small" | python3 -c '
import json, sys
d = json.load(sys.stdin)
d["training"]["eval_every_steps"] = 25 # for section 5: test figures along the way
json.dump(d, sys.stdout)' >single.json
# the two at once
"$PSFLOW_BIN" train single.json --save single.safetensors --log-every 25 --threads 1 \
  >single.out 2>single.log &
single=$!
run_static_cluster equiv.json 2 >/dev/null
wait_pid $single 300 || fail "psflow train single.json: $(tail -n 3 single.log)"
grep -rqa 'pixels/embeddings/part_1' "$WORK/ckpt/equiv" || fail "the table was not split in two shards"
"$PSFLOW_BIN" export "$WORK/ckpt/equiv" --out dist.safetensors || fail "export failed"
diff=$(max_abs_diff single.safetensors dist.safetensors)
echo "sync equivalence: max |one process - 2 ps + 2 workers| = $diff"
in_range "$diff" 0 1e-5 || fail "distributed sync differs from psflow train by $diff"

# --- 3. async --------------------------------------------------------------------------
wait_pid $names 500 || fail "hashed names: $(tail -n 3 names.log 2>/dev/null)"
rm -rf "$WORK/ckpt"
AS=$((3000 / S)) # the async job's steps
spec async 2 2 100 $AS async "$DATA" >async.json
out=$(run_static_cluster async.json 2)
aacc=$(printf '%s\n' "$out" | python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin if l.strip()][-1]["test_accuracy"])')
echo "async 2 ps + 2 workers: test accuracy $aacc after $AS steps"
accurate "$aacc" 0.84 || fail "async: test accuracy $aacc below 0.84"

# --- 3b. repartitioning restore ---------------------------------------------------------
# The async job's 2-ps checkpoint (the table and its Adam slots in 2 row ranges) into 3 ps
# tasks with 3 parts and into 1 ps without a partitioner: at the same max_steps nothing
# trains (so the workers read the small set) and the export is identical; on 3 ps with 500
# more steps training goes on.
"$PSFLOW_BIN" export "$WORK/ckpt/async" --out before.safetensors >/dev/null || fail "export failed"
regrow() { # FILE PS PARTS STEPS [DIR]: DIR's train and test tokens [the async job's]
  python3 - async.json "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
out, ps, parts, steps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if len(sys.argv) > 6:
    d["data"]["train"] = [sys.argv[6] + "/train.tokens.gz"]
    d["data"]["test"] = [sys.argv[6] + "/test.tokens.gz"]
d["replicas"]["ps"] = ps
d["training"]["max_steps"] = steps
d["placement"] = {"partitioner": {"type": "fixed_shards", "num_shards": parts}} if parts > 1 else {}
json.dump(d, open(out, "w"))
PY
}
# The two clusters run at once, each with its tasks' logs in a folder of its own.
restores=()
for ps in 3 1; do
  cp -r "$WORK/ckpt" "$WORK/ckpt$ps"
  regrow same$ps.json $ps $ps $AS "$WORK/small"
  mkdir "$WORK/same$ps"
  (WORK=$WORK/same$ps && run_static_cluster same$ps.json 2 $ps "${WORK%/*}/ckpt$ps" >/dev/null) &
  restores+=($!)
done
wait_pid "${restores[0]}" 400 || fail "restoring into 3 ps failed"
wait_pid "${restores[1]}" 400 || fail "restoring into 1 ps failed"
for ps in 3 1; do
  grep -q "repartitioned from a checkpoint of 2 ps tasks" "$WORK/same$ps/ps0.log" ||
    fail "ps 0 of $ps did not repartition: $(tail -n 3 "$WORK/same$ps/ps0.log")"
  "$PSFLOW_BIN" export "$WORK/ckpt$ps/async" --out after$ps.safetensors >/dev/null || fail "export failed"
  same=$(max_abs_diff before.safetensors after$ps.safetensors)
  [ "$same" = 0 ] || fail "restored into $ps ps, the variables differ by $same"
done
# 500 more steps in any build: with fewer, under a sanitizer the other worker can take them
# all before the chief's first
regrow more.json 3 3 $((AS + 500))
read -r rsteps rlocal racc <<<"$(run_static_cluster more.json 2 3 "$WORK/ckpt3" |
  python3 -c 'import json,sys; d=[json.loads(l) for l in sys.stdin if l.strip()][-1]; print(d["steps"], d["local_steps"], d["test_accuracy"])')"
grep -q "restored from .*/step-$AS (step $AS" "$WORK/ps0.log" || fail "the longer job did not start from step $AS"
[ "$rsteps" = $((AS + 500)) ] && [ "$rlocal" -gt 0 ] || fail "continued on 3 ps: steps $rsteps, local steps $rlocal"
echo "repartitioning restore: 2 ps -> 3 ps and 1 ps identical; on 3 ps to step $rsteps ($rlocal steps by the chief): test accuracy $racc"
accurate "$racc" 0.84 || fail "continued on 3 ps: test accuracy $racc"

# --- 4. refused data -------------------------------------------------------------------
python3 -c 'print("1 " + " ".join("%d:1" % j for j in range(785)))' >many.libsvm
spec many 1 1 100 10 sync "$WORK/small" "$WORK/many.libsvm" >many.json
printf '3 2:1 1570:1\n' >past.libsvm
spec past 1 1 100 10 sync "$WORK/small" "$WORK/past.libsvm" >past.json
expect_exit 65 "$PSFLOW_BIN" train many.json
grep -q "many.libsvm: line 1: more than max_ids 784 ids for embedding 'pixels'" \
  stderr || fail "max_ids: $(cat stderr)"
expect_exit 65 "$PSFLOW_BIN" train past.json
grep -q "past.libsvm: line 1: feature id 1570 outside 0 .. 1567" stderr || fail "past the table: $(cat stderr)"
# --- 5. categorical CSV -----------------------------------------------------------------
# The small set's integer ids against section 2's `psflow train` of its LIBSVM lines (both
# --threads 1); the hashed names of DATA (trained in section 1) against an accuracy bound.
# the loss and test figures of a run: its progress lines and its result line (name cut)
figures() {
  sed -e 's/[0-9]* examples\/s//' -e 's/ in [0-9.]* s//' -e 's/ETA.*//' "$1.log" |
    grep -E 'loss|accuracy'
  sed -e 's/^[^:]*://' -e 's/[0-9]* examples\/s.*//' "$1.out"
}
csv_spec single.json ids ids 100 "$WORK/small" >ids.json
"$PSFLOW_BIN" train ids.json --log-every 25 --threads 1 >ids.out 2>ids.log ||
  fail "psflow train ids.json: $(tail -n 3 ids.log)"
figures single >svm.fig
figures ids >ids.fig
grep -q 'test accuracy' svm.fig && [ "$(grep -c loss svm.fig)" -ge 9 ] ||
  fail "too few figures: $(cat svm.fig)"
diff svm.fig ids.fig >/dev/null || fail "csv ids and libsvm trained differently: $(diff svm.fig ids.fig | head -n 6)"
nacc=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' names.out)
echo "categorical csv: integer ids train as libsvm ($(wc -l <ids.fig) identical lines); hashed names: test accuracy $nacc"
accurate "$nacc" 0.84 || fail "hashed names: test accuracy $nacc below 0.84"

pass "embeddings: one process $acc, sync equivalence $diff, async $aacc, hashed csv $nacc; bad files refused"
