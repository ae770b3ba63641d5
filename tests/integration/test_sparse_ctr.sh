#!/usr/bin/env bash
# labels: slow
# timeout: 1500
# Embedding tables by rows (docs/embeddings.md): a CTR model over 20.1 million ids (user
# 16,000,000 + item 4,000,000 + site 100,000 rows, dimension 16: 1.29 GB of tables, each
# split over both ps), synthetic_ctr data (Zipf exponent 1.6), adagrad:
#  1. sync equivalence on every row: 100 steps of 2 ps + 2 workers x 250 examples export
#     the same variables as `psflow train` with batch 500 (max |diff| <= 1e-5), the two
#     running at once, on tables half as large (10.05 million ids: 0.64 GB, in each of the
#     two runs, and their exports); the data are the 50,000 examples those steps read (not
#     2,000,000: every task generates them, and evaluates the 10,000 test examples);
#  2. sync, 2 ps + 2 workers, 12000 steps over 2,000,000 examples: the chief's test AUC is
#     within 0.01 of the generator's Bayes-optimal AUC (the chief's own figure); each worker
#     runs with its data segment limited to 1 GB (prlimit --data), less than the tables, and
#     its peak RSS stays under 200 MB (/usr/bin/time): a worker holds a batch's rows, never
#     the tables;
#  3. async, the same with 16000 steps.
# Under a sanitizer build (shadow memory, a quarantine of freed blocks; many times slower) the
# same checks run on tables 100 times smaller, 100,000 examples and a fortieth of the steps,
# without the memory limit and the RSS and AUC bounds: that tier looks for memory errors on
# the row path.
source "$(dirname "$0")/lib.sh"

scale=1 examples=2000000 sanitizer=
if sanitized_build; then
  scale=100 examples=100000 sanitizer=1
  echo "sanitizer build: tables 100 times smaller, 1/40 of the steps, no RSS, memory or AUC bound"
fi

spec() { # NAME MODE BATCH STEPS [EXAMPLES [SCALE]]
  local scale=${6:-$scale}
  cat <<JSON
{
  "name": "$1",
  "replicas": {"ps": 2, "worker": 2},
  "model": {"type": "softmax", "outputs": 2,
            "embeddings": [{"name": "user", "vocab": $((16000000 / scale)), "dim": 16},
                           {"name": "item", "vocab": $((4000000 / scale)), "dim": 16},
                           {"name": "site", "vocab": $((100000 / scale)), "dim": 16}]},
  "data": {"format": "synthetic_ctr", "n": ${5:-$examples}, "zipf": 1.6},
  "optimizer": {"type": "adagrad", "learning_rate": 1.0},
  "training": {"mode": "$2", "batch_size": $3, "max_steps": $4},
  "placement": {"strategy": "greedy", "partitioner": {"type": "fixed_shards", "num_shards": 2}}
}
JSON
}

# --- 1. sync equivalence ----------------------------------------------------------------
# one BLAS thread, as each worker has: the two cores are the cluster's and this run's
equiv_scale=$((scale * 2))
spec equiv sync 500 100 50000 $equiv_scale >single.json
"$PSFLOW_BIN" train "$WORK/single.json" --output json --save single.safetensors --threads 1 \
  >single.out 2>single.log &
single=$!
spec equiv sync 250 100 50000 $equiv_scale >equiv.json
run_static_cluster equiv.json 2 >/dev/null
wait_pid $single 400 || fail "psflow train exited $?: $(tail -n 3 single.log)"
bayes=$(json_field single.out 'd["bayes_auc"]')
in_range "$bayes" 0.6 0.99 || fail "Bayes-optimal auc $bayes"
grep -rqa 'user/embeddings/part_1' "$WORK/ckpt/equiv" || fail "the user table was not split in two"
"$PSFLOW_BIN" export "$WORK/ckpt/equiv" --out dist.safetensors >/dev/null || fail "export failed"
diff=$(max_abs_diff single.safetensors dist.safetensors)
echo "sync equivalence: max |one process - 2 ps + 2 workers| = $diff over $((20100000 / equiv_scale)) rows"
in_range "$diff" 0 1e-5 || fail "distributed sync differs from psflow train by $diff"
rm -rf "$WORK/ckpt" single.safetensors dist.safetensors

# --- 2, 3. sync and async: AUC and the workers' memory ----------------------------------
for mode in sync async; do
  steps=12000
  [ $mode = async ] && steps=16000
  spec "ctr-$mode" $mode 500 $((sanitizer ? steps / 40 : steps)) >$mode.json
  if [ -n "$sanitizer" ]; then
    run_static_cluster $mode.json 2 >/dev/null
    echo "$mode 2 ps + 2 workers: test auc $(json_field worker0.out 'd["test_auc"]') (sanitizer build)"
    rm -rf "$WORK/ckpt"
    continue
  fi
  STATIC_WORKER_DATA=1000000000 STATIC_RSS=1 run_static_cluster $mode.json 2 >/dev/null
  dauc=$(json_field worker0.out 'd["test_auc"]')
  bayes=$(json_field worker0.out 'd["bayes_auc"]')
  in_range "$bayes" 0.6 0.99 || fail "$mode: Bayes-optimal auc $bayes"
  rss0=$(($(tail -n 1 worker0.rss) * 1024 / 1000000))
  rss1=$(($(tail -n 1 worker1.rss) * 1024 / 1000000))
  echo "$mode 2 ps + 2 workers: test auc $dauc, Bayes-optimal $bayes; worker peak RSS $rss0 MB, $rss1 MB"
  in_range "$(python3 -c "print($bayes - $dauc)")" -0.01 0.01 ||
    fail "$mode: auc $dauc is not within 0.01 of the Bayes-optimal $bayes"
  [ "$rss0" -lt 200 ] && [ "$rss1" -lt 200 ] ||
    fail "$mode: a worker's peak RSS ($rss0 MB, $rss1 MB) is not under 200 MB"
  eval "auc_$mode=$dauc rss_$mode='$rss0/$rss1'"
  rm -rf "$WORK/ckpt"
done
if [ -n "$sanitizer" ]; then
  pass "sparse ctr (sanitizer build, $((20100000 / scale)) ids): sync equivalence $diff over $((20100000 / equiv_scale)) rows"
  exit 0
fi
pass "sparse ctr (20.1 M ids, 1.29 GB of tables): sync equivalence $diff, sync auc $auc_sync, async auc $auc_async, Bayes $bayes; worker peak RSS sync $rss_sync MB, async $rss_async MB"
