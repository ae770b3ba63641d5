#!/usr/bin/env bash
# labels: sanitizer-only
# The deployment files are valid and wired together, checked offline:
#  1. docker-compose.yml: `docker-compose config -q` (Compose 1.29) and, when installed,
#     `docker compose config -q` (v2); then the resolved file: only the coordinator
#     and the serve service publish a port, each on 127.0.0.1; agents have no fixed names or ports (so --scale
#     works), wait for a healthy coordinator and share the checkpoint volume; a token is
#     required by default: the coordinator generates it into the token volume, and the
#     agents' token into the agent-token volume, which the agents mount read-only and read
#     it from (they never see the API token); every ps and worker mounts the segments
#     volume where PSFLOW_SHM_DIR points.
#  2. deploy/kubernetes: it ships no token (no Secret manifest, `kubectl kustomize` fails
#     until the user generates deploy/kubernetes/token, which git ignores); a copy with a
#     generated token is rendered with `kubectl kustomize` when kubectl exists, else its
#     resources read as they are and the Secret made as kustomize would; schema-checked with
#     the npm package kubernetes-models (deploy/validate) when kubectl is missing or its
#     node_modules are installed; then the objects: kinds, Recreate, probes on /readyz and
#     /livez, the headless ps Service and advertised names, the serve Deployment (ready on
#     /healthz, checkpoints read-only) and its Service, references to Secrets and claims
#     that exist, the token mounted where PSFLOW_TOKEN_FILE points.
#     With kubectl, the segments component rendered over the base: the ps and worker pods
#     (only they) mount the node's folder where PSFLOW_SHM_DIR points.
#  3. deploy/kubernetes/tfjob/tfjob.yaml: the same schema check, the container and port
#     names Kubeflow's operator looks for, and a job spec whose replicas match.
# Every PSFLOW_* variable set in these files must be an option of the command it runs
# (`psflow <command> --help`), so a misspelt variable cannot be silently ignored.
source "$(dirname "$0")/lib.sh"

# manifests.py (the YAML reader) is imported from the source tree, which stays clean.
export PYTHONPATH=$PSFLOW_SRC/deploy/validate PYTHONDONTWRITEBYTECODE=1
KUBE=$PSFLOW_SRC/deploy/kubernetes
# Options per command, for the environment-variable check.
for cmd in coordinator ps worker serve; do
  "$PSFLOW_BIN" "$cmd" --help >"$WORK/help-$cmd.txt" || fail "psflow $cmd --help failed"
done

# check_env FILE.json: FILE holds [[command, {NAME: value}], ...]; every PSFLOW_<FLAG> must
# be an option --<flag> of that command (the token variables are read by every command).
check_env() {
  python3 - "$1" "$WORK" <<'PY'
import json, os, sys
bad = []
for cmd, env in json.load(open(sys.argv[1])):
    help_text = open(os.path.join(sys.argv[2], "help-%s.txt" % cmd)).read()
    for name in env:
        if not name.startswith("PSFLOW_") or name in ("PSFLOW_TOKEN", "PSFLOW_TOKEN_FILE"):
            continue
        flag = "--" + name[len("PSFLOW_"):].lower().replace("_", "-")
        if flag + " " not in help_text:
            bad.append("%s: psflow %s has no option %s" % (name, cmd, flag))
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
PY
}

# --- 1. docker-compose.yml -------------------------------------------------------------------
COMPOSE_FILE=$PSFLOW_SRC/docker-compose.yml
compose_checked=0
if command -v docker-compose >/dev/null 2>&1; then
  (unset PSFLOW_TOKEN PSFLOW_PORT PSFLOW_IMAGE; cd "$PSFLOW_SRC" &&
    docker-compose -f "$COMPOSE_FILE" config -q) 2>compose.err ||
    { cat compose.err >&2; fail "docker-compose config -q rejects docker-compose.yml"; }
  (unset PSFLOW_TOKEN PSFLOW_PORT PSFLOW_IMAGE; cd "$PSFLOW_SRC" &&
    docker-compose -f "$COMPOSE_FILE" config) >compose.yaml 2>compose.err ||
    { cat compose.err >&2; fail "docker-compose config failed"; }
  pass "docker-compose $(docker-compose version --short 2>/dev/null) accepts docker-compose.yml"
  compose_checked=1
else
  echo "skipped: docker-compose is not installed: Compose 1.29 does not validate docker-compose.yml"
fi
if docker compose version >/dev/null 2>&1; then
  (cd "$PSFLOW_SRC" && docker compose -f "$COMPOSE_FILE" config -q) 2>compose.err ||
    { cat compose.err >&2; fail "docker compose (v2) config -q rejects docker-compose.yml"; }
  pass "docker compose $(docker compose version --short) accepts docker-compose.yml"
else
  echo "skipped: Compose v2 (docker compose) is not installed"
fi

if [ "$compose_checked" = 1 ]; then
  python3 - compose.yaml compose-env.json <<'PY' || fail "docker-compose.yml: wrong wiring"
import json, sys
from manifests import load_documents

(doc,) = load_documents(sys.argv[1])
services = doc["services"]
errors = []
def expect(cond, msg):
    if not cond:
        errors.append(msg)

expect(set(services) == {"coordinator", "ps", "worker", "serve"}, "services: %s" % sorted(services))
coord = services["coordinator"]
expect(coord.get("command", [None])[0] == "coordinator", "coordinator: command")
for port in coord.get("ports", []):
    if not isinstance(port, str):  # the long syntax
        port = "%s:%s:%s" % (port.get("host_ip"), port.get("published"), port.get("target"))
    text = port
    expect(text.startswith("127.0.0.1:"), "coordinator publishes %s beyond 127.0.0.1" % text)
expect(len(coord.get("ports", [])) == 1, "coordinator: one published port")
test = coord.get("healthcheck", {}).get("test", [])
expect(test[:3] == ["CMD", "psflow", "health"],
       "coordinator: healthcheck runs psflow health: %s" % test)
expect(any(v.startswith("db:") or (isinstance(v, dict) and v.get("source") == "db")
           for v in coord.get("volumes", [])), "coordinator: the db volume holds the database")
env_by_cmd = [["coordinator", coord.get("environment", {})]]
# The coordinator answers only to its own names and PSFLOW_ALLOWED_HOSTS (DNS rebinding).
allowed = str(coord.get("environment", {}).get("PSFLOW_ALLOWED_HOSTS") or "").split(",")
expect("coordinator" in [a.strip() for a in allowed],
       "coordinator: PSFLOW_ALLOWED_HOSTS must name 'coordinator', the agents' name for it")
for name in ("ps", "worker"):
    s = services[name]
    cmd = s.get("command", [])
    expect(cmd[:3] == [name, "--coordinator", "http://coordinator:8080"],
           "%s: runs as a managed agent of http://coordinator:8080: %s" % (name, cmd))
    expect("ports" not in s and "container_name" not in s and "hostname" not in s,
           "%s: fixed ports or names would break --scale" % name)
    expect(s.get("depends_on", {}).get("coordinator", {}).get("condition") == "service_healthy",
           "%s: must wait for a healthy coordinator" % name)
    expect(s.get("scale") == 2, "%s: scale 2" % name)
    expect("stop_grace_period" in s, "%s: stop_grace_period" % name)
    expect(any(str(v).startswith("checkpoints:/var/lib/psflow/checkpoints")
               for v in s.get("volumes", [])), "%s: the shared checkpoint volume" % name)
    expect(s.get("environment", {}).get("PSFLOW_CHECKPOINT_DIR") == "/var/lib/psflow/checkpoints",
           "%s: PSFLOW_CHECKPOINT_DIR is the shared volume" % name)
    env_by_cmd.append([name, s.get("environment", {})])
expect(set(doc.get("volumes", {})) == {"db", "checkpoints", "token", "agent-token", "segments"},
       "volumes: %s" % doc.get("volumes"))
# A token by default: the coordinator generates it into the token volume; agents read it.
def mounts(service):
    out = {}
    for v in service.get("volumes", []):
        if isinstance(v, dict):
            out[v.get("source")] = (v.get("target"), bool(v.get("read_only")))
        else:
            parts = str(v).split(":")
            out[parts[0]] = (parts[1], len(parts) > 2 and "ro" in parts[2].split(","))
    return out
cenv = coord.get("environment", {})
token_file = cenv.get("PSFLOW_TOKEN_FILE") or ""
token_dir = mounts(coord).get("token", (None, None))[0]
expect(token_dir and token_file.startswith(token_dir.rstrip("/") + "/"),
       "coordinator: PSFLOW_TOKEN_FILE %r is not in the token volume (%s)" % (token_file, token_dir))
expect(not mounts(coord).get("token", (None, True))[1], "coordinator: the token volume is read-only")
expect(str(cenv.get("PSFLOW_GENERATE_TOKEN")) in ("1", "true"),
       "coordinator: PSFLOW_GENERATE_TOKEN must be on (a token from the first start)")
# The agents never see the API token: the coordinator writes the agent token into a volume
# of its own, which the agents mount read-only and read through PSFLOW_AGENT_TOKEN_FILE.
agent_file = cenv.get("PSFLOW_AGENT_TOKEN_FILE") or ""
agent_dir = mounts(coord).get("agent-token", (None, None))[0]
expect(agent_dir and agent_file.startswith(agent_dir.rstrip("/") + "/"),
       "coordinator: PSFLOW_AGENT_TOKEN_FILE %r is not in the agent-token volume (%s)"
       % (agent_file, agent_dir))
expect(not mounts(coord).get("agent-token", (None, True))[1],
       "coordinator: the agent-token volume is read-only")
for name in ("ps", "worker"):
    s = services[name]
    senv = s.get("environment", {})
    expect(senv.get("PSFLOW_AGENT_TOKEN_FILE") == agent_file,
           "%s: PSFLOW_AGENT_TOKEN_FILE must be the coordinator's %s" % (name, agent_file))
    expect(mounts(s).get("agent-token") == (agent_dir, True),
           "%s: the agent-token volume read-only at %s: %s"
           % (name, agent_dir, mounts(s).get("agent-token")))
    expect("token" not in mounts(s) and "PSFLOW_TOKEN_FILE" not in senv and
           "PSFLOW_TOKEN" not in senv, "%s: an agent must not get the API token" % name)
    # The segment handoff: every ps and worker has the segments volume, writable, where
    # PSFLOW_SHM_DIR points (docs/distributed.md, "The shared segment").
    expect(mounts(s).get("segments") == (senv.get("PSFLOW_SHM_DIR"), False),
           "%s: the segments volume read-write at PSFLOW_SHM_DIR (%s): %s"
           % (name, senv.get("PSFLOW_SHM_DIR"), mounts(s).get("segments")))
for name in ("coordinator", "serve"):
    expect("segments" not in mounts(services[name]), "%s: has no use for the segments volume" % name)
# serve: one port, on 127.0.0.1; the API token from its volume (read-only), the checkpoints
# read-only; it waits for a healthy coordinator (which makes the token).
serve = services["serve"]
expect(serve.get("command", [None])[0] == "serve", "serve: command")
sports = serve.get("ports", [])
for port in sports:
    if not isinstance(port, str):
        port = "%s:%s:%s" % (port.get("host_ip"), port.get("published"), port.get("target"))
    expect(port.startswith("127.0.0.1:") and port.split("/")[0].endswith(":8501"),
           "serve publishes %s, not 127.0.0.1:...:8501" % port)
expect(len(sports) == 1, "serve: one published port")
senv = serve.get("environment", {})
expect(senv.get("PSFLOW_TOKEN_FILE") == token_file and mounts(serve).get("token") == (token_dir, True),
       "serve: the API token read-only from the token volume: %s %s" % (senv.get("PSFLOW_TOKEN_FILE"),
                                                                        mounts(serve).get("token")))
expect(mounts(serve).get("checkpoints") == ("/var/lib/psflow/checkpoints", True) and
       senv.get("PSFLOW_CHECKPOINT_DIR") == "/var/lib/psflow/checkpoints",
       "serve: the checkpoint volume read-only at PSFLOW_CHECKPOINT_DIR")
expect(senv.get("PSFLOW_MODEL") == "fmnist-mlp", "serve: PSFLOW_MODEL defaults to the example's job")
expect(serve.get("depends_on", {}).get("coordinator", {}).get("condition") == "service_healthy",
       "serve: must wait for a healthy coordinator (its token)")
env_by_cmd.append(["serve", senv])
json.dump(env_by_cmd, open(sys.argv[2], "w"))
for e in errors:
    print("docker-compose.yml:", e)
sys.exit(1 if errors else 0)
PY
  check_env compose-env.json || fail "docker-compose.yml sets variables psflow does not read"
  pass "docker-compose.yml: ports, health ordering, scaling and volumes as intended"
fi

# --- 2. Kubernetes base ----------------------------------------------------------------------
# The base ships no token: no Secret manifest among its files, the generated file ignored
# by git, and nothing renders until the user makes one (a copy gets one here, the way the
# docs/kubernetes.md says).
! grep -l '^kind: Secret' "$KUBE"/*.yaml 2>/dev/null || fail "deploy/kubernetes ships a Secret"
[ ! -e "$KUBE/token" ] || echo "note: $KUBE/token exists here (ignored by git)"
if git -C "$PSFLOW_SRC" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$PSFLOW_SRC" check-ignore -q deploy/kubernetes/token ||
    fail "deploy/kubernetes/token is not ignored by git"
fi
cp -r "$KUBE" kube
rm -f kube/token
if command -v kubectl >/dev/null 2>&1; then
  ! kubectl kustomize kube >/dev/null 2>&1 || fail "deploy/kubernetes renders without a token"
fi
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >kube/token
if command -v kubectl >/dev/null 2>&1; then
  kubectl kustomize kube >rendered.yaml 2>kustomize.err ||
    { cat kustomize.err >&2; fail "kubectl kustomize deploy/kubernetes failed"; }
  rendered_by=kubectl
  pass "kubectl kustomize renders deploy/kubernetes once a token is generated, and not before"
else
  echo "kubectl not found: checking the base's resources as written (no kustomize rendering)"
  python3 - kube >rendered.yaml <<'PY' || fail "kustomization.yaml is unreadable"
import base64, os, sys
from manifests import load_documents
(k,) = load_documents(os.path.join(sys.argv[1], "kustomization.yaml"))
for res in k["resources"]:
    sys.stdout.write(open(os.path.join(sys.argv[1], res)).read().rstrip("\n") + "\n---\n")
for gen in k.get("secretGenerator", []):  # what kustomize makes of it
    sys.stdout.write("apiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\ntype: Opaque\ndata:\n"
                     % gen["name"])
    for f in gen.get("files", []):
        key, _, path = f.partition("=")
        data = open(os.path.join(sys.argv[1], path or key), "rb").read()
        sys.stdout.write("  %s: %s\n" % (key, base64.b64encode(data).decode()))
    sys.stdout.write("---\n")
PY
  rendered_by=files
fi

# Schema check with kubernetes-models: where kubectl cannot render, or where its packages are
# installed already (scripts/deps.sh). A copy in $WORK keeps the source tree untouched.
VALIDATE=$PSFLOW_SRC/deploy/validate
schema_dir=
if [ -d "$VALIDATE/node_modules/kubernetes-models" ]; then
  schema_dir=$VALIDATE
elif [ "$rendered_by" = files ]; then
  command -v npm >/dev/null 2>&1 ||
    fail "neither kubectl nor npm is installed: nothing can check deploy/kubernetes"
  mkdir validate
  cp "$VALIDATE"/package.json "$VALIDATE"/package-lock.json "$VALIDATE"/schema-check.mjs validate/
  (cd validate && npm ci --no-audit --no-fund --loglevel=error) >npm.log 2>&1 ||
    { cat npm.log >&2; fail "npm ci in deploy/validate failed"; }
  schema_dir=$WORK/validate
fi
if [ -n "$schema_dir" ]; then
  node "$schema_dir/schema-check.mjs" rendered.yaml "$KUBE/tfjob/tfjob.yaml" >schema.log 2>&1 ||
    { cat schema.log >&2; fail "deploy/kubernetes does not pass the Kubernetes schemas"; }
  pass "kubernetes-models schema check: $(grep -c ': ok$' schema.log) objects valid"
else
  echo "skipped: schema check (kubectl rendered the base; deploy/validate has no node_modules)"
fi

python3 - rendered.yaml "$rendered_by" kube-env.json <<'PY' || fail "kubernetes: wrong wiring"
import json, sys
from collections import Counter
from manifests import load_documents

docs = load_documents(sys.argv[1])
rendered_by = sys.argv[2]
errors = []
def expect(cond, msg):
    if not cond:
        errors.append(msg)

by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
kinds = Counter(d["kind"] for d in docs)
want = Counter({"Deployment": 3, "StatefulSet": 1, "Service": 3, "PersistentVolumeClaim": 2,
                "Secret": 1})
expect(kinds == want, "kinds %s, expected %s" % (dict(kinds), dict(want)))

def pod(workload):
    return workload["spec"]["template"]["spec"]

def container(workload):
    (c,) = pod(workload)["containers"]
    return c

def env(c):
    return {e["name"]: e for e in c.get("env", [])}

def selects(service, workload):
    labels = workload["spec"]["template"]["metadata"]["labels"]
    sel = service["spec"]["selector"]
    return all(labels.get(k) == v for k, v in sel.items())

coord = by.get(("Deployment", "psflow-coordinator"))
ps = by.get(("StatefulSet", "psflow-ps"))
worker = by.get(("Deployment", "psflow-worker"))
coord_svc = by.get(("Service", "psflow-coordinator"))
ps_svc = by.get(("Service", "psflow-ps"))
serve = by.get(("Deployment", "psflow-serve"))
serve_svc = by.get(("Service", "psflow-serve"))
expect(all([coord, ps, worker, coord_svc, ps_svc, serve, serve_svc]),
       "missing workloads or Services")
if not errors:
    # Coordinator: one replica, Recreate, probes on its HTTP port, its database on a claim.
    expect(coord["spec"]["replicas"] == 1, "coordinator: 1 replica (SQLite has one writer)")
    expect(coord["spec"].get("strategy", {}).get("type") == "Recreate",
           "coordinator: strategy Recreate")
    c = container(coord)
    expect(c["args"][0] == "coordinator", "coordinator: args")
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        get = c.get(probe, {}).get("httpGet", {})
        expect(get.get("path") == path,
               "coordinator: %s on %s, found %s" % (probe, path, get.get("path")))
        port = get.get("port")
        expect(ports.get(port, port) == 8080, "coordinator: %s port %s is not 8080" % (probe, port))
    # The agents call it by the Service's name: it must be an allowed Host (DNS rebinding).
    names = [e["name"] for e in c.get("env", [])]
    allowed = env(c).get("PSFLOW_ALLOWED_HOSTS", {}).get("value", "").split(",")
    expect("psflow-coordinator" in allowed,
           "coordinator: PSFLOW_ALLOWED_HOSTS must name psflow-coordinator: %s" % allowed)
    if any("$(POD_NAMESPACE)" in a for a in allowed):
        expect("POD_NAMESPACE" in names and
               names.index("POD_NAMESPACE") < names.index("PSFLOW_ALLOWED_HOSTS"),
               "coordinator: POD_NAMESPACE must come before PSFLOW_ALLOWED_HOSTS")
    expect(selects(coord_svc, coord), "Service psflow-coordinator does not select the coordinator")
    expect([p["port"] for p in coord_svc["spec"]["ports"]] == [8080],
           "Service psflow-coordinator: port 8080")
    # ps: a StatefulSet behind its headless Service, advertising the pod's DNS name.
    expect(ps["spec"]["serviceName"] == "psflow-ps", "ps: serviceName psflow-ps")
    expect(ps_svc["spec"].get("clusterIP") == "None", "Service psflow-ps must be headless")
    expect(selects(ps_svc, ps), "Service psflow-ps does not select the ps pods")
    c = container(ps)
    names = [e["name"] for e in c.get("env", [])]
    e = env(c)
    expect(e.get("PSFLOW_ADVERTISE", {}).get("value") == "$(POD_NAME).psflow-ps:2222",
           "ps: advertises $(POD_NAME).psflow-ps:2222")
    field = e.get("POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    expect(field == "metadata.name", "ps: POD_NAME from the downward API")
    # Kubernetes expands $(VAR) only for variables defined earlier in the list.
    expect("POD_NAME" in names and names.index("POD_NAME") < names.index("PSFLOW_ADVERTISE"),
           "ps: POD_NAME must come before PSFLOW_ADVERTISE")
    expect(2222 in [p["containerPort"] for p in c.get("ports", [])], "ps: container port 2222")
    expect(2222 in [p["port"] for p in ps_svc["spec"]["ports"]], "Service psflow-ps: port 2222")
    # Both agents: the coordinator's Service, the shared checkpoint claim.
    url = "http://psflow-coordinator:8080"
    for name, w in (("ps", ps), ("worker", worker)):
        c = container(w)
        expect(c["args"][0] == name, "%s: args" % name)
        expect(env(c).get("PSFLOW_COORDINATOR", {}).get("value") == url,
               "%s: PSFLOW_COORDINATOR %s" % (name, url))
        claims = [v["persistentVolumeClaim"]["claimName"] for v in pod(w).get("volumes", [])
                  if "persistentVolumeClaim" in v]
        expect(claims == ["psflow-checkpoints"], "%s: checkpoint claim %s" % (name, claims))
    rwx = by.get(("PersistentVolumeClaim", "psflow-checkpoints"), {}).get("spec", {})
    expect("ReadWriteMany" in rwx.get("accessModes", []),
           "psflow-checkpoints must be ReadWriteMany")
    # serve: ready on /healthz at 8501, the checkpoint claim read-only, its Service on 8501.
    c = container(serve)
    expect(c["args"][0] == "serve", "serve: args")
    ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    get = c.get("readinessProbe", {}).get("httpGet", {})
    expect(get.get("path") == "/healthz" and ports.get(get.get("port"), get.get("port")) == 8501,
           "serve: readinessProbe on /healthz at 8501: %s" % get)
    expect(env(c).get("PSFLOW_CHECKPOINT_DIR", {}).get("value") == "/var/lib/psflow/checkpoints",
           "serve: PSFLOW_CHECKPOINT_DIR")
    ro = [m for m in c.get("volumeMounts", []) if m["mountPath"] == "/var/lib/psflow/checkpoints"]
    expect(ro and ro[0].get("readOnly") is True, "serve: the checkpoints mounted read-only")
    expect(selects(serve_svc, serve) and [p["port"] for p in serve_svc["spec"]["ports"]] == [8501],
           "Service psflow-serve: selects the serve pods on 8501")
    # Every referenced Secret and claim exists; images were set by kustomize.
    env_by_cmd = []
    for w in (coord, ps, worker, serve):
        for v in pod(w).get("volumes", []):
            if "secret" in v:
                n = v["secret"]["secretName"]
                expect(("Secret", n) in by, "no Secret %s" % n)
            if "persistentVolumeClaim" in v:
                n = v["persistentVolumeClaim"]["claimName"]
                expect(("PersistentVolumeClaim", n) in by, "no PersistentVolumeClaim %s" % n)
        c = container(w)
        if rendered_by == "kubectl":
            expect(c["image"] == "psflow:latest",
                   "%s: image %s" % (w["metadata"]["name"], c["image"]))
        env_by_cmd.append([c["args"][0], {k: v.get("value") for k, v in env(c).items()}])
        # The token: PSFLOW_TOKEN_FILE names the key "token" of the generated Secret, mounted.
        name = w["metadata"]["name"]
        token_file = (env(c).get("PSFLOW_TOKEN_FILE") or {}).get("value", "")
        secret_vols = {v["name"]: v["secret"]["secretName"] for v in pod(w).get("volumes", [])
                       if "secret" in v}
        mounted = [m for m in c.get("volumeMounts", [])
                   if secret_vols.get(m["name"]) == "psflow-token" and
                   token_file == m["mountPath"].rstrip("/") + "/token"]
        expect(mounted, "%s: PSFLOW_TOKEN_FILE %r is not the mounted psflow-token Secret"
               % (name, token_file))
    secret = by.get(("Secret", "psflow-token"), {})
    expect(len(secret.get("data", {}).get("token", "")) >= 40,
           "the Secret psflow-token holds no generated token: %s" % secret.get("data"))
    json.dump(env_by_cmd, open(sys.argv[3], "w"))
for e in errors:
    print("deploy/kubernetes:", e)
sys.exit(1 if errors else 0)
PY
check_env kube-env.json || fail "deploy/kubernetes sets variables psflow does not read"
pass "deploy/kubernetes: Recreate coordinator, /readyz and /livez probes, headless ps StatefulSet"

# The segments component: an overlay of the base with it gives every ps and worker pod the
# node's folder (hostPath, type Directory) where PSFLOW_SHM_DIR points, and nothing else.
if [ "$rendered_by" = kubectl ]; then
  mkdir overlay
  printf 'resources:\n  - ../kube\ncomponents:\n  - ../kube/segments\n' >overlay/kustomization.yaml
  kubectl kustomize overlay >segments.yaml 2>segments.err ||
    { cat segments.err >&2; fail "the segments component does not render over the base"; }
  python3 - segments.yaml <<'PY' || fail "deploy/kubernetes/segments: wrong wiring"
import sys
from manifests import load_documents
errors = []
for d in load_documents(sys.argv[1]):
    if d.get("kind") not in ("StatefulSet", "Deployment"):
        continue
    name, spec = d["metadata"]["name"], d["spec"]["template"]["spec"]
    c = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    if name in ("psflow-ps", "psflow-worker"):
        hp = vols.get("segments", {}).get("hostPath", {})
        if hp.get("type") != "Directory" or not hp.get("path"):
            errors.append("%s: no hostPath segments volume of type Directory: %s" % (name, hp))
        if env.get("PSFLOW_SHM_DIR") is None or env.get("PSFLOW_SHM_DIR") != mounts.get("segments"):
            errors.append("%s: PSFLOW_SHM_DIR %s is not the segments mount %s"
                          % (name, env.get("PSFLOW_SHM_DIR"), mounts.get("segments")))
    elif "segments" in vols or "PSFLOW_SHM_DIR" in env:
        errors.append("%s: has the segments volume or PSFLOW_SHM_DIR" % name)
for e in errors:
    print("deploy/kubernetes/segments:", e)
sys.exit(1 if errors else 0)
PY
  pass "deploy/kubernetes/segments: ps and worker pods get the node's folder at PSFLOW_SHM_DIR"
else
  echo "skipped: the segments component (kubectl is needed to render it)"
fi

# --- 3. TFJob --------------------------------------------------------------------------------
python3 - "$KUBE/tfjob/tfjob.yaml" tfjob-env.json <<'PY' || fail "tfjob.yaml: wrong wiring"
import json, sys
from manifests import load_documents

docs = load_documents(sys.argv[1])
errors = []
def expect(cond, msg):
    if not cond:
        errors.append(msg)

(tfjob,) = [d for d in docs if d["kind"] == "TFJob"]
expect(tfjob["apiVersion"] == "kubeflow.org/v1", "apiVersion kubeflow.org/v1")
specs = tfjob["spec"]["tfReplicaSpecs"]
expect(sorted(specs) == ["PS", "Worker"], "replica types %s" % sorted(specs))
configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
env_by_cmd = []
for rt, spec in specs.items():
    expect(spec.get("replicas") == 2, "%s: 2 replicas" % rt)
    containers = spec["template"]["spec"]["containers"]
    tf = [c for c in containers if c["name"] == "tensorflow"]
    expect(len(tf) == 1, "%s: TF_CONFIG is injected only into the container named tensorflow" % rt)
    if not tf:
        continue
    c = tf[0]
    expect({"name": "tfjob-port", "containerPort": 2222} in c.get("ports", []),
           "%s: port 2222 named tfjob-port" % rt)
    role = "ps" if rt == "PS" else "worker"
    expect(c["args"][:2] == [role, "--job"], "%s: args %s" % (rt, c["args"]))
    job_path = c["args"][2]
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in spec["template"]["spec"]["volumes"]}
    found = False
    for name, path in mounts.items():
        cm = vols[name].get("configMap")
        if cm and job_path.startswith(path.rstrip("/") + "/"):
            key = job_path[len(path.rstrip("/")) + 1:]
            data = configmaps.get(cm["name"], {}).get("data", {})
            expect(key in data, "%s: ConfigMap %s has no key %s" % (rt, cm["name"], key))
            if key in data:
                job = json.loads(data[key])
                expect(job["replicas"].get("ps") == specs["PS"]["replicas"] and
                       job["replicas"].get("worker") == specs["Worker"]["replicas"],
                       "the job spec's replicas differ from tfReplicaSpecs")
            found = True
    expect(found, "%s: %s is not in a mounted ConfigMap" % (rt, job_path))
    env_by_cmd.append([role, {e["name"]: e.get("value") for e in c.get("env", [])}])
json.dump(env_by_cmd, open(sys.argv[2], "w"))
for e in errors:
    print("tfjob.yaml:", e)
sys.exit(1 if errors else 0)
PY
check_env tfjob-env.json || fail "tfjob.yaml sets variables psflow does not read"
pass "tfjob.yaml: containers named tensorflow, tfjob-port 2222, job spec from its ConfigMap"
