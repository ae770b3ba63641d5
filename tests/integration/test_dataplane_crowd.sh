#!/usr/bin/env bash
# labels: slow
# timeout: 400
# A crowd of strangers cannot keep a job's own tasks off its ps (docs/security.md
# "Data-plane limits", api/wire.md "Limits"). A sync job (1 ps + 2 workers, static mode via
# TF_CONFIG, PSFLOW_TOKEN set, everything over the socket) trains while
# tests/integration/dataplane_crowd.py keeps 1,000 unauthenticated connections open against
# its ps from 127.0.0.1 .. 127.0.0.9 - silent sockets, half upgrade requests and half-sent
# 4096-byte frames after the upgrade - reopening each one the ps closes. Twice: with the
# ps's default limits, and with --max-connections 5000. Each time:
#  - both workers connect, and worker 1, killed (-9) mid-job and started again, has its
#    HELLO accepted (the ps logs "worker 1 connected") within 2 s of its start (the
#    acceptance bound; the figure is printed);
#  - the job trains to its last step and every process exits 0;
#  - the ps's peak RSS stays within its baseline + 16 KiB x --max-connections + 20 KiB x
#    --max-untrusted + --max-buffered (the bound docs/security.md states; printed);
#  - the ps dropped crowd connections to make room (logged, rate-limited).
# With the old single connection cap, the crowd held every slot (default limits) or filled
# the buffer for incomplete messages (--max-connections 5000), and the workers were kept out.
source "$(dirname "$0")/lib.sh"
# The acceptance bound is 2 s; a sanitizer build runs every process several times slower,
# so there the figure is printed and held to a looser bound.
# Its allocator keeps freed memory in quarantine (256 MiB), so the RSS bound is checked in the
# release tier only; a sanitizer build prints the figures.
RECONNECT_BOUND=2
SANITIZED=0
if sanitized_build; then
  RECONNECT_BOUND=8
  SANITIZED=1
  echo "sanitizer build: the reconnect time is held to $RECONNECT_BOUND s (2 s in the release" \
    "tier); the RSS bound is checked in the release tier"
fi

N_CROWD=${N_CROWD:-1000}
STEPS=${STEPS:-30000}
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge $((N_CROWD + 300)) ] ||
  { echo "skipped: the fd limit ($(ulimit -n)) is too low"; exit 77; }
python3 -c 'import socket; socket.socket().bind(("127.0.0.9", 0))' 2>/dev/null ||
  { echo "skipped: cannot bind 127.0.0.9"; exit 77; }

# A softmax over 784 inputs: a push is 31 KiB, more than half-sent frames could leave free
# of the old shared buffer for incomplete messages.
python3 -c '
import random
r = random.Random(1)
for i in range(200):
    print(",".join([str(i % 10)] + ["%.2f" % r.random() for _ in range(784)]))' >train.csv
cat >job.json <<JSON
{"name": "crowd-job", "replicas": {"ps": 1, "worker": 2},
 "model": {"type": "softmax", "inputs": 784, "outputs": 10},
 "data": {"format": "csv", "train": ["$WORK/train.csv"]},
 "training": {"mode": "sync", "max_steps": $STEPS, "batch_size": 20, "eval_every_steps": 0,
              "stall_timeout_secs": 60}}
JSON
export PSFLOW_TOKEN=crowd-test-token

# now: seconds since the epoch, to the millisecond
now() { date +%s.%N | cut -c1-14; }
connected() { grep -c "$1 connected" "$2" 2>/dev/null || true; } # "chief 0" / "worker 1"
both_connected() { [ "$(connected 'chief 0' "$1")" -ge 1 ] && [ "$(connected 'worker 1' "$1")" -ge 1 ]; }
# start_worker INDEX DIR PS_PORT WORKER_PORTS: a worker of the job in the background; its pid
# in WORKER_PID.
start_worker() {
  TF_CONFIG=$(tf_config worker "$1" "$3" "$4") "$PSFLOW_BIN" worker --job job.json \
    --checkpoint-dir "$2/ckpt" --log-every 50 >>"$2/worker$1.out" 2>>"$2/worker$1.log" &
  WORKER_PID=$!
}

# run_config NAME PS_FLAGS...: the job under the crowd; prints the figures, fails on a check.
run_config() {
  local name=$1
  shift
  mkdir "$WORK/$name"
  local dir=$WORK/$name ps_port w0 w1
  read -r ps_port w0 w1 <<<"$(free_ports 3)"
  local ps_cfg w_ports="$w0,$w1"
  ps_cfg=$(tf_config ps 0 "$ps_port" "$w_ports")
  TF_CONFIG=$ps_cfg "$PSFLOW_BIN" ps --job job.json --checkpoint-dir "$dir/ckpt" --shm off \
    --exit-grace 5 "$@" 2>"$dir/ps.log" &
  local ps_pid=$!
  wait_until 30 "the ps listening ($name)" grep -q 'listening on' "$dir/ps.log"
  local limits conns untrusted buffered
  limits=$(grep -m1 'data plane for' "$dir/ps.log")
  conns=$(sed -n 's/.*at most \([0-9]*\) connections.*/\1/p' <<<"$limits")
  untrusted=$(sed -n 's/.*, \([0-9]*\) untrusted.*/\1/p' <<<"$limits")
  buffered=$(sed -n 's/.* and \([0-9]*\) bytes of incomplete.*/\1/p' <<<"$limits")
  [ -n "$conns" ] && [ -n "$untrusted" ] && [ -n "$buffered" ] ||
    fail "the ps did not log its data-plane limits: $limits"

  python3 "$PSFLOW_SRC/tests/integration/dataplane_crowd.py" 127.0.0.1 "$ps_port" "$ps_pid" \
    "$N_CROWD" "$dir/ready" "$dir/stop" >"$dir/crowd.json" 2>"$dir/crowd.err" &
  local crowd=$!
  wait_until 60 "the crowd connected ($name)" test -s "$dir/ready"

  local chief worker t0 t1 before
  t0=$(now)
  start_worker 0 "$dir" "$ps_port" "$w_ports"
  chief=$WORKER_PID
  start_worker 1 "$dir" "$ps_port" "$w_ports"
  worker=$WORKER_PID
  # The first connections, under the crowd: a generous deadline, only to fail clearly.
  wait_until 60 "both workers connected to the ps under the crowd ($name)" \
    both_connected "$dir/ps.log"
  t1=$(now)
  echo "$name: both workers connected $(python3 -c "print(round($t1 - $t0, 3))") s after their start"
  wait_until 120 "chief step 2000 ($name)" logged_step_past "$dir/worker0.log" 2000

  kill -9 "$worker"
  wait "$worker" 2>/dev/null || true
  wait_until 30 "the ps saw worker 1 go ($name)" grep -q 'worker 1 disconnected' "$dir/ps.log"
  before=$(connected 'worker 1' "$dir/ps.log")
  t0=$(now)
  start_worker 1 "$dir" "$ps_port" "$w_ports"
  worker=$WORKER_PID
  local deadline=$((SECONDS + 60))
  while [ "$(connected 'worker 1' "$dir/ps.log")" -le "$before" ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$name: the restarted worker 1 was not let in within 60 s"
    sleep 0.02
  done
  t1=$(now)
  local took
  took=$(python3 -c "print(round($t1 - $t0, 3))")
  echo "$name: the restarted worker 1 had its HELLO accepted $took s after its start"
  in_range "$took" 0 "$RECONNECT_BOUND" ||
    fail "$name: worker 1 reconnected in $took s, over $RECONNECT_BOUND s"

  wait_pid "$chief" 120 || fail "$name: the chief exited non-zero"
  wait_pid "$worker" 60 || fail "$name: worker 1 exited non-zero"
  wait_pid "$ps_pid" 60 || fail "$name: the ps exited non-zero"
  grep -q "job crowd-job done at version $STEPS" "$dir/ps.log" ||
    fail "$name: the ps did not end at version $STEPS: $(grep 'done at' "$dir/ps.log")"
  touch "$dir/stop"
  wait_pid "$crowd" 30 || { cat "$dir/crowd.err" >&2; fail "$name: the crowd failed"; }
  local c peak base bound
  c=$(cat "$dir/crowd.json")
  peak=$(json_field "$dir/crowd.json" 'd["peak_rss_kib"]')
  base=$(json_field "$dir/crowd.json" 'd["baseline_rss_kib"]')
  bound=$((base + 16 * conns + 20 * untrusted + buffered / 1024))
  echo "$name: crowd $c"
  echo "$name: limits $conns task connections, $untrusted untrusted, $buffered bytes buffered;" \
    "ps RSS baseline $base KiB, peak $peak KiB, bound $bound KiB"
  [ "$SANITIZED" = 1 ] || [ "$peak" -le "$bound" ] ||
    fail "$name: peak RSS $peak KiB over the bound $bound KiB"
  local closed
  closed=$(json_field "$dir/crowd.json" 'd["closed_by_ps"]')
  [ "$closed" -gt 0 ] || fail "$name: the ps closed none of the crowd's connections"
  grep -q 'dropped untrusted connection' "$dir/ps.log" || fail "$name: no drop was logged"
  local lines
  lines=$(grep -c 'dropped untrusted connection' "$dir/ps.log")
  [ "$lines" -le 30 ] || fail "$name: $lines log lines about drops: the log is flooded"
  local rss="peak RSS $peak KiB <= $bound KiB"
  [ "$SANITIZED" = 0 ] || rss="peak RSS $peak KiB (sanitizer build: not held to $bound KiB)"
  pass "$name: job done at version $STEPS under a crowd of $N_CROWD; worker 1 back in $took s;" \
    "$rss; $closed crowd connections closed by the ps"
}

run_config defaults
run_config max-connections-5000 --max-connections 5000
