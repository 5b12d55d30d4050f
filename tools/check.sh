#!/usr/bin/env bash
# The whole test suite, as CI runs it: lint → typecheck → tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PATH="$PWD/node_modules/.bin:$PATH"
echo "== lint (biome)"
biome check .
echo "== typecheck"
turbo run typecheck --output-logs=errors-only
echo "== tests (vitest)"
vitest run "$@"
echo "== stress (interleaving harness, bounded budget)"
node apps/cli/dist/main.js stress --seconds "${TURNWARDEN_STRESS_SECONDS:-45}"
