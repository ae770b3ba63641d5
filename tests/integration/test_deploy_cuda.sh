#!/usr/bin/env bash
# The CUDA variants of the deployment files, checked offline (the CUDA image needs NVIDIA's
# packages, which cannot be fetched here; `make test-docker` builds the CPU image):
#  1. Dockerfile: every RUN is valid sh; the RUN steps that read PSFLOW_CUDA, CUDA_VERSION
#     or CUDA_REPO are run as `docker build` would run them, each with the build arguments
#     its stage declares (an ARG a stage forgets is unset there, as in Docker), against stub
#     commands that only record what they were asked to do. --build-arg PSFLOW_CUDA=ON must
#     install nvcc, the CUDA runtime and cuBLAS headers in the builder, configure with
#     -DPSFLOW_CUDA=ON and check that psflow links cuBLAS, and install the CUDA runtime and
#     cuBLAS libraries in the final image; OFF (the default) must touch nothing of NVIDIA's
#     and configure with -DPSFLOW_CUDA=OFF; any other value must stop the build with a
#     message. The final stage stays the CPU runtime, so `docker build .` is unchanged.
#  2. deploy/kubernetes/tfjob/tfjob.yaml: uncommenting its GPU variant gives the worker
#     container (only it) resources.limits["nvidia.com/gpu"] = 1.
source "$(dirname "$0")/lib.sh"

# --- 1. Dockerfile ---------------------------------------------------------------------------
mkdir stubs
# Stubs record their arguments; ldd claims cuBLAS; nproc says 2. Only stubs and a few
# read-only tools are on PATH, so nothing here can change the machine.
for cmd in apt-get curl dpkg cmake install cp rm mkdir ldconfig tee; do
  printf '#!/bin/sh\necho "%s $*" >>"$STUB_LOG"\n' "$cmd" >"stubs/$cmd"
done
printf '#!/bin/sh\necho "ldd $*" >>"$STUB_LOG"\necho "\tlibcublas.so.13 => /usr/local/cuda/lib/libcublas.so.13"\n' >stubs/ldd
printf '#!/bin/sh\necho 2\n' >stubs/nproc
chmod +x stubs/*
for tool in tr grep cat; do ln -s "$(command -v "$tool")" "stubs/$tool"; done

python3 - "$PSFLOW_SRC/Dockerfile" "$WORK/stubs" "$WORK" <<'PY' || fail "Dockerfile: the CUDA build argument is not wired as it should be"
import os, re, subprocess, sys

dockerfile, stubs, work = sys.argv[1:4]
errors = []
def expect(cond, msg):
    if not cond:
        errors.append(msg)

# Instructions, with continuation lines joined and comments dropped.
lines, cur = [], ""
for raw in open(dockerfile).read().splitlines():
    if not cur and (raw.strip().startswith("#") or not raw.strip()):
        continue
    if cur and raw.strip().startswith("#"):
        continue  # a comment inside a continued instruction
    if raw.endswith("\\"):
        cur += raw[:-1]  # Docker removes the backslash and the newline
        continue
    lines.append(cur + raw)
    cur = ""
global_args, stages = {}, []
for line in lines:
    word, _, rest = line.strip().partition(" ")
    word = word.upper()
    if word == "FROM":
        m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.I)
        stages.append({"from": m.group(1), "name": m.group(2), "args": {}, "runs": []})
    elif word == "ARG":
        name, eq, value = rest.strip().partition("=")
        target = stages[-1]["args"] if stages else global_args
        target[name] = value if eq else None
    elif word == "RUN":
        stages[-1]["runs"].append(rest)

expect(global_args.get("PSFLOW_CUDA") == "OFF", "global ARG PSFLOW_CUDA=OFF (the CPU image by default)")
expect(re.fullmatch(r"[0-9]+\.[0-9]+", global_args.get("CUDA_VERSION") or ""),
       "global ARG CUDA_VERSION=<major>.<minor>")
expect(len(stages) >= 2 and stages[-1]["from"] == "${BASE}" and stages[-1]["name"] is None,
       "the last stage (what `docker build .` makes) is the runtime image FROM ${BASE}")
for stage in stages:
    for cmd in stage["runs"]:
        r = subprocess.run(["/bin/sh", "-n", "-c", cmd], capture_output=True, text=True)
        expect(r.returncode == 0, "RUN is not valid sh (%s): %s" % (r.stderr.strip(), cmd[:80]))

CUDA_ARGS = ("PSFLOW_CUDA", "CUDA_VERSION", "CUDA_REPO")
def run_cuda_steps(build_args):
    """Runs the CUDA-related RUN steps of every stage; returns [(stage, rc, log, stderr)]."""
    out = []
    for i, stage in enumerate(stages):
        env = {"PATH": stubs, "STUB_LOG": os.path.join(work, "stub.log")}
        for name, default in stage["args"].items():  # only what the stage declares
            value = build_args.get(name, default if default is not None else global_args.get(name))
            if value is not None:
                env[name] = value
        for cmd in stage["runs"]:
            if not any(a in cmd for a in CUDA_ARGS):
                continue
            open(env["STUB_LOG"], "w").close()
            r = subprocess.run(["/bin/sh", "-c", cmd], env=env, cwd=work, capture_output=True, text=True)
            out.append((stage["name"] or "final", r.returncode, open(env["STUB_LOG"]).read(), r.stderr))
    return out

def logs(results, stage):
    return "".join(log for name, rc, log, err in results if name == stage)

major_minor = global_args.get("CUDA_VERSION") or "0.0"
pkg = major_minor.replace(".", "-")
for value in ("OFF", "ON"):
    results = run_cuda_steps({} if value == "OFF" else {"PSFLOW_CUDA": "ON"})
    for name, rc, log, err in results:
        expect(rc == 0, "PSFLOW_CUDA=%s: a RUN of stage %s failed (%d): %s" % (value, name, rc, err.strip()))
    builder, final = logs(results, "builder"), logs(results, "final")
    expect("cmake -S . -B /build" in builder, "PSFLOW_CUDA=%s: the builder's cmake step reads a CUDA argument" % value)
    expect("-DPSFLOW_CUDA=%s" % value in builder, "PSFLOW_CUDA=%s: cmake is not given -DPSFLOW_CUDA=%s" % (value, value))
    if value == "OFF":
        fetched = [l for l in (builder + final).splitlines()
                   if l.startswith(("apt-get", "curl", "dpkg", "ldd", "tee", "ldconfig"))]
        expect(not fetched, "PSFLOW_CUDA=OFF fetches, installs or checks CUDA things: %s" % fetched)
    else:
        for want in ("cuda-nvcc-" + pkg, "cuda-cudart-dev-" + pkg, "libcublas-dev-" + pkg, "g++"):
            expect(re.search(r"^apt-get install .*(?<!\S)\"?%s\"?(?!\S)" % re.escape(want), builder, re.M),
                   "PSFLOW_CUDA=ON: the builder does not install %s" % want)
        expect(re.search(r"^curl .*%s/cuda-keyring_[0-9.-]+_all\.deb" % re.escape(global_args["CUDA_REPO"]), builder, re.M),
               "PSFLOW_CUDA=ON: the builder does not fetch NVIDIA's keyring from CUDA_REPO")
        expect("-DCUDAToolkit_ROOT=/usr/local/cuda-%s" % major_minor in builder,
               "PSFLOW_CUDA=ON: cmake is not pointed at /usr/local/cuda-%s" % major_minor)
        expect(re.search(r"^ldd /build/psflow", builder, re.M), "PSFLOW_CUDA=ON: no check that psflow links cuBLAS")
        for want in ("cuda-cudart-" + pkg, "libcublas-" + pkg):
            expect(re.search(r"^apt-get install .*(?<!\S)\"?%s\"?(?!\S)" % re.escape(want), final, re.M),
                   "PSFLOW_CUDA=ON: the runtime image does not install %s" % want)
        expect(not re.search(r"^apt-get install .*(nvcc|-dev-)", final, re.M),
               "PSFLOW_CUDA=ON: the runtime image installs the toolkit, not just its libraries")
        expect("tee /etc/ld.so.conf.d/" in final and "ldconfig" in final,
               "PSFLOW_CUDA=ON: the CUDA libraries are not put on the loader's path")

results = run_cuda_steps({"PSFLOW_CUDA": "maybe"})
refused = [r for r in results if r[1] != 0 and "PSFLOW_CUDA must be ON or OFF, got 'maybe'" in r[3]]
expect(refused and refused[0][0] == "builder", "PSFLOW_CUDA=maybe does not stop the build with a message")

for e in errors:
    print("Dockerfile:", e)
if not errors:
    print("ok: Dockerfile: %d RUN steps are valid sh; PSFLOW_CUDA=ON, OFF and an invalid value "
          "render as intended" % sum(len(s["runs"]) for s in stages))
sys.exit(1 if errors else 0)
PY

# --- 2. TFJob --------------------------------------------------------------------------------
export PYTHONPATH=$PSFLOW_SRC/deploy/validate PYTHONDONTWRITEBYTECODE=1
python3 - "$PSFLOW_SRC/deploy/kubernetes/tfjob/tfjob.yaml" "$WORK/tfjob-gpu.yaml" <<'PY' || fail "tfjob.yaml: the GPU variant is not as intended"
import re, sys
from manifests import load_documents

src, out = sys.argv[1:3]
text = open(src).read()
# The commented block: "# resources:" and the deeper "# " lines after it, uncommented.
lines = text.splitlines()
start = [i for i, l in enumerate(lines) if re.fullmatch(r"\s*# resources:", l)]
assert len(start) == 1, "expected one commented '# resources:' block, found %d" % len(start)
i = start[0]
indent = lines[i].index("#")
lines[i] = lines[i].replace("# ", "", 1)
i += 1
while i < len(lines) and re.match(r"\s{%d}#   " % indent, lines[i]):
    lines[i] = lines[i][:indent] + lines[i][indent + 2:]
    i += 1
open(out, "w").write("\n".join(lines) + "\n")

def containers(docs, replica):
    (tfjob,) = [d for d in docs if d["kind"] == "TFJob"]
    return tfjob["spec"]["tfReplicaSpecs"][replica]["template"]["spec"]["containers"]

as_is, gpu = load_documents(src), load_documents(out)
for c in containers(as_is, "Worker") + containers(as_is, "PS"):
    assert "resources" not in c, "as shipped, no container asks for a GPU"
(worker,) = containers(gpu, "Worker")
assert worker.get("resources") == {"limits": {"nvidia.com/gpu": 1}}, worker.get("resources")
for c in containers(gpu, "PS"):
    assert "resources" not in c, "a ps asks for a GPU"
assert "PSFLOW_CUDA=ON" in text, "the comment does not say how to build the CUDA image"
print("ok: tfjob.yaml: uncommented, the GPU variant gives the worker nvidia.com/gpu: 1")
PY
pass "Dockerfile and tfjob.yaml: the CUDA variants are wired"
