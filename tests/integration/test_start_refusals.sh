#!/usr/bin/env bash
# timeout: 120
# A task that cannot start says why, and exits: (1) a ps serving TLS says so on its start line,
# and a worker without --ca-file against it is told the ps speaks TLS and to give --ca-file
# (not "connection refused"), exit 69; (2) a worker whose RLIMIT_DATA (ulimit -d) leaves no
# room for OpenBLAS's buffers exits nonzero saying there is not enough memory to start, where
# OpenBLAS would otherwise retry its mmap forever (under the sanitizers, whose shadow memory a
# low limit refuses, that part is skipped). Real processes on 127.0.0.1 (TF_CONFIG + --job).
source "$(dirname "$0")/lib.sh"
command -v openssl >/dev/null || { echo "skipped: openssl is not installed"; exit 77; }
make_test_pki "$WORK/tls"
cat >job.json <<'JSON'
{"name": "refusals", "replicas": {"ps": 1, "worker": 1},
 "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear", "n": 2000},
 "training": {"max_steps": 200, "batch_size": 50}}
JSON

# --- a TLS ps and a plain worker -------------------------------------------------------------
read -r ps_port w_port <<<"$(free_ports 2)"
TF_CONFIG=$(tf_config ps 0 "$ps_port" "$w_port") "$PSFLOW_BIN" ps --job job.json \
  --checkpoint-dir "$WORK/ckpt" --tls-cert "$WORK/tls/server.pem" \
  --tls-key "$WORK/tls/server.key" 2>tls-ps.log &
wait_until 30 "the TLS ps listening" grep -q 'listening on' tls-ps.log
grep -q "listening on [0-9.]*:$ps_port (TLS)" tls-ps.log ||
  fail "the ps's start line does not say it serves TLS: $(grep 'listening on' tls-ps.log)"
export TF_CONFIG
TF_CONFIG=$(tf_config worker 0 "$ps_port" "$w_port")
expect_exit 69 "$PSFLOW_BIN" worker --job job.json --checkpoint-dir "$WORK/ckpt" --retry-seconds 5
grep -q "ps 0 at 127.0.0.1:$ps_port: it speaks TLS (wss): give --ca-file" "$WORK/stderr" ||
  fail "a plain worker against a TLS ps: $(cat "$WORK/stderr")"
unset TF_CONFIG
pass "a TLS ps says so on its start line; a worker without --ca-file is told to give one"

# --- a worker under a low RLIMIT_DATA --------------------------------------------------------
if sanitized_build; then
  echo "skipped the memory limit: a sanitizer build maps its shadow memory under it"
  exit 0
fi
read -r ps_port w_port <<<"$(free_ports 2)"
TF_CONFIG=$(tf_config ps 0 "$ps_port" "$w_port") "$PSFLOW_BIN" ps --job job.json \
  --checkpoint-dir "$WORK/ckpt2" 2>plain-ps.log &
wait_until 30 "the plain ps listening" grep -q 'listening on' plain-ps.log
(
  ulimit -d 100000 # KiB: room for psflow, not for OpenBLAS's 128 MiB buffers
  TF_CONFIG=$(tf_config worker 0 "$ps_port" "$w_port") exec "$PSFLOW_BIN" worker --job job.json \
    --checkpoint-dir "$WORK/ckpt2" --retry-seconds 5 2>low-mem.log
) &
W=$!
wait_pid "$W" 60 && fail "the worker under a 100 MB data limit exited 0" || rc=$?
grep -q "not enough memory to start" low-mem.log ||
  fail "the worker under a 100 MB data limit (exit $rc) did not say why: $(tail -3 low-mem.log)"
grep -q "RLIMIT_DATA 97 MiB" low-mem.log || fail "the message does not name the limit: $(cat low-mem.log)"
pass "a worker under a low memory limit exits $rc saying there is not enough memory to start"
