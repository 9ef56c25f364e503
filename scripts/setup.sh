#!/usr/bin/env bash
# Installs whatever is missing for Atelier on Debian 12 (run as root), then builds.
# Safe to run again: it only installs what is absent and rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

need_pkgs=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# xfsprogs: mkfs.xfs for the image pool (copy-on-write checkpoints and forks, docs/checkpoints.md); without it --image-pool auto keeps images in the data directory
for p in bubblewrap bash-static git ripgrep universal-ctags openssl ca-certificates util-linux python3-pip squashfs-tools xfsprogs ${ATELIER_EXTRA_APT:-}; do
  have_pkg "$p" || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${need_pkgs[*]}; run as root or: sudo apt-get install -y ${need_pkgs[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${need_pkgs[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>20||(a===20&&b>=18)?0:1)'; then
  echo "setup: Node.js >= 20.18 is required (found $(node --version 2>/dev/null || echo none))" >&2
  exit 1
fi

# npm dependencies: install when node_modules is missing or was installed from another lockfile.
# Compared by content (a digest written after the install), not by time: a fresh checkout or a
# worktree has a lockfile newer than any install, and a shared (linked) node_modules installed
# from the same lockfile must not be wiped by `npm ci` from another checkout.
lock_digest() { sha256sum "$1" | cut -d' ' -f1; }
installed_from() { [ -f "$2/.atelier-lock.sha256" ] && [ "$(cat "$2/.atelier-lock.sha256")" = "$(lock_digest "$1")" ]; }
if [ ! -f node_modules/.package-lock.json ] || ! installed_from package-lock.json node_modules \
   || [ ! -f node_modules/better-sqlite3/build/Release/better_sqlite3.node ]; then
  echo "setup: installing npm dependencies (better-sqlite3 builds from source, about 90 s)" >&2
  npm ci --no-audit --no-fund --loglevel=error
  lock_digest package-lock.json > node_modules/.atelier-lock.sha256
fi
# Two packages name a `tsc` bin: the compiler (`typescript`, 7.x) and the JavaScript TypeScript whose
# tsserver the TypeScript language server runs (`typescript-lsp-tsserver`, docs/code-intelligence.md).
# npm links whichever it writes last; the build and `npx tsc` must get the compiler.
ln -sfn ../typescript/bin/tsc node_modules/.bin/tsc
# The newest MCP conformance suite and the Node 22 it needs (test/e2e/conformance-next.test.ts): a
# project of its own, so that its `node` binary is not linked into the root's node_modules/.bin,
# where it would run vitest, the service and better-sqlite3's build (docs/clients.md).
if [ ! -f test/conformance-next/node_modules/.package-lock.json ] \
   || ! installed_from test/conformance-next/package-lock.json test/conformance-next/node_modules; then
  echo "setup: installing the MCP conformance suite and its Node 22 (test/conformance-next)" >&2
  npm ci --prefix test/conformance-next --no-audit --no-fund --loglevel=error
  lock_digest test/conformance-next/package-lock.json > test/conformance-next/node_modules/.atelier-lock.sha256
fi
# Third-party MCP clients driven by their own command lines in the tests (test/e2e/clients-*.test.ts):
# the Gemini CLI, opencode (its platform binary is an npm optional dependency) and mcp-remote. A project
# of its own, so that their ~300 MB and their dependencies stay out of the root's `npm ci` (docs/clients.md).
if [ ! -f test/clients/node_modules/.package-lock.json ] \
   || ! installed_from test/clients/package-lock.json test/clients/node_modules; then
  echo "setup: installing the third-party MCP clients the tests drive (test/clients)" >&2
  npm ci --prefix test/clients --no-audit --no-fund --loglevel=error
  lock_digest test/clients/package-lock.json > test/clients/node_modules/.atelier-lock.sha256
fi

# Build when dist/ is missing or any source is newer than the last build.
if [ ! -f dist/.built ] || [ -n "$(find src tsconfig.json package.json -newer dist/.built -print -quit)" ]; then
  echo "setup: building" >&2
  node node_modules/typescript/bin/tsc -p .
  touch dist/.built
fi

# --- sandbox native pieces (issue #12 item 3; src/sandbox/native.ts, docs/sandbox.md "Seccomp") ---
# The seccomp filter (BPF for bwrap --seccomp) and nodump.so (the daemon's PR_SET_DUMPABLE 0), built
# with Debian's gcc and libseccomp into dist/native/<hash>/. Without them the runner builds them on
# first use into <dataDir>/run/, and refuses to start sandboxes when it cannot.
sandbox_native=()
for p in gcc libseccomp-dev; do have_pkg "$p" || sandbox_native+=("$p"); done
if [ ${#sandbox_native[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages for the sandbox's seccomp filter: ${sandbox_native[*]}; run as root" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${sandbox_native[@]}" >/dev/null
fi
node --input-type=module -e 'const m = await import("./dist/sandbox/native.js"); await m.buildNative(m.installNativeDir());'
# --- end sandbox native pieces ---
# The language servers' image (src/sandbox/bwrap/lsp-image.ts, docs/code-intelligence.md): the shipped
# servers reach the daemon's sandbox from a read-only squashfs of their packages, made once per
# install into dist/lsp/ (without it the runner makes one under its run directory on first use).
node --input-type=module -e '
  const m = await import("./dist/sandbox/bwrap/lsp-image.js");
  const { existsSync } = await import("node:fs");
  const { names, key } = m.languageServerPackages();
  const out = m.INSTALL_IMAGE_DIR + key + ".sqfs";
  if (names.length > 0 && !existsSync(out)) await m.makeLanguageServerImage(out);
' || echo "setup: the language servers' image was not made; the runner makes it on first use" >&2
# Large results' escaping addon (src/mcp/wire-native.ts; gcc and Node's own headers): without it they are escaped in JavaScript.
node --input-type=module -e 'const m = await import("./dist/mcp/wire-native.js"); await m.buildWireNative(m.installWireNativeDir());' || echo "setup: the wire-text addon was not built; large results are escaped in JavaScript (slower)" >&2
# Dashboard front end (web/ -> dist/web/, bundled by esbuild; nothing fetched at run time).
if [ ! -f dist/web/app.js ] || [ -n "$(find web scripts/build-web.mjs package.json -newer dist/web/app.js -print -quit)" ]; then
  echo "setup: building the dashboard" >&2
  node scripts/build-web.mjs
fi
