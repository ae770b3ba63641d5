#!/usr/bin/env bash
# labels: slow accuracy
# timeout: 900
# The Fashion-MNIST examples reach the published accuracies with `psflow train`:
# softmax regression >= 0.84 (published 0.842) and the MLP >= 0.88 (published 0.883 for
# 256-128-100) in at most 10 epochs.
source "$(dirname "$0")/lib.sh"

[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  fail "Fashion-MNIST missing: run scripts/deps.sh (package dataset-fashion-mnist)"

for example in fashion-mnist-softmax:0.84 fashion-mnist-mlp:0.88; do
  name=${example%%:*}
  target=${example##*:}
  "$PSFLOW_BIN" train "$PSFLOW_SRC/examples/$name.json" --output json --log-every 1000 \
    >"$name.json" 2>"$name.log" || { cat "$name.log"; fail "$name failed"; }
  cat "$name.log"
  acc=$(json_field "$name.json" 'd["test_accuracy"]')
  epochs=$(json_field "$name.json" 'd["epochs"]')
  in_range "$acc" "$target" 1 || fail "$name: test accuracy $acc < $target"
  in_range "$epochs" 0 10 || fail "$name: $epochs epochs > 10"
  pass "$name: test accuracy $acc after $epochs epochs (target $target)"
done
