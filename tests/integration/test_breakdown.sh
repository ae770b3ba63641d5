#!/usr/bin/env bash
# labels: slow sanitizer-only
# timeout: 600
# Where the step time goes (docs/profile.md), in managed mode (`psflow up`, a real
# coordinator and agents): the Fashion-MNIST softmax example, sync, 1 ps + 2 training tasks,
# one on psflow up's worker agent, the other (the slow one) on an agent started by hand.
#  1. the slow agent pushes 20 ms late (PSFLOW_PUSH_DELAY_MS=20): GET .../profile shows the
#     20 ms as push time of its task (at least 18 ms a step over its recent window) and as
#     barrier time of the other task (at least 10 ms a step, and at least 3 times that task's
#     own push): that one waits for the late push at every step. For each training
#     task the phases add up to its time within 5 % (nothing of the step goes uncounted),
#     and "other" is what they leave. The ps reports apply, copy and queue, and answered
#     pulls. Prometheus has psflow_task_phase_seconds_total for each phase of each task;
#     `psflow get` prints the slow task's push share.
#  2. the job again with the slow agent reading its input 20 ms late instead
#     (PSFLOW_TEST_INPUT_DELAY_MS=20): at least 18 ms a step of input on its task, and the
#     other task's barrier at least 10 ms a step.
#     A trace of 20 steps (POST/GET .../trace): bad requests refused (400, 404, 409 while one
#     records), and in the trace the late push as at least 18 ms a step of the slow task's
#     push spans and 10 ms of the other's barrier, the same 20 steps on both.
#  3. static mode: each training task logs one "time per step" line at the end.
# (Bad profiles in heartbeats: tests/coordinator/test_cluster_reports.c.)
# Time a step is checked against the delay, not shares: under the sanitizers (or a loaded
# machine) compute takes as long as the delay.
source "$(dirname "$0")/lib.sh"

spec() { # NAME STEPS
  python3 - "$PSFLOW_SRC/examples/fashion-mnist-softmax.json" "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = sys.argv[2]
d["replicas"] = {"ps": 1, "worker": 2}
d["training"].update(mode="sync", max_steps=int(sys.argv[3]), eval_every_steps=0)
d["checkpoint"] = {"every_steps": 0, "every_secs": 600}
json.dump(d, sys.stdout)
PY
}

submit() { # FILE
  local code
  code=$(curl -s -o "$WORK/created.json" -w '%{http_code}' -X POST \
    -H 'Content-Type: application/json' --data-binary @"$1" "$URL/api/v1/jobs")
  [ "$code" = 201 ] || fail "submitting $1: HTTP $code $(cat "$WORK/created.json")"
}

# check_profile JOB TASK PHASE MIN_MS: the task's recent window has at least MIN_MS ms a step
# of PHASE (barrier: and at least 3 times its push); every training task's phases add up to
# its time.
check_profile() {
  curl -sf "$URL/api/v1/jobs/$1/profile" -o "$WORK/profile.json" &&
    python3 - "$WORK/profile.json" "$2" "$3" "$4" 2>"$WORK/profile-check.log" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
want_task, want_phase, min_ms = sys.argv[2], sys.argv[3], float(sys.argv[4])
tasks = {"%s-%d" % (t["type"], t["index"]): t for t in d["tasks"]}
assert set(tasks) == {"ps-0", "worker-0", "worker-1"}, sorted(tasks)
for name, t in sorted(tasks.items()):
    r = t["recent"]
    assert r is not None and r["count"] > 0, (name, t)
    if name == "ps-0":
        assert set(r["phases"]) == {"apply", "copy", "queue"}, r
        continue
    assert set(r["phases"]) == {"input", "pull", "compute", "push", "barrier", "checkpoint",
                                "evaluate"}, r
    phases = sum(r["phases"].values())
    # "other" is what the phases leave (a span in progress at either end of the window
    # may put the phases a little over the time)
    assert abs(r["other"] - max(0.0, r["seconds"] - phases)) < 1e-6, (name, r)
    assert abs(phases - r["seconds"]) <= 0.05 * r["seconds"], \
        "%s: the phases cover %.1f %% of its time" % (name, 100 * phases / r["seconds"])
r = tasks[want_task]["recent"]
per_step = lambda p: 1e3 * r["phases"][p] / r["count"]
share = r["phases"][want_phase] / r["seconds"]
assert per_step(want_phase) >= min_ms, (want_task, want_phase, per_step(want_phase), r)
if want_phase == "barrier":
    assert per_step("barrier") >= 3 * per_step("push"), (want_task, r)
print("%s: %s %.1f ms a step, %.0f %% of %.2f s (%d steps, %.2f ms a step); %s" % (
    want_task, want_phase, per_step(want_phase), 100 * share, r["seconds"], r["count"],
    1e3 * r["seconds"] / r["count"],
    ", ".join("%s %.0f %%" % (k, 100 * v / r["seconds"]) for k, v in r["phases"].items() if v)))
PY
}

up_start --ps 1 --workers 1
start_spare() { # NODE-ID ENV... : the slow agent, with the testing aid given as environment
  local id=$1
  shift
  env "$@" "$PSFLOW_BIN" worker --coordinator "$URL" --node-id "$id" \
    --advertise "127.0.0.1:$(free_ports 1)" --checkpoint-dir "$WORK/up/checkpoints" \
    2>>"$WORK/$id.log" &
  SPARE=$!
  wait_until 20 "agent $id registered" jget "$URL/api/v1/nodes/$id" 'd["id"]'
}

# task_on JOB NODE-ID [not]: the training task ("worker-I") the agent runs, or with "not" the
# job's other one.
task_on() {
  jget "$URL/api/v1/jobs/$1/tasks" "[\"worker-%d\" % t[\"index\"] for t in d[\"items\"]
    if t[\"type\"] == \"worker\" and (t[\"node_id\"] == \"$2\") != (\"${3:-}\" == \"not\")][0]"
}

# --- 1: a late push
start_spare late-push PSFLOW_PUSH_DELAY_MS=20
spec prof-push 200000 >push.json
submit push.json
wait_until 60 "both training tasks running" task_on prof-push late-push
slow=$(task_on prof-push late-push) other=$(task_on prof-push late-push not)
echo "the late pusher runs $slow, psflow up's agent $other"
wait_until 90 "$slow's push and $other's barrier in the profile" \
  check_profile prof-push "$slow" push 18
check_profile prof-push "$slow" push 18
check_profile prof-push "$other" barrier 10
PSFLOW_COORDINATOR=$URL "$PSFLOW_BIN" get prof-push >"$WORK/get.txt" || fail "psflow get"
grep -A4 '^Step breakdown:' "$WORK/get.txt" | grep -E "^  $slow +recent +[0-9.]+ ms/step .*push [0-9]+%" >/dev/null ||
  fail "psflow get shows no push share of $slow: $(cat "$WORK/get.txt")"
echo "psflow get: $(grep -A4 '^Step breakdown:' "$WORK/get.txt" | grep "^  $slow")"
curl -sf "$URL/metrics" >"$WORK/metrics.txt" || fail "GET /metrics"
for phase in input pull compute push barrier checkpoint evaluate; do
  grep -q "^psflow_task_phase_seconds_total{job=\"prof-push\",task=\"$slow\",phase=\"$phase\"} " \
    "$WORK/metrics.txt" || fail "no $phase of $slow in /metrics"
done
for phase in apply copy queue; do
  grep -q "^psflow_task_phase_seconds_total{job=\"prof-push\",task=\"ps-0\",phase=\"$phase\"} " \
    "$WORK/metrics.txt" || fail "no $phase of ps-0 in /metrics"
done
echo "Prometheus: $(grep -c '^psflow_task_phase_seconds_total{job="prof-push"' "$WORK/metrics.txt") phase counters"

# a trace of 20 steps (docs/profile.md, "Trace"): bad requests refused, one at a time, and
# the late push in it as push spans of the slow task and barrier spans of the other
trace_post() { # BODY -> HTTP code, answer in $WORK/trace-post.json
  curl -s -o "$WORK/trace-post.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
    --data-binary "$1" "$URL/api/v1/jobs/${2:-prof-push}/trace"
}
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/api/v1/jobs/prof-push/trace")
[ "$code" = 404 ] || fail "GET .../trace before any: HTTP $code"
for body in '{"steps": 0}' '{"steps": 201}' '{"steps": "20"}' '{"steps": 2.5}' '{"step": 20}' '[20]'; do
  code=$(trace_post "$body")
  [ "$code" = 400 ] || fail "POST .../trace $body: HTTP $code $(cat "$WORK/trace-post.json")"
done
trace_post '{"steps": 0}' >/dev/null
grep -q '"pointer":"/steps"' "$WORK/trace-post.json" ||
  fail "a bad steps names the field: $(cat "$WORK/trace-post.json")"
code=$(trace_post '{"steps": 20}' no-such-job)
[ "$code" = 404 ] || fail "POST .../trace of no job: HTTP $code"
code=$(trace_post '{"steps": 20}')
[ "$code" = 202 ] || fail "POST .../trace: HTTP $code $(cat "$WORK/trace-post.json")"
code=$(trace_post '{"steps": 5}')
[ "$code" = 409 ] || fail "a second trace while one records: HTTP $code"
trace_done() {
  curl -sf "$URL/api/v1/jobs/prof-push/trace" -o "$WORK/trace.json" &&
    python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["psflow"]["state"] != "complete")' \
      "$WORK/trace.json"
}
wait_until 120 "the trace to complete" trace_done
python3 - "$WORK/trace.json" "$slow" "$other" <<'PY' || fail "the trace"
import json, sys
d = json.load(open(sys.argv[1]))
slow, other = sys.argv[2], sys.argv[3]
meta = d["psflow"]
assert meta["state"] == "complete" and meta["steps"] == 20 and not meta["missing"], meta
names = {e["pid"]: e["args"]["name"] for e in d["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
assert sorted(names.values()) == ["ps-0", "worker-0", "worker-1"], names
spans = {}
for e in d["traceEvents"]:
    if e["ph"] == "X":
        assert e["dur"] >= 0 and e["ts"] >= -1e6, e
        spans.setdefault(names[e["pid"]], []).append(e)
per_step = lambda task, phase: sum(e["dur"] for e in spans[task] if e["name"] == phase) / 20e3
for task in (slow, other):
    steps = sorted({e["args"]["step"] for e in spans[task]})
    assert steps == list(range(meta["from"], meta["from"] + 20)), (task, steps)
assert per_step(slow, "push") >= 18, ("push of the late pusher, ms a step", per_step(slow, "push"))
assert per_step(other, "barrier") >= 10, ("barrier of the other, ms a step", per_step(other, "barrier"))
assert any(e["name"] == "apply" for e in spans["ps-0"]), "no apply of ps-0"
print("trace of steps %d-%d: %s push %.1f ms a step, %s barrier %.1f ms a step, %d spans" % (
    meta["from"], meta["from"] + 19, slow, per_step(slow, "push"), other,
    per_step(other, "barrier"), sum(len(v) for v in spans.values())))
PY

curl -sf -X POST "$URL/api/v1/jobs/prof-push/cancel" >/dev/null || fail "cancel"
kill "$SPARE" 2>/dev/null || true
wait_pid "$SPARE" 30 || true

# --- 2: a slow input reader
start_spare slow-input PSFLOW_TEST_INPUT_DELAY_MS=20
spec prof-input 200000 >input.json
submit input.json
wait_until 60 "both training tasks running" task_on prof-input slow-input
slow=$(task_on prof-input slow-input) other=$(task_on prof-input slow-input not)
wait_until 90 "$slow's input in the profile" check_profile prof-input "$slow" input 18
check_profile prof-input "$slow" input 18
check_profile prof-input "$other" barrier 10
curl -sf -X POST "$URL/api/v1/jobs/prof-input/cancel" >/dev/null || fail "cancel"
kill "$SPARE" 2>/dev/null || true
wait_pid "$SPARE" 30 || true
up_stop

# --- 3: static mode logs the breakdown
spec prof-static 300 >static.json
run_static_cluster static.json 2 1 >/dev/null
for i in 0 1; do
  line=$(grep "time per step:" "$WORK/worker$i.log") || fail "worker $i logged no breakdown"
  echo "static worker $i: ${line#*: }"
done
pass
