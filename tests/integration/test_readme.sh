#!/usr/bin/env bash
# labels: slow
# timeout: 300
# The README's commands work as written: the "Distributed training" block is extracted
# from README.md and run with free ports, the built binary and a shortened copy of the
# example job; the chief prints its result and every task exits 0.
source "$(dirname "$0")/lib.sh"

python3 - "$PSFLOW_SRC/README.md" >snippet.sh <<'PY'
import re, sys
text = open(sys.argv[1]).read()
section = text.split("## Distributed training", 1)[1]
print(re.search(r"```sh\n(.*?)```", section, re.S).group(1))
PY
[ -s snippet.sh ] || fail "no sh block under 'Distributed training' in README.md"

python3 - "$PSFLOW_SRC/examples/fashion-mnist-mlp.json" >short.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["training"].update(max_steps=200, eval_every_steps=0)
json.dump(d, sys.stdout)
PY
read -r -a ports <<<"$(free_ports 4)"
sed -e "s|build/psflow|$PSFLOW_BIN|g" -e "s|examples/fashion-mnist-mlp.json|$WORK/short.json|g" \
  -e "s|2222|${ports[0]}|g; s|2223|${ports[1]}|g; s|2224|${ports[2]}|g; s|2225|${ports[3]}|g" \
  snippet.sh >run.sh
echo 'wait' >>run.sh # the README leaves the other tasks in the background
timeout 240 bash run.sh >out.txt 2>err.txt || { tail -20 err.txt; fail "README block failed"; }
cat out.txt
grep -q '^fmnist-mlp: 200 steps, test accuracy 0\.[0-9]*' out.txt || fail "no result line from the chief"
[ -f checkpoints/fmnist-mlp/step-200/manifest.json ] || fail "no final checkpoint"
pass "README distributed block runs as written"
