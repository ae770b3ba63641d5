#!/usr/bin/env bash
# labels: slow
# timeout: 600
# data.streaming: Criteo-layout training files read as streams while training, each replica
# reading its own files, trained as users train them (TF_CONFIG + --job, real processes on
# 127.0.0.1). `psflow data gen criteo` writes 5 files (seed 5); the training entry is the
# folder of 4 of them (one gzip), the fifth is the test set. A mixed model (26 small tables,
# 13 numeric inputs, tanh) trains sync with batch 64:
#  1. 2 workers read 2 streams (their logs say which) and end with the variables of 1 worker
#     of 2 in-graph replicas (max |diff| <= 1e-5): one process reads both streams in turn;
#  2. 1 ps + 2 workers with a checkpoint every 25 steps: with two kill -9 faults in the run
#     (worker 1, then the chief, each started again) the final variables equal those of the
#     same run without faults (max |diff| <= 1e-5), and so does the test AUC: every restarted
#     reader went on where the step left its stream; with the ps killed and started again, it
#     restores a checkpoint, the chief rolls back, and the job ends with the clean run's
#     variables too (max |diff| <= 1e-5), the chief held (kill -STOP) across the restart: a
#     task whose pull of its batch's rows finds the ps gone back drops that batch and takes
#     the step again from the version served;
#  3. the worker's peak RSS while streaming a 270 MiB training file (past the 256 MiB that
#     the other formats' readers take whole) stays under 200 MiB with its data segment
#     limited to 1 GB (prlimit --data); the same job loading the file whole peaks above it;
#     (Not under a sanitizer build, whose shadow memory makes RSS meaningless.)
#  4. fewer splits than replicas (one gzip file for 2) is refused, saying what to do; and
#     `psflow train` of 1 worker of 2 replicas reads the same 2 streams, ending with the
#     variables of the 2 workers (max |diff| <= 1e-5);
#  5. bad lines (a non-hex id, a number past int64, a short line, a gzip file cut short):
#     the worker and `psflow train` exit 65 naming the first by file, line and column;
#     with data.on_error skip (and data.stats from `psflow data stats`, standardising the
#     numbers) the job completes and the 4 are counted once each in the worker's log.
source "$(dirname "$0")/lib.sh"

"$PSFLOW_BIN" data gen criteo --rows 40000 --files 5 --seed 5 --out "$WORK/gen" >gen.out ||
  fail "data gen exited $?"
mkdir "$WORK/train"
mv "$WORK"/gen/part-0000[0-3].tsv "$WORK/train/"
gzip "$WORK/train/part-00001.tsv"
cp "$WORK/gen/truth.json" "$WORK/train/" # metadata beside the data: not read as a data file

spec() { # NAME WORKERS REPLICAS PS STEPS CKPT_EVERY [TRAIN...]
  python3 - "$PSFLOW_SRC/examples/criteo-mlp.json" "$WORK" "$@" <<'PY'
import json, sys
src, work, name, workers, replicas, ps, steps, every = sys.argv[1:9]
train = sys.argv[9:] or [work + "/train"]
d = json.load(open(src))
d["name"] = name
d["replicas"] = {"ps": int(ps), "worker": int(workers)}
if int(replicas) > 1:
    d["replicas_per_worker"] = int(replicas)
m = d["model"]
for e in m["embeddings"]:
    e.update(vocab=min(e["vocab"], 5000), dim=4)
m.update(hidden=[16], activation="tanh")
d["data"] = {"format": "criteo", "streaming": True, "train": train,
             "test": [work + "/gen/part-00004.tsv"]}
d["training"].update(batch_size=64, max_steps=int(steps), eval_every_steps=0)
d["checkpoint"] = {"every_steps": int(every), "every_secs": 0}
json.dump(d, sys.stdout)
PY
}

# --- 1. two workers = one worker of two replicas --------------------------------------
spec stream 2 1 2 100 0 >two.json
run_static_cluster two.json 2 2 "$WORK/ck-two" >/dev/null
for i in 0 1; do
  grep -q "streaming 4 training file(s) in 4 splits as 2 streams, one per replica; this task reads stream(s) $i..$i" \
    "$WORK/worker$i.log" || fail "worker $i: $(grep -m1 streaming "$WORK/worker$i.log")"
done
spec stream 1 2 2 100 0 >one.json
run_static_cluster one.json 1 2 "$WORK/ck-one" >/dev/null
grep -q "as 2 streams, one per replica; this task reads stream(s) 0..1" "$WORK/worker0.log" ||
  fail "one worker of 2 replicas: $(grep -m1 streaming "$WORK/worker0.log")"
"$PSFLOW_BIN" export "$WORK/ck-two/stream" --out two.safetensors 2>export.log || fail "export exited $?"
"$PSFLOW_BIN" export "$WORK/ck-one/stream" --out one.safetensors 2>export.log || fail "export exited $?"
EQUIV=$(max_abs_diff one.safetensors two.safetensors)
in_range "$EQUIV" 0 1e-5 || fail "2 workers differ from 1 worker of 2 replicas by $EQUIV"
echo "2 workers = 1 worker of 2 replicas: max |diff| $EQUIV"

# --- 2. three kill -9 faults ----------------------------------------------------------
STEPS=300
spec faults 2 1 1 $STEPS 25 >faults.json
rm -f "$WORK"/worker*.log
run_static_cluster faults.json 2 1 "$WORK/ck-clean" >clean.out
PIDS=()
start_ps() { # CKPT
  TF_CONFIG=$(tf_config ps 0 "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" ps --job faults.json \
    --checkpoint-dir "$1" --exit-grace 5 2>>"$1.ps.log" &
  PIDS[0]=$!
}
start_worker() { # CKPT INDEX [PUSH-DELAY-MS, 15]
  TF_CONFIG=$(tf_config worker "$2" "$PS_PORTS" "$W_PORTS") "$PSFLOW_BIN" worker --job faults.json \
    --checkpoint-dir "$1" --push-delay-ms "${3:-15}" --log-every 10 --output json \
    >"$1.w$2.out" 2>>"$1.w$2.log" &
  PIDS[$((1 + $2))]=$!
}
kill_at() { # CKPT STEP PROCESS-INDEX WHAT: kill -9 once the chief logged STEP
  wait_until 120 "chief step $2" logged_step_past "$1.w0.log" "$2"
  kill -9 "${PIDS[$3]}"
  wait "${PIDS[$3]}" 2>/dev/null || true
  echo "$4 killed at chief step $(grep -o 'step [0-9]*/' "$1.w0.log" | tail -1 | tr -dc 0-9)"
}
finish() { # CKPT: every process exits 0; the run's variables in CKPT.safetensors
  local rc=0 i
  for i in 1 2 0; do wait_pid "${PIDS[$i]}" 300 || { rc=$?; echo "process $i exited $rc" >&2; }; done
  [ "$rc" = 0 ] || { tail -5 "$1".*.log >&2; fail "a process exited non-zero"; }
  "$PSFLOW_BIN" export "$1/faults" --out "$1.safetensors" 2>export.log || fail "export exited $?"
}
"$PSFLOW_BIN" export "$WORK/ck-clean/faults" --out clean.safetensors 2>export.log || fail "export exited $?"
AUC_CLEAN=$(json_field clean.out '"%.6f" % d["test_auc"]')

# a worker, then the chief
CK=$WORK/ck-faults
read -r -a PORTS <<<"$(free_ports 3)"
PS_PORTS=${PORTS[0]} W_PORTS="${PORTS[1]},${PORTS[2]}"
start_ps "$CK"
start_worker "$CK" 0
start_worker "$CK" 1
kill_at "$CK" 60 2 "worker 1"
start_worker "$CK" 1
kill_at "$CK" 130 1 "the chief"
start_worker "$CK" 0
finish "$CK"
FAULT_DIFF=$(max_abs_diff clean.safetensors "$CK.safetensors")
in_range "$FAULT_DIFF" 0 1e-5 || fail "the run with faults differs from the clean run by $FAULT_DIFF"
AUC_FAULTS=$(json_field "$CK.w0.out" '"%.6f" % d["test_auc"]')
[ "$AUC_CLEAN" = "$AUC_FAULTS" ] || fail "test auc $AUC_FAULTS with faults, $AUC_CLEAN without"
echo "a worker and the chief killed: max |diff| $FAULT_DIFF against the clean run; test auc $AUC_FAULTS both"

# the ps: it restores the newest checkpoint and the chief rolls back. The chief (no push
# delay: it mostly waits for worker 1's push) is held (kill -STOP) from before the ps dies
# until worker 1 went back to the restarted ps, so that its first request after the restart
# is mostly the pull of its next batch's rows: that batch is not the restored step's, and
# is dropped (its gradient, pushed as the restored step's, made the run differ by 6.4e-3).
CK=$WORK/ck-psfault
read -r -a PORTS <<<"$(free_ports 3)"
PS_PORTS=${PORTS[0]} W_PORTS="${PORTS[1]},${PORTS[2]}"
start_ps "$CK"
start_worker "$CK" 0 0
start_worker "$CK" 1
wait_until 120 "chief step 200" logged_step_past "$CK.w0.log" 200
kill -STOP "${PIDS[1]}"
sleep 0.5 # not a condition: the chief's last push answered, worker 1 waits for the next
kill_at "$CK" 200 0 "the ps"
start_ps "$CK"
wait_until 120 "worker 1 back on the restarted ps" grep -q 'every ps at version' "$CK.w1.log"
kill -CONT "${PIDS[1]}"
finish "$CK"
grep -q 'restored from' "$CK.ps.log" || fail "the restarted ps restored no checkpoint"
grep -q 'rolled back from step' "$CK.w0.log" || fail "the chief did not roll back after the ps restart"
PS_DIFF=$(max_abs_diff clean.safetensors "$CK.safetensors")
in_range "$PS_DIFF" 0 1e-5 || fail "the run with the ps killed differs from the clean run by $PS_DIFF"
echo "the ps killed: restored, rolled back, done; max |diff| $PS_DIFF against the clean run"

# --- 3. a file past the whole-file cap, in bounded memory ------------------------------
if sanitized_build; then # the sanitizers' shadow memory and quarantine make RSS meaningless
  echo "sanitizer build: the memory bound of a 270 MiB file is not measured"
  RSS=0 WHOLE=0 BIG=0
else
"$PSFLOW_BIN" data gen criteo --rows 1150000 --files 1 --seed 6 --out "$WORK/big" >big.out ||
  fail "data gen (big) exited $?"
BIG=$(stat -c %s "$WORK/big/part-00000.tsv")
[ "$BIG" -gt $((256 << 20)) ] || fail "the big file is only $BIG bytes"
spec big 1 1 1 200 0 "$WORK/big/part-00000.tsv" >big.json
rm -f "$WORK"/worker*.log
STATIC_RSS=1 STATIC_WORKER_DATA=1000000000 run_static_cluster big.json 1 1 "$WORK/ck-big" >/dev/null
RSS=$(cat "$WORK/worker0.rss")
[ "$RSS" -lt $((200 * 1024)) ] || fail "the streaming worker's peak RSS is $RSS KiB"
python3 - big.json >whole.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["data"]["streaming"] = False
json.dump(d, sys.stdout)
PY
STATIC_RSS=1 run_static_cluster whole.json 1 1 "$WORK/ck-whole" >/dev/null
WHOLE=$(cat "$WORK/worker0.rss")
[ "$WHOLE" -gt $((200 * 1024)) ] || fail "the same file loaded whole took only $WHOLE KiB"
echo "a $((BIG >> 20)) MiB file: the worker's peak RSS $((RSS / 1024)) MiB streaming it, $((WHOLE / 1024)) MiB loading it whole"
fi

# --- 4. refusals -------------------------------------------------------------------------
gzip -c "$WORK/gen/part-00004.tsv" >"$WORK/one.tsv.gz" # a gzip file is one split
spec few 2 1 1 10 0 "$WORK/one.tsv.gz" >few.json
read -r -a P <<<"$(free_ports 3)"
TF_CONFIG=$(tf_config worker 0 "${P[0]}" "${P[1]},${P[2]}") expect_exit 65 "$PSFLOW_BIN" worker --job few.json
grep -q 'give at least 2 gzip files' "$WORK/stderr" || fail "fewer splits than replicas: $(cat "$WORK/stderr")"
# `psflow train` (one process) of 1 worker of 2 replicas reads the same 2 streams
"$PSFLOW_BIN" train one.json --save train.safetensors --output json >train.out 2>train.log ||
  { tail -3 train.log >&2; fail "psflow train exited $?"; }
grep -q 'streaming 4 training file(s) in 4 splits as 2 streams' train.log ||
  fail "psflow train: $(head -2 train.log)"
TRAIN_DIFF=$(max_abs_diff train.safetensors two.safetensors)
in_range "$TRAIN_DIFF" 0 1e-5 || fail "psflow train differs from 2 workers by $TRAIN_DIFF"
echo "psflow train of 2 replicas = 2 workers: max |diff| $TRAIN_DIFF"

# --- 5. bad lines: refused by name, or skipped and counted --------------------------------
mkdir "$WORK/dirty"
head -2000 "$WORK/gen/part-00004.tsv" |
  awk -F'\t' 'BEGIN{OFS="\t"} NR==41{$16="beef!"} NR==77{$3="99999999999999999999"} NR==90{NF=20} {print}' \
    >"$WORK/dirty/a.tsv"
sed -n 2001,4000p "$WORK/gen/part-00004.tsv" | gzip >"$WORK/dirty/b.tsv.gz"
truncate -s -100 "$WORK/dirty/b.tsv.gz" # cut short: its corrupt end is one more bad line
spec dirty 1 1 1 80 0 "$WORK/dirty" >dirty.json
read -r -a P <<<"$(free_ports 2)"
TF_CONFIG=$(tf_config ps 0 "${P[0]}" "${P[1]}") "$PSFLOW_BIN" ps --job dirty.json \
  --checkpoint-dir "$WORK/ck-dirty" 2>"$WORK/dirty-ps.log" &
DIRTY_PS=$!
TF_CONFIG=$(tf_config worker 0 "${P[0]}" "${P[1]}") expect_exit 65 "$PSFLOW_BIN" worker \
  --job dirty.json --checkpoint-dir "$WORK/ck-dirty"
kill "$DIRTY_PS" 2>/dev/null || true
wait "$DIRTY_PS" 2>/dev/null || true
grep -q 'a.tsv:41: column C2: .beef!. is not a hex id' "$WORK/stderr" ||
  fail "a bad line without on_error skip: $(tail -3 "$WORK/stderr")"
expect_exit 65 "$PSFLOW_BIN" train dirty.json
grep -q 'psflow train: .*a.tsv:41: column C2: .beef!. is not a hex id' "$WORK/stderr" ||
  fail "psflow train, a bad line: $(tail -3 "$WORK/stderr")"
"$PSFLOW_BIN" data stats "$WORK/train/part-00000.tsv" --out "$WORK/stats.json" 2>/dev/null ||
  fail "psflow data stats exited $?"
python3 - dirty.json "$WORK/stats.json" >skip.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = "skip"
d["data"].update(on_error="skip", max_bad_lines=10, stats=[sys.argv[2]])
json.dump(d, sys.stdout)
PY
rm -f "$WORK"/worker*.log
run_static_cluster skip.json 1 1 "$WORK/ck-skip" >/dev/null
SKIPPED=$(sed -n 's/.*skipped [0-9]* bad line(s) (data.on_error skip; \([0-9]*\) of at most 10 so far).*/\1/p' \
  "$WORK/worker0.log" | tail -1)
[ "$SKIPPED" = 4 ] || fail "skipped '$SKIPPED' bad lines, not 4: $(grep skipped "$WORK/worker0.log")"
grep -q 'a.tsv:90: .*' "$WORK/worker0.log" || grep -q 'b.tsv.gz' "$WORK/worker0.log" ||
  fail "the skipped lines are not named"
grep 'skipped' "$WORK/worker0.log" | head -4
# The count reaches the job's status and /metrics: the same job on a local cluster.
up_start --ps 1 --workers 1
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d["name"] = "skip-managed"; json.dump(d, sys.stdout)' \
  skip.json >skip-managed.json
code=$(curl -s -o submit.json -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  --data-binary @skip-managed.json "$URL/api/v1/jobs")
[ "$code" = 201 ] || fail "submit skip-managed: HTTP $code $(cat submit.json)"
wait_until 120 "job skip-managed Succeeded" phase_is skip-managed Succeeded
MANAGED_SKIPPED=$(jget "$URL/api/v1/jobs/skip-managed" 'd["status"]["bad_lines_skipped"]')
[ "$MANAGED_SKIPPED" = 4 ] || fail "status.bad_lines_skipped $MANAGED_SKIPPED, not 4"
curl -sf "$URL/metrics" >metrics.txt || fail "GET /metrics"
grep -q '^psflow_job_bad_lines_skipped_total{job="skip-managed"} 4$' metrics.txt ||
  fail "/metrics has no psflow_job_bad_lines_skipped_total 4: $(grep -i bad_lines metrics.txt)"
up_stop
echo "a bad line fails the worker (exit 65) naming a.tsv:41 column C2; with on_error skip 4 bad lines skipped and counted, in the managed job's status.bad_lines_skipped and /metrics too"

pass "2 workers = 1 worker of 2 replicas (max |diff| $EQUIV) = psflow train ($TRAIN_DIFF); a worker and the chief killed end as the clean run (max |diff| $FAULT_DIFF, auc $AUC_FAULTS), the ps killed: rolled back, ending as the clean run ($PS_DIFF); a $((BIG >> 20)) MiB file streamed in $((RSS / 1024)) MiB peak RSS, $((WHOLE / 1024)) MiB loaded whole"
