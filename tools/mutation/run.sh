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
if [ "${1:-}" = "--unit" ]; then
  shift
  config="$root/.stryker-unit.json"
  node -e '
    const c = require(process.argv[1]);
    c.vitest.configFile = "tools/mutation/vitest.unit.ts";
    c.jsonReporter.fileName = "reports/mutation-unit/mutation.json";
    c.htmlReporter.fileName = "reports/mutation-unit/mutation.html";
    c.incrementalFile = "reports/mutation-unit/stryker-incremental.json";
    require("fs").writeFileSync(process.argv[2], JSON.stringify(c, null, 2));
  ' "$here/stryker.config.json" "$config"
fi
status=0
"$here/node_modules/.bin/stryker" run "$config" "$@" || status=$?
# Copy the report back to the checkout the command was started from.
if [ -n "${TURNWARDEN_NODE22_ORIGIN:-}" ]; then
  for dir in reports/mutation reports/mutation-unit; do
    [ -d "$dir" ] || continue
    mkdir -p "$TURNWARDEN_NODE22_ORIGIN/$dir"
    cp -r "$dir/." "$TURNWARDEN_NODE22_ORIGIN/$dir/"
    echo "mutation: report in $TURNWARDEN_NODE22_ORIGIN/$dir/" >&2
  done
fi
exit "$status"
