#!/usr/bin/env bash
# Mutation testing of the core with StrykerJS (current line: 10.x, which needs Node 22).
# Called through `npm run mutation`, which runs it in a Node 22 copy of the checkout
# (tools/node22.sh); the report lands in reports/mutation/ of this checkout.
#
#   npm run mutation                       # the whole core (tools/mutation/stryker.config.json)
#   npm run mutation -- --mutate packages/supervisor/src/turn/repair.ts
#   npm run mutation -- --unit …           # against the unit tests only (tools/mutation/vitest.unit.ts):
#                                          # a lower bound in minutes where the whole suite takes hours;
#                                          # its report lands in reports/mutation-unit/
#   npm run mutation -- --suite core …     # against tools/mutation/vitest.core.ts (the unit tests and
#                                          # the runtime tests beside the core; edges: likewise for the edges):
#                                          # a tighter lower bound; its report lands in reports/mutation-<suite>/
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 22 ]; then
  echo "mutation: StrykerJS 10 needs Node 22 (this is $(node --version)); run: npm run mutation" >&2
  exit 2
fi
if [ ! -x "$here/node_modules/.bin/stryker" ] || [ "$here/package.json" -nt "$here/node_modules/.stamp" ]; then
  echo "mutation: installing StrykerJS…" >&2
  (cd "$here" && npm install --no-save --no-package-lock --no-audit --no-fund >&2 && touch node_modules/.stamp)
fi
cd "$root"
config="$here/stryker.config.json"
suite=
if [ "${1:-}" = "--unit" ]; then
  shift
  suite=unit
elif [ "${1:-}" = "--suite" ]; then
  suite=${2:?--suite needs a name: unit or core}
  shift 2
fi
if [ -n "$suite" ]; then
  if [ ! -f "$here/vitest.$suite.ts" ]; then
    echo "mutation: no suite '$suite' (tools/mutation/vitest.$suite.ts)" >&2
    exit 2
  fi
  config="$root/.stryker-$suite.json"
  node -e '
    const [base, out, suite] = process.argv.slice(1);
    const c = require(base);
    c.vitest.configFile = `tools/mutation/vitest.${suite}.ts`;
    c.jsonReporter.fileName = `reports/mutation-${suite}/mutation.json`;
    c.htmlReporter.fileName = `reports/mutation-${suite}/mutation.html`;
    c.incrementalFile = `reports/mutation-${suite}/stryker-incremental.json`;
    require("fs").writeFileSync(out, JSON.stringify(c, null, 2));
  ' "$here/stryker.config.json" "$config" "$suite"
fi
status=0
"$here/node_modules/.bin/stryker" run "$config" "$@" || status=$?
# A mutant of the throwaway-cluster helper (packages/store/src/pg-cluster.ts) can break its stop():
# a server left running whose directory is gone (nothing could ever stop it), or a directory left
# behind. Stop the first; remove the second once an hour old and without a server.
for pid in $(pgrep -f 'postgres -D /tmp/tw-pg-' || true); do
  data=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | sed -n 's/.*-D \([^ ]*\).*/\1/p')
  if [ -n "$data" ] && [ ! -d "$data" ]; then
    kill "$pid" 2>/dev/null && echo "mutation: stopped an orphaned PostgreSQL (pid $pid, $data gone)" >&2
  fi
done
find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'tw-pg-*' -type d -mmin +60 2>/dev/null | while read -r dir; do
  [ -f "$dir/data/postmaster.pid" ] || rm -rf "$dir"
done
# Copy the report back to the checkout the command was started from.
if [ -n "${TURNWARDEN_NODE22_ORIGIN:-}" ]; then
  for dir in reports/mutation reports/mutation-*; do
    [ -d "$dir" ] || continue
    mkdir -p "$TURNWARDEN_NODE22_ORIGIN/$dir"
    cp -r "$dir/." "$TURNWARDEN_NODE22_ORIGIN/$dir/"
    echo "mutation: report in $TURNWARDEN_NODE22_ORIGIN/$dir/" >&2
  done
fi
exit "$status"
