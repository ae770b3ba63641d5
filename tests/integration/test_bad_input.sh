#!/usr/bin/env bash
# Bad input while streaming (data.streaming, formats criteo and csv): each of a non-hex id, a
# number past int64 (criteo) or float32 (csv), a line with too many fields and one with too
# few, a 100 MB line without a newline, a gzip file cut short, an empty file and two gzip
# bombs (1 GiB of NUL bytes, no newline; 1 GiB of "garbage" lines), all made here, in
#  1. `psflow train`, data.on_error fail: exits 65 naming the file, the line and the column;
#     the run stops before the step whose batch holds the bad example: its JSON "steps" is
#     floor(examples before it / batch), and the variables it saves are byte for byte those
#     of a clean run of that many steps (no bad line changed a variable);
#  2. `psflow train`, on_error skip: every bad line is skipped (counted once though read in 3
#     epochs), the variables equal byte for byte a clean run on the good lines only; past
#     max_bad_lines it exits 65 saying "more than N bad lines" and naming the last;
#  3. a static cluster (1 ps + 1 worker, TF_CONFIG + --job): the worker refuses the same
#     way, the ps never reaches the bad step's version, the newest checkpoint equals a clean
#     run; with skip the worker counts the bad lines in its log and ends as `psflow train`;
#  4. every process's peak RSS (/usr/bin/time %M) stays under 80 MiB, far under the 100 MB
#     line and the 1 GiB bombs (not under a sanitizer build, whose shadow memory makes RSS
#     meaningless).
# A defect found is reported by known_bug ("KNOWN BUG: ..."): the test goes on and exits 1
# at the end, so the correct behaviour stays what is expected.
source "$(dirname "$0")/lib.sh"

BATCH=32
RSS_MAX=$((80 * 1024)) # KiB
KNOWN=()
known_bug() {
  echo "KNOWN BUG: $*" >&2
  KNOWN+=("$*")
}
FIGURES=()

# --- data --------------------------------------------------------------------------------
"$PSFLOW_BIN" data gen criteo --rows 9300 --files 1 --seed 11 --out "$WORK/gen" >gen.out ||
  fail "data gen exited $?"
G=$WORK/gen/part-00000.tsv
head -3000 "$G" >clean.tsv             # the good lines the bad ones go among
sed -n 3001,3300p "$G" >test.tsv       # the test set (read whole)
sed -n 3301,9300p "$G" >more.tsv       # 6000 good lines after a bomb
to_csv() { # label and the 13 integers as log(1 + x), comma-separated
  awk -F'\t' '{s=$1; for(i=2;i<=14;i++){v=$i==""?0:$i; if(v<0)v=0; s=s "," sprintf("%.4f",log(1+v))} print s}' "$1"
}
to_csv clean.tsv >clean.csv
to_csv test.tsv >test.csv
long_line() { head -c 100000000 /dev/zero | tr '\0' "$1"; echo; } # 100 MB, then a newline

# bad criteo lines, each made from the first good one
python3 - clean.tsv <<'PY'
f = open("clean.tsv").readline().rstrip("\n").split("\t")
def put(name, i, v):
    g = list(f); g[i] = v; open(name, "w").write("\t".join(g) + "\n")
put("bad-hex.line", 15, "beef!")                 # C2
put("bad-ovf.line", 2, "99999999999999999999")   # I2, past int64
open("bad-many.line", "w").write("\t".join(f + ["7"]) + "\n")
open("bad-few.line", "w").write("\t".join(f[:20]) + "\n")
PY
# FILE LINE BADFILE: the good lines with BADFILE's line put before line LINE
insert_at() { { head -$(($2 - 1)) "$1"; cat "$3"; tail -n +"$2" "$1"; }; }
insert_at clean.tsv 100 bad-hex.line >hex.tsv
insert_at clean.tsv 1000 bad-ovf.line >ovf.tsv
insert_at clean.tsv 1500 bad-many.line >many.tsv
insert_at clean.tsv 2000 bad-few.line >few.tsv
{ head -2499 clean.tsv; long_line a; tail -n +2500 clean.tsv; } >long.tsv
gzip -c clean.tsv >trunc.gz && truncate -s 150000 trunc.gz # about the first half
: >empty.tsv
mkdir with-empty && cp clean.tsv with-empty/a.tsv && : >with-empty/b.tsv
# the bombs: 16 gzip members of 64 MiB each (a gzip file may be members one after another)
head -c 64M /dev/zero | gzip -9 >zeros.gz
{ yes garbage || true; } | head -c 64M | gzip -9 >garbage.gz
for i in $(seq 16); do cat zeros.gz; done >bomb0.gz
for i in $(seq 16); do cat garbage.gz; done >bombg.gz
{ cat bomb0.gz; printf '\n' | gzip; gzip -c more.tsv; } >bomb-then-good.gz
BOMB_GZ=$(stat -c %s bomb0.gz)
# every bad criteo line among the good ones: before lines 100, 1000, 1500, 2000, 2500 (the
# 100 MB line), so at lines 100, 1001, 1502, 2003, 2504 of dirty.tsv
{
  head -99 clean.tsv; cat bad-hex.line; sed -n 100,999p clean.tsv; cat bad-ovf.line
  sed -n 1000,1499p clean.tsv; cat bad-many.line; sed -n 1500,1999p clean.tsv
  cat bad-few.line; sed -n 2000,2499p clean.tsv; long_line a; tail -n +2500 clean.tsv
} >dirty.tsv

# csv: the same kinds, at line 100
awk -F, 'BEGIN{OFS=","} NR==100{$3="1e999"} {print}' clean.csv >c-ovf.csv
awk -F, 'BEGIN{OFS=","} NR==100{$15="7"} {print}' clean.csv >c-many.csv
awk -F, 'BEGIN{OFS=","} NR==100{NF=8} {print}' clean.csv >c-few.csv
{ head -99 clean.csv; long_line 1; tail -n +100 clean.csv; } >c-long.csv
gzip -c clean.csv >c-trunc.gz && truncate -s 40000 c-trunc.gz
: >c-empty.csv
awk -F, 'BEGIN{OFS=","} NR==100{$3="1e999"} NR==1000{$15="7"} NR==2000{NF=8} {print}' clean.csv >c-3bad.csv
{ head -2499 c-3bad.csv; long_line 1; tail -n +2500 c-3bad.csv; } | gzip >c-dirty.csv.gz # 4 bad lines, the last 100 MB
awk -F, 'NR!=100 && NR!=1000 && NR!=2000' clean.csv >c-good.csv # the same, good lines only

# --- jobs ----------------------------------------------------------------------------------
# spec NAME FORMAT STEPS TRAIN [DATA_JSON]: a small model (criteo: 26 tables of at most 1000
# ids of dim 4 and 13 numbers; csv: 13 numbers), one stream, batch 32.
spec() {
  python3 - "$PSFLOW_SRC/examples/criteo-mlp.json" "$WORK" "$@" <<'PY'
import json, sys
src, work, name, fmt, steps, train = sys.argv[1:7]
extra = json.loads(sys.argv[7]) if len(sys.argv) > 7 else {}
if fmt == "criteo":
    d = json.load(open(src))
    for e in d["model"]["embeddings"]:
        e.update(vocab=min(e["vocab"], 1000), dim=4)
    d["model"].update(hidden=[8], activation="tanh")
    test = work + "/test.tsv"
else:
    d = {"model": {"type": "mlp", "inputs": 13, "hidden": [8], "outputs": 2},
         "optimizer": {"type": "adagrad", "learning_rate": 0.1}, "training": {}}
    test = work + "/test.csv"
d["name"] = name
d["replicas"] = {"ps": 1, "worker": 1}
d["data"] = {"format": fmt, "streaming": True, "train": [work + "/" + train], "test": [test],
             "split_mb": 1024}  # one split per file: the 100 MB line does not cut it
d["data"].update(extra)
d["training"].update(batch_size=32, max_steps=int(steps), eval_every_steps=0)
json.dump(d, sys.stdout)
PY
}

# train NAME WANT_RC: `psflow train NAME.json` under /usr/bin/time, its variables in NAME.st,
# JSON result in NAME.out, stderr in NAME.err, peak RSS (KiB) checked and kept in FIGURES.
train() {
  local name=$1 want=$2 rc=0 rss
  /usr/bin/time -f %M -o "$name.rss" "$PSFLOW_BIN" train "$name.json" --backend reference \
    --save "$name.st" --output json >"$name.out" 2>"$name.err" || rc=$?
  [ "$rc" = "$want" ] || { tail -5 "$name.err" >&2; fail "$name: psflow train exited $rc, expected $want"; }
  rss=$(tail -1 "$name.rss")
  FIGURES+=("$name $((rss / 1024))MiB")
  if ! sanitized_build; then
    [ "$rss" -lt "$RSS_MAX" ] || fail "$name: peak RSS $rss KiB, over $RSS_MAX"
  fi
}
steps_of() { json_field "$1.out" 'd["steps"]'; }

# same_vars A B: the two safetensors files hold the same tensors, byte for byte.
same_vars() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    h = json.loads(data[8:8 + n])
    return {k: data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
            for k, v in h.items() if k != "__metadata__"}
a, b = load(sys.argv[1]), load(sys.argv[2])
differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
sys.exit("variables differ: %s" % ", ".join(differ[:5]) if differ else 0)
PY
}

# clean FORMAT STEPS [TRAIN]: a clean run of STEPS steps on TRAIN (clean.tsv or clean.csv); its
# variables in the file CLEAN names (clean-FORMAT-STEPS-TRAIN.st, run once)
clean() {
  local fmt=$1 steps=$2 file=${3:-clean.$([ "$1" = criteo ] && echo tsv || echo csv)}
  local name=clean-$fmt-$steps-${file%%.*}
  if [ ! -e "$name.st" ]; then
    spec "$name" "$fmt" "$steps" "$file" >"$name.json"
    train "$name" 0
  fi
  CLEAN=$name.st
}

# where NAME FILE LINE: the error in NAME.err names FILE and LINE (fails if not), and a column
# (a known bug if not).
where() {
  local name=$1 file=$2 line=$3 msg
  msg=$(grep -F -m1 "$file" "$name.err" || true)
  [ -n "$msg" ] || fail "$name: no message names $file: $(tail -2 "$name.err")"
  grep -qE "$file(:| line |: line )$line([^0-9]|\$)|line $line([^0-9]|\$)" <<<"$msg" ||
    fail "$name: the message does not name line $line: $msg"
  grep -q 'column' <<<"$msg" || known_bug "$name: the message names no column: $msg"
  echo "$name: $msg"
}

# fail_case NAME FORMAT FILE LINE GOOD_BEFORE [WHERE_FILE]: on_error fail: exit 65 naming FILE
# and LINE, the run stopped at the step whose batch holds example GOOD_BEFORE (0-based), with
# the variables of a clean run that long.
fail_case() {
  local name=$1 fmt=$2 file=$3 line=$4 before=$5 steps
  spec "$name" "$fmt" 200 "$file" >"$name.json"
  train "$name" 65
  where "$name" "${6:-$file}" "$line"
  [ "$(json_field "$name.out" 'd["reason"]')" = InputError ] ||
    fail "$name: the JSON result does not say InputError: $(cat "$name.out")"
  steps=$(steps_of "$name")
  [ "$steps" = $((before / BATCH)) ] ||
    fail "$name: stopped after $steps steps, expected $((before / BATCH)) (the batch of example $before)"
  if [ "$steps" != 0 ]; then
    clean "$fmt" "$steps"
    same_vars "$name.st" "$CLEAN" || fail "$name: the variables after $steps steps are not a clean run's"
  fi
}

# --- 1. on_error fail, psflow train --------------------------------------------------------
fail_case hex criteo hex.tsv 100 99
grep -q "hex.tsv:100: column C2: 'beef!' is not a hex id" hex.err || fail "hex: $(tail -1 hex.err)"
fail_case ovf criteo ovf.tsv 1000 999
grep -q "ovf.tsv:1000: column I2: .* overflows a 64-bit integer" ovf.err || fail "ovf: $(tail -1 ovf.err)"
fail_case many criteo many.tsv 1500 1499
fail_case few criteo few.tsv 2000 1999
fail_case long criteo long.tsv 2500 2499
grep -q 'longer than' long.err || fail "long: $(tail -1 long.err)"
# a gzip file cut short: the line it ends in is the bad one
TRUNC_LINE=$(python3 -c 'import zlib,sys; print(zlib.decompressobj(31).decompress(open(sys.argv[1],"rb").read()).count(b"\n") + 1)' trunc.gz)
fail_case trunc criteo trunc.gz "$TRUNC_LINE" $((TRUNC_LINE - 1))
grep -q 'gzip data ends early' trunc.err || fail "trunc: $(tail -1 trunc.err)"
fail_case bomb0 criteo bomb0.gz 1 0
fail_case bombg criteo bombg.gz 1 0
# an empty file: alone it holds no example, named; beside a good file it is no error
spec empty criteo 200 empty.tsv >empty.json
train empty 65
grep -q 'empty.tsv' empty.err && grep -q 'no example' empty.err || fail "empty: $(tail -1 empty.err)"
spec with-empty criteo 200 with-empty >with-empty.json
train with-empty 0
clean criteo 200
same_vars with-empty.st "$CLEAN" || fail "an empty file beside a good one changed the run"

fail_case c-ovf csv c-ovf.csv 100 99
grep -q 'line 100, field 3: 1e999 is out of float32 range' c-ovf.err || fail "c-ovf: $(tail -1 c-ovf.err)"
fail_case c-many csv c-many.csv 100 99
fail_case c-few csv c-few.csv 100 99
fail_case c-long csv c-long.csv 100 99
C_TRUNC_LINE=$(python3 -c 'import zlib,sys; print(zlib.decompressobj(31).decompress(open(sys.argv[1],"rb").read()).count(b"\n") + 1)' c-trunc.gz)
fail_case c-trunc csv c-trunc.gz "$C_TRUNC_LINE" $((C_TRUNC_LINE - 1))
fail_case c-bomb0 csv bomb0.gz 1 0
spec c-empty csv 200 c-empty.csv >c-empty.json
train c-empty 65
grep -q 'c-empty.csv' c-empty.err || fail "c-empty: $(tail -1 c-empty.err)"

# --- 2. on_error skip, psflow train ----------------------------------------------------------
# 200 steps of 32 read dirty.tsv's 3000 good lines 2.1 times: each bad line is met 3 times
spec skip criteo 200 dirty.tsv '{"on_error": "skip", "max_bad_lines": 10}' >skip.json
train skip 0
clean criteo 200
same_vars skip.st "$CLEAN" || fail "skip: the run on dirty.tsv is not the clean run"
grep -q 'skipped 5 bad line(s) in all' skip.err || fail "skip: psflow train did not say it skipped 5 lines: $(tail -3 skip.err)"
[ "$(json_field skip.out 'd["bad_lines_skipped"]')" = 5 ] || fail "skip: JSON result: $(cat skip.out)"
# past the cap: the 5th bad line (the 100 MB line, dirty.tsv:2504) is one too many
spec skip-cap criteo 200 dirty.tsv '{"on_error": "skip", "max_bad_lines": 4}' >skip-cap.json
train skip-cap 65
grep -q 'more than 4 bad lines (data.max_bad_lines); the last: .*dirty.tsv:2504: ' skip-cap.err ||
  fail "skip-cap: $(tail -1 skip-cap.err)"
[ "$(steps_of skip-cap)" = $((2499 / BATCH)) ] || fail "skip-cap: stopped after $(steps_of skip-cap) steps"
clean criteo $((2499 / BATCH))
same_vars skip-cap.st "$CLEAN" || fail "skip-cap: variables are not a clean run's"
# a gzip file cut short: its corrupt end is one bad line, the stream goes on with its next epoch
head -$((TRUNC_LINE - 1)) clean.tsv >trunc-good.tsv
spec skip-trunc criteo 200 trunc.gz '{"on_error": "skip", "max_bad_lines": 10}' >skip-trunc.json
train skip-trunc 0
clean criteo 200 trunc-good.tsv
same_vars skip-trunc.st "$CLEAN" || fail "skip-trunc: not the run on its good lines"
# the NUL bomb is one bad line of 1 GiB, read past in bounded memory; then 6000 good lines
# (read once: 40 steps and the 4096 examples read ahead end before the file does)
spec skip-bomb0 criteo 40 bomb-then-good.gz '{"on_error": "skip", "max_bad_lines": 10}' >skip-bomb0.json
SECONDS_BEFORE=$SECONDS
train skip-bomb0 0
BOMB_SECONDS=$((SECONDS - SECONDS_BEFORE))
clean criteo 40 more.tsv
same_vars skip-bomb0.st "$CLEAN" || fail "skip-bomb0: not the run on the good lines"
# the garbage bomb: 134 M bad lines, the 101st fails the run
spec skip-bombg criteo 200 bombg.gz '{"on_error": "skip", "max_bad_lines": 100}' >skip-bombg.json
train skip-bombg 65
grep -q 'more than 100 bad lines (data.max_bad_lines); the last: .*bombg.gz:101: ' skip-bombg.err ||
  fail "skip-bombg: $(tail -1 skip-bombg.err)"
# csv
spec c-skip csv 200 c-dirty.csv.gz '{"on_error": "skip", "max_bad_lines": 10}' >c-skip.json
train c-skip 0
clean csv 200 c-good.csv
same_vars c-skip.st "$CLEAN" || fail "c-skip: not the run on the good lines"
spec c-skip-cap csv 200 c-dirty.csv.gz '{"on_error": "skip", "max_bad_lines": 3}' >c-skip-cap.json
train c-skip-cap 65
grep -q 'more than 3 bad lines (data.max_bad_lines); the last: .*c-dirty.csv.gz: line 2500' c-skip-cap.err ||
  fail "c-skip-cap: $(tail -1 c-skip-cap.err)"
echo "psflow train: every bad line refused (exit 65) or skipped, variables those of the good lines"

# --- 3. a static cluster: 1 ps + 1 worker ---------------------------------------------------
# on_error fail: the bad line at hex1000.tsv:1000 is example 999, in the batch of step 31
insert_at clean.tsv 1000 bad-hex.line >hex1000.tsv
spec cl-fail criteo 200 hex1000.tsv '{}' |
  python3 -c 'import json,sys; d=json.load(sys.stdin); d["checkpoint"]={"every_steps":1,"every_secs":0}; json.dump(d,sys.stdout)' >cl-fail.json
read -r -a P <<<"$(free_ports 2)"
TF_CONFIG=$(tf_config ps 0 "${P[0]}" "${P[1]}") "$PSFLOW_BIN" ps --job cl-fail.json \
  --checkpoint-dir "$WORK/ck-fail" 2>"$WORK/cl-ps.log" &
CL_PS=$!
TF_CONFIG=$(tf_config worker 0 "${P[0]}" "${P[1]}") expect_exit 65 /usr/bin/time -f %M -o cl-fail.rss \
  "$PSFLOW_BIN" worker --job cl-fail.json --checkpoint-dir "$WORK/ck-fail"
kill "$CL_PS" 2>/dev/null || true
wait "$CL_PS" 2>/dev/null || true
cp "$WORK/stderr" cl-fail.err
grep -q "hex1000.tsv:1000: column C2: 'beef!' is not a hex id" cl-fail.err ||
  fail "the worker, a bad line: $(tail -2 cl-fail.err)"
CL_RSS=$(tail -1 cl-fail.rss)
FIGURES+=("cl-fail(worker) $((CL_RSS / 1024))MiB")
sanitized_build || [ "$CL_RSS" -lt "$RSS_MAX" ] || fail "cl-fail: the worker's peak RSS $CL_RSS KiB"
LAST_STEP=$(ls "$WORK/ck-fail/cl-fail" | sed -n 's/^step-\([0-9]*\)$/\1/p' | sort -n | tail -1)
[ "${LAST_STEP:-0}" -le 31 ] || fail "the ps checkpointed step $LAST_STEP, past the bad batch (31)"
LAST_VERSION=$({ grep -o 'pushes applied [0-9]*' "$WORK/cl-ps.log" || true; } | tr -dc '0-9\n' | sort -n | tail -1)
[ "${LAST_VERSION:-0}" -le 31 ] || fail "the ps applied $LAST_VERSION pushes, past the bad batch (31)"
"$PSFLOW_BIN" export "$WORK/ck-fail/cl-fail" --out cl-fail.st >cl-export.out 2>&1 || fail "export exited $?"
CK_STEP=$(sed -n 's/.*step \([0-9]*\),.*/\1/p' cl-export.out)
[ "${CK_STEP:-0}" -ge 20 ] || fail "the newest complete checkpoint is step '$CK_STEP': $(cat cl-export.out)"
clean criteo "$CK_STEP"
CL_DIFF=$(max_abs_diff cl-fail.st "$CLEAN")
in_range "$CL_DIFF" 0 1e-5 || fail "the cluster's step-$CK_STEP differs from psflow train's by $CL_DIFF"
echo "cluster, on_error fail: worker exit 65 naming hex1000.tsv:1000 column C2; ps at most version $LAST_VERSION, checkpoint step-$CK_STEP = a clean run (max |diff| $CL_DIFF)"
# on_error skip: the 5 bad lines of dirty.tsv counted once each in the worker's log
spec cl-skip criteo 200 dirty.tsv '{"on_error": "skip", "max_bad_lines": 10}' >cl-skip.json
STATIC_RSS=1 run_static_cluster cl-skip.json 1 1 "$WORK/ck-skip" >/dev/null
CL_SKIP_RSS=$(tail -1 "$WORK/worker0.rss")
FIGURES+=("cl-skip(worker) $((CL_SKIP_RSS / 1024))MiB")
sanitized_build || [ "$CL_SKIP_RSS" -lt "$RSS_MAX" ] || fail "cl-skip: the worker's peak RSS $CL_SKIP_RSS KiB"
SKIPPED=$(sed -n 's/.*skipped [0-9]* bad line(s) (data.on_error skip; \([0-9]*\) of at most 10 so far).*/\1/p' \
  "$WORK/worker0.log" | tail -1)
[ "$SKIPPED" = 5 ] || fail "the worker skipped '$SKIPPED' bad lines, not 5: $(grep skipped "$WORK/worker0.log")"
"$PSFLOW_BIN" export "$WORK/ck-skip/cl-skip" --out cl-skip.st >/dev/null 2>&1 || fail "export exited $?"
clean criteo 200
CL_SKIP_DIFF=$(max_abs_diff cl-skip.st "$CLEAN")
in_range "$CL_SKIP_DIFF" 0 1e-5 || fail "the cluster with skip differs from the clean run by $CL_SKIP_DIFF"
echo "cluster, on_error skip: 5 bad lines counted, the variables of the clean run (max |diff| $CL_SKIP_DIFF)"

# --- the figures ---------------------------------------------------------------------------
echo "peak RSS per run (bound $((RSS_MAX / 1024)) MiB$(sanitized_build && echo ', not applied: sanitizer build')): ${FIGURES[*]}"
echo "the 1 GiB NUL bomb ($BOMB_GZ bytes of gzip) read past in ${BOMB_SECONDS}s"
if [ "${#KNOWN[@]}" -gt 0 ]; then
  printf 'KNOWN BUG: %s\n' "${KNOWN[@]}" >&2
  echo "FAIL: ${#KNOWN[@]} known bug(s) above" >&2
  exit 1
fi
pass "bad input refused by file, line and column or skipped and counted, no variable changed, peak RSS under $((RSS_MAX / 1024)) MiB"
