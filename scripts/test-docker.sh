#!/usr/bin/env bash
# test-docker.sh - the `make test-docker` tier: the Dockerfile and docker-compose.yml as a
# user runs them, on a private Docker engine.
#
#  1. starts Debian's dockerd on its own socket and data root (no iptables rules, no docker0
#     bridge: nothing on the host changes but the files under PSFLOW_DOCKER_DIR);
#  2. builds a Debian 12 base image with debootstrap (cached: only when the tag is missing),
#     so no registry but Debian's mirror is needed;
#  3. builds the Dockerfile on that base;
#  4. `docker-compose up -d` of docker-compose.yml with nothing set but the port: the API
#     needs the token the coordinator generated on its volume, which the test takes with
#     `docker-compose exec` (the agents read the agent token from a volume of its own);
#     submits a Fashion-MNIST job with curl, waits for Succeeded, checks that each worker
#     handed its shared segment to both ps through the segments volume, that the serve
#     service answers predict requests with its final checkpoint, checks the checkpoint,
#     scales the workers to 3 and back to 2;
#  5. `docker-compose down -v`, stops dockerd.
#
# Exit 0 passed, 1 failed, 77 skipped (no root, no dockerd, the engine does not start).
#
# usage: scripts/test-docker.sh           environment: PSFLOW_DOCKER_DIR [/var/tmp/psflow-docker]
#                                          PSFLOW_DOCKER_KEEP=1 leaves the stack running
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD

DIR=${PSFLOW_DOCKER_DIR:-/var/tmp/psflow-docker}
BASE_TAG=psflow-base:bookworm
IMAGE=psflow:test
PROJECT=psflowtest
MIRROR=${PSFLOW_DEBIAN_MIRROR:-http://deb.debian.org/debian}
T0=$(date +%s)

log() { echo "test-docker: [$(($(date +%s) - T0))s] $*" >&2; }
skip() {
  echo "test-docker: SKIPPED: $*" >&2
  exit 77
}
FAILURE=
fail() {
  FAILURE=$*
  echo "test-docker: FAILED: $*" >&2
  exit 1
}

# --- preconditions ---------------------------------------------------------------------
[ "$(id -u)" = 0 ] || skip "starting dockerd needs root"
for tool in dockerd docker docker-compose debootstrap curl python3; do
  command -v "$tool" >/dev/null 2>&1 ||
    skip "'$tool' not found (Debian: apt-get install docker.io docker-compose debootstrap curl)"
done

mkdir -p "$DIR"
export DOCKER_HOST="unix://$DIR/docker.sock"
# The classic builder: `--network host` needs no BuildKit entitlement there, and it behaves
# the same whichever docker CLI is installed.
export DOCKER_BUILDKIT=0
export COMPOSE_PROJECT_NAME=$PROJECT
WORK=$(mktemp -d "${TMPDIR:-/tmp}/psflow-docker.XXXXXX")
DOCKERD_PID=

cleanup() {
  local rc=$?
  set +e
  if [ -n "$DOCKERD_PID" ] && [ "${PSFLOW_DOCKER_KEEP:-0}" != 1 ]; then
    if [ "${COMPOSE_UP:-0}" = 1 ]; then
      if [ "$rc" != 0 ]; then
        compose ps >&2 2>/dev/null
        compose logs --no-color --tail 40 >&2 2>/dev/null
      fi
      compose down -v --remove-orphans >/dev/null 2>&1
    fi
    kill "$DOCKERD_PID" 2>/dev/null
    for _ in $(seq 1 150); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.2; done
    # dockerd leaves its default network namespace mounted; without it `rm -rf $DIR` works.
    kill -0 "$DOCKERD_PID" 2>/dev/null || umount "$DIR/exec/netns/default" 2>/dev/null
  fi
  rm -rf "$WORK"
  # Said again after the services' logs, so that the last lines of a CI log name the failure.
  [ -z "$FAILURE" ] || echo "test-docker: FAILED: $FAILURE" >&2
  log "done (exit $rc)"
}
trap cleanup EXIT

# --- 1. the engine -----------------------------------------------------------------------
# A dockerd left behind by an interrupted run of this script holds the pid file: stop it.
if [ -f "$DIR/dockerd.pid" ]; then
  old=$(cat "$DIR/dockerd.pid")
  if [ -n "$old" ] && [ "$(cat "/proc/$old/comm" 2>/dev/null)" = dockerd ]; then
    log "stopping the dockerd of an earlier run (pid $old)"
    kill "$old"
    for _ in $(seq 1 150); do kill -0 "$old" 2>/dev/null || break; sleep 0.2; done
  fi
fi
log "starting dockerd (data root $DIR/data)"
dockerd --iptables=false --bridge=none --data-root "$DIR/data" --exec-root "$DIR/exec" \
  --pidfile "$DIR/dockerd.pid" --host "$DOCKER_HOST" >"$DIR/dockerd.log" 2>&1 &
DOCKERD_PID=$!
deadline=$((SECONDS + 60))
until docker version >/dev/null 2>&1; do
  if ! kill -0 "$DOCKERD_PID" 2>/dev/null; then
    DOCKERD_PID=
    tail -n 15 "$DIR/dockerd.log" >&2
    skip "dockerd exited during start-up (its log is above)"
  fi
  if [ $SECONDS -ge $deadline ]; then
    tail -n 15 "$DIR/dockerd.log" >&2
    skip "dockerd did not answer within 60 s"
  fi
  sleep 0.2
done
log "engine up: $(docker version --format 'server {{.Server.Version}}')"

# --- 2. base image -------------------------------------------------------------------------
# debootstrap's minimal Debian 12 with the same apt sources as Docker Hub's debian image.
# CA certificates added locally on this host (/usr/local/share/ca-certificates) go in too,
# so HTTPS from the build (npm) works wherever it works on the host, e.g. behind a
# TLS-inspecting proxy; update-ca-certificates in the image picks them up.
if ! docker image inspect "$BASE_TAG" >/dev/null 2>&1; then
  log "building $BASE_TAG with debootstrap"
  rootfs="$DIR/rootfs"
  rm -rf "$rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$DIR/debootstrap.log" 2>&1 ||
    { tail -n 20 "$DIR/debootstrap.log" >&2; fail "debootstrap bookworm failed"; }
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${MIRROR%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$rootfs/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
  fi
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" --numeric-owner -c . |
    docker import --change 'CMD ["bash"]' - "$BASE_TAG" >/dev/null
  rm -rf "$rootfs"
fi
# A container must start, or nothing below can work (no cgroups, no overlay, seccomp...).
docker run --rm "$BASE_TAG" true ||
  skip "the engine cannot run a container (see $DIR/dockerd.log)"
log "base image $BASE_TAG ready"

# --- 3. image ------------------------------------------------------------------------------
# The build runs apt-get and npm, so it uses the host's network: --bridge=none leaves the
# default bridge network without one.
log "building $IMAGE from the Dockerfile"
# The builder stage gets a tag of its own so that its layers (apt, npm) stay cached while
# the untagged leftovers of earlier builds are pruned.
build() {
  docker build --network host --force-rm --build-arg BASE="$BASE_TAG" "$@" . \
    >"$WORK/build.log" 2>&1 || { tail -n 30 "$WORK/build.log" >&2; fail "docker build $* failed"; }
}
build --target builder -t psflow-builder:test
build -t "$IMAGE"
docker image prune -f >/dev/null
size=$(docker image inspect --format '{{.Size}}' "$IMAGE")
log "image built: $((size / 1000000)) MB"
docker run --rm "$IMAGE" version || fail "psflow version failed in the image"
docker run --rm --entrypoint sh "$IMAGE" -c \
  'test "$(id -u)" != 0 && test -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz' ||
  fail "the image runs as root or lacks the data set"

docker run --rm "$IMAGE" coordinator --help >/dev/null ||
  fail "the image's psflow has no coordinator"

# --- 4. compose ----------------------------------------------------------------------------
# docker-compose.yml as it is: the project network is a user-defined bridge network, which
# dockerd creates even with --bridge=none (that flag only drops the default docker0), and
# Docker's DNS on it resolves service names and each container's hostname (its short id,
# which the agents advertise). The API port is published on 127.0.0.1 by docker-proxy,
# which needs no iptables. Only the host port is set from outside: the token is the one the
# coordinator generates on its first start.
PSFLOW_PORT=$(python3 -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
PSFLOW_SERVE_PORT=$(python3 -c '
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
unset PSFLOW_TOKEN PSFLOW_SERVE_MODEL
export PSFLOW_PORT PSFLOW_SERVE_PORT PSFLOW_IMAGE=$IMAGE
SERVE=http://127.0.0.1:$PSFLOW_SERVE_PORT
API=http://127.0.0.1:$PSFLOW_PORT
compose() {
  docker-compose -f "$SRC/docker-compose.yml" "$@"
}
COMPOSE_UP=1

api() { # METHOD PATH [curl args...]: the body on stdout, fails on HTTP errors
  local method=$1 path=$2
  shift 2
  curl -sS --fail-with-body --max-time 10 -X "$method" \
    -H "Authorization: Bearer $PSFLOW_TOKEN" "$@" "$API$path"
}
# wait_for SECONDS WHAT CMD...: polls CMD until it succeeds, failing after SECONDS.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || fail "$what: not within ${limit}s"
    sleep 0.5
  done
}
# agents ROLE N [STATE]: succeeds when exactly N agents of ROLE are registered and not lost
# (and, with STATE, N of them are in STATE).
agents() {
  api GET /api/v1/nodes | python3 -c '
import json, sys
role, n, state = sys.argv[1], int(sys.argv[2]), sys.argv[3]
items = [x for x in json.load(sys.stdin)["items"] if x["role"] == role and x["state"] != "lost"]
sys.exit(0 if len(items) == n and sum(1 for x in items if state in ("", x["state"])) == n else 1)
' "$1" "$2" "${3:-}"
}

log "docker-compose up (API on $API)"
compose up -d --no-build >"$WORK/up.log" 2>&1 ||
  { cat "$WORK/up.log" >&2; fail "docker-compose up failed"; }
log "stack up: $(compose ps --services | tr '\n' ' ')"
health=$(docker inspect --format '{{.State.Health.Status}}' "$(compose ps -q coordinator)")
[ "$health" = healthy ] ||
  fail "the coordinator is not healthy after docker-compose up"
# The token the coordinator generated, read the way the README says.
PSFLOW_TOKEN=$(compose exec -T coordinator cat /var/lib/psflow/token/token | tr -d '\r\n')
[[ $PSFLOW_TOKEN =~ ^[0-9a-f]{64}$ ]] || fail "no generated token in the token volume: '$PSFLOW_TOKEN'"
log "the coordinator generated its API token; the agents use the agent token of their own volume"
wait_for 60 "2 ps agents registered" agents ps 2
wait_for 60 "2 worker agents registered" agents worker 2
# Every agent advertises its container's hostname, which Docker's DNS resolves: a ps agent
# at its data-plane port 2222, a worker agent at the port it holds for itself (a worker
# listens on nothing; the port keeps two agents of one host apart).
hosts=$( (for c in $(compose ps -q ps); do docker inspect --format '{{.Config.Hostname}}:2222' "$c"; done
  for c in $(compose ps -q worker); do docker inspect --format '{{.Config.Hostname}}:PORT' "$c"; done) |
  sort)
[ "$(api GET /api/v1/nodes | python3 -c '
import json, re, sys
items = json.load(sys.stdin)["items"]
print("\n".join(sorted(x["address"] if x["role"] == "ps" else re.sub(r":[0-9]+$", ":PORT", x["address"])
                       for x in items)))')" = "$hosts" ] ||
  fail "the agents' addresses are not their container hostnames: $hosts"
log "4 agents registered, advertising ${hosts//$'\n'/ }"

# The dashboard and uPlot come from the image.
curl -sS --fail "$API/" | grep -qi '<title>psflow' || fail "GET / is not the dashboard"
curl -sS --fail -o /dev/null "$API/vendor/uplot/uPlot.min.css" || fail "uPlot is not served"
code=$(curl -sS -o /dev/null -w '%{http_code}' "$API/api/v1/jobs")
[ "$code" = 401 ] || fail "the API answered $code without the token, expected 401"

# The example with fewer steps (1000 of 6000, evaluated at the end) so that the tier stays
# within minutes on 2 cores; everything else is the file as users submit it.
python3 - "$SRC/examples/fashion-mnist-mlp.json" >"$WORK/job.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["training"].update(max_steps=1000, eval_every_steps=500)
d["checkpoint"] = {"every_steps": 500}
json.dump(d, sys.stdout)
PY
JOB=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$WORK/job.json")
api POST /api/v1/jobs -H 'Content-Type: application/json' --data-binary "@$WORK/job.json" \
  >"$WORK/created.json" || { cat "$WORK/created.json" >&2; fail "POST /api/v1/jobs failed"; }
log "submitted $JOB (1000 steps)"
deadline=$((SECONDS + 600))
phase=
while :; do
  api GET "/api/v1/jobs/$JOB" >"$WORK/job-status.json" || fail "GET /api/v1/jobs/$JOB failed"
  read -r phase step <<<"$(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["status"]
print(s["phase"], s.get("global_step"))' "$WORK/job-status.json")"
  case $phase in
    Succeeded) break ;;
    Failed) python3 -m json.tool "$WORK/job-status.json" >&2; fail "job $JOB failed" ;;
  esac
  if [ $SECONDS -ge $deadline ]; then
    python3 -m json.tool "$WORK/job-status.json" >&2
    fail "job $JOB still $phase after 600s"
  fi
  [ "${last_step:-}" = "$step" ] || { log "$JOB: $phase, step $step"; last_step=$step; }
  sleep 2
done
acc=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["status"]["accuracy"])' \
  "$WORK/job-status.json")
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.8 else 1)' "$acc" ||
  fail "$JOB succeeded with test accuracy $acc < 0.8"
log "$JOB Succeeded, test accuracy $acc"

# The workers, each in a container of its own, handed their segments to the ps tasks through
# the segments volume (PSFLOW_SHM_DIR): one handoff per worker and ps, none over /proc.
handed=$(compose logs --no-color ps 2>/dev/null | grep -c "handed over through PSFLOW_SHM_DIR" || true)
[ "$handed" -ge 4 ] || {
  compose logs --no-color ps worker 2>/dev/null | grep -i segment >&2
  fail "$handed segments handed over to the ps tasks, expected 4 (2 workers x 2 ps)"
}
log "each worker shared its segment with both ps across containers ($handed handoffs)"

# The serve service answers with the final checkpoint (the example's job is its default
# model), with the token only.
serving_version() {
  curl -sS --fail --max-time 5 -H "Authorization: Bearer $PSFLOW_TOKEN" "$SERVE/v1/models/$JOB" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["model_version_status"][0]["version"])'
}
serving_step_1000() { [ "$(serving_version 2>/dev/null)" = 1000 ]; } # asked again at each poll
wait_for 30 "the serve service serving step 1000" serving_step_1000
code=$(curl -sS -o /dev/null -w '%{http_code}' "$SERVE/v1/models/$JOB")
[ "$code" = 401 ] || fail "the serve service answered $code without the token, expected 401"
curl -sS --fail-with-body --max-time 10 -H "Authorization: Bearer $PSFLOW_TOKEN" \
  -H 'Content-Type: application/json' \
  -d "{\"instances\": [$(python3 -c 'print([0.5] * 784)')]}" "$SERVE/v1/models/$JOB:predict" \
  >"$WORK/predict.json" || { cat "$WORK/predict.json" >&2; fail "the serve service's predict failed"; }
python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))
assert a["model_version"] == "1000" and len(a["predictions"][0]) == 10, a
assert abs(sum(a["predictions"][0]) - 1) < 1e-5, a' "$WORK/predict.json" ||
  fail "the serve service's answer: $(cat "$WORK/predict.json")"
log "the serve service answers predict requests with step 1000 (401 without the token)"

# The final checkpoint is on the shared volume, and psflow export merges it.
compose exec -T coordinator psflow export "/var/lib/psflow/checkpoints/$JOB" \
  --out /tmp/model.safetensors || fail "psflow export of the shared checkpoint failed"
wait_for 30 "worker agents back in the pool" agents worker 2 idle
wait_for 30 "ps agents back in the pool" agents ps 2 idle

# Scaling the worker pool: a third agent registers; scaling back stops one with SIGTERM,
# and it deregisters (a lost agent would still be listed as lost, not gone).
compose up -d --no-build --scale worker=3 >"$WORK/scale.log" 2>&1 ||
  { cat "$WORK/scale.log" >&2; fail "scaling to 3 workers failed"; }
wait_for 60 "3 worker agents registered" agents worker 3
log "scaled to 3 workers"
compose up -d --no-build --scale worker=2 >"$WORK/scale.log" 2>&1 ||
  { cat "$WORK/scale.log" >&2; fail "scaling back to 2 workers failed"; }
wait_for 30 "back to 2 worker agents" agents worker 2
api GET /api/v1/nodes | python3 -c '
import json, sys
items = [x for x in json.load(sys.stdin)["items"] if x["role"] == "worker"]
sys.exit(0 if len(items) == 2 else 1)' || fail "the removed worker did not deregister"
log "scaled back to 2 workers; the stopped agent deregistered"

t=$SECONDS
compose down -v >"$WORK/down.log" 2>&1 ||
  { cat "$WORK/down.log" >&2; fail "docker-compose down -v failed"; }
COMPOSE_UP=0
log "docker-compose down -v: $((SECONDS - t))s"
project="label=com.docker.compose.project=$PROJECT"
[ -z "$(docker ps -aq --filter "$project")" ] || fail "containers left after down"
[ -z "$(docker volume ls -q --filter "$project")" ] || fail "volumes left after down -v"
log "PASSED"
