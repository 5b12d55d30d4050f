#!/usr/bin/env bash
# The whole test suite, as CI runs it: lint → knip → guarantees → typecheck → API report → stress (interleaving harness) → tests (then the supervisor's again on a delayed store and on PostgreSQL).
# With TURNWARDEN_REPEAT_PASS=1 (CI's second pass, on Node 22) only the build, stress and the tests run.
set -euo pipefail
cd "$(dirname "$0")/.."
PATH="$PWD/node_modules/.bin:$PATH"
if [ "${TURNWARDEN_REPEAT_PASS:-0}" != 1 ]; then
  echo "== lint (biome)"
  biome check .
  echo "== unused files, exports and dependencies (knip)"
  knip
  echo "== guarantees (docs/guarantees.md: every promise proven by a named test, lists current)"
  node tools/guarantees.mjs
  echo "== typecheck"
  bash tools/pnpm.sh exec turbo run typecheck --output-logs=errors-only
  echo "== public API report (packages/supervisor/api/supervisor.api.md; after a deliberate change: npm run api)"
  (cd packages/supervisor && api-extractor run >/dev/null 2>&1) || {
    (cd packages/supervisor && api-extractor run 2>&1 | tail -20)
    echo "the public API of @turnwarden/supervisor changed: review it, then npm run api and commit the report" >&2
    exit 1
  }
  echo "== OpenAPI document (docs/openapi.json matches the server's routes; after a change: npm run openapi)"
  node apps/server/scripts/openapi.mjs --check
else
  # The same sources were checked on the first Node; the build above compiled them on this one.
  echo "== lint, knip, guarantees, typecheck, API report, OpenAPI check: skipped (TURNWARDEN_REPEAT_PASS: they ran on the first Node)"
fi
echo "== stress (interleaving harness, bounded budget)"
node apps/cli/dist/main.js stress --seconds "${TURNWARDEN_STRESS_SECONDS:-45}"
echo "== tests (vitest)"
mkdir -p .turbo
vitest run --reporter=default --reporter=json --outputFile.json=.turbo/vitest-report.json "$@"
rm -f .turbo/vitest-delayed-report.json
if [ "${TURNWARDEN_REPEAT_PASS:-0}" != 1 ]; then
  echo "== supervisor tests on a store that delays every write (an asynchronous store)"
  TURNWARDEN_TEST_STORE=delayed vitest run packages/supervisor --reporter=dot \
    --reporter=json --outputFile.json=.turbo/vitest-delayed-report.json
else
  echo "== supervisor tests on a delayed store: skipped (TURNWARDEN_REPEAT_PASS: they ran on the first Node)"
fi
# The supervisor suite on the PostgreSQL store, when a server can be started here.
pg_note="PostgreSQL pass not run"
rm -f .turbo/vitest-postgres-report.json
if [ "${TURNWARDEN_REPEAT_PASS:-0}" != 1 ] && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  echo "== supervisor tests on the PostgreSQL store (one throwaway cluster for the run, a schema per runtime)"
  TURNWARDEN_TEST_STORE=postgres vitest run packages/supervisor --reporter=dot \
    --reporter=json --outputFile.json=.turbo/vitest-postgres-report.json
  pg_note=""
else
  echo "== supervisor tests on the PostgreSQL store: skipped (no server binaries in /usr/lib/postgresql, or TURNWARDEN_REPEAT_PASS)"
fi
# The plain closing line CI reads: "N passed, N failed".
PG_NOTE="$pg_note" node -e '
const fs = require("node:fs");
const read = (f) => (fs.existsSync(f) ? require(f) : { numPassedTests: 0, numFailedTests: 0 });
const a = read("./.turbo/vitest-report.json"), b = read("./.turbo/vitest-delayed-report.json"), c = read("./.turbo/vitest-postgres-report.json");
const pg = process.env.PG_NOTE || `${c.numPassedTests} on the PostgreSQL store`;
const delayed = b.numPassedTests + b.numFailedTests === 0 ? "delayed-store pass not run" : `${b.numPassedTests} of them on the delayed-write store`;
console.log(`vitest: ${a.numPassedTests + b.numPassedTests + c.numPassedTests} passed, ${a.numFailedTests + b.numFailedTests + c.numFailedTests} failed (${delayed}, ${pg})`);'
