#!/usr/bin/env bash
# Runs a command in a copy of this checkout installed and built with Node 22 — the supported
# line after Node 20's end of life — on a machine whose own Node is 20. Node 22 comes from the
# npm registry (the `node-linux-<arch>` package carries the binary and its headers, so native
# addons such as better-sqlite3 build against it without a download from nodejs.org).
#
#   bash tools/node22.sh npm test          # the whole suite on Node 22
#   bash tools/node22.sh node --version
#
# The copy lives in .cache/node22/work (tracked and untracked files of this checkout, not
# node_modules, dist or caches); it is refreshed on every call and installs incrementally.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
NODE22_VERSION=${TURNWARDEN_NODE22_VERSION:-22.23.3}
case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "node22: unsupported machine $(uname -m)" >&2; exit 2 ;;
esac
cache=${TURNWARDEN_NODE22_DIR:-$root/.cache/node22}
runtime=$cache/runtime/node_modules/node-linux-$arch
if [ ! -x "$runtime/bin/node" ] || [ "$("$runtime/bin/node" --version)" != "v$NODE22_VERSION" ]; then
  echo "node22: installing Node $NODE22_VERSION from the npm registry…" >&2
  mkdir -p "$cache/runtime"
  npm install --prefix "$cache/runtime" --no-save --no-package-lock --no-audit --no-fund \
    "node-linux-$arch@$NODE22_VERSION" >&2
fi

work=$cache/work
mkdir -p "$work"
# Mirror the checkout's files (committed and untracked, minus ignored ones); drop files that
# are gone from it. node_modules, dist and caches in the copy are its own.
(cd "$root" && git ls-files -co --exclude-standard -z) >"$cache/files"
(cd "$root" && tar --null -T "$cache/files" -cf -) | (cd "$work" && tar -xf -)
python3 - "$cache/files" "$work" <<'PY'
import os, sys
keep = set(open(sys.argv[1], 'rb').read().decode().split('\0')) - {''}
work = sys.argv[2]
skip = {'node_modules', 'dist', 'dist-harness', '.turbo', '.stryker-tmp', 'reports', '.cache'}
for dirpath, dirnames, filenames in os.walk(work):
    dirnames[:] = [d for d in dirnames if d not in skip]
    for f in filenames:
        rel = os.path.relpath(os.path.join(dirpath, f), work)
        if rel not in keep and not rel.startswith('node_modules'):
            os.remove(os.path.join(dirpath, f))
PY

export TURNWARDEN_NODE22_ORIGIN="$root"
# The copy is no git checkout, so turbo cannot see which inputs changed: always rebuild.
export TURBO_FORCE=true
export PATH="$runtime/bin:$PATH"
export npm_config_nodedir="$runtime"
cd "$work"
echo "node22: $(node --version) in $work" >&2
bash tools/setup.sh
exec "$@"
