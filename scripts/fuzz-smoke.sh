#!/usr/bin/env bash
# Runs every libFuzzer target in DIR for SECONDS each, seeded with its corpus from
# tests/data/<parser>/ (valid and invalid cases), as many at a time as there are cores, and
# fails if any target finds a crash (printing the end of its log).
# usage: scripts/fuzz-smoke.sh DIR SECONDS
set -euo pipefail
dir=$1
seconds=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shopt -s nullglob
targets=("$dir"/fuzz_*)
[ ${#targets[@]} -gt 0 ] || { echo "fuzz-smoke: no targets in $dir" >&2; exit 1; }
# One target per core at a time (each fuzzer is one process on one core); a crash in any
# stops the run with its log.
jobs=$(nproc 2>/dev/null || echo 1)
run_one() { # TARGET: fuzz it; its log and verdict in $work/NAME.{log,rc}
  local target=$1 name parser corpus rc=0
  name=$(basename "$target")
  parser=${name#fuzz_}
  corpus="$work/$name"
  mkdir -p "$corpus"
  for seed in "$root"/tests/data/"$parser"/*/*; do cp "$seed" "$corpus/" 2>/dev/null || true; done
  echo "fuzz-smoke: $name for ${seconds}s ($(ls "$corpus" | wc -l) seeds)"
  "$target" -max_total_time="$seconds" -print_final_stats=0 -artifact_prefix="$work/$name-" \
    "$corpus" >"$work/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$name.rc"
}
pids=()
for target in "${targets[@]}"; do
  [ -x "$target" ] || continue
  run_one "$target" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
  fi
done
wait
failed=0
for target in "${targets[@]}"; do
  [ -x "$target" ] || continue
  name=$(basename "$target")
  if [ "$(cat "$work/$name.rc" 2>/dev/null || echo missing)" != 0 ]; then
    echo "fuzz-smoke: $name FAILED:" >&2
    tail -40 "$work/$name.log" >&2
    failed=1
  else
    echo "fuzz-smoke: $name: $(grep -E '^Done [0-9]+ runs' "$work/$name.log" | tail -1 || true)"
  fi
done
exit $failed
