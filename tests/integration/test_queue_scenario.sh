#!/usr/bin/env bash
# labels: sanitizer-only
# The queue's order, backfill and reasons (docs/design.md "The queue") on a real coordinator
# with its SQLite file and simulated agents: 3 ps and 4 worker agents played over the agent
# API by this test (they register, heartbeat every 0.3 s and report each assignment running
# until it is taken away; the chief of `first` reports 100 steps/s), so that no training
# decides the timing. A running job's expected end is its steps left at its measured rate,
# capped by its deadline; a job with no rate is not estimated, but for one that backfilled
# by its deadline.
#  1. `first` (1 ps, 2 workers, active_deadline_seconds 600) runs at a measured rate; `large`
#     (3 ps, 4 workers) waits for capacity, holding the idle agents, and is expected to start
#     when `first`'s deadline ends (queue.estimated_start within 5 s of first's start + 600 s);
#  2. `bounded` (1 ps, 1 worker, active_deadline_seconds 60) fits the agents held for
#     `large` and ends before it could start: it backfills (event Backfilled), and large's
#     expected start does not move; `unbounded` (the same size, no deadline) would fit the
#     idle agents too but waits, reserved behind `large`, and so does `late` (2 ps, 1
#     worker);
#  3. no starvation: `first` ends, but `large` still lacks the ps `bounded` holds, so it
#     waits (now expected when `bounded`'s deadline ends) and the small `unbounded` does not
#     take the agents freed meanwhile; `bounded` ends and `large` starts before `unbounded`;
#  4. the queue API (/api/v1/queues): create, change, list, and the errors (400 for a bad name
#     or an unknown field, 422 for a bad value or a job naming no existing queue, 404, 409 for
#     deleting the default queue or one in use);
#  5. quotas: team-a (1 ps, 2 workers) runs a1 within its quota and a2 beyond it on idle
#     agents (event Borrowing; the queue shows what it borrowed); b1 of team-b, within its
#     quota, finds no idle worker and takes a2's agents back in the round it is submitted
#     (events Reclaiming and Checkpointing before the submission is answered; a2's simulated
#     chief reports the final checkpoint its heartbeat answer asks for, and a2 stops after
#     it, Preempted); a2 then waits,
#     reason preempted, and a3 of team-a, not preemptible, waits with reason quota naming its
#     queue; team-a never holds more than its quota but for what it borrowed;
#  6. a quota of memory and priority classes: team-m (classes high 100, low -10) refuses an
#     unknown class and a priority beside a class; m1 (low) runs and gets priority -10; with
#     the quota set to m1's memory, m2 (high, not preemptible) preempts m1 to come within it,
#     m1 resumes by borrowing (event Borrowing; the queue shows the memory it borrowed), and
#     m3 waits with reason quota, its message naming the memory quota;
#  at every step each waiting job's status names its reason (and `behind` where it is
#  reserved), and GET /api/v1/jobs?waiting=true lists them in queue order.
source "$(dirname "$0")/lib.sh"

read -r port <<<"$(free_ports 1)"
URL=http://127.0.0.1:$port
"$PSFLOW_BIN" coordinator --listen "127.0.0.1:$port" --db "$WORK/psflow.db" \
  2>"$WORK/coordinator.log" &
wait_until 30 "the coordinator ready" curl -sf "$URL/readyz"

python3 - "$URL" "$PSFLOW_AGENT_TOKEN" <<'PY' || fail "the queue scenario (above)"
import calendar, json, sys, threading, time, urllib.error, urllib.request

URL, TOKEN = sys.argv[1], sys.argv[2]
AGENT = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}

def call(method, path, body=None, headers=None):
    req = urllib.request.Request(URL + path, method=method,
                                 data=None if body is None else json.dumps(body).encode(),
                                 headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")

def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)

def ok(msg):
    print("ok: " + msg)

# --- the simulated agents ---
agents = {}  # id -> the assignment it runs (None: idle)
lock = threading.Lock()
stop = threading.Event()
for i, (role, n) in enumerate([("ps", 3), ("worker", 4)]):
    for k in range(n):
        aid = "%s-%d" % (role, k)
        st, body = call("POST", "/api/v1/nodes", {"id": aid, "role": role,
                        "address": "127.0.0.1:%d" % (20000 + 10 * i + k), "version": "0.1.0",
                        "memory_bytes": 16 << 30}, AGENT)
        if st != 201:
            fail("registering %s: %s %s" % (aid, st, body))
        agents[aid] = None

progress = {}  # job -> the step its simulated chief reports (100 steps/s)

def beat():
    while not stop.is_set():
        for aid in list(agents):
            with lock:
                a = agents[aid]
            if a and a["job"] in progress and a["type"] == "worker" and a["index"] == 0:
                progress[a["job"]] += 30
                call("POST", "/api/v1/jobs/%s/metrics" % a["job"], {
                    "task": "chief", "incarnation": a["incarnation"], "points": [{
                        "step": progress[a["job"]], "time": time.time(), "loss": 1.0,
                        "examples_per_sec": 100.0, "step_time_seconds": 0.01}]}, AGENT)
            report = {"state": "idle"} if a is None else {
                "state": "running", "job": a["job"], "generation": a["generation"],
                "type": a["type"], "index": a["index"], "incarnation": a["incarnation"]}
            st, body = call("POST", "/api/v1/nodes/%s/heartbeat" % aid, report, AGENT)
            if st == 200:
                with lock:
                    agents[aid] = body.get("assignment")
                a = body.get("assignment")
                if a and "checkpoint_now" in a:  # preempted: the chief's final checkpoint
                    st, got = call("POST", "/api/v1/jobs/%s/checkpoints" % a["job"], {
                        "task": "chief", "incarnation": a["incarnation"],
                        "step": max(a["checkpoint_now"], progress.get(a["job"], 0)),
                        "bytes": 1, "files": []}, AGENT)
                    if st != 204:
                        print("checkpoint report for %s: %s %s" % (a["job"], st, got), file=sys.stderr)
        stop.wait(0.3)

threading.Thread(target=beat, daemon=True).start()

def spec(name, ps, workers, deadline=None, policy=None):
    d = {"name": name, "replicas": {"ps": ps, "worker": workers},
         "model": {"type": "linear", "inputs": 1}, "data": {"format": "synthetic_linear"},
         "training": {"max_steps": 1000000}, "run_policy": dict(policy or {})}
    if deadline:
        d["run_policy"]["active_deadline_seconds"] = deadline
    return d

def submit(name, ps, workers, deadline=None, policy=None):
    st, body = call("POST", "/api/v1/jobs", spec(name, ps, workers, deadline, policy))
    if st != 201:
        fail("submitting %s: %s %s" % (name, st, body))

def job(name):
    st, body = call("GET", "/api/v1/jobs/" + name)
    if st != 200:
        fail("GET %s: %s" % (name, st))
    return body["status"]

def parse_time(s):  # "2026-11-30T11:19:01.357Z"
    return calendar.timegm(time.strptime(s[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + s[19:-1])

def wait(what, pred, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    fail("timed out waiting for " + what)

def running(name):
    return wait(name + " Running with every task running", lambda:
                job(name)["phase"] == "Running" and
                all(t["state"] == "Running" for t in call("GET", "/api/v1/jobs/%s/tasks" % name)[1]["items"]))

def queue_is(want):
    """want: [(name, reason, behind)] in queue order; every waiting job's status agrees."""
    st, body = call("GET", "/api/v1/jobs?waiting=true")
    got = sorted(body["items"], key=lambda j: j["queue"]["position"])
    seen = [(j["name"], j["queue"]["reason"], j["queue"]["behind"]) for j in got]
    if seen != want or [j["queue"]["position"] for j in got] != list(range(1, len(got) + 1)):
        return None
    for name, reason, behind in want:
        q = job(name)["queue"]
        if not q or q["reason"] != reason or q["behind"] != behind:
            return None
    return got

def events(name, reason):
    st, body = call("GET", "/api/v1/jobs/%s/events" % name)
    return [e for e in body["items"] if e["reason"] == reason]

# 1. first runs, its chief reporting 100 steps/s (1,000,000 steps: its 600 s deadline ends it
#    first); large waits, holding the idle agents, expected when first's deadline ends
progress["first"] = 0
submit("first", 1, 2, deadline=600)
running("first")
first_start = parse_time(job("first")["start_time"])
rate = wait("first's measured rate", lambda: job("first")["steps_per_sec"], timeout=30)
ok("first runs at a measured %.0f steps/s" % rate)
submit("large", 3, 4)
wait("large waiting for capacity", lambda: queue_is([("large", "capacity", None)]))
est = parse_time(job("large")["queue"]["estimated_start"])
if abs(est - (first_start + 600)) > 5:
    fail("large is expected at %.1f, not at first's deadline %.1f" % (est, first_start + 600))
ok("large waits for capacity, expected to start when first's deadline ends (%+.1f s)" % (est - first_start))

# 2. bounded backfills; unbounded and late wait
submit("bounded", 1, 1, deadline=60)
running("bounded")
if len(events("bounded", "Backfilled")) != 1:
    fail("no Backfilled event for bounded: %s" % call("GET", "/api/v1/jobs/bounded/events")[1])
est2 = parse_time(job("large")["queue"]["estimated_start"])
if abs(est2 - est) > 5:
    fail("the backfill moved large's expected start from %.1f to %.1f" % (est, est2))
submit("unbounded", 1, 1)
submit("late", 2, 1)
wait("the queue large, unbounded (reserved for large), late", lambda: queue_is(
    [("large", "capacity", None), ("unbounded", "reserved", "large"), ("late", "reserved", "large")]))
if events("unbounded", "Backfilled") or job("unbounded")["phase"] != "Created":
    fail("unbounded (no deadline) started ahead of large")
ok("bounded (deadline 60 s) backfilled ahead of large, whose expected start stayed; unbounded "
   "and late wait, reserved behind large: %s" % job("unbounded")["queue"])

# 3. no starvation: first ends; large still waits for bounded's ps, and unbounded does not
#    take the agents first freed
st, _ = call("POST", "/api/v1/jobs/first/cancel")
if st != 200:
    fail("cancel first: %s" % st)
wait("first's agents idle", lambda: sum(1 for a in agents.values() if a is None) == 5)
time.sleep(1.0)  # a few scheduling rounds with the freed agents
wait("large still first", lambda: queue_is(
    [("large", "capacity", None), ("unbounded", "reserved", "large"), ("late", "reserved", "large")]))
bounded_start = parse_time(job("bounded")["start_time"])
est3 = parse_time(job("large")["queue"]["estimated_start"])
if abs(est3 - (bounded_start + 60)) > 5:
    fail("large is expected at %.1f, not at bounded's deadline %.1f" % (est3, bounded_start + 60))
ok("first ended: large, short of one ps, still waits (expected when bounded's deadline ends) "
   "and unbounded does not take the freed agents")
st, _ = call("POST", "/api/v1/jobs/bounded/cancel")
running("large")
wait("unbounded and late waiting", lambda: queue_is(
    [("unbounded", "capacity", None), ("late", "capacity", None)]))
ok("bounded ended: large started before the smaller unbounded and late, which wait for capacity")
for name in ("large", "unbounded", "late"):
    call("POST", "/api/v1/jobs/%s/cancel" % name)
wait("every agent idle", lambda: all(a is None for a in agents.values()))

# 4. the queue API
def expect(method, path, body, status, pointer=None):
    st, got = call(method, path, body)
    if st != status or (pointer and got["errors"][0]["pointer"] != pointer):
        fail("%s %s %s: %s %s, expected %s %s" % (method, path, body, st, got, status, pointer))
    return got
expect("PUT", "/api/v1/queues/team-a", {"quota": {"ps": 1, "workers": 1}}, 201)
q = expect("PUT", "/api/v1/queues/team-a", {"quota": {"ps": 1, "workers": 2}, "weight": 2}, 200)
if q["quota"] != {"ps": 1, "workers": 2, "memory_bytes": None} or q["weight"] != 2 or \
        q["priority_classes"] != {}:
    fail("team-a after PUT: %s" % q)
expect("PUT", "/api/v1/queues/team-b", {"quota": {"ps": 2, "workers": 2}}, 201)
names = [x["name"] for x in expect("GET", "/api/v1/queues", None, 200)["items"]]
if names != ["default", "team-a", "team-b"]:
    fail("GET /api/v1/queues lists %s" % names)
expect("PUT", "/api/v1/queues/Team_A", {}, 400, "/name")
expect("PUT", "/api/v1/queues/team-c", {"quota": {"memory": 1}}, 400, "/quota/memory")
expect("PUT", "/api/v1/queues/team-c", {"weight": 0}, 422, "/weight")
expect("PUT", "/api/v1/queues/team-c", {"quota": {"workers": -1}}, 422, "/quota/workers")
expect("PUT", "/api/v1/queues/team-c", {"quota": "all"}, 422, "/quota")
expect("PUT", "/api/v1/queues/team-c", {"quota": {"memory_bytes": -1}}, 422, "/quota/memory_bytes")
expect("PUT", "/api/v1/queues/team-c", {"quota": {"memory_bytes": 1.5}}, 422, "/quota/memory_bytes")
expect("PUT", "/api/v1/queues/team-c", {"priority_classes": ["high"]}, 422, "/priority_classes")
expect("PUT", "/api/v1/queues/team-c", {"priority_classes": {"High": 1}}, 422,
       "/priority_classes/High")
expect("PUT", "/api/v1/queues/team-c", {"priority_classes": {"high": 1001}}, 422,
       "/priority_classes/high")
expect("PUT", "/api/v1/queues/team-c", {"priority_classes": {"a/b~c": 1}}, 422,
       "/priority_classes/a~1b~0c")
expect("PUT", "/api/v1/queues/team-c",
       {"priority_classes": {"c%d" % i: i for i in range(17)}}, 422, "/priority_classes")
expect("GET", "/api/v1/queues/team-c", None, 404)
expect("DELETE", "/api/v1/queues/default", None, 409)
expect("POST", "/api/v1/jobs", spec("lost", 1, 1, policy={"queue": "team-c"}), 422,
       "/run_policy/queue")
ok("the queue API: created, changed and listed; a bad name, field, value, quota of memory or "
   "priority class, an unknown queue and deleting the default queue refused")

# 5. quotas, borrowing and reclaim
def queue(name):
    return expect("GET", "/api/v1/queues/" + name, None, 200)

def within_quota_but_borrowed(name):
    q = queue(name)
    for role in ("ps", "workers", "memory_bytes"):
        if q["quota"][role] is None:
            continue
        if q["usage"][role] - q["borrowed"][role] > q["quota"][role]:
            fail("queue %s holds more than its quota beyond what it borrowed: %s" % (name, q))
    return q

submit("a1", 1, 2, policy={"queue": "team-a"})
running("a1")
submit("a2", 1, 2, policy={"queue": "team-a"})
running("a2")
if len(events("a2", "Borrowing")) != 1:
    fail("no Borrowing event for a2")
q = within_quota_but_borrowed("team-a")
if (q["usage"]["ps"], q["usage"]["workers"]) != (2, 4) or \
        (q["borrowed"]["ps"], q["borrowed"]["workers"]) != (1, 2):
    fail("team-a while a2 borrows: %s" % q)
ok("a1 runs within team-a's quota, a2 beyond it on idle agents: %s" % q["borrowed"])
submit("b1", 1, 2, policy={"queue": "team-b"})
# asked right after the submission was answered: the same round reclaimed a2, whose chief is
# asked for a final checkpoint in its next heartbeat answer
if len(events("b1", "Reclaiming")) != 1 or len(events("a2", "Checkpointing")) != 1:
    fail("b1's submission did not reclaim a2 in its round: %s" % call("GET", "/api/v1/jobs/a2/events")[1])
wait("a2 stopped after its final checkpoint", lambda: job("a2")["phase"] == "Restarting")
if "after its final checkpoint at step" not in [e for e in events("a2", "Preempted")][0]["message"]:
    fail("a2's Preempted event: %s" % events("a2", "Preempted"))
if job("a1")["phase"] != "Running":
    fail("a1, within team-a's quota, was stopped too")
running("b1")
within_quota_but_borrowed("team-a")
submit("a3", 1, 1, policy={"queue": "team-a", "preemptible": False})
got = wait("a2 preempted and a3 waiting for team-a's quota", lambda: queue_is(
    [("a2", "preempted", None), ("a3", "quota", None)]))
if any(j["queue"]["name"] != "team-a" for j in got):
    fail("the waiting jobs do not name their queue: %s" % [j["queue"] for j in got])
if "waiting for the quota of queue team-a" not in job("a3")["message"]:
    fail("a3's message: %s" % job("a3")["message"])
ok("b1 (team-b, within its quota) took back a2's borrowed agents in the round it was "
   "submitted; a2 waits (preempted), a3 waits for team-a's quota: %s" % job("a3")["message"])
st, _ = call("POST", "/api/v1/jobs/b1/cancel")
running("a2")
if job("a2")["preemptions"] != 1:
    fail("a2's preemptions: %s" % job("a2")["preemptions"])
within_quota_but_borrowed("team-a")
wait("a3 still waiting for team-a's quota", lambda: queue_is([("a3", "quota", None)]))
expect("DELETE", "/api/v1/queues/team-a", None, 409)
ok("b1 ended: a2 resumed by borrowing again; a3 (not preemptible) still waits for the quota")
for name in ("a1", "a2", "a3"):
    call("POST", "/api/v1/jobs/%s/cancel" % name)
wait("every agent idle", lambda: all(a is None for a in agents.values()))

# 6. a quota of memory and priority classes
expect("PUT", "/api/v1/queues/team-m", {"priority_classes": {"high": 100, "low": -10}}, 201)
expect("POST", "/api/v1/jobs", spec("m0", 1, 1, policy={"queue": "team-m",
       "priority_class": "urgent"}), 422, "/run_policy/priority_class")
expect("POST", "/api/v1/jobs", spec("m0", 1, 1, policy={"queue": "team-m",
       "priority_class": "high", "priority": 5}), 422, "/run_policy/priority")
submit("m1", 1, 1, policy={"queue": "team-m", "priority_class": "low"})
running("m1")
st, got = call("GET", "/api/v1/jobs/m1")
if got["spec"]["run_policy"].get("priority") != -10 or \
        got["spec"]["run_policy"].get("priority_class") != "low":
    fail("m1's run_policy after submit: %s" % got["spec"]["run_policy"])
one = queue("team-m")["usage"]["memory_bytes"]
if not one > 0:
    fail("team-m's memory while m1 runs: %s" % queue("team-m"))
# room for one such job: m2 (class high, not preemptible, so it never borrows) comes within
# the quota only by stopping m1, which then borrows the idle agents beyond it
expect("PUT", "/api/v1/queues/team-m", {"quota": {"memory_bytes": one},
       "priority_classes": {"high": 100, "low": -10}}, 200)
submit("m2", 1, 1, policy={"queue": "team-m", "priority_class": "high", "preemptible": False})
if len(events("m2", "Preempting")) != 1:
    fail("m2 did not preempt m1: %s" % call("GET", "/api/v1/jobs/m2/events")[1])
running("m2")
wait("m1 preempted by m2", lambda: job("m1")["preemptions"] == 1)
running("m1")
if len(events("m1", "Borrowing")) != 1:
    fail("m1 did not resume by borrowing: %s" % call("GET", "/api/v1/jobs/m1/events")[1])
q = within_quota_but_borrowed("team-m")
if q["usage"]["memory_bytes"] != 2 * one or q["borrowed"]["memory_bytes"] != one:
    fail("team-m while m1 borrows: %s" % q)
submit("m3", 1, 1, policy={"queue": "team-m", "preemptible": False})
wait("m3 waiting for team-m's quota", lambda: queue_is([("m3", "quota", None)]))
if "memory: " not in job("m3")["message"]:
    fail("m3's message does not name the memory quota: %s" % job("m3")["message"])
ok("team-m (memory for one job, classes high 100 and low -10): m2 (high) preempted m1 (low) "
   "to come within the quota, m1 resumed borrowing %d bytes; m3 waits: %s"
   % (q["borrowed"]["memory_bytes"], job("m3")["message"]))
stop.set()
PY
pass "queue order, backfill, quotas, borrowing, reclaim and reasons on a real coordinator with simulated agents"
