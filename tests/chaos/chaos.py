#!/usr/bin/env python3
"""chaos.py - the chaos suite: a long sync job and a long async job on a real managed cluster
(a coordinator with its SQLite file and ps/worker agents, started as users start them, on
127.0.0.1) while a seeded schedule injects faults:

  kill-worker   kill -9 of the worker agent running a job's worker task, started again
  kill-ps       kill -9 of the ps agent running a job's ps task (a managed ps runs inside
                its agent), started again with the same node id
  kill-coord    kill -9 of the coordinator, started again on the same database and port
  stop-agent    SIGSTOP of the agent running a task, past its lease, then SIGCONT

The seed and the schedule are printed first; `CHAOS_SEED=S CHAOS_SECONDS=T CHAOS_FAULTS=N`
replays a run. Checks, each failing the run with a message that says which:
  1. both jobs end Succeeded with test accuracy >= CHAOS_ACCURACY [0.84, the softmax
     example's target];
  2. global_step sampled through the API never goes back except at a RolledBack event
     recorded by the coordinator (each decrease a -> b needs a rollback of its own whose
     target step is <= b);
  3. every metric point the coordinator acknowledged (HTTP 2xx to an agent's POST .../metrics,
     seen by a recording proxy the agents talk to) is in GET .../metrics at the end, across
     coordinator restarts;
  4. no process the run started is left once the cluster is stopped (by pid, and no process
     whose command line names the run's folder); leftovers are killed with SIGKILL and fail.

Environment: PSFLOW_BIN, PSFLOW_SRC (set by ctest); CHAOS_SEED [random], CHAOS_SECONDS [60],
CHAOS_FAULTS [4], CHAOS_STEPS [each job's max_steps; by default from CHAOS_SECONDS and
CHAOS_DELAY_MS [10], the workers' --push-delay-ms], CHAOS_LEASE [3],
CHAOS_ACCURACY [0.84], CHAOS_PREFETCH [1 or 0: the async job's training.prefetch; by default
on for an odd seed], CHAOS_STALENESS [S >= 0: the async job's training.max_staleness, -1:
none; by default 2 for a seed that is a multiple of 4, none otherwise; never with prefetch],
CHAOS_KEEP=1 keeps the run's folder.

Under the sanitizer build (PSFLOW_SANITIZE set, as ctest sets it) the defaults are shorter:
CHAOS_SECONDS 44 (the four kinds, one slot of 8 + CHAOS_LEASE s each), CHAOS_DELAY_MS 20,
max_steps what a job would do at the push-delay bound in the schedule's time alone (the last
fault ends within it; a job is never faster than the bound), and CHAOS_ACCURACY 0.80 (about
2200 sync steps, too few for the example's 0.84); the first line says so. Every check is the
same; explicit CHAOS_* settings win.
"""
import calendar
import http.client
import http.server
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

BIN = os.environ.get("PSFLOW_BIN") or sys.exit("PSFLOW_BIN unset (run through ctest)")
SRC = os.environ.get("PSFLOW_SRC") or sys.exit("PSFLOW_SRC unset (run through ctest)")
# The sanitizer build (PSFLOW_SANITIZE, from ctest) runs a shorter schedule by default.
SANITIZED = bool(os.environ.get("PSFLOW_SANITIZE"))
SECONDS = float(os.environ.get("CHAOS_SECONDS") or ("44" if SANITIZED else "60"))
FAULTS = int(os.environ.get("CHAOS_FAULTS", "4"))
SEED = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1, 1 << 31))
# Whether the async job prefetches (training.prefetch): CHAOS_PREFETCH=1/0, else by the seed.
PREFETCH = (os.environ.get("CHAOS_PREFETCH") == "1" if os.environ.get("CHAOS_PREFETCH")
            else SEED % 2 == 1)
# The async job's training.max_staleness (None: unbounded); prefetch excludes it.
_STALENESS = int(os.environ.get("CHAOS_STALENESS") or (2 if SEED % 4 == 0 else -1))
STALENESS = None if PREFETCH or _STALENESS < 0 else _STALENESS
LEASE = float(os.environ.get("CHAOS_LEASE", "3"))
ACCURACY = float(os.environ.get("CHAOS_ACCURACY") or ("0.80" if SANITIZED else "0.84"))
MODES = ("sync", "async")
PS_PER_JOB, WORKERS_PER_JOB = 2, 2
# The worker agents wait DELAY_MS before every push (their testing option --push-delay-ms), so
# a job cannot go faster than 1000 / DELAY_MS steps a second per worker (sync: per job): a
# softmax step alone takes about a millisecond, and a job must outlast the schedule however
# fast the machine is. Each job's max_steps is what it would do at that bound in the
# schedule's time plus 15 s (in the sanitizer build, the schedule's time alone: each fault
# ends within its slot, so even at the bound a job outlasts the last one).
DELAY_MS = int(os.environ.get("CHAOS_DELAY_MS") or ("20" if SANITIZED else "10"))
MARGIN = 0 if SANITIZED else 15
STEPS = {m: int(os.environ.get("CHAOS_STEPS") or (SECONDS + MARGIN) * 1000 / DELAY_MS
                * (1 if m == "sync" else WORKERS_PER_JOB)) for m in MODES}
SPARE_PS, SPARE_WORKERS = 1, 1
KINDS = ("kill-worker", "kill-ps", "kill-coord", "stop-agent")

START = time.monotonic()


def stamp(t):
    """Wall-clock time t as the coordinator's events write it."""
    return time.strftime("%H:%M:%S", time.gmtime(t)) + ".%03dZ" % int((t % 1) * 1000)


def log(msg):
    print("[%7.1fs] %s" % (time.monotonic() - START, msg), flush=True)


class Failure(Exception):
    pass


def free_ports(n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


# --- the schedule ----------------------------------------------------------------------------


def make_schedule(seed, seconds, n):
    """n faults over `seconds`, one per equal slot, each recovered within its slot. The first
    four are the four kinds in a seeded order, so a short run covers each."""
    if n < 1:
        raise Failure("CHAOS_FAULTS must be at least 1")
    slot = seconds / n
    if slot < 8 + LEASE:
        raise Failure("CHAOS_SECONDS / CHAOS_FAULTS = %.1f s per fault; at least %.0f s needed "
                      "(a stopped agent stays stopped past its %.0f s lease)"
                      % (slot, 8 + LEASE, LEASE))
    rng = random.Random(seed)
    kinds = list(KINDS)
    rng.shuffle(kinds)
    while len(kinds) < n:
        kinds.append(rng.choice(KINDS))
    out = []
    for k in range(n):
        kind = kinds[k]
        at = k * slot + rng.uniform(0.1, 0.4) * slot
        f = {"n": k + 1, "at": round(at, 1), "kind": kind, "job": "chaos-" + rng.choice(MODES)}
        if kind == "kill-worker":
            f.update(type="worker", index=rng.randrange(WORKERS_PER_JOB))
            f["down"] = round(rng.uniform(0.2, 3.0), 1)
        elif kind == "kill-ps":
            f.update(type="ps", index=rng.randrange(PS_PER_JOB))
            f["down"] = round(rng.uniform(0.2, 3.0), 1)
        elif kind == "kill-coord":
            f["job"] = None
            f["down"] = round(rng.uniform(0.5, 4.0), 1)
        else:
            f["type"] = rng.choice(("ps", "worker"))
            f["index"] = rng.randrange(PS_PER_JOB if f["type"] == "ps" else WORKERS_PER_JOB)
            f["down"] = round(LEASE + rng.uniform(1.0, 3.0), 1)
        out.append(f)
    return out


def replay():
    extra = "".join(" %s=%s" % (k, os.environ[k]) for k in
                    ("CHAOS_STEPS", "CHAOS_DELAY_MS", "CHAOS_LEASE", "CHAOS_PREFETCH",
                     "CHAOS_STALENESS")
                    if k in os.environ)
    if SANITIZED and "CHAOS_DELAY_MS" not in os.environ:
        extra += " CHAOS_DELAY_MS=%d" % DELAY_MS  # the sanitizer build's default
    return "CHAOS_SEED=%d CHAOS_SECONDS=%g CHAOS_FAULTS=%d%s" % (SEED, SECONDS, FAULTS, extra)


def describe(f):
    if f["kind"] == "kill-coord":
        return "kill -9 the coordinator, restart it %.1f s later on the same database" % f["down"]
    task = "%s %s %d" % (f["job"], f["type"], f["index"])
    if f["kind"] == "stop-agent":
        return "SIGSTOP the agent of %s for %.1f s (lease %.0f s), then SIGCONT" % (
            task, f["down"], LEASE)
    return "kill -9 the agent of %s, start it again %.1f s later" % (task, f["down"])


# --- the recording proxy between the agents and the coordinator ------------------------------


class Acks:
    """Metric points the coordinator acknowledged: (job, task, step) of every point in a POST
    .../metrics that it answered with 2xx."""

    def __init__(self):
        self.mu = threading.Lock()
        self.points = set()
        self.posts = 0
        self.rollbacks = []

    def add(self, job, body):
        with self.mu:
            self.posts += 1
            for p in body.get("points", []):
                self.points.add((job, body["task"], int(p["step"])))
            for r in body.get("rollbacks", []) or []:
                self.rollbacks.append((job, r.get("from"), r.get("to")))


METRICS_PATH = re.compile(r"^/api/v1/jobs/([^/?]+)/metrics$")


def make_proxy(upstream_port, acks):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args):
            pass

        def forward(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else None
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("connection", "keep-alive", "host",
                                            "transfer-encoding")}
            try:
                conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=15)
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
            except (OSError, http.client.HTTPException):
                # The coordinator is down: the agent sees what it would see without the proxy,
                # a connection that ends without an answer.
                self.close_connection = True
                return
            m = METRICS_PATH.match(self.path.split("?")[0])
            if self.command == "POST" and m and 200 <= resp.status < 300 and body:
                try:
                    acks.add(m.group(1), json.loads(body))
                except (ValueError, KeyError, TypeError) as e:
                    log("proxy: cannot read an acknowledged metrics body: %s" % e)
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("connection", "keep-alive", "transfer-encoding",
                                     "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = forward

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


# --- the cluster -----------------------------------------------------------------------------


class Cluster:
    def __init__(self, work):
        self.work = work
        self.logs = os.path.join(work, "logs")
        os.makedirs(self.logs)
        self.ckpt = os.path.join(work, "checkpoints")
        self.db = os.path.join(work, "psflow.db")
        # The coordinator creates the agents' token here on its first start; the agents read it.
        self.agent_token = os.path.join(work, "agent-token")
        self.port, = free_ports(1)
        self.url = "http://127.0.0.1:%d" % self.port
        self.acks = Acks()
        self.proxy = make_proxy(self.port, self.acks)
        self.agent_url = "http://127.0.0.1:%d" % self.proxy.server_address[1]
        self.procs = []  # every Popen this run started, for the final check
        self.coord = None
        self.coord_starts = 0
        self.agents = {}  # node id -> {"role", "port", "proc", "starts", "stopped"}
        self.env = dict(os.environ, PSFLOW_LEASE_SECONDS="%g" % LEASE, PSFLOW_THREADS="1")

    def spawn(self, name, argv):
        out = open(os.path.join(self.logs, name + ".log"), "ab")
        p = subprocess.Popen([BIN] + argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                             stdin=subprocess.DEVNULL)
        out.close()
        self.procs.append((name, p))
        return p

    def start_coordinator(self):
        self.coord_starts += 1
        self.coord = self.spawn("coordinator", ["coordinator", "--listen", "127.0.0.1:%d" % self.port,
                                                "--db", self.db,
                                                "--agent-token-file", self.agent_token])
        wait_until(30, "the coordinator ready (start %d)" % self.coord_starts,
                   lambda: self.coord.poll() is None and http_ok(self.url + "/readyz"),
                   abort=lambda: self.coord.poll() is not None and
                   "the coordinator exited with status %s" % self.coord.returncode)

    def add_agent(self, node_id, role):
        self.agents[node_id] = {"role": role, "port": free_ports(1)[0], "proc": None, "starts": 0,
                                "stopped": False}
        self.start_agent(node_id)

    def start_agent(self, node_id):
        a = self.agents[node_id]
        a["starts"] += 1
        addr = "127.0.0.1:%d" % a["port"]
        argv = [a["role"], "--coordinator", self.agent_url, "--node-id", node_id,
                "--advertise", addr, "--checkpoint-dir", self.ckpt,
                "--agent-token-file", self.agent_token]
        if a["role"] == "ps":
            argv += ["--listen", addr]
        else:
            argv += ["--push-delay-ms", str(DELAY_MS)]
        a["proc"] = self.spawn(node_id, argv)

    def agent_of(self, job, typ, index):
        tasks = get_json(self.url + "/api/v1/jobs/%s/tasks" % job)["items"]
        for t in tasks:
            if t["type"] == typ and t["index"] == index:
                return t["node_id"], t["state"]
        return None, None


def http_ok(url):
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return 200 <= r.status < 300
    except (OSError, http.client.HTTPException):
        return False


def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.load(r)


def post_json(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_until(limit, what, cond, abort=None):
    deadline = time.monotonic() + limit
    while True:
        try:
            if cond():
                return
        except (OSError, ValueError, KeyError, http.client.HTTPException):
            pass
        if abort:
            why = abort()
            if why:
                raise Failure("while waiting for %s: %s" % (what, why))
        if time.monotonic() > deadline:
            raise Failure("timed out after %.0f s waiting for %s" % (limit, what))
        time.sleep(0.2)


def job_spec(name, mode):
    d = json.load(open(os.path.join(SRC, "examples", "fashion-mnist-softmax.json")))
    d["name"] = name
    d["replicas"] = {"ps": PS_PER_JOB, "worker": WORKERS_PER_JOB}
    d["training"].update(mode=mode, max_steps=STEPS[mode], batch_size=50, eval_every_steps=0)
    if mode == "sync":
        d["training"]["replicas_to_aggregate"] = WORKERS_PER_JOB
    else:
        d["training"].pop("replicas_to_aggregate", None)
        d["training"]["prefetch"] = PREFETCH
        if STALENESS is not None:
            d["training"]["max_staleness"] = STALENESS
    d["checkpoint"] = {"every_steps": 250, "keep": 3}
    # Every fault may cost a restart: the policy must allow as many as the schedule has.
    d["run_policy"] = {"restart_policy": "OnFailure", "backoff_limit": 2 * FAULTS + 4}
    return d


# --- sampling global_step --------------------------------------------------------------------


class Sampler(threading.Thread):
    def __init__(self, url, jobs):
        super().__init__(daemon=True)
        self.url, self.jobs = url, jobs
        self.samples = {j: [] for j in jobs}  # (wall-clock time, step, phase)
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            for j in self.jobs:
                try:
                    st = get_json(self.url + "/api/v1/jobs/" + j, timeout=2)["status"]
                    self.samples[j].append((time.time(), st["global_step"], st["phase"]))
                except (OSError, ValueError, KeyError, http.client.HTTPException):
                    pass  # the coordinator is down
            self.stop.wait(0.2)


# --- faults ----------------------------------------------------------------------------------


def inject(cluster, f, running):
    """Applies fault f; returns a line for the report."""
    if f["kind"] == "kill-coord":
        pid = cluster.coord.pid
        cluster.coord.kill()
        cluster.coord.wait()
        time.sleep(f["down"])  # the fault itself: the coordinator stays down this long
        cluster.start_coordinator()
        return "coordinator pid %d killed, restarted (start %d)" % (pid, cluster.coord_starts)
    job = f["job"]
    if job not in running:
        others = [j for j in running]
        if not others:
            return None
        job = others[0]
    node, state = cluster.agent_of(job, f["type"], f["index"])
    if not node or node not in cluster.agents:
        return "SKIPPED: %s %s %d has no agent (state %s)" % (job, f["type"], f["index"], state)
    a = cluster.agents[node]
    p = a["proc"]
    what = "%s %s %d on agent %s (pid %d, task %s)" % (job, f["type"], f["index"], node, p.pid,
                                                       state)
    if f["kind"] == "stop-agent":
        p.send_signal(signal.SIGSTOP)
        a["stopped"] = True
        time.sleep(f["down"])  # the fault itself: stopped past its lease
        p.send_signal(signal.SIGCONT)
        a["stopped"] = False
        return "stopped and continued " + what
    p.kill()
    p.wait()
    time.sleep(f["down"])  # the fault itself: the agent stays down this long
    cluster.start_agent(node)
    return "killed and restarted " + what


# --- checks ----------------------------------------------------------------------------------


ROLLBACK_MSG = re.compile(r"rolled back from step (\d+) to checkpoint step (\d+)")


def all_events(url, job):
    out, since = [], 0
    while True:
        items = get_json(url + "/api/v1/jobs/%s/events?since_id=%d" % (job, since))["items"]
        if not items:
            return out
        out += items
        nxt = max(e["id"] for e in items)
        if nxt <= since:
            return out
        since = nxt


def event_time(e):
    """An event's RFC 3339 time ("2026-11-25T13:19:06.227Z") in seconds since the epoch."""
    t = e["time"]
    whole, _, frac = t.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float("0." + (frac or "0"))


def check_steps(job, samples, events):
    """Each decrease of the sampled global_step (a -> b between samples at t0 and t1) must be
    a RolledBack event of its own, recorded between the two samples (1 s of slack for the
    millisecond times), whose checkpoint step is <= b."""
    rollbacks = []
    for e in events:
        if e.get("type") == "RolledBack":
            m = ROLLBACK_MSG.search(e.get("message", ""))
            if not m:
                raise Failure("%s: a RolledBack event without from/to steps: %r" % (job, e))
            rollbacks.append((int(m.group(1)), int(m.group(2)), event_time(e)))
    left = list(rollbacks)
    decreases = []
    for (t0, a, _), (t1, b, ph) in zip(samples, samples[1:]):
        if b < a:
            decreases.append((t1, a, b, ph))
            match = next((r for r in left if r[1] <= b and t0 - 1 <= r[2] <= t1 + 1), None)
            if match is None:
                raise Failure("%s: global_step went back from %d to %d between %s and %s (phase "
                              "%s) with no recorded rollback to explain it (RolledBack events: "
                              "%s; restarts: %s)"
                              % (job, a, b, stamp(t0), stamp(t1), ph,
                                 [(f, t, stamp(w)) for f, t, w in rollbacks] or "none",
                                 [(e["reason"], e["message"]) for e in events
                                  if e.get("reason") in ("JobRestarted", "TaskLost",
                                                         "TaskFailed")][:6]))
            left.remove(match)
    return rollbacks, decreases


def check_metrics(cluster, job):
    # The points acknowledged before the GET is sent: the coordinator commits a POST before
    # it answers, so each must be in the answer. A task may still post after its job ended
    # (a worker's last window), and a point acknowledged while the GET is being answered
    # may or may not be in it.
    with cluster.acks.mu:
        acked = {(t, s) for (j, t, s) in cluster.acks.points if j == job}
    got = get_json(cluster.url + "/api/v1/jobs/%s/metrics?max_points=100000" % job, timeout=30)
    if got.get("downsampled"):
        raise Failure("%s: %d metric points, more than one answer holds; cannot compare"
                      % (job, got["total_points"]))
    have = {(p["task"], int(p["step"])) for p in got["points"]}
    missing = sorted(acked - have)
    if missing:
        raise Failure("%s: %d of %d acknowledged metric points missing from GET .../metrics, "
                      "e.g. %s" % (job, len(missing), len(acked), missing[:5]))
    return len(acked), len(have)


SANITIZER = re.compile(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error: ")


def sanitizer_reports(logs):
    """Logs (of the sanitizer build) holding a report; a process killed with SIGKILL has none."""
    out = []
    for name in sorted(os.listdir(logs)):
        with open(os.path.join(logs, name), errors="replace") as fh:
            m = SANITIZER.search(fh.read())
        if m:
            out.append("logs/%s (%s)" % (name, m.group(0)))
    return out


def processes_naming(path):
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if path in cmd and BIN in cmd:
            out.append((int(pid), cmd.strip()))
    return out


def stop_cluster(cluster, grace=30):
    """SIGTERM every agent, then the coordinator, as an operator stops them; returns the
    processes still alive after `grace` seconds (killed with SIGKILL) and strays."""
    for a in cluster.agents.values():
        if a["stopped"] and a["proc"].poll() is None:
            a["proc"].send_signal(signal.SIGCONT)
    for a in cluster.agents.values():
        if a["proc"] and a["proc"].poll() is None:
            a["proc"].terminate()
    leftovers = []
    deadline = time.monotonic() + grace
    for name, p in cluster.procs:
        if p is cluster.coord:
            continue
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            leftovers.append("%s (pid %d)" % (name, p.pid))
            p.kill()
            p.wait()
    if cluster.coord and cluster.coord.poll() is None:
        cluster.coord.terminate()
        try:
            cluster.coord.wait(grace)
        except subprocess.TimeoutExpired:
            leftovers.append("coordinator (pid %d)" % cluster.coord.pid)
            cluster.coord.kill()
            cluster.coord.wait()
    for pid, cmd in processes_naming(cluster.work):
        leftovers.append("stray pid %d: %s" % (pid, cmd))
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return leftovers


# --- the run ---------------------------------------------------------------------------------


def main():
    schedule = make_schedule(SEED, SECONDS, FAULTS)
    if SANITIZED:
        print("chaos: sanitizer build: by default a %.0f s schedule, push delay %d ms, max_steps "
              "for the schedule alone, accuracy bound %.2f (0.84 in the release build)"
              % (SECONDS, DELAY_MS, ACCURACY))
    print("chaos: seed %d, %d faults over %.0f s, max_steps %s, push delay %d ms, lease %.0f s,"
          " accuracy bound %.2f, async prefetch %s, max_staleness %s"
          % (SEED, FAULTS, SECONDS, STEPS, DELAY_MS, LEASE, ACCURACY,
             "on" if PREFETCH else "off", "none" if STALENESS is None else STALENESS))
    print("chaos: replay with %s" % replay())
    for f in schedule:
        print("chaos: fault %2d at +%6.1f s: %s" % (f["n"], f["at"], describe(f)))
    sys.stdout.flush()
    work = tempfile.mkdtemp(prefix="psflow-chaos.")
    cluster = Cluster(work)
    jobs = ["chaos-" + m for m in MODES]
    ok = False
    try:
        cluster.start_coordinator()
        log("coordinator %s (agents talk to it through the recording proxy %s)" % (
            cluster.url, cluster.agent_url))
        for i in range(len(MODES) * PS_PER_JOB + SPARE_PS):
            cluster.add_agent("ps-%d" % i, "ps")
        for i in range(len(MODES) * WORKERS_PER_JOB + SPARE_WORKERS):
            cluster.add_agent("worker-%d" % i, "worker")
        n_agents = len(cluster.agents)
        wait_until(60, "%d agents registered" % n_agents,
                   lambda: len(get_json(cluster.url + "/api/v1/nodes")["items"]) == n_agents)
        for j, mode in zip(jobs, MODES):
            code, body = post_json(cluster.url + "/api/v1/jobs", job_spec(j, mode))
            if code != 201:
                raise Failure("submitting %s: HTTP %d %s" % (j, code, body))
        sampler = Sampler(cluster.url, jobs)
        sampler.start()
        wait_until(60, "both jobs Running", lambda: all(
            get_json(cluster.url + "/api/v1/jobs/" + j)["status"]["phase"] == "Running"
            for j in jobs))
        t0 = time.monotonic()
        log("both jobs Running; the schedule starts")
        survived = []
        for f in schedule:
            delay = t0 + f["at"] - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the schedule's own clock, not a synchronisation
            running = [j for j in jobs if get_json(cluster.url + "/api/v1/jobs/" + j)["status"][
                "phase"] not in ("Succeeded", "Failed")]
            what = inject(cluster, f, running)
            if what is None:
                what = "both jobs had ended; nothing to hit"
            log("fault %d (%s): %s" % (f["n"], f["kind"], what))
            survived.append((f, what, bool(running) and not what.startswith("SKIPPED")))
        log("schedule done; waiting for both jobs to end")

        def ended():
            phases = [get_json(cluster.url + "/api/v1/jobs/" + j)["status"]["phase"] for j in jobs]
            failed = [j for j, p in zip(jobs, phases) if p == "Failed"]
            if failed:
                st = get_json(cluster.url + "/api/v1/jobs/" + failed[0])["status"]
                raise Failure("%s Failed: %s: %s" % (failed[0], st.get("reason"), st.get("message")))
            return all(p == "Succeeded" for p in phases)

        wait_until(max(600, 3 * SECONDS), "both jobs Succeeded", lambda: ended() is True)
        sampler.stop.set()
        sampler.join()
        results = []
        for j in jobs:
            st = get_json(cluster.url + "/api/v1/jobs/" + j)["status"]
            acc = st.get("accuracy")
            if acc is None or acc < ACCURACY:
                raise Failure("%s Succeeded with test accuracy %s, below the target %.2f"
                              % (j, acc, ACCURACY))
            events = all_events(cluster.url, j)
            rollbacks, decreases = check_steps(j, sampler.samples[j], events)
            acked, have = check_metrics(cluster, j)
            restarts = [e for e in events
                        if e.get("type") == "Running" and e.get("reason") == "JobRestarted"]
            results.append("%s: Succeeded at step %d, accuracy %.4f, generation %s, %d gang "
                           "restarts, %d rollbacks (from, to) %s, %d step samples (%d decreases, each a "
                           "recorded rollback), %d acknowledged metric points all kept (%d stored)"
                           % (j, st["global_step"], acc, st.get("generation"), len(restarts),
                              len(rollbacks), [r[:2] for r in rollbacks], len(sampler.samples[j]), len(decreases),
                              acked, have))
        leftovers = stop_cluster(cluster)
        if leftovers:
            raise Failure("processes left running after the cluster was stopped (killed): "
                          + ", ".join(leftovers))
        reports = sanitizer_reports(cluster.logs)
        if reports:
            raise Failure("sanitizer reports in " + ", ".join(reports))
        print("chaos: seed %d: %d of %d faults hit a running job:" % (
            SEED, sum(1 for s in survived if s[2]), len(survived)))
        for f, what, hit in survived:
            print("chaos:   %2d %-11s %s" % (f["n"], f["kind"], what))
        for r in results:
            print("chaos: " + r)
        print("chaos: no process left running (%d processes started: coordinator x%d, agents "
              "x%d)" % (len(cluster.procs), cluster.coord_starts,
                        sum(a["starts"] for a in cluster.agents.values())))
        print("ok: chaos seed %d survived" % SEED)
        ok = True
    except Failure as e:
        print("FAIL: %s" % e, file=sys.stderr)
        print("FAIL: replay with %s" % replay(), file=sys.stderr)
    finally:
        if not ok:
            leftovers = stop_cluster(cluster, grace=10)
            if leftovers:
                print("FAIL: also left running (killed): " + ", ".join(leftovers),
                      file=sys.stderr)
            for name in sorted(os.listdir(cluster.logs)):
                path = os.path.join(cluster.logs, name)
                with open(path, errors="replace") as fh:
                    tail = fh.readlines()[-15:]
                print("--- last lines of logs/%s" % name, file=sys.stderr)
                sys.stderr.write("".join(tail))
        cluster.proxy.shutdown()
        if os.environ.get("CHAOS_KEEP") == "1":
            print("chaos: kept %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as e:
        print("FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)
