#!/usr/bin/env bash
# labels: slow release-only
# timeout: 480
# README.md and the pages of docs/ say what a user can run; this test runs it, so they cannot
# drift. A section named below is looked up by its "## " heading (or a docs page's "# " title)
# in README.md and docs/*.md, and must be in exactly one place:
#  0. the README stays short (under 300 lines, `make demo` and `make test` in its first 40),
#     links every page of docs/, and every relative link of README.md and docs/*.md leads to
#     a file and, with #anchor, to a heading of it;
#  1. the configuration tables ("Configuration") list every option of every command exactly as
#     `psflow <command> --help` does (both ways), each with its PSFLOW_* twin; every
#     `psflow <command> --flag` in the code of the README and docs exists; every `make` target
#     they name exists in the Makefile; every repository path they name exists;
#  2. "Quick start" (README): scripts/demo.sh (the recipe of `make demo` after the build) runs
#     on a copy of the tree whose example job is shortened, and prints the lines the README
#     shows;
#  3. "Training in one process" (docs/training.md): the block runs as written;
#  4. "A local cluster" (README), "The job API", "Command-line clients", "Changing a running
#     job" (docs/api.md), "Embeddings" (docs/embeddings.md), "Operations"
#     (docs/operations.md) and "Serving a trained model" (docs/serving.md): their blocks run
#     in that order
#     in one shell, against the `psflow up` the first one starts (a free port for 8080, a
#     shortened copy of the example job; the copy the commands change while it trains runs
#     until it is deleted), then the last block of "A local cluster" exports the model and stops the
#     cluster with SIGINT; the outputs are checked, and the Docker Compose section submits
#     with the very same curl command;
#  5. "Distributed training" (docs/distributed.md): the block runs with free ports and the
#     shortened job;
#  6. "Benchmarks" (docs/benchmarks.md): each program runs briefly and prints what the page
#     describes.
source "$(dirname "$0")/lib.sh"

README=$PSFLOW_SRC/README.md
# pages.py: the README and docs/*.md, their sections, for the Python checks below.
cat >pages.py <<'PY'
import glob, os, re, sys
def pages(src):
    """README.md, then every page of docs/."""
    return [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))
def text(src):
    """Every page, one after the other."""
    return "\n".join(open(p).read() for p in pages(src))
def sections(path):
    """The page's "## " sections; a leading "# " title heads the part before the first."""
    return re.split(r"^## ", re.sub(r"^# ", "", open(path).read()), flags=re.M)
def section(src, heading):
    """(page, text) of the one section whose heading starts with HEADING."""
    found = [(p, s) for p in pages(src) for s in sections(p) if s.startswith(heading)]
    if len(found) != 1:
        sys.exit("README.md and docs/ have %d sections '%s'%s" % (len(found), heading,
                 "".join(" " + os.path.relpath(p, src) for p, _ in found)))
    return found[0]
PY
BUILD_DIR=$(cd "$(dirname "$PSFLOW_BIN")" && pwd)
# No PSFLOW_* setting of the calling shell may reach the commands under test.
for var in $(compgen -e | grep '^PSFLOW_' || true); do
  case $var in PSFLOW_BIN | PSFLOW_SRC | PSFLOW_TEST_DATA) ;; *) unset "$var" ;; esac
done

# block HEADING [N]: the N-th (from 0) ```sh block of the section (README.md or docs/) whose
# heading starts with HEADING; LANG_BLOCK=text picks ```text blocks instead.
block() {
  python3 - "$PSFLOW_SRC" "$1" "${2:-0}" "${LANG_BLOCK:-sh}" <<'PY'
import re, sys
sys.path.insert(0, ".")
from pages import section
src, heading, n, lang = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
page, text = section(src, heading)
blocks = re.findall(r"^```%s\n(.*?)^```" % lang, text, re.S | re.M)
if len(blocks) <= n:
    sys.exit("section '%s' of %s has no ```%s block number %d" % (heading, page, lang, n))
sys.stdout.write(blocks[n])
PY
}

# The example job, shortened: 200 steps, evaluated at the end only.
python3 - "$PSFLOW_SRC/examples/fashion-mnist-mlp.json" >short.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["training"].update(max_steps=200, eval_every_steps=0)
json.dump(d, sys.stdout)
PY

# --- 0. the README's shape, the docs it links, every relative link ---------------------------
python3 - "$PSFLOW_SRC" <<'PY' || fail "README.md or docs/ has a shape or link problem"
import os, re, sys
sys.path.insert(0, ".")
from pages import pages
src = sys.argv[1]
errors = []
readme = open(os.path.join(src, "README.md")).read()
lines = readme.splitlines()
if len(lines) >= 300:
    errors.append("README.md has %d lines: keep it under 300 (details go to docs/)" % len(lines))
first = "\n".join(lines[:40])
for cmd in ("make demo", "make test"):
    if not re.search(r"^%s\b" % cmd, first, re.M):
        errors.append("README.md: '%s' is not in a code line of its first 40 lines" % cmd)
for page in pages(src)[1:]:
    if "(docs/%s)" % os.path.basename(page) not in readme:
        errors.append("README.md does not link docs/%s" % os.path.basename(page))

def slug(heading):  # GitHub's anchor for a heading
    heading = re.sub(r"`", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")
def anchors(path):
    found, seen = set(), {}
    body = re.sub(r"^```.*?^```", "", open(path).read(), flags=re.S | re.M)
    for h in re.findall(r"^#{1,6} (.*)$", body, re.M):
        s = slug(h)
        found.add(s if s not in seen else "%s-%d" % (s, seen[s]))
        seen[s] = seen.get(s, 0) + 1
    return found
for page in pages(src):
    body = re.sub(r"^```.*?^```", "", open(page).read(), flags=re.S | re.M)
    body = re.sub(r"`[^`\n]*`", "", body)  # code spans hold no links
    name = os.path.relpath(page, src)
    for target in re.findall(r"\]\(([^)\s]+)\)", body):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(full):
            errors.append("%s links %s, which does not exist" % (name, target))
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            errors.append("%s links %s: no heading with that anchor" % (name, target))
for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY
pass "README.md: under 300 lines, make demo and make test first, every docs/ page linked; every relative link resolves"

# --- 1. the README and docs against the program's own descriptions ---------------------------
"$PSFLOW_BIN" --help >help-main.txt
COMMANDS=$(sed -n '/^commands:/,/^$/s/^  \([a-z]*\)  .*/\1/p' help-main.txt)
[ -n "$COMMANDS" ] || fail "cannot read the commands from 'psflow --help'"
mkdir help
for cmd in $COMMANDS; do
  "$PSFLOW_BIN" "$cmd" --help >"help/$cmd.txt" || fail "psflow $cmd --help failed"
done
python3 - help "$PSFLOW_SRC" "$BUILD_DIR" $COMMANDS <<'PY' || fail "README.md or docs/ disagree with the program"
import os, re, sys
sys.path.insert(0, ".")
import pages
help_dir, src, build = sys.argv[1:4]
commands = sys.argv[4:]
text = pages.text(src)
helps = {c: open(os.path.join(help_dir, c + ".txt")).read() for c in commands}
def help_flags(cmd):
    return set(re.findall(r"^  (--[a-z][a-z0-9-]*)", helps[cmd], re.M)) - {"--help"}
errors = []

# Configuration tables: rows of "`psflow CMD` option" tables, and of the clients' table whose
# "commands" column names the commands.
conf = [pages.section(src, "Configuration")[1]]
documented = {c: set() for c in commands}
for table in re.findall(r"((?:^\|.*\n)+)", conf[0], re.M):
    rows = [[c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]] for line in table.splitlines()]
    header, body = rows[0], rows[2:]
    if "environment" not in header:
        continue
    env_col = header.index("environment")
    m = re.fullmatch(r"`psflow ([a-z]+)` option", header[0])
    cmd_col = header.index("commands") if "commands" in header else None
    if not m and cmd_col is None:
        continue
    for row in body:
        flags = re.findall(r"--[a-z][a-z0-9-]*", row[0])
        if not flags:
            errors.append("configuration row without an option: %s" % row)
            continue
        cmds = [m.group(1)] if m else re.findall(r"`([a-z]+)`", row[cmd_col])
        want = "PSFLOW_" + flags[0][2:].upper().replace("-", "_")
        # "— (command line only)": an option without a twin (psflow scale's counts)
        if not row[env_col].startswith("—") and re.findall(r"PSFLOW_[A-Z_]+", row[env_col]) != [want]:
            errors.append("%s: the environment column should be %s" % (flags[0], want))
        for cmd in cmds:
            if cmd not in helps:
                errors.append("configuration names 'psflow %s', which does not exist" % cmd)
                continue
            for flag in flags:
                if flag not in help_flags(cmd):
                    errors.append("configuration: psflow %s has no option %s" % (cmd, flag))
                documented[cmd].add(flag)
for cmd in commands:
    for flag in sorted(help_flags(cmd) - documented[cmd]):
        errors.append("configuration lacks 'psflow %s %s' (it is in --help)" % (cmd, flag))
for var in ("PSFLOW_TOKEN", "PSFLOW_TOKEN_FILE"):
    if "`%s`" % var not in conf[0]:
        errors.append("configuration does not describe %s" % var)

# Code anywhere: `psflow CMD ... --flag` on one line of a block or in one inline span.
code = re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M)
lines = [l for b in code for l in b.splitlines()]
lines += re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
for line in lines:
    for m in re.finditer(r"\bpsflow ([a-z]+)\b([^|;&#]*)", line):
        cmd, tail = m.group(1), m.group(2)
        if cmd not in helps:
            continue
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", tail):
            if flag != "--help" and flag not in help_flags(cmd):
                errors.append("'%s': psflow %s has no option %s" % (line.strip(), cmd, flag))

# Paths: every `path` or link into the repository (or build/) must exist.
tops = ("common/", "coordinator/", "ps/", "worker/", "agent/", "serve/", "cli/", "web/", "api/", "deploy/",
        "tests/", "bench/", "examples/", "scripts/", "build/")
words = re.findall(r"`([^`\s]+)`", text) + re.findall(r"\]\(([^)\s]+)\)", text)
path_re = r"(?<![\w./-])((?:%s)[\w./-]*)" % "|".join(map(re.escape, tops))
for line in (l for b in code for l in b.splitlines()):
    if line.startswith("kubectl"):  # resource names (deploy/psflow-worker) are no paths
        line = " ".join(re.findall(r"-[kf] (\S+)", line))
    words += re.findall(path_re, line)
# Files the user makes and git ignores (deploy/kubernetes/token) exist only after that.
import subprocess
candidates = sorted({w.rstrip(".,:") for w in words if w.startswith(tops)})
ignored = set(subprocess.run(["git", "-C", src, "check-ignore", "--no-index"] + candidates,
                             capture_output=True, text=True).stdout.split())
for w in sorted(set(words)):
    w = w.rstrip(".,:")
    if not w.startswith(tops) or re.search(r"[<>{}*\[\]$]", w) or "node_modules" in w:
        continue
    if w in ignored and not w.startswith("build/"):
        continue
    if w.startswith("build/"):
        path = os.path.join(build, w[len("build/"):])
    else:
        path = os.path.join(src, w)
    if not os.path.exists(path):
        errors.append("README.md or docs/ name %s, which does not exist" % w)

for e in errors:
    print(e)
sys.exit(1 if errors else 0)
PY
pass "configuration tables match 'psflow <command> --help' for: $(echo $COMMANDS)"

# Every `make TARGET` the README and docs name is a target of the Makefile (-n: print, run
# nothing).
targets=$(python3 - "$PSFLOW_SRC" <<'PY'
import re, sys
sys.path.insert(0, ".")
import pages
text = pages.text(sys.argv[1])
code = [l for b in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M) for l in b.splitlines()]
code += re.findall(r"`([^`\n]+)`", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))
found = set()
for line in code:
    if not line.startswith("apt-get"):  # `apt-get install make git` installs make
        found.update(re.findall(r"(?:^|[\s'])make ([a-z][a-z-]*)", line))
print("\n".join(sorted(found)))
PY
)
for t in $targets; do
  make -n -C "$PSFLOW_SRC" "$t" >/dev/null 2>make.err || { cat make.err >&2; fail "README.md or docs/ name 'make $t', which the Makefile lacks"; }
done
pass "make targets exist: $(echo $targets)"

# --- 2. Quick start: make demo ----------------------------------------------------------------
block "Quick start" >quick-start.sh
grep -qx 'make demo .*' quick-start.sh || fail "'make demo' is not in the Quick start block"
mkdir -p demo-tree/scripts demo-tree/examples
cp "$PSFLOW_SRC/scripts/demo.sh" demo-tree/scripts/
cp short.json demo-tree/examples/fashion-mnist-mlp.json
read -r demo_port <<<"$(free_ports 1)"
PSFLOW_DEMO_PORT=$demo_port PSFLOW_DEMO_DIR=$WORK/demo timeout 120 \
  bash demo-tree/scripts/demo.sh "$BUILD_DIR" >demo.out 2>demo.err ||
  { tail -n 20 demo.err demo.out >&2; fail "scripts/demo.sh failed"; }
grep -q "^== dashboard: http://127.0.0.1:$demo_port/ " demo.out || { cat demo.out; fail "demo: no dashboard line"; }
grep -q '^== final test accuracy: 0\.[0-9]\{4\}$' demo.out || { cat demo.out; fail "demo: no accuracy line"; }
# The README's sample: each line of it but the progress lines, with every number any number.
LANG_BLOCK=text block "Quick start" >demo-sample.txt
python3 - demo-sample.txt demo.out "$WORK/demo" <<'PY' || fail "make demo's output is not what the README shows"
import re, sys
sample, out, demo_dir = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3]
bad = 0
for line in sample.splitlines():
    if line == "..." or re.match(r"fmnist-mlp  ", line):
        continue  # progress lines depend on timing
    pattern = re.sub(r"[0-9]+", "[0-9]+", re.escape(line.replace("psflow-demo", demo_dir)))
    if not re.search("^" + pattern + "$", out, re.M):
        print("README line not printed by the demo: %s" % line)
        bad = 1
sys.exit(bad)
PY
pass "make demo (scripts/demo.sh, 200 steps) prints what the README shows"

# --- 3. Training in one process ---------------------------------------------------------------
mkdir train
block "Training in one process" |
  sed -e "s|build/psflow|$PSFLOW_BIN|g" -e "s|examples/|$PSFLOW_SRC/examples/|g" >train/run.sh
(cd train && timeout 120 bash -e run.sh >out.txt 2>err.txt) ||
  { tail -20 train/err.txt; fail "the 'Training in one process' block failed"; }
grep -q '^linear: 3000 steps, loss 0\.0[0-9]*, test loss 0\.0[0-9]*, ' train/out.txt ||
  { cat train/out.txt; fail "no result line for linear.json"; }
python3 - train/out.txt "$PSFLOW_SRC" <<'PY' || fail "psflow train --output json"
import json, re, sys
sys.path.insert(0, ".")
from pages import section
obj = json.loads(open(sys.argv[1]).read().splitlines()[1])
keys = ["name", "steps", "loss", "test_loss", "test_accuracy", "examples_per_sec", "seconds",
        "epochs", "backend", "reason"]
assert sorted(obj) == sorted(keys), sorted(obj)
page, section = section(sys.argv[2], "Training in one process")
for k in keys:
    assert "`%s`" % k in section, "%s does not describe %s" % (page, k)
assert obj["name"] == "fmnist-softmax" and obj["steps"] == 6000 and obj["test_accuracy"] > 0.8, obj
assert obj["reason"] == "Done", obj
PY
[ "$(safetensors_values train/model.safetensors dense_0/kernel | awk '{printf "%.1f", $1}')" = 2.0 ] ||
  fail "model.safetensors: dense_0/kernel is not about 2 (y = 2x + 10)"
pass "'Training in one process' runs as written; --save and --output json give what it says"

# --- 4. A local cluster, the job API, the clients, operations ---------------------------------
read -r PORT SERVE_PORT <<<"$(free_ports 2)"
{
  cat <<'SH'
set -euo pipefail
# The API's JSON answers end without a newline; HTTP errors fail the block. The event stream
# is followed for 3 s.
curl() {
  local a stream=0 rc=0
  for a in "$@"; do case $a in */api/v1/events*) stream=1 ;; esac; done
  if [ "$stream" = 1 ]; then
    command curl --fail-with-body --max-time 3 "$@" || rc=$?
    [ "$rc" = 28 ] || { echo "curl $*: exit $rc, not the 3 s limit" >&2; return 1; }
    rc=0
  else
    command curl --fail-with-body --max-time 30 "$@" || rc=$? # an `until curl` sees it
  fi
  echo
  return "$rc"
}
# timeout_ok SECONDS CMD...: CMD must still be running after SECONDS (psflow watch).
timeout_ok() {
  local t=$1 rc=0
  shift
  timeout "$t" "$@" || rc=$?
  [ "$rc" = 124 ] || { echo "'$*' ended ($rc) before ${t} s" >&2; return 1; }
}
SH
  for part in "A local cluster:0" "The job API:0" "Command-line clients:0" \
    "Changing a running job:0" "Changing a running job:1" "Embeddings:0" "Operations:0" \
    "Serving a trained model:0" "A local cluster:1"; do
    echo "echo '### ${part%:*} ${part#*:}'"
    block "${part%:*}" "${part#*:}"
  done
  echo "echo '### end'"
  echo 'wait %1 # psflow up, stopped by the last block'
} >cluster.tmpl
python3 - cluster.tmpl "$PSFLOW_BIN" "$WORK" "$PORT" "$PSFLOW_SRC" "$SERVE_PORT" >cluster.sh <<'PY'
import sys
text, binary, work, port, src, serve_port = open(sys.argv[1]).read(), *sys.argv[2:7]
for old, new in [
        # the copy the commands change while it trains: long enough to outlast them
        ("examples/fashion-mnist-mlp.json --set name=fmnist-live",
         "@WORK@/long.json --set name=fmnist-live"),
        ("psflow-up/", "@WORK@/psflow-up/"),
        ("build/psflow up", "@BIN@ up --port %s --dir @WORK@/psflow-up" % port),
        ("build/psflow watch", "timeout_ok 3 @BIN@ watch"),
        ("build/psflow", "@BIN@"),
        ("examples/fashion-mnist-mlp.json", "@WORK@/short.json"),
        ("examples/fashion-mnist-tokens.json", "@WORK@/tokens-short.json"),
        ("python3 scripts/", "python3 @SRC@/scripts/"),
        ("127.0.0.1:8080", "127.0.0.1:%s" % port),
        ("127.0.0.1:8501", "127.0.0.1:%s" % serve_port),
        ("localhost:8501", "localhost:%s" % serve_port)]:
    text = text.replace(old, new)
sys.stdout.write(text.replace("@BIN@", binary).replace("@WORK@", work).replace("@SRC@", src))
PY
grep -q "$PSFLOW_BIN up --port $PORT" cluster.sh || fail "no 'build/psflow up' in the local cluster block"
grep -q "$WORK/long.json --set name=fmnist-live" cluster.sh || fail "no fmnist-live in 'Changing a running job'"
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d["training"]["max_steps"] = 1000000; json.dump(d, sys.stdout)' \
  short.json >long.json
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); d["training"].update(max_steps=200, eval_every_steps=0); json.dump(d, sys.stdout)' \
  "$PSFLOW_SRC/examples/fashion-mnist-tokens.json" >tokens-short.json
PSFLOW_COORDINATOR=http://127.0.0.1:$PORT timeout 320 bash cluster.sh >cluster.out 2>cluster.err ||
  { tail -30 cluster.err; tail -20 cluster.out; fail "the README's cluster blocks failed"; }
! pgrep -f -- "$WORK/psflow-up" >/dev/null || fail "processes of psflow up left running"
grep -q '^psflow up: stopped$' cluster.err || fail "psflow up did not say it stopped"

# part NAME: the output of that block.
part() { sed -n "/^### $1\$/,/^### /p" cluster.out; }
expect() { # expect BLOCK REGEX WHAT
  part "$1" >part.txt
  grep -Eq -- "$2" part.txt || { cat part.txt >&2; fail "$1: $3"; }
}
expect "A local cluster 0" '^ok$' "psflow health did not print ok"
expect "A local cluster 0" '"name":"fmnist-mlp"' "the curl POST did not answer with the job"
expect "A local cluster 0" '^fmnist-mlp: Succeeded, step 200/200, test accuracy 0\.[0-9]+$' \
  "submit --wait did not follow the job to Succeeded"
LANG_BLOCK=text block "A local cluster" | sed "s|127.0.0.1:8080|127.0.0.1:$PORT|g" >up-sample.txt
while IFS= read -r line; do
  grep -qxF -- "$line" cluster.out || { cat cluster.out; fail "psflow up did not print: $line"; }
done <up-sample.txt
pass "A local cluster: psflow up, curl POST, submit --wait -> Succeeded; psflow up printed what the README shows"

expect "The job API 0" '^\{"items":\[\{"name":"fmnist-mlp","phase":"Succeeded"' "GET /api/v1/jobs"
expect "The job API 0" '^\{"name":"fmnist-mlp","spec":' "GET /api/v1/jobs/fmnist-mlp"
expect "The job API 0" '"type":"worker","index":1,"node_id":"worker-' "GET .../tasks"
expect "The job API 0" '^\{"cluster":\{"ps":\["127\.0\.0\.1:[0-9]+","127\.0\.0\.1:[0-9]+"\],"worker":.*"task":\{"type":"worker","index":0\}' \
  "GET .../tf_config"
expect "The job API 0" '^\{"job":"fmnist-mlp","total_points":[1-9][0-9]*,.*"points":\[\{"task":"' "GET .../metrics"
expect "The job API 0" '"variable":"dense_0/kernel"' "GET .../placement"
# The final checkpoint's record may reach the coordinator just after the job's Succeeded.
expect "The job API 0" '^\{"items":\[(\{"step":200,.*)?\]\}$' "GET .../checkpoints"
expect "The job API 0" '"role":"worker"' "GET /api/v1/nodes"
expect "The job API 0" '^event: job$' "the event stream replayed no job event"
pass "The job API: every curl of the block answered 2xx with the expected content"

expect "Command-line clients 0" '^fmnist-mlp: Succeeded, step 200/200' "submit --wait"
expect "Command-line clients 0" '^fmnist-mlp +Succeeded +200/200 ' "list"
expect "Command-line clients 0" '^Phase: +Succeeded' "get"
expect "Command-line clients 0" '^\{"name":"fmnist-mlp","spec":' "get -o json"
expect "Command-line clients 0" '"task":\{"type":"worker","index":0\}' "tfconfig"
expect "Command-line clients 0" ' fmnist-mlp +job +Succeeded ' "watch"
expect "Command-line clients 0" '^job fmnist-mlp Succeeded' "cancel of a finished job"
expect "Command-line clients 0" '^psflow [0-9]+\.[0-9]+\.[0-9]+ ' "version"
pass "Command-line clients: submit, list, get, tfconfig, watch, cancel, health, version as shown"

expect "Changing a running job 0" '^job fmnist-live created$' "submit --set name=fmnist-live"
expect "Changing a running job 0" '^job fmnist-live: workers 2 -> 3 \(Running\)$' "scale --workers 3 --wait"
expect "Changing a running job 0" '^job fmnist-live: suspended \(Suspended\)$' "suspend --wait"
expect "Changing a running job 0" '^job fmnist-live: ps 2 -> 3 \(Suspended\)$' "scale --ps 3 of the suspended job"
expect "Changing a running job 0" '^job fmnist-live: .*\(Running\)$' "resume --wait"
expect "Changing a running job 0" '"ps":\[\{"task":0,.*\{"task":1,.*\{"task":2,' "the placement over 3 ps"
expect "Changing a running job 0" '^job fmnist-live deleted' "delete"
pass "Changing a running job: a copy submitted with --set trains; scale --workers 3, suspend, scale --ps 3, resume on 3 ps, delete"
expect "Changing a running job 1" '^fmnist-eval: Succeeded, step 200/200' "submit with an evaluator --wait"
expect "Changing a running job 1" '^ *evaluator +0 ' "get: the evaluator task"
pass "Changing a running job: a job with an evaluator on the third worker agent succeeds"

expect "Operations 0" '^\{"version":"[0-9.]+","git":".*","api":"v1"' "GET /version"
expect "Embeddings 0" '^fmnist-tokens: 200 steps, ' "psflow train of the tokens example"
expect "Embeddings 0" '^fmnist-tokens: Succeeded, step 200/200, test accuracy 0\.[0-9]+$' "submit --wait of the tokens example"
expect "Embeddings 0" '"variable":"pixels/embeddings","name":"pixels/embeddings","kind":"table","shape":\[1568,64\],.*"ps_task":0,' "the placement: the table pixels on ps 0"
pass "Embeddings: the tokens data written, trained in one process and on the local cluster, the table placed on ps 0"

expect "Operations 0" '^psflow_jobs\{phase="Succeeded"\} 3$' "GET /metrics"
part "Operations 0" >part.txt
[ "$(grep -c '^ok$' part.txt)" = 2 ] || fail "Operations: /livez and /readyz should print ok"
[ -f "$WORK/fmnist-mlp.safetensors" ] || fail "psflow export wrote no fmnist-mlp.safetensors"
[ "$(safetensors_values fmnist-mlp.safetensors dense_2/bias | wc -w)" = 10 ] ||
  fail "the exported model has no dense_2/bias [10]"
pass "Operations: /livez /readyz /version /metrics; export and Ctrl-C (kill -INT) as shown"

expect "Serving a trained model 0" '^\{"model_version_status":\[\{"version":"200","state":"AVAILABLE"' "GET /v1/models/fmnist-mlp"
expect "Serving a trained model 0" '^\{"model_version":"200","predictions":\[\[[0-9.e-]+(,[0-9.e-]+){9}\]\]\}$' "the predict request"
pass "Serving a trained model: psflow serve answered the version status and a prediction of step 200"

# The Docker Compose section submits with the same curl command the local cluster block ran.
# (Compose needs the token it generated: the Authorization header is the one difference.)
curl_cmd() {
  block "$1" | sed -n '/^curl /,/[^\\]$/p' | head -2 | tr -s ' ' |
    sed 's/ -H "Authorization: Bearer \$TOKEN"//'
}
[ -n "$(curl_cmd "A local cluster")" ] && [ "$(curl_cmd "Docker Compose")" = "$(curl_cmd "A local cluster")" ] ||
  fail "the Docker Compose section's curl differs from the one the local cluster block runs"
pass "Docker Compose: the curl submission is the one tested against psflow up"

# --- 5. Distributed training -------------------------------------------------------------------
block "Distributed training" >snippet.sh
read -r -a ports <<<"$(free_ports 4)"
sed -e "s|build/psflow|$PSFLOW_BIN|g" -e "s|examples/fashion-mnist-mlp.json|$WORK/short.json|g" \
  -e "s|2222|${ports[0]}|g; s|2223|${ports[1]}|g; s|2224|${ports[2]}|g; s|2225|${ports[3]}|g" \
  snippet.sh >run.sh
echo 'wait' >>run.sh # the README leaves the other tasks in the background
timeout 240 bash run.sh >out.txt 2>err.txt || { tail -20 err.txt; fail "README block failed"; }
cat out.txt
grep -q '^fmnist-mlp: 200 steps, test accuracy 0\.[0-9]*' out.txt || fail "no result line from the chief"
[ -f checkpoints/fmnist-mlp/step-200/manifest.json ] || fail "no final checkpoint"
pass "README distributed block runs as written"

# --- 6. Benchmarks -------------------------------------------------------------------------------
# The synopses in the README and docs are the programs' own usage lines.
cat "$README" "$PSFLOW_SRC"/docs/*.md >all-pages.md
for prog in train_throughput wire_throughput tcp_baseline; do
  usage=$("$BUILD_DIR/bench/$prog" --help 2>&1 | sed -n "s/^usage: $prog //p" || true)
  [ -n "$usage" ] || fail "bench/$prog printed no usage line"
  grep -qF "\`build/bench/$prog $usage\`" all-pages.md || fail "the synopsis of build/bench/$prog in README.md or docs/ is not '$usage'"
done
(cd "$PSFLOW_SRC" && "$BUILD_DIR/bench/train_throughput" --steps 20 --rounds 1) >bench.out 2>&1 ||
  { cat bench.out; fail "build/bench/train_throughput failed"; }
grep -q 'ratio measured / ideal' bench.out || { cat bench.out; fail "train_throughput printed no ratio"; }
"$BUILD_DIR/bench/wire_throughput" --seconds 0.05 >bench.out 2>/dev/null || fail "build/bench/wire_throughput failed"
for size in "4 KB" "4 MB" "40 MB"; do
  grep -q "^$size *push-pull " bench.out || { cat bench.out; fail "bench/wire_throughput printed no $size push-pull line"; }
done
if command -v wrk >/dev/null; then
  SECONDS_PER_PHASE=1 timeout 120 bash "$PSFLOW_SRC/bench/coordinator.sh" "$BUILD_DIR" >bench.out 2>&1 ||
    { tail -20 bench.out; fail "bench/coordinator.sh failed"; }
  grep -q '^heartbeat throughput = ' bench.out && grep -q '^GET job throughput = ' bench.out ||
    { cat bench.out; fail "bench/coordinator.sh printed no ratios"; }
  pass "Benchmarks: train_throughput, wire and coordinator.sh run and print their ratios"
else
  pass "Benchmarks: train_throughput and wire_throughput run (bench/coordinator.sh skipped: wrk is not installed)"
fi
