#!/usr/bin/env bash
# Runs the pinned pnpm: the one on PATH when it is the pinned version, otherwise through npx.
# turbo needs a pnpm binary on PATH to run tasks; running it as `tools/pnpm.sh exec turbo …`
# provides one on a fresh machine that has only Node and npm.
set -euo pipefail
PNPM_VERSION=12.4.2
if command -v pnpm >/dev/null 2>&1 && [ "$(pnpm --version 2>/dev/null)" = "$PNPM_VERSION" ]; then
  exec pnpm "$@"
fi
exec npx --yes "pnpm@$PNPM_VERSION" "$@"
