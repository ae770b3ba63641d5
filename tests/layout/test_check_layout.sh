#!/usr/bin/env bash
# test_check_layout.sh - scripts/check-layout.sh on small trees made here: a tree that keeps
# the rules passes, and each broken rule (a circle between the files of a folder, two headers
# of one name, a private header named by neither its file nor its module, a function too
# long, a folder or file ARCHITECTURE.md does not name) fails with a line that names it.
set -euo pipefail
script=$(cd "$(dirname "$0")/../../scripts" && pwd)/check-layout.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# A tree that holds: a layer with a public header, a role with two files calling one way.
good_tree() {
  local t=$1
  rm -rf "$t"
  mkdir -p "$t/common/base" "$t/common/include/psflow" "$t/ps"
  printf 'int pf_a(void);\n' >"$t/common/include/psflow/a.h"
  printf '#include "psflow/a.h"\nint pf_a(void) {\n    return 1;\n}\n' >"$t/common/base/a.c"
  printf 'int low(void);\n' >"$t/ps/low.h"
  printf '#include "ps/low.h"\nint low(void) {\n    return 2;\n}\n' >"$t/ps/low.c"
  printf '#include "ps/low.h"\nint high(void) {\n    return low();\n}\n' >"$t/ps/high.c"
  cat >"$t/ARCHITECTURE.md" <<'MAP'
common/base/ a.c; common/include/psflow/ a.h; ps/ low.c low.h high.c
MAP
}

expect() { # expect pass|fail TREE WHAT [TEXT]
  local want=$1 t=$2 what=$3 text=${4:-} out rc=0
  out=$(bash "$script" "$t" 2>&1) || rc=$?
  if [ "$want" = pass ] && [ "$rc" -ne 0 ]; then
    echo "FAIL: $what: check-layout failed on a good tree:"
    echo "$out"
    failures=$((failures + 1))
  elif [ "$want" = fail ] && { [ "$rc" -eq 0 ] || ! grep -qF -- "$text" <<<"$out"; }; then
    echo "FAIL: $what: expected a failure naming \"$text\", got rc $rc:"
    echo "$out"
    failures=$((failures + 1))
  else
    echo "ok: $what"
  fi
}

t=$work/tree
good_tree "$t"
expect pass "$t" "a tree that keeps the rules"

good_tree "$t"
printf 'int high(void);\n' >"$t/ps/high.h"
printf '#include "ps/high.h"\nint low(void) {\n    return high();\n}\n' >"$t/ps/low.c"
echo "high.h" >>"$t/ARCHITECTURE.md"
expect fail "$t" "a circle between two files of a folder" "circle in ps/: high.c <-> low.c"

good_tree "$t"
mkdir -p "$t/worker"
printf 'int low2(void);\n' >"$t/worker/low.h"
printf '#include "worker/low.h"\nint low2(void) {\n    return 3;\n}\n' >"$t/worker/low2.c"
echo "worker/ low2.c" >>"$t/ARCHITECTURE.md"
expect fail "$t" "two headers of one name" "files share the name low.h"

good_tree "$t"
printf 'int helper(void);\n' >"$t/ps/helpers.h"
echo "helpers.h" >>"$t/ARCHITECTURE.md"
expect fail "$t" "a private header named by neither its file nor its module" \
  "ps/helpers.h: a private header"
mv "$t/ps/helpers.h" "$t/ps/ps_internal.h"
echo "ps_internal.h" >>"$t/ARCHITECTURE.md"
expect pass "$t" "the same header named MODULE_internal.h"

good_tree "$t"
{
  printf 'int long_one(void) {\n    int x = 0;\n'
  for i in $(seq 1 130); do printf '    x += %d;\n' "$i"; done
  printf '    return x;\n}\n'
} >"$t/ps/long.c"
echo "long.c" >>"$t/ARCHITECTURE.md"
expect fail "$t" "a function over 120 lines" "long_one() has 134 lines"
mkdir -p "$t/tests/ps"
mv "$t/ps/long.c" "$t/tests/ps/test_long.c"
echo "tests/ps/" >>"$t/ARCHITECTURE.md"
expect pass "$t" "the same function in a test"

good_tree "$t"
mkdir -p "$t/agent"
printf 'int agent_run(void) {\n    return 0;\n}\n' >"$t/agent/agent.c"
expect fail "$t" "a folder the map does not name" "agent/: ARCHITECTURE.md does not name this folder"
expect fail "$t" "a file the map does not name" "agent/agent.c: ARCHITECTURE.md does not say"

good_tree "$t"
{
  for i in $(seq 1 1100); do printf 'static int f%d(void) {\n    return %d;\n}\n' "$i" "$i"; done
} >"$t/ps/big.c"
echo "big.c" >>"$t/ARCHITECTURE.md"
expect pass "$t" "a long file is advice, not a failure"
out=$(bash "$script" "$t" 2>&1)
if grep -qF "advice: ps/big.c has 3300 lines" <<<"$out"; then
  echo "ok: the long file is named in the advice"
else
  echo "FAIL: no advice for ps/big.c:"
  echo "$out"
  failures=$((failures + 1))
fi

echo "check-layout rules: $failures failure(s)"
[ "$failures" -eq 0 ]
