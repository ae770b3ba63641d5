#!/usr/bin/env bash
# Runs one browser test of the dashboard, NAME.test.js (dashboard: the pages as a job trains;
# compare: the run comparison; serving: a job's serving tasks; breakdown: the step
# breakdown; trace: a trace on demand in Chromium's trace viewer; queue: the Jobs page's
# queue): `psflow up`, jobs trained through the API, and Debian's chromium driven by npm
# playwright-core (tests/browser/package.json; never a downloaded browser).
# Screenshots go to $PSFLOW_ARTIFACTS [tests/browser/artifacts]. Needs chromium (apt) and
# node; skips (77) without chromium.
#   ctest -R test_compare    or    PSFLOW_BIN=build/psflow PSFLOW_SRC=. bash tests/browser/run_test.sh compare
set -euo pipefail

name=${1:?usage: run_test.sh NAME (runs tests/browser/NAME.test.js)}
: "${PSFLOW_BIN:?run through ctest (PSFLOW_BIN unset)}"
: "${PSFLOW_SRC:?run through ctest (PSFLOW_SRC unset)}"
chromium=${PSFLOW_CHROMIUM:-/usr/bin/chromium}

if [ ! -x "$chromium" ]; then
  echo "SKIP: no chromium at $chromium (apt-get install chromium, or set PSFLOW_CHROMIUM)"
  exit 77
fi
command -v node >/dev/null || { echo "FAIL: node is not installed (apt-get install nodejs npm)" >&2; exit 1; }

# npm packages: the dashboard's uPlot (served at /vendor/uplot/) and this test's playwright-core.
for dir in web tests/browser; do
  if [ ! -d "$PSFLOW_SRC/$dir/node_modules" ] || [ "$PSFLOW_SRC/$dir/package.json" -nt "$PSFLOW_SRC/$dir/node_modules" ]; then
    echo "installing npm packages in $dir"
    (cd "$PSFLOW_SRC/$dir" && npm ci --no-audit --no-fund --loglevel=error && touch node_modules)
  fi
done

export PSFLOW_ARTIFACTS=${PSFLOW_ARTIFACTS:-$PSFLOW_SRC/tests/browser/artifacts}
export PSFLOW_CHROMIUM=$chromium
exec node "$PSFLOW_SRC/tests/browser/$name.test.js"
