/**
 * Code intelligence (issue #44) through the real service: language servers inside a workspace's
 * sandbox answering code_definition, code_references, code_hover, code_symbols, code_diagnostics
 * and code_rename on a fixture repository (TypeScript, Python, and C when Debian's clangd is
 * installed), by line and column and by symbol; diagnostics after a files_write and after a
 * `git checkout` run by exec_run; a server killed from inside and restarted; hostile repositories
 * (a tsconfig.json plugin, a compile_commands.json loading a plugin, a pyrightconfig.json
 * pointing outside the checkout) proved inert by marker files; narrowed tokens; a fork.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { call, connectV2, httpRequest, ROOT, runCli, type Service } from './harness.js';
import { startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const CLANGD = existsSync('/usr/bin/clangd');

/** The fixture repository: small projects in three languages, and hostile configuration. */
const FILES: Record<string, string> = {
  'tsconfig.json': JSON.stringify({ compilerOptions: { strict: true, target: 'es2022', module: 'commonjs', plugins: [{ name: 'evil-plugin' }] }, include: ['src'] }),
  // A TypeScript server plugin: if tsserver loaded it, it would write a marker file.
  'node_modules/evil-plugin/package.json': JSON.stringify({ name: 'evil-plugin', version: '1.0.0', main: 'index.js' }),
  'node_modules/evil-plugin/index.js': "require('fs').writeFileSync('/workspace/TS_PLUGIN_RAN', 'ran'); module.exports = () => ({ create: (info) => info.languageService });\n",
  // A TypeScript of the repository's own: typescript-language-server would run its tsserver.js if it were not given Atelier's.
  'node_modules/typescript/package.json': JSON.stringify({ name: 'typescript', version: '5.4.0' }),
  'node_modules/typescript/lib/tsserver.js': "require('fs').writeFileSync('/workspace/REPO_TSSERVER_RAN', 'ran'); process.exit(1);\n",
  'src/shapes.ts': 'export interface Shape {\n  area(): number;\n}\n\nexport function makeSquare(side: number): Shape {\n  return { area: () => side * side };\n}\n',
  'src/main.ts':
    "import { makeSquare } from './shapes';\n\n// makeSquare in a comment is not a reference\nconst sq = makeSquare(3);\nconst label = '🎉 ' + String(sq.area());\nexport const total: number = makeSquare(4).area() + sq.area();\nconsole.log(label, total);\n",
  'src/other.ts': "export function makeSquare(): string {\n  return 'same name, another symbol';\n}\n",
  'app/geometry.py': 'def circle_area(r: float) -> float:\n    return 3.14159 * r * r\n',
  'app/main.py': 'from app.geometry import circle_area\nimport extmod\n\nprint(circle_area(2.0))\nprint(extmod.OUTSIDE)\n',
  // Search paths outside the checkout: what pyright finds there must not come back as a host path.
  'pyrightconfig.json': JSON.stringify({ extraPaths: ['/tmp/outside', '../../../../etc'], venvPath: '/tmp', venv: 'nothing' }),
  'c/twice.c': 'int twice(int x) { return 2 * x; }\nint use(void) { return twice(21); }\n',
  'c/evil.c': '#include <stdio.h>\n__attribute__((constructor)) static void ran(void) { FILE *f = fopen("/workspace/CLANG_PLUGIN_RAN", "w"); if (f) { fputs("ran", f); fclose(f); } }\n',
  'compile_commands.json': JSON.stringify([{ directory: '/workspace/c', file: 'twice.c', arguments: ['cc', '-fplugin=/workspace/c/evil.so', '-Xclang', '-load', '-Xclang', '/workspace/c/evil.so', '-c', 'twice.c'] }]),
  'notes.md': '# notes\n',
};

let host: GitHost;
let svc: Service;
let c: Client;
let ws: string;
let repoUrl: string;

async function ok(name: string, args: Record<string, unknown>, client: Client = c): Promise<R> {
  const r = await call(client, name, args, 120_000);
  if (!r.ok) throw new Error(`${name}: ${r.text}`);
  return r.result as R;
}

async function fails(name: string, args: Record<string, unknown>, client: Client = c): Promise<R> {
  const r = await call(client, name, args, 120_000);
  if (r.ok) throw new Error(`${name} succeeded: ${JSON.stringify(r.result).slice(0, 500)}`);
  return r.error as unknown as R;
}

async function sh(command: string, workspaceId = ws): Promise<string> {
  const r = await ok('exec_run', { workspaceId, command, timeoutMs: 60_000 });
  return String(r.stdout);
}

/** No answer may name a host path: the data directory or the install directory. */
function noHostPath(v: unknown): void {
  const text = JSON.stringify(v);
  expect(text).not.toContain(svc.dataDir);
  expect(text).not.toContain(ROOT);
}

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/code-intel', FILES)).url;
  svc = await startWorkspaceService(host, { config: { sandboxMemoryMb: 1536, sandboxPidsMax: 512, sandboxDiskMb: 512, knowledgeEmbeddings: 'off' } });
  c = await connectV2(svc);
  ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'code-intel-open' })).workspaceId as string;
  await sh('mkdir -p /tmp/outside && printf "OUTSIDE = 1\\n" > /tmp/outside/extmod.py');
}, 180_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('positions', { timeout: 240_000 }, () => {
  it('code_definition by line and column and by symbol lands on the declaration, with the line\'s text; columns count code points', async () => {
    // main.ts line 4: "const sq = makeSquare(3);" — makeSquare starts at column 12.
    const byCol = await ok('code_definition', { workspaceId: ws, path: 'src/main.ts', line: 4, column: 12 });
    expect(byCol.server).toBe('typescript');
    expect(byCol.locations).toEqual([{ path: 'src/shapes.ts', range: { start: { line: 5, column: 17 }, end: { line: 5, column: 27 } }, text: 'export function makeSquare(side: number): Shape {' }]);
    const bySym = await ok('code_definition', { workspaceId: ws, path: 'src/main.ts', symbol: 'makeSquare', line: 6 });
    expect(bySym.position).toEqual({ line: 6, column: 30 });
    expect(bySym.locations[0]).toMatchObject({ path: 'src/shapes.ts', range: { start: { line: 5, column: 17 } } });
    // Line 5 has an emoji (two UTF-16 units, one column) before "sq": column 29 is "sq" in code points (30 in UTF-16 units).
    const emoji = await ok('code_definition', { workspaceId: ws, path: 'src/main.ts', line: 5, column: 29 });
    expect(emoji.locations[0]).toMatchObject({ path: 'src/main.ts', range: { start: { line: 4, column: 7 } }, text: 'const sq = makeSquare(3);' });
    // A definition in TypeScript's own lib is outside the workspace, named by Atelier's package, never a host path.
    const lib = await ok('code_definition', { workspaceId: ws, path: 'src/main.ts', symbol: 'String' });
    expect(lib.locations.length).toBeGreaterThan(0);
    expect(lib.locations[0]).toMatchObject({ path: null, outsideWorkspace: true, external: { root: 'atelier' } });
    expect(lib.locations[0].external.path).toMatch(/^typescript-lsp-tsserver\/lib\/lib\..*\.d\.ts$/);
    noHostPath([byCol, bySym, emoji, lib]);
  });

  it('code_references finds the real references (not the comment, not the other makeSquare), paged with a cursor; symbols_references cannot tell them apart', async () => {
    const all = await ok('code_references', { workspaceId: ws, path: 'src/shapes.ts', symbol: 'makeSquare' });
    expect(all.total).toBe(4); // the declaration, the import, two calls
    expect(all.locations.map((l: R) => `${l.path}:${l.range.start.line}`)).toEqual(['src/main.ts:1', 'src/main.ts:4', 'src/main.ts:6', 'src/shapes.ts:5']);
    const noDecl = await ok('code_references', { workspaceId: ws, path: 'src/shapes.ts', symbol: 'makeSquare', includeDeclaration: false });
    expect(noDecl.total).toBe(3);
    const p1 = await ok('code_references', { workspaceId: ws, path: 'src/shapes.ts', symbol: 'makeSquare', maxResults: 3 });
    expect(p1.count).toBe(3);
    expect(p1.nextCursor).toEqual(expect.any(String));
    const p2 = await ok('code_references', { workspaceId: ws, path: 'src/shapes.ts', symbol: 'makeSquare', maxResults: 3, cursor: p1.nextCursor });
    expect(p2.locations.map((l: R) => l.path)).toEqual(['src/shapes.ts']);
    expect(p2.nextCursor).toBeNull();
    const wrong = await fails('code_references', { workspaceId: ws, path: 'src/main.ts', symbol: 'sq', cursor: p1.nextCursor });
    expect(wrong).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'cursor' } });
    const text = await ok('symbols_references', { workspaceId: ws, symbol: 'makeSquare' });
    expect(text.count).toBeGreaterThan(all.total); // the comment and src/other.ts
  });

  it('code_hover gives the type; code_symbols gives a file outline and workspace symbols', async () => {
    const h = await ok('code_hover', { workspaceId: ws, path: 'src/main.ts', symbol: 'total' });
    expect(h.contents).toContain('const total: number');
    const hc = await ok('code_hover', { workspaceId: ws, path: 'src/main.ts', line: 6, column: 14 });
    expect(hc).toMatchObject({ position: { line: 6, column: 14 }, range: { start: { line: 6, column: 14 }, end: { line: 6, column: 19 } } });
    expect(hc.contents).toContain('const total: number');
    const refs = await ok('code_references', { workspaceId: ws, path: 'src/main.ts', line: 4, column: 7 });
    expect(refs.locations.map((l: R) => `${l.range.start.line}:${l.range.start.column}`)).toEqual(['4:7', '5:29', '6:53']);
    const outline = await ok('code_symbols', { workspaceId: ws, path: 'src/shapes.ts' });
    expect(outline.mode).toBe('outline');
    expect(outline.symbols.map((s: R) => `${s.kind}:${s.name}:${s.depth}`)).toEqual(['interface:Shape:0', 'method:area:1', 'function:makeSquare:0', 'method:area:1']);
    const found = await ok('code_symbols', { workspaceId: ws, query: 'makeSq', server: 'typescript' });
    expect(found.symbols.map((s: R) => s.path).sort()).toEqual(['src/other.ts', 'src/shapes.ts']);
  });

  it('python: definition, hover and diagnostics from pyright; a module found through pyrightconfig.json outside the checkout comes back marked, by base name', async () => {
    const d = await ok('code_definition', { workspaceId: ws, path: 'app/main.py', symbol: 'circle_area', line: 4 });
    expect(d.server).toBe('python');
    expect(d.locations[0]).toMatchObject({ path: 'app/geometry.py', range: { start: { line: 1, column: 5 } }, text: 'def circle_area(r: float) -> float:' });
    const h = await ok('code_hover', { workspaceId: ws, path: 'app/main.py', symbol: 'circle_area', line: 4 });
    expect(h.contents).toContain('(r: float) -> float');
    const out = await ok('code_definition', { workspaceId: ws, path: 'app/main.py', symbol: 'OUTSIDE' });
    expect(out.locations[0]).toMatchObject({ path: null, outsideWorkspace: true, external: { root: 'sandbox', path: 'extmod.py' } });
    noHostPath([d, h, out]);
    expect(JSON.stringify(out)).not.toContain('/tmp/outside');
    // pyright's and tsserver's documents are closed after every call (both follow the checkout
    // themselves and re-check every open document after each change: docs/code-intelligence.md).
    await ok('code_hover', { workspaceId: ws, path: 'src/main.ts', line: 1, column: 1 });
    const st = (await ok('code_servers', { workspaceId: ws })).servers as R[];
    expect(st.find((s) => s.server === 'python')).toMatchObject({ state: 'running', openDocuments: 0 });
    expect(st.find((s) => s.server === 'typescript')).toMatchObject({ state: 'running', openDocuments: 0 });
  });

  it.runIf(CLANGD)('C: clangd answers from a compile_commands.json whose plugin flags were dropped; the plugin never loads', async () => {
    await sh('cd c && cc -shared -fPIC -o evil.so evil.c');
    const d = await ok('code_definition', { workspaceId: ws, path: 'c/twice.c', symbol: 'twice', line: 2 });
    expect(d.server).toBe('clangd');
    expect(d.locations[0]).toMatchObject({ path: 'c/twice.c', range: { start: { line: 1, column: 5 } } });
    const diag = await ok('code_diagnostics', { workspaceId: ws, path: 'c/twice.c', waitMs: 10_000 });
    expect(diag.complete).toBe(true);
    const st = await ok('code_servers', { workspaceId: ws });
    expect(st.servers.find((s: R) => s.server === 'clangd')).toMatchObject({ state: 'running', compileDatabase: { source: 'compile_commands.json', entries: 1, removedFlags: 5 } });
    expect(st.servers.find((s: R) => s.server === 'clangd').openDocuments).toBeGreaterThan(0); // clangd's stay open (a closed one is parsed again)
    expect((await sh('ls /workspace/CLANG_PLUGIN_RAN 2>&1 || true')).trim()).toMatch(/No such file/);
  });

  it('refusals name the field and the rule; a file no server serves says which server would and points at symbols_search', async () => {
    expect(await fails('code_definition', { workspaceId: ws, path: 'src/main.ts', line: 400, column: 1 })).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'line' } });
    expect(await fails('code_definition', { workspaceId: ws, path: 'src/main.ts', line: 4, column: 99 })).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'column' } });
    expect(await fails('code_definition', { workspaceId: ws, path: 'src/main.ts', symbol: 'nowhere' })).toMatchObject({ code: 'NOT_FOUND', details: { field: 'symbol' } });
    expect(await fails('code_definition', { workspaceId: ws, path: 'src/main.ts' })).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'symbol' } });
    expect(await fails('code_hover', { workspaceId: ws, path: '../etc/passwd.ts', line: 1, column: 1 })).toMatchObject({ code: 'PERMISSION_DENIED' });
    const none = await fails('code_hover', { workspaceId: ws, path: 'notes.md', line: 1, column: 1 });
    expect(none).toMatchObject({ code: 'FAILED_PRECONDITION', details: { reason: 'no_server', fallback: ['symbols_search', 'symbols_references'] } });
    // A symlink leaving the checkout is refused like any file tool would.
    await sh('ln -sf /etc/hostname src/escape.ts');
    expect(await fails('code_hover', { workspaceId: ws, path: 'src/escape.ts', line: 1, column: 1 })).toMatchObject({ code: 'PERMISSION_DENIED' });
    await sh('rm -f src/escape.ts');
    const huge = await fails('code_hover', { workspaceId: ws, path: 'src/main.ts', symbol: 'x'.repeat(300) });
    expect(huge).toMatchObject({ code: 'INVALID_ARGUMENT' });
    // A file larger than a server is given (2 MiB) is refused naming it; the server stays up.
    await sh('head -c 3000000 /dev/zero | tr "\\0" "a" > big.ts');
    expect(await fails('code_hover', { workspaceId: ws, path: 'big.ts', line: 1, column: 1 })).toMatchObject({ code: 'RESOURCE_EXHAUSTED', details: { field: 'path', path: 'big.ts' } });
    // A workspace-wide call leaves such a file out rather than failing.
    const whole = await ok('code_diagnostics', { workspaceId: ws, waitMs: 10_000, minSeverity: 'error' });
    expect(whole.diagnostics.some((d: R) => d.path === 'big.ts')).toBe(false);
    await sh('rm -f big.ts');
    expect((await ok('code_hover', { workspaceId: ws, path: 'src/main.ts', symbol: 'sq' })).contents).toContain('sq');
  });
});

describe('edits', { timeout: 240_000 }, () => {
  it('diagnostics follow a files_write and a git checkout run by exec_run', async () => {
    const before = await ok('code_diagnostics', { workspaceId: ws, path: 'src/main.ts', waitMs: 10_000 });
    expect(before).toMatchObject({ complete: true, count: 0 });
    const text = String((await ok('files_read', { workspaceId: ws, path: 'src/main.ts' })).content);
    await ok('files_write', { workspaceId: ws, path: 'src/main.ts', content: text.replace('export const total: number =', 'export const total: string =') });
    const broken = await ok('code_diagnostics', { workspaceId: ws, path: 'src/main.ts', waitMs: 10_000 });
    expect(broken.diagnostics).toEqual([expect.objectContaining({ severity: 'error', path: 'src/main.ts', message: "Type 'number' is not assignable to type 'string'.", range: { start: { line: 6, column: 14 }, end: { line: 6, column: 19 } } })]);
    await sh('git checkout -- src/main.ts');
    const fixed = await ok('code_diagnostics', { workspaceId: ws, path: 'src/main.ts', waitMs: 10_000 });
    expect(fixed).toMatchObject({ complete: true, count: 0 });
    // The workspace scope sees every served file (python's unresolved import is not an error here: the search path has it).
    const all = await ok('code_diagnostics', { workspaceId: ws, waitMs: 10_000, minSeverity: 'error' });
    expect(all.scope).toBe('workspace');
    expect(all.servers).toEqual(expect.arrayContaining(['typescript', 'python']));
  });

  it('code_rename previews a diff per file, applies atomically with the hashes, and refuses a stale hash naming the file (nothing written)', async () => {
    const preview = await ok('code_rename', { workspaceId: ws, path: 'src/shapes.ts', symbol: 'makeSquare', newName: 'square' });
    expect(preview.applied).toBe(false);
    expect(preview.files.map((f: R) => f.path)).toEqual(['src/main.ts', 'src/shapes.ts']);
    const shapes = preview.files[1];
    expect(shapes.diff).toContain('-export function makeSquare(side: number): Shape {\n+export function square(side: number): Shape {');
    expect(String((await ok('files_read', { workspaceId: ws, path: 'src/shapes.ts' })).content)).toContain('makeSquare'); // nothing written yet
    const expected = Object.fromEntries(preview.files.map((f: R) => [f.path, f.sha256]));

    // Stale: main.ts changes after the preview.
    const mainText = String((await ok('files_read', { workspaceId: ws, path: 'src/main.ts' })).content);
    await ok('files_write', { workspaceId: ws, path: 'src/main.ts', content: mainText + '// touched\n' });
    const stale = await fails('code_rename', { workspaceId: ws, path: 'src/shapes.ts', symbol: 'makeSquare', newName: 'square', apply: true, expectedSha256: expected });
    expect(stale).toMatchObject({ code: 'CONFLICT', details: { path: 'src/main.ts' } });
    expect(stale.message).toContain('src/main.ts');
    expect(String((await ok('files_read', { workspaceId: ws, path: 'src/shapes.ts' })).content)).toContain('function makeSquare');
    await ok('files_write', { workspaceId: ws, path: 'src/main.ts', content: mainText });

    const applied = await ok('code_rename', { workspaceId: ws, path: 'src/shapes.ts', symbol: 'makeSquare', newName: 'square', apply: true, expectedSha256: expected });
    expect(applied.applied).toBe(true);
    expect(String((await ok('files_read', { workspaceId: ws, path: 'src/shapes.ts' })).content)).toContain('export function square(side: number)');
    const main = String((await ok('files_read', { workspaceId: ws, path: 'src/main.ts' })).content);
    expect(main).toContain("import { square } from './shapes';");
    expect(main).toContain('// makeSquare in a comment'); // the comment is no reference
    expect(String((await ok('files_read', { workspaceId: ws, path: 'src/other.ts' })).content)).toContain('export function makeSquare()');
    // The servers were told: no diagnostics for the renamed code.
    expect(await ok('code_diagnostics', { workspaceId: ws, path: 'src/main.ts', waitMs: 10_000 })).toMatchObject({ complete: true, count: 0 });
    await sh('git checkout -- src && git status --porcelain src');
  });
});

describe('servers', { timeout: 240_000 }, () => {
  it('a language server killed from inside is restarted on the next call, the reason kept', async () => {
    await ok('code_hover', { workspaceId: ws, path: 'src/main.ts', symbol: 'sq' });
    const before = (await ok('code_servers', { workspaceId: ws })).servers.find((s: R) => s.server === 'typescript');
    expect(before.state).toBe('running');
    await sh('pkill -f typescript-language-server');
    const h = await ok('code_hover', { workspaceId: ws, path: 'src/main.ts', symbol: 'sq' });
    expect(h.contents).toContain('const sq: Shape');
    const after = (await ok('code_servers', { workspaceId: ws })).servers.find((s: R) => s.server === 'typescript');
    expect(after).toMatchObject({ state: 'running', restarts: before.restarts + 1, crashesInWindow: before.crashesInWindow + 1, lastExit: { expected: false } });
    expect(after.lastExit.reason).toMatch(/SIGTERM|status/);
    expect(after.pid).not.toBe(before.pid);
    // /metrics counts requests and restarts by language.
    const m = await httpRequest(svc.url, 'GET', '/metrics', { authorization: `Bearer ${svc.token}` });
    expect(m.status).toBe(200);
    expect(Number(/^atelier_code_intel_restarts_total\{server="typescript"\} (\d+)$/m.exec(m.body)?.[1])).toBeGreaterThanOrEqual(1);
    expect(Number(/^atelier_code_intel_requests_total\{server="typescript",outcome="ok"\} (\d+)$/m.exec(m.body)?.[1])).toBeGreaterThan(5);
    expect(m.body).toMatch(/^atelier_code_intel_requests_total\{server="none",outcome="FAILED_PRECONDITION"\} \d+$/m);
  });

  it('no TypeScript plugin from tsconfig.json ran, and the servers run as the workspace user inside its sandbox', async () => {
    expect((await sh('ls /workspace/TS_PLUGIN_RAN 2>&1 || true')).trim()).toMatch(/No such file/);
    expect((await sh('ls /workspace/REPO_TSSERVER_RAN 2>&1 || true')).trim()).toMatch(/No such file/);
    const ps = await sh("ps -eo user:20,args | grep -E 'typescript-language-server|pyright' | grep -v grep || true");
    expect(ps).toMatch(/^user\s/m);
    expect(ps).not.toMatch(/^root/m);
    // Atelier's packages are read-only inside.
    expect((await sh('touch /opt/atelier/node_modules/pyright/x 2>&1 || true'))).toMatch(/Read-only/);
  });
});

describe('access', { timeout: 240_000 }, () => {
  async function tokenClient(...flags: string[]): Promise<Client> {
    const r = await runCli(['token', 'create', '--name', 'code-intel e2e', '--json', ...flags, '--data-dir', svc.dataDir]);
    if (r.code !== 0) throw new Error(r.stderr);
    const t = JSON.parse(r.stdout).token as string;
    const client = new Client({ name: 'code-intel-e2e', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${t}` } } }));
    return client;
  }

  it('a token without the code-intel toolset is refused; one with only lsp (no exec_run) uses the servers that run no repository code', async () => {
    const files = await tokenClient('--toolsets', 'files,workspace');
    expect((await files.listTools()).tools.some((t) => t.name.startsWith('code_'))).toBe(false);
    expect(await fails('code_definition', { workspaceId: ws, path: 'src/main.ts', symbol: 'sq' }, files)).toMatchObject({ code: 'PERMISSION_DENIED' });
    await files.close();
    const lsp = await tokenClient('--toolsets', 'lsp');
    const names = (await lsp.listTools()).tools.map((t) => t.name);
    expect(names.filter((n) => n.startsWith('code_')).sort()).toEqual(['code_definition', 'code_diagnostics', 'code_hover', 'code_references', 'code_rename', 'code_servers', 'code_symbols']);
    expect(names).not.toContain('exec_run');
    const d = await ok('code_definition', { workspaceId: ws, path: 'src/main.ts', symbol: 'sq' }, lsp);
    expect(d.locations[0].path).toBe('src/main.ts');
    const st = await ok('code_servers', { workspaceId: ws }, lsp);
    expect(st.callerMayUse).not.toContain('gopls');
    expect(await fails('code_hover', { workspaceId: ws, path: 'x.go', line: 1, column: 1 }, lsp)).toMatchObject({ code: 'PERMISSION_DENIED', details: { server: 'gopls' } });
    await lsp.close();
  });
});

describe('fork', { timeout: 240_000 }, () => {
  it("a fork's servers answer from the fork's tree", async () => {
    await ok('code_definition', { workspaceId: ws, path: 'src/main.ts', symbol: 'makeSquare', line: 4 });
    const fork = (await ok('workspace_fork', { workspaceId: ws, idempotencyKey: 'code-intel-fork' })).workspaceId as string;
    // In the fork only: the function moves down three lines.
    const shapes = String((await ok('files_read', { workspaceId: fork, path: 'src/shapes.ts' })).content);
    await ok('files_write', { workspaceId: fork, path: 'src/shapes.ts', content: '\n\n\n' + shapes });
    const inFork = await ok('code_definition', { workspaceId: fork, path: 'src/main.ts', symbol: 'makeSquare', line: 4 });
    expect(inFork.locations[0]).toMatchObject({ path: 'src/shapes.ts', range: { start: { line: 8 } } });
    const inSource = await ok('code_definition', { workspaceId: ws, path: 'src/main.ts', symbol: 'makeSquare', line: 4 });
    expect(inSource.locations[0]).toMatchObject({ path: 'src/shapes.ts', range: { start: { line: 5 } } });
    await ok('workspace_close', { workspaceId: fork });
  });
});
