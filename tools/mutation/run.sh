#!/usr/bin/env bash
# Mutation testing of the core with StrykerJS (current line: 10.x, which needs Node 22).
# Called through `npm run mutation`, which runs it in a Node 22 copy of the checkout
# (tools/node22.sh); the report lands in reports/mutation/ of this checkout.
#
#   npm run mutation                       # the whole core (tools/mutation/stryker.config.json)
#   npm run mutation -- --mutate packages/supervisor/src/turn/repair.ts
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
status=0
"$here/node_modules/.bin/stryker" run "$here/stryker.config.json" "$@" || status=$?
# Copy the report back to the checkout the command was started from.
if [ -n "${TURNWARDEN_NODE22_ORIGIN:-}" ] && [ -d reports/mutation ]; then
  mkdir -p "$TURNWARDEN_NODE22_ORIGIN/reports/mutation"
  cp -r reports/mutation/. "$TURNWARDEN_NODE22_ORIGIN/reports/mutation/"
  echo "mutation: report in $TURNWARDEN_NODE22_ORIGIN/reports/mutation/" >&2
fi
exit "$status"
