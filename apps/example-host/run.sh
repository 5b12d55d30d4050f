#!/usr/bin/env bash
# Packs the public packages (@turnwarden/clock, protocol, session, store, supervisor) the way they
# would be published, installs the tarballs into a temporary project with npm — no workspace, no
# links into this repository — and runs host.mjs against them. Part of .ci/run.
#
#   bash apps/example-host/run.sh            # after the packages are built (tools/setup.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/turnwarden-example-host.XXXXXX")
trap 'rm -rf "$work"' EXIT
packages=(clock protocol session store supervisor)
echo "example host: packing ${packages[*]} into $work/tarballs" >&2
mkdir -p "$work/tarballs" "$work/app"
for p in "${packages[@]}"; do
  cp "$root/LICENSE" "$root/packages/$p/LICENSE"
  (cd "$root/packages/$p" && bash "$root/tools/pnpm.sh" pack --pack-destination "$work/tarballs" >/dev/null)
  rm -f "$root/packages/$p/LICENSE"
done
ls "$work/tarballs" >&2
# Each tarball names its siblings by version ("0.1.0"), as published; overrides point npm at the
# tarballs instead of the registry.
node - "$work" "${packages[@]}" <<'JS'
const { readdirSync, writeFileSync } = require('node:fs');
const [work, ...packages] = process.argv.slice(2);
const tarballs = readdirSync(`${work}/tarballs`);
const spec = {};
for (const p of packages) {
  const file = tarballs.find((t) => t.startsWith(`turnwarden-${p}-`));
  if (!file) throw new Error(`no tarball for ${p}`);
  spec[`@turnwarden/${p}`] = `file:../tarballs/${file}`;
}
const pkg = { name: 'example-host', private: true, type: 'module', dependencies: { '@turnwarden/supervisor': spec['@turnwarden/supervisor'] }, overrides: spec };
writeFileSync(`${work}/app/package.json`, JSON.stringify(pkg, null, 2));
JS
cp "$here/host.mjs" "$work/app/host.mjs"
if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/node_version.h ]; then
  export npm_config_nodedir=/usr
fi
echo "example host: npm install (better-sqlite3 may compile)…" >&2
(cd "$work/app" && npm install --no-audit --no-fund --loglevel=error >&2)
# What a host gets: the manifests' files only (no sources, no tests).
if find "$work/app/node_modules/@turnwarden" -name '*.test.*' -o -name 'src' -type d | grep -q .; then
  echo "example host: a package ships sources or tests" >&2
  exit 1
fi
(cd "$work/app" && node host.mjs)
