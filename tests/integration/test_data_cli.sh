#!/usr/bin/env bash
# timeout: 240
# psflow data, as a user runs it: `gen criteo` writes Criteo-layout files (plain and gzip) and
# truth.json, the same seed gives the same bytes, and the Bayes-optimal AUC it prints matches
# truth.json; `inspect` reads every file back (row counts add up to --rows, the click rate
# agrees); `stats` finds the generator's log1p mean and deviation of a column; `inspect` names the file, line and column of bad lines (a non-hex id, a missing field, a
# numeric overflow) with exit 65 while still counting the good rows; a truncated gzip, an
# empty file and a line longer than --max-line are refused by name; a file given as a
# missing path exits 66. Usage errors exit 64. Memory: inspect of a file ~28 times its
# buffer runs under a data limit of 200 MB (the reader holds one buffer whatever the size).
source "$(dirname "$0")/lib.sh"

ROWS=60000
expect_exit 0 "$PSFLOW_BIN" data gen criteo --rows "$ROWS" --files 3 --seed 11 --out "$WORK/plain"
grep -q 'bayes-optimal auc 0\.[0-9]' "$WORK/stdout" || fail "no Bayes-optimal AUC printed"
printed=$(sed -n 's/.*bayes-optimal auc \([0-9.]*\).*/\1/p' "$WORK/stdout")
truth=$(json_field "$WORK/plain/truth.json" '"%.4f" % d["bayes_auc"]')
[ "$printed" = "$truth" ] || fail "printed auc $printed, truth.json $truth"
in_range "$truth" 0.7 0.95 || fail "Bayes-optimal auc $truth outside [0.7, 0.95]"
[ "$(ls "$WORK/plain"/part-*.tsv | wc -l)" = 3 ] || fail "expected 3 files"

expect_exit 0 "$PSFLOW_BIN" data gen criteo --rows "$ROWS" --files 3 --seed 11 --out "$WORK/again"
cmp -s "$WORK/plain/part-00001.tsv" "$WORK/again/part-00001.tsv" || fail "same seed, other bytes"
expect_exit 0 "$PSFLOW_BIN" data gen criteo --rows 5000 --files 1 --seed 12 --gzip --out "$WORK/gz"
gzip -t "$WORK/gz/part-00000.tsv.gz" || fail "the gzip file does not test clean"

total=0
clicks=0
for f in "$WORK"/plain/part-*.tsv; do
  expect_exit 0 "$PSFLOW_BIN" data inspect "$f"
  n=$(sed -n 's/^rows \([0-9]*\),.*/\1/p' "$WORK/stdout")
  [ "$n" = "$(wc -l <"$f")" ] || fail "$f: inspect counted $n rows, the file has $(wc -l <"$f") lines"
  total=$((total + n))
  clicks=$((clicks + $(cut -f1 "$f" | grep -c '^1$')))
done
[ "$total" = "$ROWS" ] || fail "files hold $total rows, --rows was $ROWS"
want=$(json_field "$WORK/plain/truth.json" 'd["positives"]')
[ "$clicks" = "$want" ] || fail "$clicks clicks in the files, truth.json says $want"
expect_exit 0 "$PSFLOW_BIN" data inspect "$WORK/gz/part-00000.tsv.gz"
grep -q '^rows 5000,' "$WORK/stdout" || fail "gzip file: $(head -3 "$WORK/stdout")"

# stats: the numeric transforms' figures over all three files (I5 is drawn as
# exp(N(7.5, 2.0)) - 1, so its log1p mean and deviation are close to those)
expect_exit 0 "$PSFLOW_BIN" data stats "$WORK"/plain/part-*.tsv --out stats.json
[ "$(json_field stats.json 'd["rows"]')" = "$ROWS" ] || fail "stats rows: $(head -c 300 stats.json)"
in_range "$(json_field stats.json 'd["numeric"]["I5"]["log1p_mean"]')" 7.4 7.6 || fail "I5 mean"
in_range "$(json_field stats.json 'd["numeric"]["I5"]["log1p_std"]')" 1.9 2.1 || fail "I5 std"
in_range "$(json_field stats.json 'd["categorical"]["C9"]["distinct_estimate"]')" 3 3 ||
  fail "C9 (3 ids) distinct: $(json_field stats.json 'd["categorical"]["C9"]')"

# bad lines: each named; the good ones still counted
head -100 "$WORK/plain/part-00000.tsv" >bad.tsv
awk -F'\t' 'BEGIN{OFS="\t"} NR==10{$20="zz12"} NR==20{NF=39} NR==30{$4="99999999999999999999"} {print}' \
  bad.tsv >bad2.tsv
expect_exit 65 "$PSFLOW_BIN" data inspect bad2.tsv
grep -q 'bad2.tsv:10: column C6: .zz12. is not a hex id' "$WORK/stderr" || fail "non-hex id: $(cat "$WORK/stderr")"
grep -q 'bad2.tsv:20: column C26: 39 fields' "$WORK/stderr" || fail "missing field: $(cat "$WORK/stderr")"
grep -q 'bad2.tsv:30: column I3: .* overflows' "$WORK/stderr" || fail "overflow: $(cat "$WORK/stderr")"
grep -q '^rows 97, .*bad lines 3' "$WORK/stdout" || fail "counts: $(head -2 "$WORK/stdout")"

# a truncated gzip, an empty file, a line too long, a missing file, usage
head -c 20000 "$WORK/gz/part-00000.tsv.gz" >cut.tsv.gz
expect_exit 65 "$PSFLOW_BIN" data inspect cut.tsv.gz
grep -q 'cut.tsv.gz: gzip data ends early' "$WORK/stderr" || fail "truncated gzip: $(cat "$WORK/stderr")"
: >empty.tsv
expect_exit 65 "$PSFLOW_BIN" data inspect empty.tsv
grep -q 'empty.tsv holds no rows' "$WORK/stderr" || fail "empty file: $(cat "$WORK/stderr")"
{ head -3 bad.tsv; head -c 5000 /dev/zero | tr '\0' 'x'; echo; head -3 bad.tsv; } >long.tsv
expect_exit 65 "$PSFLOW_BIN" data inspect --max-line 1024 long.tsv
grep -q 'long.tsv:4: the line is longer than 1024 bytes' "$WORK/stderr" || fail "long line: $(cat "$WORK/stderr")"
grep -q '^rows 6,' "$WORK/stdout" || fail "rows around the long line: $(head -2 "$WORK/stdout")"
expect_exit 66 "$PSFLOW_BIN" data inspect "$WORK/nothing.tsv"
grep -q 'nothing.tsv: cannot open' "$WORK/stderr" || fail "missing file: $(cat "$WORK/stderr")"
expect_exit 64 "$PSFLOW_BIN" data gen criteo --out "$WORK/x"
expect_exit 64 "$PSFLOW_BIN" data gen avazu --rows 10 --out "$WORK/x"
expect_exit 64 "$PSFLOW_BIN" data frobnicate
expect_exit 65 "$PSFLOW_BIN" data stats bad2.tsv

# memory: a file ~15x the reader's buffer, read under a 200 MB data limit (sanitizer builds
# reserve far more than that for themselves: there the limit is left out)
cat "$WORK"/plain/part-*.tsv "$WORK"/plain/part-*.tsv >big.tsv
limit=(prlimit --data=200000000)
sanitized_build && limit=()
expect_exit 0 "${limit[@]}" "$PSFLOW_BIN" data inspect big.tsv
grep -q "^rows $((2 * ROWS))," "$WORK/stdout" || fail "big file: $(head -2 "$WORK/stdout")"
pass "gen: $ROWS rows in 3 files, Bayes-optimal auc $truth; inspect counts and stats agree; bad lines named by line and column; truncated gzip, empty file, long line refused; $((2 * ROWS)) rows read under a 200 MB data limit"
