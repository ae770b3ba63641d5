# lib.sh - helpers for integration tests, sourced by tests/integration/test_*.sh.
# CTest sets PSFLOW_BIN (the built psflow), PSFLOW_SRC (the source tree) and
# PSFLOW_TEST_DATA. Each test gets a fresh temp dir in $WORK, removed on exit.
set -euo pipefail

: "${PSFLOW_BIN:?run through ctest (PSFLOW_BIN unset)}"
: "${PSFLOW_SRC:?run through ctest (PSFLOW_SRC unset)}"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/psflow-it.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

pass() {
  echo "ok: $*"
}

# expect_exit CODE CMD...: runs CMD, checks its exit code, keeps stderr in $WORK/stderr.
expect_exit() {
  local want=$1
  shift
  local got=0
  "$@" >"$WORK/stdout" 2>"$WORK/stderr" || got=$?
  [ "$got" = "$want" ] || { cat "$WORK/stderr" >&2; fail "'$*' exited $got, expected $want"; }
}

# json_field FILE EXPR: evaluates a Python expression over the JSON document `d` in FILE.
json_field() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# safetensors_values FILE NAME: prints the float32 values of tensor NAME, space-separated,
# read with an independent reader (Python struct), not psflow's own.
safetensors_values() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
data = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack('<Q', data[:8])
header = json.loads(data[8:8 + n])
t = header[sys.argv[2]]
assert t['dtype'] == 'F32', t
b, e = t['data_offsets']
raw = data[8 + n + b:8 + n + e]
print(' '.join('%.9g' % v for v in struct.unpack('<%df' % (len(raw) // 4), raw)))
PY
}

# in_range VALUE LO HI: succeeds when LO <= VALUE <= HI.
in_range() {
  python3 -c 'import sys; v,lo,hi=map(float,sys.argv[1:]); sys.exit(0 if lo<=v<=hi else 1)' "$@"
}
