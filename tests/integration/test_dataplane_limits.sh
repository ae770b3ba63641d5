#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 300
# A ps's data-plane limits (api/wire.md "Limits", docs/security.md) against a hostile
# crowd on 127.0.0.1 (tests/integration/dataplane_flood.py), while a real job trains:
#  - 2,000 connections that finish the WebSocket upgrade and then say nothing, and 400 that
#    send half of the largest frame a peer may send before HELLO, are all closed: each
#    newcomer takes the slot of the oldest (64 untrusted slots), and the last ones go by the
#    idle timeout (shortened to 3 s by --idle-timeout);
#  - a frame header announcing 1 GiB before HELLO, and NUL bytes instead of an upgrade
#    request (answered 400), are refused at once;
#  - the ps's peak RSS stays within its baseline + 16 KiB x --max-connections + 20 KiB x
#    --max-untrusted + --max-buffered (the bound docs/security.md states), and the refusals
#    are logged without a flood;
#  - the worker, started while the crowd is connected, trains the job to the end.
source "$(dirname "$0")/lib.sh"

N_IDLE=2000
N_HALF=400
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge $((N_IDLE + N_HALF + 200)) ] ||
  { echo "skipped: the fd limit ($(ulimit -n)) is too low"; exit 77; }

cat >job.json <<'JSON'
{"name": "limits-job", "replicas": {"ps": 1, "worker": 1},
 "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear", "n": 4000},
 "training": {"max_steps": 2000, "batch_size": 50}}
JSON
read -r ps_port w_port <<<"$(free_ports 2)"
MAX_CONNECTIONS=2500
MAX_BUFFERED=$((4 << 20))
MAX_UNTRUSTED=64 # the default
TF_CONFIG=$(tf_config ps 0 "$ps_port" "$w_port") \
  "$PSFLOW_BIN" ps --job job.json --checkpoint-dir "$WORK/ckpt" --idle-timeout 3 \
  --max-connections $MAX_CONNECTIONS --max-buffered $MAX_BUFFERED 2>ps.log &
PS_PID=$!
wait_until 30 "the ps listening" grep -q 'listening on' ps.log

python3 "$PSFLOW_SRC/tests/integration/dataplane_flood.py" 127.0.0.1 "$ps_port" "$PS_PID" \
  $N_IDLE $N_HALF "$WORK/ready" >flood.json 2>flood.err &
FLOOD=$!
wait_until 120 "the crowd connected" test -s "$WORK/ready"
kill -0 "$PS_PID" || fail "the ps died under the crowd"

TF_CONFIG=$(tf_config worker 0 "$ps_port" "$w_port") \
  "$PSFLOW_BIN" worker --job job.json --checkpoint-dir "$WORK/ckpt" --output json \
  >worker.out 2>worker.log &
WORKER=$!
wait_pid "$WORKER" 120 || { tail -n 20 worker.log ps.log >&2; fail "the worker failed"; }
json_field worker.out 'd' >/dev/null ||
  fail "the worker printed no result: $(cat worker.out)"
pass "the worker trained the job to the end while $N_IDLE idle and $N_HALF half-sent connections came in"

wait_pid "$FLOOD" 180 || { cat flood.err >&2; fail "the crowd's checks failed"; }
cat flood.json
opened=$(json_field flood.json 'd["opened"]')
closed=$(json_field flood.json 'd["closed"]')
[ "$opened" = $((N_IDLE + N_HALF)) ] && [ "$closed" = "$opened" ] ||
  fail "connections opened $opened, closed by the ps $closed"
pass "all $closed connections were closed by the ps; the 1 GiB frame and the NUL bytes were refused at once"

peak=$(json_field flood.json 'd["peak_rss_kib"]')
base=$(json_field flood.json 'd["baseline_rss_kib"]')
bound=$((base + MAX_CONNECTIONS * 16 + MAX_UNTRUSTED * 20 + MAX_BUFFERED / 1024))
echo "ps RSS: baseline $base KiB, peak $peak KiB, bound $bound KiB"
[ "$peak" -le "$bound" ] || fail "peak RSS $peak KiB over the bound $bound KiB"
pass "the ps's peak RSS ($peak KiB) stayed within baseline + 16 KiB x $MAX_CONNECTIONS + 20 KiB x $MAX_UNTRUSTED + max-buffered ($bound KiB)"

grep -q 'idle timeout' ps.log || fail "the ps did not log the idle timeout"
grep -q 'before HELLO' ps.log || fail "the ps did not log the oversized frame"
grep -q 'not a WebSocket upgrade' ps.log || fail "the ps did not log the garbage"
lines=$(grep -c 'idle timeout' ps.log)
[ "$lines" -le 20 ] || fail "$lines log lines about the idle timeout: the log is flooded"
pass "refusals logged once per cause with a rate limit ($lines idle-timeout lines for $closed closures)"

wait_pid "$PS_PID" 60 || { tail -n 20 ps.log >&2; fail "the ps exited non-zero"; }
pass "the ps finished the job and exited 0"
