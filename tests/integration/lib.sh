# lib.sh - helpers for integration tests, sourced by tests/integration/test_*.sh.
# CTest sets PSFLOW_BIN (the built psflow), PSFLOW_SRC (the source tree) and
# PSFLOW_TEST_DATA, and PSFLOW_SANITIZE (the build's -fsanitize list, empty in a release
# build). Each test gets a fresh temp dir in $WORK, removed on exit.
set -euo pipefail

: "${PSFLOW_BIN:?run through ctest (PSFLOW_BIN unset)}"
: "${PSFLOW_SRC:?run through ctest (PSFLOW_SRC unset)}"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/psflow-it.XXXXXX")
# On exit every process still running from this test's folder (psflow up, agents, a
# coordinator) is killed, so a failing test never leaves processes behind.
# Under the sanitizer build a report in any log the test kept (a ps, an agent, a coordinator
# whose exit status the test did not check) fails the test too.
cleanup() {
  local rc=$?
  if [ -n "${UP_PID:-}" ]; then kill -9 "$UP_PID" 2>/dev/null || true; fi
  pkill -9 -f -- "$WORK" 2>/dev/null || true
  local reports
  reports=$(grep -rlsI -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' \
    -e 'runtime error: ' "$WORK" 2>/dev/null || true)
  if [ "$rc" -ne 0 ]; then # what the processes said last, for a failure seen only in CI
    find "$WORK" -maxdepth 4 -type f \( -name '*.log' -o -name '*.err' \) -size +0 2>/dev/null |
      sort | head -24 | while read -r f; do
      echo "--- last lines of ${f#"$WORK"/}" >&2
      tail -n 12 "$f" >&2
    done
  fi
  if [ -n "$reports" ]; then
    for f in $reports; do
      echo "sanitizer report in ${f#"$WORK"/}:" >&2
      grep -sI -A12 -e 'ERROR: AddressSanitizer' -e 'ERROR: LeakSanitizer' -e 'runtime error: ' "$f" | head -40 >&2
    done
    rc=1
  fi
  if [ "$rc" != 0 ] && [ -n "${PSFLOW_TEST_KEEP:-}" ]; then # debugging: keep what failed
    echo "kept $WORK (PSFLOW_TEST_KEEP)" >&2
  else
    rm -rf "$WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
cd "$WORK"

# The agent token of the coordinators and agents a test starts by hand (psflow up gives its
# own a file of their own): a coordinator's agent routes (registration, heartbeat, reports)
# take nothing else, so a curl that plays an agent sends "${AGENT_AUTH[@]}".
PSFLOW_AGENT_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
export PSFLOW_AGENT_TOKEN
AGENT_AUTH=(-H "Authorization: Bearer $PSFLOW_AGENT_TOKEN")

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# True in a sanitizer build (the PSFLOW_SANITIZE the build was configured with).
sanitized_build() { [ -n "${PSFLOW_SANITIZE:-}" ]; }

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

# checkpoint_versions JOB_DIR N_PS MIN: for every complete step-<N> folder (with a manifest)
# under JOB_DIR, checks that each ps-<i>.safetensors records version N in its metadata (read
# with Python, not psflow); fails naming the first file that does not, or when fewer than MIN
# complete checkpoints exist. Prints one line per checkpoint.
checkpoint_versions() {
  python3 - "$@" <<'PY'
import json, os, re, struct, sys
root, n_ps, least = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
steps = []
for name in os.listdir(root):
    m = re.fullmatch(r"step-(\d+)", name)
    if not m or not os.path.exists(os.path.join(root, name, "manifest.json")):
        continue
    step = int(m.group(1))
    for ps in range(n_ps):
        data = open(os.path.join(root, name, "ps-%d.safetensors" % ps), "rb").read()
        (n,) = struct.unpack("<Q", data[:8])
        version = int(json.loads(data[8:8 + n])["__metadata__"]["version"])
        if version != step:
            sys.exit("%s/ps-%d.safetensors records version %d" % (name, ps, version))
    steps.append(step)
for step in sorted(steps):
    print("step-%d: every ps file at version %d" % (step, step))
if len(steps) < least:
    sys.exit("%d complete checkpoints, expected at least %d (folders: %s)"
             % (len(steps), least, sorted(os.listdir(root))))
PY
}

# in_range VALUE LO HI: succeeds when LO <= VALUE <= HI.
in_range() {
  python3 -c 'import sys; v,lo,hi=map(float,sys.argv[1:]); sys.exit(0 if lo<=v<=hi else 1)' "$@"
}

# free_ports N: prints N distinct free TCP ports on 127.0.0.1.
free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# tf_config TYPE INDEX PS_PORTS WORKER_PORTS: the TF_CONFIG of one task on 127.0.0.1
# (port lists are comma-separated).
tf_config() {
  python3 - "$@" <<'PY'
import json, sys
t, i, ps, workers = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
addr = lambda ports: ["127.0.0.1:%s" % p for p in ports.split(",") if p]
print(json.dumps({"cluster": {"ps": addr(ps), "worker": addr(workers)},
                  "task": {"type": t, "index": i}, "environment": "cloud"},
                 separators=(",", ":")))
PY
}

# wait_pid PID SECONDS: waits for a background process, failing after SECONDS.
wait_pid() {
  local pid=$1 limit=$2 waited=0
  while kill -0 "$pid" 2>/dev/null; do
    [ "$waited" -lt $((limit * 10)) ] || { kill -9 "$pid" 2>/dev/null; fail "pid $pid still running after ${limit}s"; }
    sleep 0.1
    waited=$((waited + 1))
  done
  wait "$pid"
}

# max_abs_diff A B: largest |a - b| over every tensor of two safetensors files with the
# same tensor names and shapes.
max_abs_diff() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = (t["shape"], memoryview(data)[8 + n + b:8 + n + e])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
worst = 0.0
CHUNK = 1 << 16  # bytes: chunks that are byte-identical (a table's untouched rows) are skipped
for name in a:
    assert a[name][0] == b[name][0], (name, a[name][0], b[name][0])
    x, y = a[name][1], b[name][1]
    for at in range(0, len(x), CHUNK):
        cx, cy = x[at:at + CHUNK], y[at:at + CHUNK]
        if cx == cy:
            continue
        fx = struct.unpack("<%df" % (len(cx) // 4), cx)
        fy = struct.unpack("<%df" % (len(cy) // 4), cy)
        worst = max([worst] + [abs(p - q) for p, q in zip(fx, fy)])
print("%.3g" % worst)
PY
}

# run_static_cluster JOB.json WORKERS [PS [CKPT]]: PS [2] ps + WORKERS workers on 127.0.0.1,
# started the TFJob way (TF_CONFIG + --job), checkpoints under CKPT [$WORK/ckpt], each task's
# stderr in $WORK/ps<i>.log and worker<i>.log; waits for all to exit 0 and prints the
# chief's --output json result.
# With STATIC_RSS set, each worker runs under /usr/bin/time: its peak RSS (KiB) in worker<i>.rss;
# with STATIC_WORKER_DATA=BYTES, under that limit of its data segment (prlimit --data).
run_static_cluster() {
  local job=$1 nw=$2 nps=${3:-2} ckpt=${4:-$WORK/ckpt} ports ps_ports w_ports pids=() i rc=0
  read -r -a ports <<<"$(free_ports $((nps + nw)))"
  ps_ports=$(IFS=,; echo "${ports[*]:0:nps}")
  w_ports=$(IFS=,; echo "${ports[*]:nps}")
  for ((i = 0; i < nps; i++)); do
    TF_CONFIG=$(tf_config ps $i "$ps_ports" "$w_ports") \
      "$PSFLOW_BIN" ps --job "$job" --checkpoint-dir "$ckpt" 2>"$WORK/ps$i.log" &
    pids+=($!)
  done
  for ((i = 0; i < nw; i++)); do
    # STATIC_RSS=1: each worker's peak RSS in KiB (ru_maxrss, /usr/bin/time) in worker<i>.rss
    # STATIC_WORKER_DATA=BYTES: each worker's data segment limit (prlimit --data): it can
    # allocate no more than that
    local wrap=()
    [ -n "${STATIC_RSS:-}" ] && wrap=(/usr/bin/time -f %M -o "$WORK/worker$i.rss")
    [ -n "${STATIC_WORKER_DATA:-}" ] && wrap+=(prlimit --data="$STATIC_WORKER_DATA" --)
    TF_CONFIG=$(tf_config worker $i "$ps_ports" "$w_ports") \
      "${wrap[@]}" "$PSFLOW_BIN" worker --job "$job" --checkpoint-dir "$ckpt" --output json \
      --log-every 500 >"$WORK/worker$i.out" 2>>"$WORK/worker$i.log" &
    pids+=($!)
  done
  for pid in "${pids[@]:nps}"; do wait_pid "$pid" 400 || rc=$?; done
  if [ "$rc" != 0 ]; then
    kill "${pids[@]:0:nps}" 2>/dev/null || true
    fail "a worker exited $rc"
  fi
  for pid in "${pids[@]:0:nps}"; do wait_pid "$pid" 60 || rc=$?; done
  [ "$rc" = 0 ] || fail "a ps exited $rc"
  cat "$WORK/worker0.out"
}

# --- coordinator helpers ---------------------------------------------------------------

# jget URL EXPR: GETs URL and evaluates a Python expression over the JSON answer `d`.
jget() {
  curl -sf --max-time 5 "$1" >"$WORK/jget.json" || return 1
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
    "$WORK/jget.json" "$2"
}

# wait_until SECONDS DESCRIPTION CMD...: runs CMD every 0.2 s until it succeeds; fails the
# test with DESCRIPTION after SECONDS.
wait_until() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || fail "timed out after ${limit}s waiting for: $what"
    sleep 0.2
  done
}

# logged_step_past LOG STEP: the last progress line of a worker's LOG ("step N/M ...")
# names a global step >= STEP.
logged_step_past() {
  local s
  s=$(grep -o 'step [0-9]*/' "$1" 2>/dev/null | tail -1 | tr -dc 0-9 || true)
  [ -n "$s" ] && [ "$s" -ge "$2" ]
}

# up_start ARGS...: starts `psflow up --port 0 --dir $WORK/up ARGS` in the background and
# sets UP_PID, URL, COORD_PID, PSFLOW_AGENT_TOKEN_FILE and AGENT_AUTH (its agent token) once
# every agent has registered.
up_start() {
  "$PSFLOW_BIN" up --port 0 --dir "$WORK/up" "$@" >"$WORK/up.out" 2>"$WORK/up.err" &
  UP_PID=$!
  local deadline=$((SECONDS + 60))
  until grep -q '^Ctrl-C' "$WORK/up.out" 2>/dev/null; do
    kill -0 "$UP_PID" 2>/dev/null || { cat "$WORK/up.err" >&2; fail "psflow up exited"; }
    [ "$SECONDS" -lt "$deadline" ] || { cat "$WORK/up.err" >&2; fail "psflow up did not start"; }
    sleep 0.2
  done
  URL=$(sed -n 's|^dashboard: \(https\{0,1\}://[0-9.:]*\)/$|\1|p' "$WORK/up.out")
  # Agents started by hand and curls that play one use psflow up's agent token.
  unset PSFLOW_AGENT_TOKEN
  export PSFLOW_AGENT_TOKEN_FILE=$WORK/up/agent-token
  AGENT_AUTH=(-H "Authorization: Bearer $(cat "$PSFLOW_AGENT_TOKEN_FILE")")
  COORD_PID=$(sed -n 's/.*coordinator http[^ ]* (pid \([0-9]*\),.*/\1/p' "$WORK/up.err")
  [ -n "$URL" ] && [ -n "$COORD_PID" ] || fail "cannot read the URL and pid from psflow up"
}

# up_stop: Ctrl-C for psflow up; checks that it and every process it started are gone.
up_stop() {
  kill -INT "$UP_PID" 2>/dev/null || true
  wait_pid "$UP_PID" 60 || true
  ! pgrep -f -- "--dir $WORK/up" >/dev/null || fail "processes of psflow up left running"
  ! pgrep -f -- "$WORK/up/" >/dev/null || fail "agents of psflow up left running"
}

# job_phase NAME: the job's phase.
job_phase() { jget "$URL/api/v1/jobs/$1" 'd["status"]["phase"]'; }

# phase_is NAME PHASE: succeeds when the job is in that phase.
phase_is() { [ "$(job_phase "$1")" = "$2" ]; }

# make_test_pki DIR: in DIR, a self-signed CA (ca.pem, ca.key), a second unrelated one
# (other.pem), and a server certificate for 127.0.0.1 and localhost signed by the first
# (server.pem, server.key); sets CA and OTHER to their paths. Needs the openssl CLI.
make_test_pki() {
  local dir=$1 name
  mkdir -p "$dir"
  for name in ca other; do
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -keyout "$dir/$name.key" -out "$dir/$name.pem" -subj "/CN=psflow test $name" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
      2>/dev/null || fail "openssl: making CA $name"
  done
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$dir/server.key" \
    -out "$dir/server.csr" -subj "/CN=127.0.0.1" 2>/dev/null || fail "openssl: server key"
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 2 -extfile "$dir/server.ext" -out "$dir/server.pem" 2>/dev/null ||
    fail "openssl: signing the server certificate"
  openssl verify -CAfile "$dir/ca.pem" "$dir/server.pem" >/dev/null ||
    fail "the test certificate does not verify"
  CA=$dir/ca.pem
  OTHER=$dir/other.pem
}
