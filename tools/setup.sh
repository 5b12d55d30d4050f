#!/usr/bin/env bash
# One-step setup for a fresh machine with only Node 20 and npm:
# installs pnpm (pinned) through npx, installs the workspace from the lockfile and builds it.
# Idempotent and quiet when everything is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."
PNPM=(bash tools/pnpm.sh)
# better-sqlite3 builds from source when no prebuilt binary can be downloaded; point node-gyp
# at the local Node headers when the machine has them so it never tries to download them.
if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/node_version.h ]; then
  export npm_config_nodedir=/usr
fi
stamp=node_modules/.turnwarden-setup
if [ ! -f "$stamp" ] || [ pnpm-lock.yaml -nt "$stamp" ]; then
  echo "turnwarden setup: installing dependencies (pnpm, pinned in tools/pnpm.sh)…" >&2
  "${PNPM[@]}" install --frozen-lockfile --reporter=append-only >&2
  touch "$stamp"
fi
echo "turnwarden setup: building packages…" >&2
"${PNPM[@]}" exec turbo run build --output-logs=errors-only >&2
