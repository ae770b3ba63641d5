#!/usr/bin/env bash
# labels: slow
# timeout: 1500
# Embedding tables by rows (README "Embeddings"): a CTR model over 10.1 million ids (user
# 8,000,000 + item 2,000,000 + site 100,000 rows, dimension 16: 646 MB of tables, each split
# over both ps), synthetic_ctr data with Zipf exponent 1.6, adagrad:
#  1. sync equivalence on every row: 100 steps of 2 ps + 2 workers x 250 examples export
#     the same variables as `psflow train` with batch 500 (max |diff| <= 1e-5);
#  2. sync, 2 ps + 2 workers, 4000 steps: the chief's test AUC is within 0.01 of the
#     generator's Bayes-optimal AUC, and each worker's peak RSS is under 200 MB
#     (/usr/bin/time): a worker holds a batch's rows, never the tables;
#  3. async, the same.
source "$(dirname "$0")/lib.sh"

spec() { # NAME MODE BATCH STEPS
  cat <<JSON
{
  "name": "$1",
  "replicas": {"ps": 2, "worker": 2},
  "model": {"type": "softmax", "outputs": 2,
            "embeddings": [{"name": "user", "vocab": 8000000, "dim": 16},
                           {"name": "item", "vocab": 2000000, "dim": 16},
                           {"name": "site", "vocab": 100000, "dim": 16}]},
  "data": {"format": "synthetic_ctr", "n": 500000, "zipf": 1.6},
  "optimizer": {"type": "adagrad", "learning_rate": 0.5},
  "training": {"mode": "$2", "batch_size": $3, "max_steps": $4},
  "placement": {"strategy": "greedy", "partitioner": {"type": "fixed_shards", "num_shards": 2}}
}
JSON
}

# --- 1. sync equivalence ----------------------------------------------------------------
spec equiv sync 500 100 >single.json
"$PSFLOW_BIN" train single.json --output json --save single.safetensors >single.out \
  2>single.log || fail "psflow train exited $?: $(tail -n 3 single.log)"
bayes=$(json_field single.out 'd["bayes_auc"]')
in_range "$bayes" 0.6 0.99 || fail "Bayes-optimal auc $bayes"
spec equiv sync 250 100 >equiv.json
run_static_cluster equiv.json 2 >/dev/null
grep -rqa 'user/embeddings/part_1' "$WORK/ckpt/equiv" || fail "the user table was not split in two"
"$PSFLOW_BIN" export "$WORK/ckpt/equiv" --out dist.safetensors >/dev/null || fail "export failed"
diff=$(max_abs_diff single.safetensors dist.safetensors)
echo "sync equivalence: max |one process - 2 ps + 2 workers| = $diff over 10.1 M rows"
in_range "$diff" 0 1e-5 || fail "distributed sync differs from psflow train by $diff"
rm -rf "$WORK/ckpt" single.safetensors dist.safetensors

# --- 2, 3. sync and async: AUC and the workers' memory ----------------------------------
for mode in sync async; do
  spec "ctr-$mode" $mode 500 4000 >$mode.json
  STATIC_RSS=1 run_static_cluster $mode.json 2 >/dev/null
  dauc=$(json_field worker0.out 'd["test_auc"]')
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
pass "sparse ctr (10.1 M ids): sync equivalence $diff, sync auc $auc_sync, async auc $auc_async, Bayes $bayes; worker peak RSS sync $rss_sync MB, async $rss_async MB"
