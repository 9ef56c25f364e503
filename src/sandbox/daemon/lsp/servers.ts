/**
 * The language servers the daemon knows: which files each serves, how it is started, and whether it
 * can start here. Nothing here runs repository code (docs/code-intelligence.md "What runs"):
 *
 *  - typescript: typescript-language-server over Atelier's own TypeScript 5 (tsserver.js given by
 *    path, never the repository's node_modules/typescript), automatic type acquisition off, no
 *    plugins passed; tsserver resolves tsconfig.json plugins only from its own install location
 *    (/opt/atelier/node_modules, Atelier's read-only packages), never from the project;
 *  - python: pyright-langserver with a PATH holding no interpreter, so it never runs a python
 *    (a pyrightconfig.json venv is only read as directories);
 *  - c/cpp: clangd from the host's /usr, with no --query-driver, project and user config off, and a
 *    compilation database rewritten by the daemon without plugin flags (clangd.ts);
 *  - go: gopls from the host's /usr with GOTOOLCHAIN=local, GOPROXY=off, GOFLAGS=-mod=readonly and
 *    CGO_ENABLED=0 (no toolchain download, no network, no cgo compiler runs).
 *
 * Imports node built-ins and sibling daemon files only.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import type { CodeCustomServer, CodeServerId } from '../protocol.js';

export type ServerId = CodeServerId;

export interface ServerSpec {
  id: ServerId;
  /** Shown to callers: what the server is. */
  title: string;
  /** File extensions (lower case, with the dot) it serves, and the LSP languageId of each. */
  extensions: Record<string, string>;
  /** Runs no repository code (docs/access.md: callers that could not run exec_run may use it). */
  runsNoRepositoryCode: boolean;
  /** Where its program comes from, for the "not installed" answer. */
  source: string;
  /**
   * Its documents are closed after every call (else up to LSP_LIMITS.maxOpenDocs stay open): for a
   * server whose project follows the disk without them and that re-checks every open document after
   * each change it sees, so documents left open cost CPU per document on each write in the
   * workspace (files_write ran 1.27x a twin workspace's with tsserver, 1.07x with pyright); a
   * document opened again is answered from the server's project at once.
   */
  docsClosedAfterCall?: true;
}

export const SERVERS: ServerSpec[] = [
  {
    id: 'typescript',
    title: 'typescript-language-server (TypeScript 5 tsserver)',
    extensions: { '.ts': 'typescript', '.tsx': 'typescriptreact', '.mts': 'typescript', '.cts': 'typescript', '.js': 'javascript', '.jsx': 'javascriptreact', '.mjs': 'javascript', '.cjs': 'javascript' },
    runsNoRepositoryCode: true,
    source: "Atelier's npm dependencies typescript-language-server and typescript (read-only at /opt/atelier/node_modules)",
    // tsserver watches the checkout itself and re-checks every open document (geterr) whenever it updates its project.
    docsClosedAfterCall: true,
  },
  {
    id: 'python',
    title: 'pyright-langserver',
    extensions: { '.py': 'python', '.pyi': 'python' },
    runsNoRepositoryCode: true,
    source: "Atelier's npm dependency pyright (read-only at /opt/atelier/node_modules)",
    // Offered no watched-file registration, pyright watches the checkout too, re-checks every open
    // document after each change and analyses open documents in the background.
    docsClosedAfterCall: true,
  },
  {
    id: 'clangd',
    title: 'clangd',
    extensions: { '.c': 'c', '.h': 'c', '.cc': 'cpp', '.cpp': 'cpp', '.cxx': 'cpp', '.hpp': 'cpp', '.hh': 'cpp', '.hxx': 'cpp' },
    runsNoRepositoryCode: true,
    source: "the host's /usr/bin/clangd (Debian package clangd)",
  },
  {
    id: 'gopls',
    title: 'gopls',
    extensions: { '.go': 'go' },
    // gopls runs the go command (go list), which runs no project code with these settings, but it
    // is a toolchain the repository's go.mod steers: not offered to callers that could not run exec_run.
    runsNoRepositoryCode: false,
    source: "the host's /usr/bin/gopls and /usr/bin/go (Debian packages gopls, golang-go)",
  },
  {
    id: 'bash',
    title: 'bash-language-server',
    extensions: { '.sh': 'shellscript', '.bash': 'shellscript' },
    runsNoRepositoryCode: true,
    source: "the host's /usr/bin/bash-language-server (not shipped with Atelier)",
  },
];

/** The operator's servers (codeIntel.servers in the config file), as the runner last sent them. */
let custom: Array<{ spec: ServerSpec; def: CodeCustomServer }> = [];

const NAME = /^[a-z0-9][a-z0-9-]{0,39}$/;
const EXT = /^\.[A-Za-z0-9_+-]{1,20}$/;

/** Replaces the operator's servers; a malformed entry is left out (the runner checked them at start-up). */
export function setCustomServers(list: unknown): void {
  if (!Array.isArray(list)) return;
  const out: typeof custom = [];
  for (const d of list.slice(0, 20) as CodeCustomServer[]) {
    if (typeof d !== 'object' || d === null || typeof d.name !== 'string' || !NAME.test(d.name)) continue;
    if (typeof d.command !== 'string' || !d.command.startsWith('/') || d.command.includes('\0')) continue;
    if (d.args !== undefined && (!Array.isArray(d.args) || d.args.length > 64 || !d.args.every((a) => typeof a === 'string' && !a.includes('\0')))) continue;
    if (typeof d.extensions !== 'object' || d.extensions === null) continue;
    const extensions: Record<string, string> = {};
    for (const [e, l] of Object.entries(d.extensions)) if (EXT.test(e) && typeof l === 'string' && l.length <= 40) extensions[e.toLowerCase()] = l;
    if (Object.keys(extensions).length === 0) continue;
    out.push({ def: d, spec: { id: `custom:${d.name}`, title: `${d.name} (the operator's ${path.posix.basename(d.command)})`, extensions, runsNoRepositoryCode: d.runsNoRepositoryCode === true, source: `the operator's config file (codeIntel.servers, ${d.command})` } });
  }
  custom = out;
}

/** Every server: the operator's first (their extensions win), then the built-in ones. */
export function allServers(): ServerSpec[] {
  return [...custom.map((c) => c.spec), ...SERVERS];
}

export function serverForPath(rel: string): { spec: ServerSpec; languageId: string } | undefined {
  const ext = path.posix.extname(rel).toLowerCase();
  for (const spec of allServers()) {
    const languageId = spec.extensions[ext];
    if (languageId) return { spec, languageId };
  }
  return undefined;
}

/**
 * Where Atelier's own node_modules are: /opt/atelier/node_modules inside a sandbox (bound
 * read-only, src/sandbox/bwrap/args.ts), else the install's (a daemon run on the host by tests).
 */
export function modulesDir(): string {
  // dist/sandbox/daemon/lsp/servers.js → the install root is four levels up.
  const here = path.dirname(fileURLToPath(import.meta.url));
  const candidates = [path.resolve(here, '../../node_modules'), path.resolve(here, '../../../../node_modules')];
  return candidates.find((d) => existsSync(path.join(d, 'vscode-jsonrpc'))) ?? candidates[0]!;
}

/** The package name TypeScript 5 (the JS tsserver) is installed under (an npm alias; the repository's devDependency typescript is the native 7.x port, which has no tsserver). */
export const TSSERVER_PACKAGE = 'typescript-lsp-tsserver';

export interface Launch {
  command: string;
  args: string[];
  env: Record<string, string>;
  initializationOptions?: unknown;
  /** What workspace/configuration answers, by section. */
  settings: Record<string, unknown>;
}

const BASE_ENV = { LANG: 'C.UTF-8', LC_ALL: 'C.UTF-8', HOME: '/home/user', TMPDIR: '/tmp' };

/** How to start a server here, or why it cannot start ("not installed: ..."). */
export function launchOf(id: ServerId, nodePath: string, home: string): Launch | { missing: string } {
  const mods = modulesDir();
  const env = { ...BASE_ENV, HOME: home };
  if (id.startsWith('custom:')) {
    const c = custom.find((x) => x.spec.id === id);
    if (!c) return { missing: 'the operator no longer configures it' };
    if (!existsSync(c.def.command)) return { missing: `${c.def.command} is not there in this sandbox` };
    for (const lib of ['vscode-jsonrpc', 'vscode-languageserver-protocol']) {
      if (!existsSync(path.join(mods, lib, 'package.json'))) return { missing: `the LSP library ${lib} is not reachable in this sandbox` };
    }
    return { command: c.def.command, args: [...(c.def.args ?? [])], env: { ...env, PATH: '/usr/bin:/bin' }, initializationOptions: c.def.initializationOptions, settings: c.def.settings ?? {} };
  }
  // The daemon speaks LSP with these (a sandbox without Atelier's node_modules, e.g. an image that lacks them, has no server at all).
  for (const lib of ['vscode-jsonrpc', 'vscode-languageserver-protocol']) {
    if (!existsSync(path.join(mods, lib, 'package.json'))) return { missing: `the LSP library ${lib} is not reachable in this sandbox` };
  }
  switch (id) {
    case 'typescript': {
      const cli = path.join(mods, 'typescript-language-server', 'lib', 'cli.mjs');
      const tsserver = path.join(mods, TSSERVER_PACKAGE, 'lib', 'tsserver.js');
      if (!existsSync(cli)) return { missing: `${cli} is not there` };
      if (!existsSync(tsserver)) return { missing: `${tsserver} is not there` };
      return {
        command: nodePath,
        args: [cli, '--stdio'],
        // No npm, no python on PATH: tsserver's typings installer (off anyway) would find nothing to run.
        env: { ...env, PATH: '/nonexistent' },
        initializationOptions: {
          tsserver: { path: tsserver, logVerbosity: 'off', trace: 'off', useSyntaxServer: 'never' },
          disableAutomaticTypingAcquisition: true,
          plugins: [],
          hostInfo: 'atelier',
          maxTsServerMemory: 1024,
          preferences: { includeCompletionsForModuleExports: false, allowRenameOfImportPath: false, providePrefixAndSuffixTextForRename: true },
        },
        settings: {},
      };
    }
    case 'python': {
      const ls = path.join(mods, 'pyright', 'langserver.index.js');
      if (!existsSync(ls)) return { missing: `${ls} is not there` };
      return {
        command: nodePath,
        args: [ls, '--stdio'],
        // No interpreter on PATH: pyright never runs a python to ask for its search paths.
        env: { ...env, PATH: '/nonexistent', PYTHONNOUSERSITE: '1' },
        settings: {
          python: { pythonPath: '/nonexistent/python' },
          'python.analysis': { diagnosticMode: 'openFilesOnly', autoSearchPaths: true, useLibraryCodeForTypes: true, typeCheckingMode: 'standard', logLevel: 'Error' },
          pyright: { disableOrganizeImports: true },
        },
      };
    }
    case 'clangd': {
      if (!existsSync('/usr/bin/clangd')) return { missing: '/usr/bin/clangd is not installed on the host' };
      return {
        command: '/usr/bin/clangd',
        // --compile-commands-dir is added by the manager (the sanitized database, clangd.ts).
        args: ['--enable-config=false', '--background-index=false', '--pch-storage=memory', '--log=error', '-j=1', '--header-insertion=never'],
        env: { ...env, PATH: '/nonexistent', XDG_CONFIG_HOME: '/nonexistent' },
        settings: {},
      };
    }
    case 'gopls': {
      if (!existsSync('/usr/bin/gopls')) return { missing: '/usr/bin/gopls is not installed on the host' };
      return {
        command: '/usr/bin/gopls',
        args: ['serve'],
        env: { ...env, PATH: '/usr/bin:/bin', GOTOOLCHAIN: 'local', GOPROXY: 'off', GOFLAGS: '-mod=readonly', CGO_ENABLED: '0', GONOSUMDB: '*', GOPATH: `${home}/go`, GOCACHE: `${home}/.cache/go-build` },
        settings: { gopls: { 'ui.semanticTokens': false } },
      };
    }
    case 'bash': {
      if (!existsSync('/usr/bin/bash-language-server')) return { missing: '/usr/bin/bash-language-server is not installed on the host' };
      return { command: '/usr/bin/bash-language-server', args: ['start'], env: { ...env, PATH: '/usr/bin:/bin' }, settings: {} };
    }
    default:
      return { missing: `no server ${id}` };
  }
}
