#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 300
# What trainers report, through the real coordinator and its SQLite file (psflow up, one ps
# and two worker agents on 127.0.0.1; reports carry the agents' token, as agents send them):
#  1. a job that diverges at learning rate 1000 and recovers once rolled back (learning rate
#     x 0.0005) Succeeds with status.loss the loss of the steps after the rollback (< 1), and
#     no metric point past the step it rolled back from holds a pre-rollback loss;
#  2. the same report POSTed 500 times is stored once per step (rows counted in the file);
#     a report of a stale incarnation (409), a rollback or checkpoint from a task that is
#     not the chief (403), and a forged RolledBack for a job that never ran (409) are
#     refused and change nothing; worker 0 of a job without a chief replica reporting as
#     "chief" and as "worker-0" is stored once, under "chief";
#  3. a job that keeps diverging (one rollback, then Failed/NonFiniteLoss) logs its
#     RolledBack event before the Failed one, and no task of it stays Running or Pending.
source "$(dirname "$0")/lib.sh"

spec() { # NAME LR-SCALE: the linear example at learning rate 1000, sync, 2 workers, 1 rollback
  python3 - "$PSFLOW_SRC/examples/linear.json" "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["name"] = sys.argv[2]
d["replicas"] = {"ps": 1, "worker": 2}
d["optimizer"] = {"type": "sgd", "learning_rate": 1000}
d["training"].update(mode="sync", max_steps=300, eval_every_steps=0, on_nonfinite="rollback",
                     nonfinite_max_rollbacks=1, nonfinite_lr_scale=float(sys.argv[3]))
d["checkpoint"] = {"every_steps": 1000}
json.dump(d, sys.stdout)
PY
}
submit() { # SPEC: expects 201
  code=$(curl -s -o submit.out -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary @"$1" "$URL/api/v1/jobs")
  [ "$code" = 201 ] || fail "submit $1: $code $(cat submit.out)"
}

up_start --ps 1 --workers 2
DB=$WORK/up/psflow.db

# --- 1. the loss after a rollback ------------------------------------------------------------
spec recover 0.0005 >recover.json
submit recover.json
wait_until 120 "job recover Succeeded" phase_is recover Succeeded
curl -sf "$URL/api/v1/jobs/recover" -o job.json
curl -sf "$URL/api/v1/jobs/recover/events" -o events.json
curl -sf "$URL/api/v1/jobs/recover/metrics?max_points=100000" -o metrics.json
python3 - job.json events.json metrics.json <<'PY' || fail "the loss after the rollback"
import json, re, sys
st = json.load(open(sys.argv[1]))["status"]
rolled = [e["message"] for e in json.load(open(sys.argv[2]))["items"]
          if e["type"] == "RolledBack" and e["reason"] == "NonFiniteLoss"]
assert len(rolled) == 1, rolled
m = re.search(r"rolled back from step (\d+) to checkpoint step (\d+)", rolled[0])
assert m, rolled[0]
was_at = int(m.group(1))
assert st["loss"] is not None and st["loss"] < 1.0, "status.loss %r" % st["loss"]
late = [p for p in json.load(open(sys.argv[3]))["points"] if p["step"] > was_at]
assert late, "no point past step %d" % was_at
bad = [p for p in late if p["loss"] is None or p["loss"] > 1e3]
assert not bad, "points past step %d with a pre-rollback loss: %s" % (was_at, bad[:3])
print("status.loss %.4g; %d points past step %d, the largest loss %.4g" %
      (st["loss"], len(late), was_at, max(p["loss"] for p in late)))
PY
pass "rolled back once and recovered: status.loss and every later point are the new steps' losses"

# --- 2. reports stored once, and refused when they may not be made ---------------------------
curl -sf "$URL/api/v1/jobs/recover/tasks" -o tasks.json
CHIEF_INC=$(json_field tasks.json '[t["incarnation"] for t in d["items"] if t["type"] == "worker" and t["index"] == 0][0]')
W1_INC=$(json_field tasks.json '[t["incarnation"] for t in d["items"] if t["type"] == "worker" and t["index"] == 1][0]')
spec never 0.5 >never.json
python3 - never.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["replicas"] = {"ps": 3, "worker": 1} # more ps than agents: it never starts
json.dump(d, open(sys.argv[1], "w"))
PY
submit never.json
python3 - "$URL" "$DB" "$CHIEF_INC" "$W1_INC" "$WORK/up/agent-token" <<'PY' ||
import http.client, json, sqlite3, sys, urllib.parse
url, db, chief, w1 = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
agent = {"Authorization": "Bearer " + open(sys.argv[5]).read().strip()}
u = urllib.parse.urlparse(url)
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)

def post(path, body):
    conn.request("POST", path, json.dumps(body), dict(agent, **{"Content-Type": "application/json"}))
    r = conn.getresponse()
    text = r.read().decode()
    return r.status, text

def rows(job):
    c = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
    n = c.execute("SELECT COUNT(*) FROM metrics WHERE job = ?", (job,)).fetchone()[0]
    c.close()
    return n

def status(job):
    conn.request("GET", "/api/v1/jobs/" + job)
    r = conn.getresponse()
    return json.loads(r.read())["status"]

before = rows("recover")
points = [{"step": s, "time": 1763805600.0 + s, "loss": 0.5} for s in range(1, 301)]
body = {"task": "worker-1", "incarnation": w1, "points": points}
for i in range(500):
    code, text = post("/api/v1/jobs/recover/metrics", body)
    assert code == 204, (code, text)
after = rows("recover")
# worker-1's own points of these steps, if it reported them, were measured later: kept
assert after <= before + 300, "500 POSTs of 300 steps: %d rows before, %d after" % (before, after)
print("500 POSTs of the same 300 steps: %d rows before, %d after" % (before, after))

# Worker 0 of a job without a chief replica is its chief: reports under either name are
# one task's, stored once (not twice against the job's retention bound).
late = [{"step": s, "time": 1763809200.0 + s, "loss": 0.25} for s in range(1, 301)]
before = rows("recover")
for name in ("chief", "worker-0", "chief", "worker-0"):
    code, text = post("/api/v1/jobs/recover/metrics",
                      {"task": name, "incarnation": chief, "points": late})
    assert code == 204, (name, code, text)
c = sqlite3.connect("file:%s?mode=ro" % db, uri=True)
names = [r[0] for r in c.execute("SELECT DISTINCT task FROM metrics WHERE job = 'recover'"
                                 " AND task IN ('chief', 'worker-0')")]
c.close()
assert names == ["chief"], "worker 0's reports kept under %s" % names
assert rows("recover") <= before + 300, "as chief and worker-0: %d rows before, %d after" % (
    before, rows("recover"))
print("worker 0 as chief and as worker-0: %d rows before, %d after, kept as %s"
      % (before, rows("recover"), names))

refusals = [
    ("stale incarnation", "/api/v1/jobs/recover/metrics",
     {"task": "worker-1", "incarnation": w1 - 1, "points": points[:5]}, 409, "not its current"),
    ("no incarnation", "/api/v1/jobs/recover/metrics",
     {"task": "worker-1", "points": points[:5]}, 422, "incarnation"),
    ("chief's report with a worker's incarnation", "/api/v1/jobs/recover/metrics",
     {"task": "chief", "incarnation": w1,
      "rollbacks": [{"from": 10, "to": 0, "time": 1763805600.0}]}, 409, "not its current"),
    ("checkpoint from worker 1", "/api/v1/jobs/recover/checkpoints",
     {"task": "worker-1", "incarnation": w1, "step": 300, "bytes": 10, "files": []}, 403,
     "only the chief"),
    ("forged RolledBack for a job that never ran", "/api/v1/jobs/never/metrics",
     {"task": "chief", "incarnation": chief,
      "rollbacks": [{"from": 150, "to": 100, "time": 1763805600.0, "reason": "NonFiniteLoss",
                     "message": "forged"}]}, 409, "has not run"),
]
conds_before = json.dumps(status("never")["conditions"])
recover_before = status("recover")
rows_before = rows("recover")
for what, path, body, want, says in refusals:
    code, text = post(path, body)
    assert code == want and says in text, "%s: %d %s" % (what, code, text)
    assert json.loads(text).get("status") == want, text
assert json.dumps(status("never")["conditions"]) == conds_before, status("never")
assert not [c for c in status("never")["conditions"] if c["type"] == "RolledBack"]
assert rows("recover") == rows_before and rows("never") == 0
assert status("recover")["conditions"] == recover_before["conditions"]
print("refused: " + ", ".join("%s %d" % (r[0], r[3]) for r in refusals))
PY
  fail "repeated and refused reports"
curl -sf -X DELETE "$URL/api/v1/jobs/never" >/dev/null || fail "DELETE never"
pass "500 repeated POSTs stored once per step; stale, wrong-role and never-ran reports refused, nothing changed"

# --- 3. events in causal order, and the tasks of a failed job ----------------------------------
spec keeps 0.5 >keeps.json
submit keeps.json
wait_until 120 "job keeps Failed" phase_is keeps Failed
curl -sf "$URL/api/v1/jobs/keeps/events" -o events.json
curl -sf "$URL/api/v1/jobs/keeps/tasks" -o tasks.json
python3 - events.json tasks.json <<'PY' || fail "events order or task states of the failed job"
import json, sys
items = json.load(open(sys.argv[1]))["items"]
kinds = [(e["id"], e["type"], e["reason"]) for e in items]
rolled = [i for i, t, r in kinds if t == "RolledBack" and r == "NonFiniteLoss"]
failed = [i for i, t, r in kinds if t == "Failed"]
assert len(rolled) == 1 and len(failed) == 1, kinds
assert rolled[0] < failed[0], "Failed (id %d) before RolledBack (id %d): %s" % (failed[0], rolled[0], kinds)
states = {"%s-%d" % (t["type"], t["index"]): t["state"] for t in json.load(open(sys.argv[2]))["items"]}
assert not [k for k, s in states.items() if s in ("Running", "Pending")], states
print("RolledBack id %d < Failed id %d; tasks %s" % (rolled[0], failed[0], states))
PY
pass "a failed job: RolledBack logged before Failed, no task left Running"
up_stop
