#!/usr/bin/env bash
# labels: slow
# timeout: 300
# A ps task's memory follows its own share (psflow/footprint.h): real ps and worker
# processes on 127.0.0.1 (bench/ps_memory.sh) train a 784-4096-4096-10 MLP (80 MB) with
# Adam on two ps tasks, and each ps's peak RSS (ru_maxrss) stays within 1.5 x the bound it
# logs at start (pf_footprint_ps_bytes). The bound has no term the size of the whole model,
# so a ps that built or received the whole model, or kept a copy of every message, fails.
# Under a sanitizer build (shadow memory, a quarantine of freed blocks) RSS says nothing
# about the ps: the cluster still runs, and the test reports the check skipped (77).
source "$(dirname "$0")/lib.sh"

out=$(TMPDIR=$WORK "$PSFLOW_SRC/bench/ps_memory.sh" -b "$(dirname "$PSFLOW_BIN")" -o adam -p 2 -s 3 4096 4096) ||
  fail "the cluster failed: $out"
echo "$out"
if sanitized_build; then
  echo "sanitizer build: peak RSS not compared with the bound"
  exit 77
fi
n=0
while read -r ratio; do
  n=$((n + 1))
  in_range "$ratio" 0 1.5 || fail "a ps peaked at $ratio x its bound: $out"
done < <(sed -n 's/.*ps [0-9]*: .*peak\/bound \([0-9.]*\)$/\1/p' <<<"$out")
[ "$n" = 2 ] || fail "expected two ps lines with a bound: $out"
pass "each ps's peak RSS stays within 1.5 x the bound of its own share"
