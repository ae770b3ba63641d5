#!/usr/bin/env bash
# labels: sanitizer-only
# Repartitioning restore, with real ps and worker processes on 127.0.0.1 (TF_CONFIG +
# --job): a job trained on 2 ps tasks (every variable in 2 parts, Adam) is resubmitted with
# 3 ps tasks (3 parts), with 1 ps task (no partitioner) and with 2 ps tasks under greedy
# placement. Each ps reassembles its shards from the slices the checkpoint's files hold:
#  - resubmitted at the same max_steps, the job trains no step and its final checkpoint,
#    now written by the new ps tasks, exports to exactly the same variables (the slots are
#    checked element by element in tests/sharding/test_checkpoint.c);
#  - resubmitted with more steps, training continues from the restored step and the job
#    completes with its accuracy.
source "$(dirname "$0")/lib.sh"

spec() { # PS PLACEMENT_JSON STEPS
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$@" <<'PY'
import json, sys
src, ps, placement, steps = sys.argv[1:5]
d = json.load(open(src))
d["name"] = "grow"
d["replicas"] = {"ps": int(ps), "worker": 1}
d["training"].update(mode="async", max_steps=int(steps), eval_every_steps=0)
d["training"].pop("replicas_to_aggregate", None)
d["optimizer"] = {"type": "adam", "learning_rate": 0.001}
d["placement"] = json.loads(placement)
d["checkpoint"] = {"every_steps": 300, "keep": 5}
json.dump(d, sys.stdout)
PY
}

PIDS=()
trap 'rc=$?; kill -9 "${PIDS[@]}" 2>/dev/null || true; (exit $rc); cleanup' EXIT

run_job() { # JOB_FILE N_PS CKPT_DIR LOG_PREFIX: a static cluster to the end; all exit 0
  local ports ps_ports i rc=0
  read -r -a ports <<<"$(free_ports $(($2 + 1)))"
  ps_ports=$(IFS=,; echo "${ports[*]:0:$2}")
  PIDS=()
  for ((i = 0; i < $2; i++)); do
    TF_CONFIG=$(tf_config ps "$i" "$ps_ports" "${ports[$2]}") "$PSFLOW_BIN" ps --job "$1" \
      --checkpoint-dir "$3" --exit-grace 1 2>"$WORK/$4-ps$i.log" &
    PIDS+=($!)
  done
  TF_CONFIG=$(tf_config worker 0 "$ps_ports" "${ports[$2]}") "$PSFLOW_BIN" worker --job "$1" \
    --checkpoint-dir "$3" --log-every 100 >"$WORK/$4-chief.out" 2>"$WORK/$4-chief.log" &
  PIDS+=($!)
  for i in "${!PIDS[@]}"; do
    wait_pid "${PIDS[$i]}" 300 || { rc=$?; echo "process $i of $4 exited $rc" >&2; }
  done
  [ "$rc" = 0 ] || { tail -n 5 "$WORK/$4"-*.log >&2; fail "$4: a process exited non-zero"; }
}

# tensors_equal A B: every tensor of both files (names, shapes, bytes) is the same.
tensors_equal() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["shape"], data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if sorted(a) != sorted(b):
    sys.exit("tensor names differ: %s vs %s" % (sorted(a), sorted(b)))
for k in a:
    if a[k] != b[k]:
        sys.exit("tensor %s differs" % k)
print("%d tensors identical (%s)" % (len(a), ", ".join(sorted(a))))
PY
}

TWO='{"partitioner": {"type": "fixed_shards", "num_shards": 2}}'
spec 2 "$TWO" 600 >two.json
run_job two.json 2 "$WORK/ckpt" two
[ -f "$WORK/ckpt/grow/step-600/manifest.json" ] || fail "no step-600 checkpoint"
"$PSFLOW_BIN" export "$WORK/ckpt/grow/step-600" --out "$WORK/before.safetensors" >/dev/null ||
  fail "export of the 2-ps checkpoint failed"
echo "2 ps: $(cat "$WORK/two-chief.out")"

n=0
for layout in '3|{"partitioner": {"type": "fixed_shards", "num_shards": 3}}' '1|{}' \
  '2|{"strategy": "greedy"}'; do
  n=$((n + 1))
  ps=${layout%%|*}
  placement=${layout#*|}
  cp -r "$WORK/ckpt" "$WORK/ckpt$n"
  spec "$ps" "$placement" 600 >same$n.json
  run_job same$n.json "$ps" "$WORK/ckpt$n" same$n
  for ((i = 0; i < ps; i++)); do
    grep -q "restored from .*/step-600 (step 600, .*repartitioned from a checkpoint of 2 ps tasks" \
      "$WORK/same$n-ps$i.log" || { cat "$WORK/same$n-ps$i.log" >&2; fail "ps $i of $ps did not repartition step-600"; }
  done
  grep -q '"num_ps": *'"$ps" "$WORK/ckpt$n/grow/step-600/manifest.json" ||
    fail "step-600 was not written again by $ps ps tasks: $(cat "$WORK/ckpt$n/grow/step-600/manifest.json")"
  "$PSFLOW_BIN" export "$WORK/ckpt$n/grow/step-600" --out "$WORK/after$n.safetensors" >/dev/null ||
    fail "export after the restore into $ps ps failed"
  same=$(tensors_equal "$WORK/before.safetensors" "$WORK/after$n.safetensors") ||
    fail "the export after a restore into $ps ps ($placement) differs: $same"
  echo "2 ps -> $ps ps ($placement): $same"

  spec "$ps" "$placement" 1200 >more$n.json
  run_job more$n.json "$ps" "$WORK/ckpt$n" more$n
  grep -q 'restored from .*/step-600 (step 600' "$WORK/more$n-ps0.log" ||
    fail "the longer job did not start from step-600"
  acc=$(grep -o 'test accuracy [0-9.]*' "$WORK/more$n-chief.out" | awk '{print $3}')
  [ -n "$acc" ] && in_range "$acc" 0.80 1 || fail "continued on $ps ps: $(cat "$WORK/more$n-chief.out")"
  [ -f "$WORK/ckpt$n/grow/step-1200/manifest.json" ] || fail "no step-1200 checkpoint on $ps ps"
  echo "continued on $ps ps from step 600: $(cat "$WORK/more$n-chief.out")"
done
pass "a 2-ps checkpoint restored into 3, 1 and 2 (greedy) ps tasks: identical exports, training continued"
