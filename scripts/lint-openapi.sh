#!/usr/bin/env bash
# Lints api/openapi.yaml with Redocly CLI (the version pinned in api/package.json, rules in
# api/redocly.yaml). Installs api/node_modules with `npm ci` when it is missing or older
# than api/package.json, as scripts/deps.sh does for web/. Exits non-zero on any error.
#
# usage: scripts/lint-openapi.sh
set -euo pipefail

cd "$(dirname "$0")/../api"

if ! command -v npm >/dev/null 2>&1; then
  echo "lint-openapi: npm is missing; run scripts/deps.sh" >&2
  exit 1
fi
if [ ! -x node_modules/.bin/redocly ] || [ package.json -nt node_modules ] ||
  [ package-lock.json -nt node_modules ]; then
  echo "lint-openapi: installing npm packages for api/" >&2
  npm ci --no-audit --no-fund
  touch node_modules
fi

# No usage reports and no update checks: linting stays on this machine.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true REDOCLY_SUPPRESS_NOTIFICATIONS=true
npx --no-install redocly lint openapi.yaml --config redocly.yaml --format=stylish
