#!/usr/bin/env bash
# labels: sanitizer-only
# bench/train_distributed.sh runs end to end on a tiny model and prints its table: the
# header, one row per mode with a ratio and every process's peak RSS next to its bound, and
# refuses bad options with exit 64; with --ps 2 (over the socket, --shm off) a peak and a
# bound for each ps; the click-through job (--models ctr) as well. It checks that the
# benchmark works, never its figures (no timing in a pass/fail test).
# labels: integration
source "$(dirname "$0")/lib.sh"

bench=$PSFLOW_SRC/bench/train_distributed.sh
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  fail "Fashion-MNIST missing: run scripts/deps.sh (package dataset-fashion-mnist)"

"$bench" --help >help.txt || fail "--help failed"
grep -q -- "--repeats N" help.txt || fail "--help does not list --repeats"

expect_exit 64 "$bench" "$(dirname "$PSFLOW_BIN")" --modes 3w
grep -q "bad mode '3w'" "$WORK/stderr" || fail "a bad mode is not named: $(cat "$WORK/stderr")"
expect_exit 64 "$bench" "$(dirname "$PSFLOW_BIN")" --repeats 0

"$bench" "$(dirname "$PSFLOW_BIN")" --models 32 --modes 1w,2w-sync --repeats 1 \
  --steps-scale 0.2 >table.txt 2>bench.err || { cat table.txt bench.err; fail "the benchmark failed"; }
cat table.txt
grep -q "^model  *cluster  *steps" table.txt || fail "no table header"
for mode in 1w 2w-sync; do
  row=$(grep "^784-32-32-10  *$mode " table.txt) || fail "no row for $mode"
  ratio=$(awk '{print $6}' <<<"$row")
  in_range "$ratio" 0.0001 1000 || fail "$mode: ratio '$ratio' is not a number"
  grep -q "ps [0-9][0-9]* ([0-9][0-9]*)" <<<"$row" || fail "$mode: no ps peak RSS and bound"
  grep -q "w0 [0-9][0-9]* ([0-9][0-9]*)" <<<"$row" || fail "$mode: no worker peak RSS and bound"
done
grep -q "w1 [0-9]" <<<"$(grep " 2w-sync " table.txt)" || fail "2w-sync: the second worker's RSS is missing"
grep -q "shared segment on" table.txt || fail "the header does not say the shared segment is on"

# Two ps tasks, over the socket: each ps's peak RSS against its own bound.
expect_exit 64 "$bench" "$(dirname "$PSFLOW_BIN")" --ps 9
expect_exit 64 "$bench" "$(dirname "$PSFLOW_BIN")" --shm maybe
"$bench" "$(dirname "$PSFLOW_BIN")" --models 32 --modes 1w --repeats 1 --steps-scale 0.2 \
  --ps 2 --shm off >table2.txt 2>bench2.err || { cat table2.txt bench2.err; fail "--ps 2 failed"; }
cat table2.txt
grep -q "2 ps, .*shared segment off" table2.txt || fail "the header does not say 2 ps, segment off"
row=$(grep "^784-32-32-10  *1w " table2.txt) || fail "no row for --ps 2"
grep -q "ps0 [0-9][0-9]* ([0-9][0-9]*); ps1 [0-9][0-9]* ([0-9][0-9]*)" <<<"$row" ||
  fail "--ps 2: no peak RSS and bound for each ps"
# The click-through job (--models ctr): workers of 2 ps pull and push their batch's rows
# (sync: each worker takes every step, so each has its progress lines for a rate).
"$bench" "$(dirname "$PSFLOW_BIN")" --models ctr --modes 2w-sync --repeats 1 --steps-scale 0.1 \
  --ps 2 >table3.txt 2>bench3.err || { cat table3.txt bench3.err; fail "--models ctr failed"; }
cat table3.txt
row=$(grep "^ctr-3x1M-d16  *2w-sync  *300 " table3.txt) || fail "no row for --models ctr"
in_range "$(awk '{print $6}' <<<"$row")" 0.0001 1000 || fail "ctr: the ratio is not a number: $row"
grep -q "ps0 [0-9][0-9]* ([0-9][0-9]*); ps1 [0-9][0-9]* ([0-9][0-9]*); w0 [0-9]" <<<"$row" ||
  fail "ctr: no peak RSS and bound for each task"
pass "bench/train_distributed.sh runs and prints its table"
