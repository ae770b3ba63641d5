#!/usr/bin/env bash
# Installs what psflow needs to build, test and run its examples on Debian 12: the Debian
# packages below and the npm packages pinned by each package.json (the dashboard's uPlot,
# the OpenAPI linter, the manifest schema check and the browser test's playwright-core).
# Idempotent: installs only what is missing. As root it installs; otherwise it prints the
# exact command to run and exits 1 if anything is missing.
#
# usage: scripts/deps.sh [--check]     (--check: report only, never install)
set -euo pipefail

cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  build-essential cmake pkg-config clang clang-format   # toolchain; clang for libFuzzer
  libopenblas-dev libjansson-dev zlib1g-dev             # compute, job spec, data, checkpoints
  libwebsockets-dev libssl-dev                          # data plane (common/dataplane)
  libmicrohttpd-dev libsqlite3-dev libcurl4-openssl-dev # coordinator; its clients (common/control)
  libcmocka-dev python3 python3-jsonschema              # tests
  curl sqlite3 chromium prometheus wrk                  # API, dashboard, metrics tests; bench
  iproute2                                              # TFJob test (network namespaces)
  openssl                                               # TLS test: a CA and certificates
  time                                                  # peak RSS of ps and workers (/usr/bin/time)
  docker.io docker-compose debootstrap                  # container tier (make test-docker)
  dataset-fashion-mnist                                 # the examples' data
)

check_only=0
[ "${1:-}" = "--check" ] && check_only=1

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$pkg")
  fi
done

# npm: Debian's nodejs + npm, unless a Node.js that brings its own npm is installed.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -gt 0 ]; then
  cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
  if [ "$check_only" = 1 ] || [ "$(id -u)" != 0 ]; then
    echo "deps: missing Debian packages: ${missing[*]}" >&2
    echo "deps: install them with:" >&2
    echo "  sudo sh -c '$cmd'" >&2
    exit 1
  fi
  echo "deps: installing ${missing[*]}" >&2
  # Update the package lists only when a package cannot be found in the current ones.
  if ! apt-get install -y --no-install-recommends -s "${missing[@]}" >/dev/null 2>&1; then
    apt-get update -q
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

for dir in web api deploy/validate tests/browser; do
  [ -f "$dir/package.json" ] || continue
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package.json" -nt "$dir/node_modules" ]; then
    if [ "$check_only" = 1 ]; then
      echo "deps: npm packages of $dir/ are not installed: run (cd $dir && npm ci)" >&2
      exit 1
    fi
    echo "deps: installing npm packages for $dir/" >&2
    (cd "$dir" && if [ -f package-lock.json ]; then npm ci --no-audit --no-fund; else npm install --no-audit --no-fund; fi)
    touch "$dir/node_modules"
  fi
done
echo "deps: all dependencies present" >&2
