#!/usr/bin/env bash
# labels: sanitizer-only
# timeout: 300
# deploy/kubernetes/tfjob/tfjob.yaml run the way Kubeflow's TFJob operator runs it, without
# Kubernetes: every replica is a separate psflow process in its own network namespace,
# reachable under its operator-made Service name (<job>-<type>-<i>.<ns>.svc) through a bridge
# this test creates, with the TF_CONFIG the operator would inject, the container's args and
# env from the yaml, and the ConfigMap's job spec as the file the yaml mounts. The job must
# train to completion: the chief prints the test accuracy, every ps exits 0, and `psflow
# export` merges the final checkpoint.
#
# Needs root (ip netns, veth, bridge); without it the test exits 77 (skipped).
source "$(dirname "$0")/lib.sh"

SKIP=77
export PYTHONDONTWRITEBYTECODE=1 # manifests.py is imported from the source tree
TFJOB_YAML=$PSFLOW_SRC/deploy/kubernetes/tfjob/tfjob.yaml
[ "$(id -u)" = 0 ] || { echo "SKIP: network namespaces need root"; exit $SKIP; }
command -v ip >/dev/null 2>&1 || { echo "SKIP: 'ip' (iproute2) not found"; exit $SKIP; }

# --- 1. TF_CONFIG and processes from the yaml ----------------------------------------------
# tfjob_plan.py reads the yaml (deploy/validate/manifests.py: PyYAML when installed, else
# a reader for the subset the manifests use, checked against PyYAML where both exist),
# computes each replica's TF_CONFIG by the operator's rules and writes plan.json: one entry
# per task with its Service name, port, TF_CONFIG, argv and env, volumes turned into
# directories under $WORK (a ConfigMap into its files, a PersistentVolumeClaim into one
# directory shared by all tasks) and the paths in args and env rewritten to them.
cat >tfjob_plan.py <<'PY'
import json, os, sys

sys.path.insert(0, os.path.join(os.environ["PSFLOW_SRC"], "deploy", "validate"))
from manifests import load_documents  # noqa: E402

REPLICA_TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")

def tf_config(job, namespace, replica_specs, rtype, index, domain=""):
    """The operator's TF_CONFIG (training-operator v1 genTFConfigJSONStr): cluster job names
    are the lower-cased replica types in sorted order (Go marshals maps sorted), each task
    `<job>-<type>-<i>.<namespace>.svc[.<CUSTOM_CLUSTER_DOMAIN>]:<port>`, the port the one
    named tfjob-port on the container named tensorflow [2222]; the evaluator is part of the
    cluster (the current rule); keys cluster, task, environment; no spaces."""
    cluster = {}
    for rt, spec in replica_specs.items():
        hosts = []
        for i in range(spec.get("replicas", 1)):
            svc = "%s-%s-%d.%s.svc" % (job, rt.lower(), i, namespace)
            if domain:
                svc += "." + domain
            hosts.append("%s:%d" % (svc, port_of(spec)))
        cluster[rt.lower()] = hosts
    doc = {"cluster": {k: cluster[k] for k in sorted(cluster)},
           "task": {"type": rtype.lower(), "index": index}, "environment": "cloud"}
    return json.dumps(doc, separators=(",", ":"))

def container_of(spec):
    for c in spec["template"]["spec"]["containers"]:
        if c["name"] == "tensorflow":
            return c
    raise SystemExit("replica has no container named 'tensorflow' (TF_CONFIG goes there)")

def port_of(spec):
    for c in spec["template"]["spec"]["containers"]:
        if c["name"] == "tensorflow":
            for p in c.get("ports", []):
                if p.get("name") == "tfjob-port":
                    return p["containerPort"]
    return 2222

def self_check(vectors):
    """The generator reproduces the operator's test vectors under tests/data/tf_config."""
    def spec(n):
        return {"replicas": n, "template": {"spec": {"containers": [{"name": "tensorflow"}]}}}
    cases = [("kubeflow_evaluator.json", "ns3", "", True),
             ("kubeflow_evaluator_domain.json", "ns3", "tf.training.io", True),
             ("kubeflow_ns2_domain.json", "ns2", "tf.training.org", False)]
    for name, ns, domain, evaluator in cases:
        specs = {"PS": spec(1), "Worker": spec(1)}
        if evaluator:
            specs["Evaluator"] = spec(1)
        want = open(os.path.join(vectors, name)).read().strip()
        got = tf_config("test-tfjob", ns, specs, "Worker", 0, domain)
        assert got == want, "TF_CONFIG generator: %s\n got %s\nwant %s" % (name, got, want)

def main(yaml_path, work, vectors):
    self_check(vectors)
    docs = load_documents(yaml_path)
    tfjobs = [d for d in docs if d.get("kind") == "TFJob"]
    assert len(tfjobs) == 1, "expected one TFJob, found %d" % len(tfjobs)
    tfjob = tfjobs[0]
    assert tfjob["apiVersion"] == "kubeflow.org/v1", tfjob["apiVersion"]
    job = tfjob["metadata"]["name"]
    namespace = tfjob["metadata"].get("namespace", "default")
    specs = tfjob["spec"]["tfReplicaSpecs"]
    for rt in specs:
        assert rt in REPLICA_TYPES, "unknown replica type %s" % rt
    configmaps = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ConfigMap"}
    claims = {d["metadata"]["name"] for d in docs if d.get("kind") == "PersistentVolumeClaim"}

    tasks = []
    for rt in sorted(specs):
        spec = specs[rt]
        container = container_of(spec)
        assert port_of(spec) == 2222 and any(
            p.get("name") == "tfjob-port" for p in container.get("ports", [])), \
            "%s: port 2222 must be named tfjob-port" % rt
        # Volumes become directories under work; mount paths map onto them.
        volumes = {v["name"]: v for v in spec["template"]["spec"].get("volumes", [])}
        mounts = {}
        for m in container.get("volumeMounts", []):
            v = volumes[m["name"]]
            if "configMap" in v:
                cm_name = v["configMap"]["name"]
                assert cm_name in configmaps, "ConfigMap %s is not in the yaml" % cm_name
                d = os.path.join(work, "configmap-" + cm_name)
                os.makedirs(d, exist_ok=True)
                for key, content in configmaps[cm_name]["data"].items():
                    with open(os.path.join(d, key), "w") as f:
                        f.write(content)
            elif "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                assert claim in claims, "PersistentVolumeClaim %s is not in the yaml" % claim
                d = os.path.join(work, "pvc-" + claim)
                os.makedirs(d, exist_ok=True)
            else:
                raise SystemExit("volume %s: only configMap and PVC volumes are emulated"
                                 % m["name"])
            mounts[m["mountPath"].rstrip("/")] = d

        def local(value):
            for path, d in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
                if value == path or value.startswith(path + "/"):
                    return d + value[len(path):]
            return value

        argv = [local(a) for a in container.get("args", [])]
        assert container.get("command") is None, "the image's entrypoint (psflow) must run"
        env = {e["name"]: local(e["value"]) for e in container.get("env", []) if "value" in e}
        for i in range(spec.get("replicas", 1)):
            tasks.append({"type": rt.lower(), "index": i,
                          "host": "%s-%s-%d.%s.svc" % (job, rt.lower(), i, namespace),
                          "port": port_of(spec),
                          "tf_config": tf_config(job, namespace, specs, rt, i),
                          "argv": argv, "env": env})
    job_files = [a for t in tasks for a in t["argv"] if a.endswith(".json")]
    spec_doc = json.load(open(job_files[0]))
    json.dump({"job": job, "namespace": namespace, "tasks": tasks, "spec": spec_doc,
               "claims": sorted(os.path.join(work, "pvc-" + c) for c in claims)},
              open(os.path.join(work, "plan.json"), "w"), indent=1)

main(*sys.argv[1:])
PY
python3 tfjob_plan.py "$TFJOB_YAML" "$WORK" "$PSFLOW_TEST_DATA/tf_config/valid" ||
  fail "could not derive the tasks from $TFJOB_YAML"
n_tasks=$(json_field plan.json 'len(d["tasks"])')
pass "TF_CONFIG generator matches the operator's vectors; $n_tasks tasks from tfjob.yaml"
json_field plan.json '"\n".join(t["tf_config"] for t in d["tasks"])'

# The job spec's replica counts must agree with the TFJob's, or the tasks refuse to start.
json_field plan.json '
all(sum(1 for t in d["tasks"] if t["type"] == k) == d["spec"]["replicas"].get(k, 0)
    for k in ("ps", "worker", "chief", "evaluator"))' | grep -qx True ||
  fail "the ConfigMap's replicas differ from the TFJob's tfReplicaSpecs"

# --- 2. one network namespace per task -----------------------------------------------------
# The tasks' namespaces hang off a bridge that lives in a namespace of its own (the
# "switch"): nothing changes in the host's namespace, and the host's firewall rules, which
# may drop bridged traffic, do not apply there. Names carry this shell's pid so parallel
# runs do not collide. The bridge has no uplink: the tasks reach each other and nothing else.
TAG=$$
SWITCH=pf$TAG-switch
NETNS=()
PIDS=()
cleanup_netns() {
  local rc=$? pid ns
  for pid in "${PIDS[@]}"; do
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  for ns in "${NETNS[@]}"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns delete "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  # lib.sh's own exit handler (when it has one) removes $WORK.
  if declare -F cleanup >/dev/null; then (exit $rc); cleanup; else rm -rf "$WORK"; fi
  exit $rc
}
trap cleanup_netns EXIT

ip netns add "$SWITCH" 2>/dev/null || { echo "SKIP: cannot create network namespaces"; exit $SKIP; }
NETNS+=("$SWITCH")
ip -n "$SWITCH" link add br0 type bridge 2>/dev/null ||
  { echo "SKIP: cannot create a bridge"; exit $SKIP; }
ip -n "$SWITCH" link set br0 up
hosts_file=$WORK/hosts
printf '127.0.0.1\tlocalhost\n' >"$hosts_file"
for k in $(seq 0 $((n_tasks - 1))); do
  # 10.250.0.0/24: a private range with room for 240 tasks; never routed off the bridge.
  host=$(json_field plan.json "d['tasks'][$k]['host']")
  printf '10.250.0.%d\t%s\n' $((10 + k)) "$host" >>"$hosts_file"
done
for k in $(seq 0 $((n_tasks - 1))); do
  ns=pf$TAG-$k
  ip netns add "$ns"
  NETNS+=("$ns")
  ip -n "$SWITCH" link add "port$k" type veth peer name eth0 netns "$ns"
  ip -n "$SWITCH" link set "port$k" master br0 up
  ip -n "$ns" addr add "10.250.0.$((10 + k))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # `ip netns exec` bind-mounts /etc/netns/<ns>/hosts over /etc/hosts: the Service names
  # resolve there as cluster DNS would resolve them.
  mkdir -p "/etc/netns/$ns"
  cp "$hosts_file" "/etc/netns/$ns/hosts"
done
ip netns exec "pf$TAG-0" getent hosts "$host" >/dev/null ||
  fail "service names do not resolve inside the namespaces"

# --- 3. run the job ------------------------------------------------------------------------
# run_task K: starts task K in its namespace with exactly the TF_CONFIG, args and env of
# the plan; stdout and stderr go to $WORK/<type>-<index>.{out,log}.
run_task() {
  local k=$1 name tf_config argv=() envs=()
  name=$(json_field plan.json "'%s-%d' % (d['tasks'][$k]['type'], d['tasks'][$k]['index'])")
  tf_config=$(json_field plan.json "d['tasks'][$k]['tf_config']")
  mapfile -t argv < <(json_field plan.json "'\n'.join(d['tasks'][$k]['argv'])")
  mapfile -t envs < <(json_field plan.json \
    "'\n'.join('%s=%s' % kv for kv in d['tasks'][$k]['env'].items())")
  ip netns exec "pf$TAG-$k" env "${envs[@]}" TF_CONFIG="$tf_config" \
    "$PSFLOW_BIN" "${argv[@]}" >"$WORK/$name.out" 2>"$WORK/$name.log" &
  PIDS+=($!)
  TASK_NAMES+=("$name")
}
TASK_NAMES=()
for k in $(seq 0 $((n_tasks - 1))); do run_task "$k"; done

show_logs() { tail -n 15 "$WORK"/*.log >&2; }
# Workers (and a chief) first: when one fails, the ps tasks would wait for ever.
rc=0
for k in $(seq 0 $((n_tasks - 1))); do
  case ${TASK_NAMES[$k]} in ps-*) continue ;; esac
  wait_pid "${PIDS[$k]}" 240 || rc=$?
  [ "$rc" = 0 ] || { show_logs; fail "${TASK_NAMES[$k]} exited $rc"; }
done
for k in $(seq 0 $((n_tasks - 1))); do
  case ${TASK_NAMES[$k]} in ps-*) ;; *) continue ;; esac
  wait_pid "${PIDS[$k]}" 60 || rc=$?
  [ "$rc" = 0 ] || { show_logs; fail "${TASK_NAMES[$k]} exited $rc"; }
  host=$(json_field plan.json "d['tasks'][$k]['host']")
  grep -q "advertised as $host:2222" "$WORK/${TASK_NAMES[$k]}.log" ||
    { show_logs; fail "${TASK_NAMES[$k]} did not use its TF_CONFIG address"; }
done
chief="chief-0"
[ -f "$WORK/$chief.out" ] || chief=worker-0
cat "$WORK/$chief.out"
acc=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' "$WORK/$chief.out")
[ -n "$acc" ] || { show_logs; fail "the chief printed no test accuracy"; }
in_range "$acc" 0.80 1 || fail "test accuracy $acc < 0.80"
pass "every task of the TFJob exited 0; chief: test accuracy $acc"

# --- 4. the checkpoint ---------------------------------------------------------------------
name=$(json_field plan.json 'd["spec"]["name"]')
steps=$(json_field plan.json 'd["spec"]["training"]["max_steps"]')
ckpt=$(json_field plan.json 'd["claims"][0]')/$name
[ -f "$ckpt/step-$steps/manifest.json" ] || fail "no final checkpoint at $ckpt/step-$steps"
"$PSFLOW_BIN" export "$ckpt" --out "$WORK/model.safetensors" || fail "psflow export failed"
inputs=$(json_field plan.json 'd["spec"]["model"]["inputs"]')
outputs=$(json_field plan.json 'd["spec"]["model"]["outputs"]')
python3 - "$WORK/model.safetensors" "$inputs" "$outputs" <<'PY' || fail "wrong exported model"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
# Dense layers dense_0 ... dense_<last>: the first reads the inputs, the last gives the outputs.
last = max(int(k.split("/")[0][len("dense_"):]) for k in header if k.endswith("/kernel"))
assert header["dense_0/kernel"]["shape"][0] == int(sys.argv[2]), header["dense_0/kernel"]
assert header["dense_%d/kernel" % last]["shape"][1] == int(sys.argv[3]), header
assert header["dense_%d/bias" % last]["shape"] == [int(sys.argv[3])], header
PY
pass "psflow export merged the final checkpoint (step $steps) of every ps"
