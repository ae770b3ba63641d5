#!/usr/bin/env bash
# Runs every libFuzzer target in DIR for SECONDS each, seeded with its corpus from
# tests/data/<parser>/ (valid and invalid cases), and fails if any target finds a crash.
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
for target in "${targets[@]}"; do
  [ -x "$target" ] || continue
  name=$(basename "$target")
  parser=${name#fuzz_}
  corpus="$work/$name"
  mkdir -p "$corpus"
  for seed in "$root"/tests/data/"$parser"/*/*; do cp "$seed" "$corpus/" 2>/dev/null || true; done
  echo "fuzz-smoke: $name for ${seconds}s ($(ls "$corpus" | wc -l) seeds)"
  "$target" -max_total_time="$seconds" -print_final_stats=0 -artifact_prefix="$work/$name-" \
    "$corpus" >"$work/$name.log" 2>&1 || { tail -40 "$work/$name.log"; exit 1; }
  grep -E '^#[0-9]+ *DONE' "$work/$name.log" | tail -1 || true
done
