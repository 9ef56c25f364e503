// bench/code-intel (issue #44, "Goals"): the code_* tools on real open-source checkouts, beside
// symbols_search / symbols_references on the same names and the SAME language server binary driven
// directly in the same run (spawned from node_modules or /usr/bin with the daemon's own launch,
// src/sandbox/daemon/lsp/servers.ts launchOf, spoken to with vscode-languageserver-protocol over
// stdio, on the same files). Per project: definition accuracy on the labelled positions
// (bench/data/code-intel-<lang>.json, written by scripts/code-intel-label.mjs), references precision
// and recall against the labelled reference lines, warm code_definition / code_hover p50 and p99
// through MCP and their ratio to the bare server, code_references p50, the first answer after a cold
// start, diagnostics after a files_write introducing a type error, files_write p50 with a server
// running vs without, each server's memory, and the workspace's size back after an idle stop.
// Every figure is printed with its goal and met / NOT met; the bench never fails on a goal.
//
//   ATELIER_BENCH_REPOS=/work/bench-repos node bench/code-intel.mjs
//     (or --repos DIR) DIR holds plain git checkouts ky/, click/, cJSON/ at the commits the labelled
//     sets name (a different commit is measured, and said). Nothing of them is committed here.
//     BENCH_CODE_INTEL_PROJECTS=ky,click to measure only those (the figures file then holds only them).
//   node bench/code-intel.mjs --smoke   a generated TS + Python project, a handful of positions,
//     every measurement path once (the suite: test/e2e/bench-smoke.test.ts).
//   --labels-only (with either): only the labelled sets against the bare servers, no service: each
//     set's definition accuracy with every miss, and each reference name's precision and recall with
//     the lines found and not labelled or labelled and not found (checks scripts/code-intel-label.mjs).
// Full runs write their figures to bench/data/code-intel.json.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { ROOT, SMOKE, count, loadGitHost, median, pct, startAtelierForGitHost } from './lib.mjs';

const argRepos = process.argv.indexOf('--repos');
const REPOS = argRepos > 0 ? process.argv[argRepos + 1] : process.env.ATELIER_BENCH_REPOS;
if (!SMOKE && !REPOS) throw new Error('bench/code-intel: give the checkouts with ATELIER_BENCH_REPOS=DIR or --repos DIR (or run --smoke)');
const IDLE_S = count(45, 5);
const WRITES = count(40, 3);
/** files_write pairs, interleaved between the workspace with servers and its twin without (the goal's figure). */
const WRITE_PAIRS = count(100, 3);
const f = (ms) => (Number.isFinite(ms) ? `${ms.toFixed(1)} ms` : 'n/a');
const verdict = (ok) => (ok ? 'met' : 'NOT met');
const figures = { node: process.versions.node, cpus: availableParallelism(), loadavg: readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' '), projects: {} };

/** The smoke project: TS and Python, with its labelled positions written beside the code. */
const SMOKE_FILES = {
  'tsconfig.json': JSON.stringify({ compilerOptions: { strict: true, target: 'es2022', module: 'commonjs' }, include: ['src'] }),
  'src/shapes.ts': 'export interface Shape {\n  area(): number;\n}\n\nexport function makeSquare(side: number): Shape {\n  return { area: () => side * side };\n}\n\nexport function makeCircle(r: number): Shape {\n  return { area: () => 3.14 * r * r };\n}\n',
  'src/main.ts': "import { makeSquare, makeCircle } from './shapes';\n\n// makeSquare in a comment is not a reference\nconst sq = makeSquare(3);\nconst ci = makeCircle(2);\nexport const total: number = makeSquare(4).area() + sq.area() + ci.area();\n",
  'app/geometry.py': 'def circle_area(r: float) -> float:\n    """circle_area of r"""\n    return 3.14159 * r * r\n\n\ndef square_area(s: float) -> float:\n    return s * s\n',
  'app/main.py': 'from app.geometry import circle_area, square_area\n\n# circle_area in a comment\nprint(circle_area(2.0))\nprint(square_area(3.0) + circle_area(1.0))\n',
};
const SMOKE_SETS = {
  typescript: {
    positions: [
      { path: 'src/main.ts', line: 4, column: 12, symbol: 'makeSquare', expected: { path: 'src/shapes.ts', line: 5 } },
      { path: 'src/main.ts', line: 5, column: 12, symbol: 'makeCircle', expected: { path: 'src/shapes.ts', line: 9 } },
      { path: 'src/main.ts', line: 6, column: 30, symbol: 'makeSquare', expected: { path: 'src/shapes.ts', line: 5 } },
    ],
    references: [{ path: 'src/shapes.ts', line: 5, column: 17, symbol: 'makeSquare', lines: [{ path: 'src/shapes.ts', line: 5 }, { path: 'src/main.ts', line: 1 }, { path: 'src/main.ts', line: 4 }, { path: 'src/main.ts', line: 6 }] }],
  },
  python: {
    positions: [
      { path: 'app/main.py', line: 4, column: 7, symbol: 'circle_area', expected: { path: 'app/geometry.py', line: 1 } },
      { path: 'app/main.py', line: 5, column: 7, symbol: 'square_area', expected: { path: 'app/geometry.py', line: 6 } },
    ],
    references: [{ path: 'app/geometry.py', line: 1, column: 5, symbol: 'circle_area', lines: [{ path: 'app/geometry.py', line: 1 }, { path: 'app/main.py', line: 1 }, { path: 'app/main.py', line: 4 }, { path: 'app/main.py', line: 5 }] }],
  },
};

/** What is measured: per project, its checkout (files), labelled set, server and the edit that breaks its types. */
function projects() {
  const typeError = { typescript: '\nexport const benchTypeError: number = "not a number";\n', python: '\nbench_type_error: int = "not a number"\n', c: '\nint bench_type_error = "not a number";\n' };
  if (SMOKE) {
    return [{ name: 'smoke', files: SMOKE_FILES, commit: 'generated', sets: Object.entries(SMOKE_SETS).map(([lang, s]) => ({ lang, ...s })), edit: [{ lang: 'typescript', path: 'src/main.ts', append: typeError.typescript }, { lang: 'python', path: 'app/main.py', append: typeError.python }] }];
  }
  const out = [];
  // BENCH_CODE_INTEL_PROJECTS=ky,click: only those.
  const only = process.env.BENCH_CODE_INTEL_PROJECTS?.split(',');
  for (const [lang, dir] of [['typescript', 'ky'], ['python', 'click'], ['c', 'cJSON']].filter(([, d]) => !only || only.includes(d))) {
    const set = JSON.parse(readFileSync(join(ROOT, `bench/data/code-intel-${lang}.json`), 'utf8'));
    const root = join(REPOS, dir);
    const commit = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: root }).toString().trim();
    if (commit !== set.commit) console.log(`NOTE ${dir}: checkout at ${commit}, the labelled set was made at ${set.commit}`);
    const files = {};
    // Every tracked file but .gitignore: the git host commits with `git add -A`, which would leave out tracked files the checkout's ignore rules name (cJSON ignores `test`).
    for (const p of execFileSync('git', ['ls-files', '-z'], { cwd: root, maxBuffer: 1 << 26 }).toString().split('\0').filter((x) => x && !/(^|\/)\.gitignore$/.test(x))) {
      try { files[p] = readFileSync(join(root, p)); } catch { /* a submodule or a dangling link: left out */ }
    }
    out.push({ name: dir, root, repository: set.repository, files, commit, sets: [{ lang, positions: set.positions, references: set.references }], edit: [{ lang, path: set.positions[0].path, append: typeError[lang] }] });
  }
  return out;
}

const SERVER = { typescript: 'typescript', python: 'python', c: 'clangd' };
const LANG_ID = { '.ts': 'typescript', '.tsx': 'typescriptreact', '.js': 'javascript', '.mjs': 'javascript', '.py': 'python', '.c': 'c', '.h': 'c' };

/** The same server the daemon starts, driven directly on the host checkout. */
async function bareServer(id, root) {
  const { launchOf } = await import('../dist/sandbox/daemon/lsp/servers.js');
  const m = await import('vscode-languageserver-protocol/node');
  const lsp = m.default ?? m;
  const home = mkdtempSync(join(tmpdir(), 'atelier-bench-lsp-home-'));
  const l = launchOf(id, process.execPath, home);
  if (l.missing) return { missing: l.missing };
  const args = id === 'clangd' ? [...l.args, `--compile-commands-dir=${home}`] : l.args;
  const child = spawn(l.command, args, { cwd: root, env: l.env, stdio: ['pipe', 'pipe', 'ignore'] });
  const conn = lsp.createProtocolConnection(new lsp.StreamMessageReader(child.stdout), new lsp.StreamMessageWriter(child.stdin));
  const section = (s) => s.split('.').reduce((o, k) => (o && typeof o === 'object' ? o[k] : undefined), l.settings) ?? l.settings[s] ?? null;
  conn.onRequest(lsp.ConfigurationRequest.type, (p) => (p.items ?? []).map((i) => (i.section ? section(i.section) : l.settings)));
  conn.onRequest(lsp.WorkDoneProgressCreateRequest.type, () => undefined);
  conn.onRequest(lsp.RegistrationRequest.type, () => undefined);
  conn.onRequest(lsp.WorkspaceFoldersRequest.type, () => [{ uri: pathToFileURL(root).href, name: 'workspace' }]);
  conn.onNotification(() => undefined);
  conn.listen();
  const uri = (p) => pathToFileURL(join(root, p)).href;
  const t0 = performance.now();
  await conn.sendRequest(lsp.InitializeRequest.type, {
    processId: process.pid, rootUri: pathToFileURL(root).href, rootPath: root, workspaceFolders: [{ uri: pathToFileURL(root).href, name: 'workspace' }], initializationOptions: l.initializationOptions ?? null,
    capabilities: { general: { positionEncodings: ['utf-16'] }, workspace: { configuration: true, workspaceFolders: true }, textDocument: { synchronization: {}, definition: { linkSupport: true }, references: {}, hover: { contentFormat: ['markdown', 'plaintext'] }, documentSymbol: { hierarchicalDocumentSymbolSupport: true } }, window: { workDoneProgress: false } },
  });
  await conn.sendNotification(lsp.InitializedNotification.type, {});
  await conn.sendNotification(lsp.DidChangeConfigurationNotification.type, { settings: l.settings });
  const opened = new Set();
  const open = async (p) => {
    if (opened.has(p)) return;
    opened.add(p);
    await conn.sendNotification(lsp.DidOpenTextDocumentNotification.type, { textDocument: { uri: uri(p), languageId: LANG_ID[p.slice(p.lastIndexOf('.'))] ?? 'plaintext', version: 1, text: readFileSync(join(root, p), 'utf8') } });
  };
  // Labelled columns are code points; every labelled line is ASCII up to the name in these sets, so the UTF-16 offset is column - 1 (checked).
  const pos = (p) => {
    const line = readFileSync(join(root, p.path), 'utf8').split('\n')[p.line - 1];
    return { line: p.line - 1, character: Array.from(line).slice(0, p.column - 1).join('').length };
  };
  const ask = async (method, p, extra = {}) => {
    await open(p.path);
    return conn.sendRequest(method, { textDocument: { uri: uri(p.path) }, position: pos(p), ...extra });
  };
  const toLoc = (r) => (r === null || r === undefined ? [] : Array.isArray(r) ? r : [r]).map((x) => ({ path: decodeURIComponent((x.targetUri ?? x.uri).replace(pathToFileURL(root).href + '/', '')), line: (x.targetSelectionRange ?? x.range).start.line + 1 }));
  return {
    pid: child.pid,
    startMs: performance.now() - t0,
    definition: async (p) => toLoc(await ask('textDocument/definition', p)),
    hover: (p) => ask('textDocument/hover', p),
    references: async (p) => toLoc(await ask('textDocument/references', p, { context: { includeDeclaration: true } })),
    async close() {
      try { await Promise.race([conn.sendRequest(lsp.ShutdownRequest.type), new Promise((r) => setTimeout(r, 2000))]); await conn.sendNotification(lsp.ExitNotification.type); } catch { /* gone */ }
      setTimeout(() => child.kill('SIGKILL'), 1000).unref();
      conn.dispose();
      rmSync(home, { recursive: true, force: true });
    },
  };
}

const rssKb = (pid) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
/** A process tree's RSS (kB): a server with its children (tsserver under typescript-language-server). */
function treeRssKb(pid) {
  let kb = 0;
  const walk = (p) => {
    try { kb += rssKb(p); } catch { return; }
    let kids = '';
    try { kids = readFileSync(`/proc/${p}/task/${p}/children`, 'utf8'); } catch { /* none */ }
    for (const k of kids.trim().split(/\s+/).filter(Boolean)) walk(Number(k));
  };
  walk(pid);
  return kb;
}

/** Whether a definition answer lands on the label: expected.line, or any of expected.lines (every line of an overload set, in expected.path) when the set gives them. */
const hit = (locs, e) => locs.some((l) => l.path === e.path && (e.lines ?? [e.line]).includes(l.line));
const lineKey = (l) => `${l.path}:${l.line}`;
function pr(found, labelled) {
  const F = new Set(found.map(lineKey));
  const L = new Set(labelled.map(lineKey));
  const both = [...F].filter((k) => L.has(k)).length;
  return { precision: F.size ? both / F.size : 0, recall: L.size ? both / L.size : 0, found: F.size, labelled: L.size };
}

// --labels-only: the labelled sets against the bare servers alone (no service, no workspace), every
// miss printed: what checks the labeller's rules in a minute or two (scripts/code-intel-label.mjs).
// Figures go to stdout only.
if (process.argv.includes('--labels-only')) {
  for (const p of projects()) {
    const root = p.root ?? mkdtempSync(join(tmpdir(), 'atelier-bench-ci-'));
    if (!p.root) for (const [k, v] of Object.entries(p.files)) { execFileSync('mkdir', ['-p', join(root, k, '..')]); writeFileSync(join(root, k), v); }
    for (const set of p.sets) {
      const bare = await bareServer(SERVER[set.lang], root);
      if (bare.missing) { console.log(`${p.name} ${set.lang}: bare ${SERVER[set.lang]} missing: ${bare.missing}`); continue; }
      let ok = 0;
      const misses = [];
      for (const q of set.positions) {
        const got = await bare.definition(q);
        if (hit(got, q.expected)) ok++;
        else misses.push(`  miss ${q.path}:${q.line}:${q.column} ${q.symbol} labelled ${q.expected.path}:${q.expected.line}${q.expected.lines ? ` (or ${q.expected.lines.join(',')})` : ''} -> ${got.map(lineKey).join(' ') || 'nothing'}`);
      }
      console.log(`${p.name} ${set.lang}: bare ${SERVER[set.lang]} definition accuracy ${(100 * ok / Math.max(1, set.positions.length)).toFixed(1)} % of ${set.positions.length} positions over ${new Set(set.positions.map((q) => q.symbol)).size} names (goal >= 95 %: ${verdict(ok / set.positions.length >= 0.95)}), ${misses.length} misses`);
      for (const m of misses) console.log(m);
      const rs = [];
      for (const r of set.references) {
        const found = await bare.references(r);
        const x = pr(found, r.lines);
        rs.push(x);
        const F = new Set(found.map(lineKey));
        const L = new Set(r.lines.map(lineKey));
        const missed = [...L].filter((k) => !F.has(k));
        const extra = [...F].filter((k) => !L.has(k));
        console.log(`  references ${r.symbol} (${r.path}:${r.line}): precision ${(100 * x.precision).toFixed(1)} % recall ${(100 * x.recall).toFixed(1)} % (${x.found} found, ${x.labelled} labelled)${missed.length ? `; not found: ${missed.join(' ')}` : ''}${extra.length ? `; not labelled: ${extra.join(' ')}` : ''}`);
      }
      const avg = (k) => rs.reduce((a, x) => a + x[k], 0) / Math.max(1, rs.length);
      console.log(`${p.name} ${set.lang}: bare ${SERVER[set.lang]} references over ${rs.length} labelled names: precision ${(100 * avg('precision')).toFixed(1)} % recall ${(100 * avg('recall')).toFixed(1)} %`);
      await bare.close();
    }
    if (!p.root) rmSync(root, { recursive: true, force: true });
  }
  // close() kills a server still there after 1 s: let that run before leaving.
  await new Promise((r) => setTimeout(r, 1500));
  process.exit(0);
}

const { startGitHost } = await loadGitHost();
const host = await startGitHost();
const svc = await startAtelierForGitHost(host, { sandboxMemoryMb: 2048, sandboxPidsMax: 1024, sandboxDiskMb: 2048, knowledgeEmbeddings: 'off', codeIntelIdleSeconds: IDLE_S });
const client = new Client({ name: 'bench', version: '1' });
await client.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { authorization: `Bearer ${svc.token}` } } }));
const tool = async (name, args) => {
  const r = await client.callTool({ name, arguments: args }, undefined, { timeout: 600_000 });
  if (r.isError) throw new Error(`${name}: ${r.content[0].text}`);
  return r.structuredContent ?? JSON.parse(r.content[0].text);
};
const time = async (fn) => {
  const t = performance.now();
  const r = await fn();
  return { ms: performance.now() - t, r };
};
const mcpLocs = (r) => (r.locations ?? []).filter((l) => l.path).map((l) => ({ path: l.path, line: l.range.start.line }));
const pcts = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: s.length ? pct(s, 50) : NaN, p99: s.length ? pct(s, 99) : NaN, n: s.length };
};
/** The sandbox's processes' RSS, MiB (what the workspace holds in memory), from inside, with each process's share (the measuring shell left out). */
async function workspaceRss(ws) {
  const r = await tool('exec_run', { workspaceId: ws, command: "for f in /proc/[0-9]*/status; do case $f in /proc/$$/*) continue;; esac; awk '/^Name/{n=$2} /^VmRSS/{print n, $2}' $f 2>/dev/null; done" });
  const rows = r.stdout.trim().split('\n').map((l) => l.split(' ')).filter(([n]) => n && n !== 'awk');
  const mb = rows.reduce((a, [, kb]) => a + Number(kb), 0) / 1024;
  return { mb, text: rows.map(([n, kb]) => `${n} ${(Number(kb) / 1024).toFixed(1)}`).join(', ') };
}

console.log(`bench/code-intel (node ${process.versions.node}, ${figures.cpus} CPUs, load ${figures.loadavg}${SMOKE ? ', smoke' : ''}; the machine is shared: figures are load-bound)`);
for (const p of projects()) {
  const out = { commit: p.commit, repository: p.repository ?? null, languages: {} };
  figures.projects[p.name] = out;
  const { url } = await host.createRepo(`approved/ci-${p.name}`, p.files);
  const ws = (await tool('workspace_open', { repositoryUrl: url, idempotencyKey: `bench-ci-${p.name}-${Date.now()}` })).workspaceId;
  // A twin of the same repository where no server ever starts: the baseline of files_write, written
  // in turn with the workspace whose servers run, so both see the same minutes of the machine.
  const twin = (await tool('workspace_open', { repositoryUrl: url, idempotencyKey: `bench-ci-twin-${p.name}-${Date.now()}` })).workspaceId;
  console.log(`${p.name}: ${Object.keys(p.files).length} files at ${p.commit}${p.repository ? ` (${p.repository})` : ''}`);
  // files_write with no server running, then the workspace's idle size.
  const scratch = p.sets[0].lang === 'python' ? 'bench_scratch.py' : p.sets[0].lang === 'c' ? 'bench_scratch.c' : 'bench_scratch.ts';
  const writes = async () => {
    const ms = [];
    for (let i = 0; i < WRITES; i++) ms.push((await time(() => tool('files_write', { workspaceId: ws, path: scratch, content: `// ${i}\n` }))).ms);
    return median(ms);
  };
  const writeCold = await writes();
  // The idle size is taken with the text tools warm (symbols_search keeps its ctags index, exec_run
  // its starters), so the difference after the idle stop is what the servers leave behind.
  const name0 = p.sets[0].positions[0].symbol;
  await tool('symbols_search', { workspaceId: ws, query: name0 });
  await tool('symbols_references', { workspaceId: ws, symbol: name0 });
  for (let i = 0; i < 4; i++) await workspaceRss(ws);
  const idle = await workspaceRss(ws);
  const idleMb = idle.mb;
  // The host copy the bare server reads: the checkout itself, or the smoke files written out.
  const root = p.root ?? mkdtempSync(join(tmpdir(), 'atelier-bench-ci-'));
  if (!p.root) for (const [k, v] of Object.entries(p.files)) { execFileSync('mkdir', ['-p', join(root, k, '..')]); writeFileSync(join(root, k), v); }

  for (const set of p.sets) {
    const L = { positions: set.positions.length };
    out.languages[set.lang] = L;
    const server = SERVER[set.lang];
    // Cold start: the first answer through MCP (server start plus indexing).
    const first = set.positions[0];
    const cold = await time(() => tool('code_definition', { workspaceId: ws, path: first.path, line: first.line, column: first.column }));
    L.coldFirstAnswerMs = cold.ms;
    // Accuracy (this pass also opens every file) and symbols_search on the same names.
    let ok = 0;
    let okSym = 0;
    const misses = [];
    for (const q of set.positions) {
      const r = await tool('code_definition', { workspaceId: ws, path: q.path, line: q.line, column: q.column });
      if (hit(mcpLocs(r), q.expected)) ok++;
      else misses.push(`${q.path}:${q.line}:${q.column} ${q.symbol} -> ${mcpLocs(r).map(lineKey).join(' ') || (r.locations?.length ? 'outside the workspace' : 'nothing')}`);
      const s = await tool('symbols_search', { workspaceId: ws, query: q.symbol, maxResults: 100 });
      const exact = (s.symbols ?? []).filter((x) => x.name === q.symbol);
      if (exact.length === 1 && exact[0].file === q.expected.path && exact[0].line === q.expected.line) okSym++;
    }
    L.definitionAccuracy = ok / set.positions.length;
    L.definitionMisses = misses;
    L.symbolsSearchUniqueExact = okSym / set.positions.length;
    // Warm latency through MCP, then the bare server on the same positions (both warm: one pass first).
    const defMs = [];
    const hovMs = [];
    for (const q of set.positions) {
      defMs.push((await time(() => tool('code_definition', { workspaceId: ws, path: q.path, line: q.line, column: q.column }))).ms);
      hovMs.push((await time(() => tool('code_hover', { workspaceId: ws, path: q.path, line: q.line, column: q.column }))).ms);
    }
    const bare = await bareServer(server, root);
    if (!bare.missing) {
      const bdef = [];
      const bhov = [];
      let bok = 0;
      const bcold = await time(() => bare.definition(first));
      for (const q of set.positions) if (hit(await bare.definition(q), q.expected)) bok++;
      for (const q of set.positions) {
        bdef.push((await time(() => bare.definition(q))).ms);
        bhov.push((await time(() => bare.hover(q))).ms);
      }
      L.bare = { firstAnswerMs: bare.startMs + bcold.ms, definitionAccuracy: bok / set.positions.length, definition: pcts(bdef), hover: pcts(bhov), rssMb: treeRssKb(bare.pid) / 1024 };
      for (const r of set.references) r.bareFound = await bare.references(r);
      await bare.close();
    } else L.bare = { missing: bare.missing };
    L.definition = pcts(defMs);
    L.hover = pcts(hovMs);
    // The floor of any call through MCP to this workspace in the same minutes (a trivial tool: the service and the daemon hop, no server).
    const floor = [];
    for (let i = 0; i < Math.min(50, set.positions.length); i++) floor.push((await time(() => tool('workspace_status', { workspaceId: ws }))).ms);
    L.mcpFloor = pcts(floor);
    // References: code_references and symbols_references against the labelled lines.
    const refMs = [];
    L.references = [];
    for (const r of set.references) {
      const t = await time(() => tool('code_references', { workspaceId: ws, path: r.path, line: r.line, column: r.column, maxResults: 500 }));
      refMs.push(t.ms);
      const sr = await tool('symbols_references', { workspaceId: ws, symbol: r.symbol, maxResults: 500 });
      const srLocs = (sr.references ?? []).map((x) => ({ path: x.file, line: x.line }));
      L.references.push({ symbol: r.symbol, code: pr(mcpLocs(t.r), r.lines), symbols: pr(srLocs, r.lines), ...(r.bareFound ? { bare: pr(r.bareFound, r.lines) } : {}) });
    }
    L.referencesMs = pcts(refMs);
    const macro = (k, m) => L.references.reduce((a, x) => a + x[k][m], 0) / Math.max(1, L.references.length);
    L.referencesMacro = { code: { precision: macro('code', 'precision'), recall: macro('code', 'recall') }, symbols: { precision: macro('symbols', 'precision'), recall: macro('symbols', 'recall') } };

    const ratio = (a, b) => (b ? a / b : NaN);
    const jsLike = set.lang === 'typescript';
    console.log(`${p.name} ${set.lang}: definition accuracy ${(L.definitionAccuracy * 100).toFixed(1)} % of ${L.positions} labelled positions (goal >= 95 %): ${verdict(L.definitionAccuracy >= 0.95)}${misses.length ? `; first misses: ${misses.slice(0, 5).join(', ')}` : ''}`);
    console.log(`${p.name} ${set.lang}: beside: symbols_search names the one labelled definition for ${(L.symbolsSearchUniqueExact * 100).toFixed(1)} %${L.bare.definitionAccuracy !== undefined ? `; the bare server lands ${(L.bare.definitionAccuracy * 100).toFixed(1)} %` : ''}`);
    if (L.references.length === 0) console.log(`${p.name} ${set.lang}: references: no labelled names for this language (none reported)`);
    else console.log(`${p.name} ${set.lang}: references over ${L.references.length} labelled names: code_references precision ${(L.referencesMacro.code.precision * 100).toFixed(1)} % recall ${(L.referencesMacro.code.recall * 100).toFixed(1)} %; symbols_references precision ${(L.referencesMacro.symbols.precision * 100).toFixed(1)} % recall ${(L.referencesMacro.symbols.recall * 100).toFixed(1)} % (no goal: reported)`);
    for (const [k, g50, g99] of [['definition', 30, 150], ['hover', 30, 150]]) {
      const m = L[k];
      const b = L.bare[k];
      const r50 = b ? ratio(m.p50, b.p50) : NaN;
      console.log(`${p.name} ${set.lang}: warm code_${k} through MCP p50 ${f(m.p50)} p99 ${f(m.p99)} (n ${m.n}); bare server p50 ${b ? f(b.p50) : 'n/a'} p99 ${b ? f(b.p99) : 'n/a'}; ratio p50 ${r50.toFixed(2)}x (goals p50 <= ${g50} ms: ${verdict(m.p50 <= g50)}, p99 <= ${g99} ms: ${verdict(m.p99 <= g99)}, <= 1.3x bare: ${verdict(r50 <= 1.3)})`);
    }
    console.log(`${p.name} ${set.lang}: the MCP floor in the same run (workspace_status, no server) p50 ${f(L.mcpFloor.p50)} p99 ${f(L.mcpFloor.p99)}: code_definition p50 beyond it ${f(L.definition.p50 - L.mcpFloor.p50)}, code_hover ${f(L.hover.p50 - L.mcpFloor.p50)}`);
    console.log(`${p.name} ${set.lang}: code_references p50 ${f(L.referencesMs.p50)} (n ${L.referencesMs.n})${jsLike ? ` (goal <= 300 ms on the JavaScript project: ${verdict(L.referencesMs.p50 <= 300)})` : ' (no goal here)'}`);
    console.log(`${p.name} ${set.lang}: first answer after a cold start (server start + indexing) ${f(L.coldFirstAnswerMs)}; bare server ${L.bare.firstAnswerMs !== undefined ? f(L.bare.firstAnswerMs) : 'n/a'}${set.lang !== 'c' ? ` (goal <= 5000 ms: ${verdict(L.coldFirstAnswerMs <= 5000)})` : ' (no goal for C)'}`);
  }

  // Diagnostics after a files_write that breaks the types.
  for (const e of p.edit) {
    const L = out.languages[e.lang];
    const before = (await tool('files_read', { workspaceId: ws, path: e.path, readAll: true })).content;
    const badLine = before.split('\n').length + (before.endsWith('\n') ? 1 : 1);
    const t0 = performance.now();
    await tool('files_write', { workspaceId: ws, path: e.path, content: before + e.append });
    let seen = NaN;
    while (performance.now() - t0 < 15_000) {
      const d = await tool('code_diagnostics', { workspaceId: ws, path: e.path, minSeverity: 'error', waitMs: 2000 });
      if ((d.diagnostics ?? []).some((x) => Math.abs((x.range?.start?.line ?? x.line) - badLine) <= 1)) { seen = performance.now() - t0; break; }
    }
    L.diagnosticsAfterWriteMs = seen;
    console.log(`${p.name} ${e.lang}: diagnostics visible through code_diagnostics after a files_write introducing a type error: ${Number.isNaN(seen) ? 'not within 15 s' : f(seen)} (goal <= 2000 ms: ${verdict(seen <= 2000)})`);
    await tool('files_write', { workspaceId: ws, path: e.path, content: before });
  }
  // files_write with servers running, in turn with the twin that has none; memory per server.
  const writeWarm = await writes();
  const pairWith = [];
  const pairWithout = [];
  for (let i = 0; i < WRITE_PAIRS; i++) {
    const order = i % 2 === 0 ? [ws, twin] : [twin, ws];
    for (const w of order) (w === ws ? pairWith : pairWithout).push((await time(() => tool('files_write', { workspaceId: w, path: scratch, content: `// pair ${i}\n` }))).ms);
  }
  const st = await tool('code_servers', { workspaceId: ws });
  const running = (st.servers ?? []).filter((s) => s.state === 'running' && s.pid);
  const mem = {};
  for (const s of running) {
    const r = await tool('exec_run', { workspaceId: ws, command: `t=0; for p in ${s.pid} $(pgrep -P ${s.pid}) $(for c in $(pgrep -P ${s.pid}); do pgrep -P $c; done); do r=$(awk '/VmRSS/{print $2}' /proc/$p/status 2>/dev/null); t=$((t + \${r:-0})); done; echo $t` });
    mem[s.server] = Number(r.stdout.trim()) / 1024;
  }
  const pw = median(pairWith);
  const po = median(pairWithout);
  out.filesWriteP50 = { withServer: pw, withoutServer: po, ratio: pw / po, pairs: WRITE_PAIRS, sameWorkspaceBefore: writeCold, sameWorkspaceAfter: writeWarm };
  out.serverRssMb = mem;
  console.log(`${p.name}: files_write p50 with a server running ${f(pw)} vs without ${f(po)} (its twin workspace, ${WRITE_PAIRS} writes each, in turn): ratio ${(pw / po).toFixed(2)}x (goal within 5 %: ${verdict(pw <= po * 1.05)}); the same workspace before any server ${f(writeCold)}, with servers ${f(writeWarm)}`);
  console.log(`${p.name}: memory per server (RSS of its process tree, from code_servers' pid): ${Object.entries(mem).map(([k, v]) => `${k} ${v.toFixed(1)} MiB`).join(', ') || 'none running'}${Object.values(out.languages).some((l) => l.bare?.rssMb) ? `; bare: ${Object.entries(out.languages).filter(([, l]) => l.bare?.rssMb).map(([k, l]) => `${SERVER[k]} ${l.bare.rssMb.toFixed(1)} MiB`).join(', ')}` : ''}`);
  // Idle stop: wait (no calls) until the servers stop, then the workspace's size again.
  await new Promise((r) => setTimeout(r, (IDLE_S + 3) * 1000));
  const t0 = performance.now();
  let stopped = false;
  while (!stopped && performance.now() - t0 < 60_000) {
    const s = await tool('code_servers', { workspaceId: ws });
    stopped = !(s.servers ?? []).some((x) => x.state === 'running');
    if (!stopped) await new Promise((r) => setTimeout(r, 1000));
  }
  const after = await workspaceRss(ws);
  const afterMb = after.mb;
  out.idle = { beforeServersMb: idleMb, afterIdleStopMb: afterMb, stopped, before: idle.text, after: after.text };
  console.log(`${p.name}: workspace size (RSS of the sandbox's processes) idle before any server ${idleMb.toFixed(1)} MiB, after the servers' idle stop (${IDLE_S} s, stopped ${stopped}) ${afterMb.toFixed(1)} MiB: ${(afterMb - idleMb).toFixed(1)} MiB (goal within 5 MB: ${verdict(stopped && afterMb - idleMb <= 5)}); processes (MiB) before: ${idle.text}; after: ${after.text}`);
  await tool('workspace_close', { workspaceId: ws });
  await tool('workspace_close', { workspaceId: twin });
  if (!p.root) rmSync(root, { recursive: true, force: true });
  // After every project, so a run that fails later keeps what it measured.
  if (!SMOKE) writeFileSync(join(ROOT, 'bench/data/code-intel.json'), JSON.stringify({ date: new Date().toISOString(), note: 'one run on a shared 2-core machine during a CI run: load-bound', ...figures }, null, 1) + '\n');
}

await client.close();
await svc.stop();
await host.close();
