// bench/soak: sustained mixed load (issue #35 item 1). Several clients, each on its own workspace,
// do what a coding agent does (files_write, files_read, files_apply_patch, grep_search, exec_run,
// git_status, git_add + git_commit, shell_io input) as fast as the machine answers, for N minutes
// (SOAK_MINUTES, default 20; SOAK_CLIENTS, default 8). Every few seconds it samples each
// workspace daemon's memory (RSS and, from its cgroup, the workspace's memory), the runner's RSS
// and descriptors. Goal: 0 errors, no daemon death (workspace_status sandboxRestarts stays
// absent), daemon and runner memory flat after warm-up (the last fifth's mean over the mean just
// after warm-up, printed as ratios). Smoke mode (--smoke): 3 clients for 12 s, sampled every second. The daemons' memory
// is that of this service's own daemons only (the machine may run others). On a death the
// workspace's sandboxNote (exit signal, last stderr lines, OOM kills) is printed.
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { SMOKE, count, loadGitHost, startAtelierForGitHost } from './lib.mjs';

const CLIENTS = Number(process.env.SOAK_CLIENTS ?? count(8, 3));
const SECONDS = Number(process.env.SOAK_SECONDS ?? (process.env.SOAK_MINUTES ? Number(process.env.SOAK_MINUTES) * 60 : count(20 * 60, 12)));
const SAMPLE_MS = Number(process.env.SOAK_SAMPLE_MS ?? count(10_000, 1_000));
/** Flat: the last fifth's mean memory within this factor of the mean just after warm-up. */
const FLAT = 1.25;

const { startGitHost } = await loadGitHost();
const host = await startGitHost();
const files = {};
for (let i = 0; i < 100; i++) files[`src/mod${i}.ts`] = `export function f${i}(x: number): number {\n  return x + ${i};\n}\n`.repeat(10);
files['README.md'] = '# soak\n';
const { url } = await host.createRepo('approved/soak', files, { commits: 2 });
const svc = await startAtelierForGitHost(host, { sandboxDiskMb: 512 });

// ---- process sampling (this service's daemons only: other services may run on the machine) ----
const status = (pid) => {
  try {
    return readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return '';
  }
};
const field = (text, name) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? NaN);
const ppid = (pid) => field(status(pid), 'PPid');
function descendsFrom(pid, root) {
  for (let p = pid, n = 0; p > 1 && n < 64; p = ppid(p), n++) if (p === root) return true;
  return false;
}
/** The daemons of this service: pid, RSS (KiB) and the cgroup's memory.current (bytes). */
function daemons() {
  const out = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    let cmd;
    try {
      cmd = readFileSync(`/proc/${d}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    // The node process itself (its launcher, setpriv and bwrap carry the same words in their command lines).
    const argv = cmd.split('\0');
    if (!/(^|\/)node$/.test(argv[0]) || !argv.includes('/opt/atelier/daemon/main.js')) continue;
    const pid = Number(d);
    if (!descendsFrom(pid, svc.pid)) continue;
    let cgMem = NaN;
    try {
      const cg = readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n').find((l) => l.startsWith('0::'))?.slice(3);
      if (cg) cgMem = Number(readFileSync(`/sys/fs/cgroup${cg}/memory.current`, 'utf8'));
    } catch {
      // cgroup v1 or gone
    }
    out.push({ pid, rssKb: field(status(pid), 'VmRSS'), cgMem });
  }
  return out;
}
const fds = (pid) => {
  try {
    return readdirSync(`/proc/${pid}/fd`).length;
  } catch {
    return NaN;
  }
};

// ---- clients ----
async function connect() {
  const client = new Client({ name: 'soak', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { authorization: `Bearer ${svc.token}` } } }));
  return client;
}
const calls = new Map(); // tool -> { ok, failed }
const failures = new Map(); // tool: message -> count
let total = 0;
async function call(client, name, args) {
  const c = calls.get(name) ?? { ok: 0, failed: 0 };
  calls.set(name, c);
  total++;
  let r;
  try {
    r = await client.callTool({ name, arguments: args }, undefined, { timeout: 120_000 });
  } catch (err) {
    r = { isError: true, content: [{ type: 'text', text: `transport: ${err?.message ?? err}` }] };
  }
  if (r.isError) {
    c.failed++;
    const key = `${name}: ${String(r.content?.[0]?.text ?? '').slice(0, 160)}`;
    failures.set(key, (failures.get(key) ?? 0) + 1);
    return undefined;
  }
  c.ok++;
  return r.structuredContent ?? JSON.parse(r.content[0].text);
}

/** Opens client i's workspace and shell (before the load starts: opens are not the soak). A refused open is retried (a loaded machine may take longer than a daemon start's 15 s); the retries are printed. */
let openRetries = 0;
async function prepare(i) {
  const client = await connect();
  let ws;
  for (let attempt = 0; attempt < 4 && !ws; attempt++) {
    const r = await client.callTool({ name: 'workspace_open', arguments: { repositoryUrl: url, idempotencyKey: `soak-${i}-${attempt}-${Date.now()}` } }, undefined, { timeout: 180_000 });
    if (!r.isError) ws = r.structuredContent ?? JSON.parse(r.content[0].text);
    else {
      openRetries++;
      console.log(`client ${i}: workspace_open refused (attempt ${attempt + 1}): ${String(r.content?.[0]?.text).slice(0, 200)}`);
    }
  }
  if (!ws) throw new Error(`client ${i}: workspace_open failed 4 times`);
  opened.push({ client, workspaceId: ws.workspaceId });
  const shell = await call(client, 'shell_open', { workspaceId: ws.workspaceId, idempotencyKey: `soak-sh-${i}-${Date.now()}` });
  return { client, workspaceId: ws.workspaceId, shell };
}
const opened = [];
/** Closes every workspace opened (also when the run failed: a workspace left open keeps its disk mounted). */
async function closeAll() {
  for (const o of opened.splice(0)) {
    await o.client.callTool({ name: 'workspace_close', arguments: { workspaceId: o.workspaceId } }, undefined, { timeout: 180_000 }).catch(() => undefined);
    await o.client.close().catch(() => undefined);
  }
}

async function worker(i, deadline, { client, workspaceId, shell }) {
  let cursor;
  let n = 0;
  let version = 0;
  let lastWritten = 'README.md';
  while (Date.now() < deadline) {
    n++;
        switch (n % 10) {
      case 0:
        lastWritten = `work/f${(n / 10) % 16}.ts`;
        await call(client, 'files_write', { workspaceId, path: lastWritten, content: `export const v = ${++version};\n// ${'x'.repeat(n % 2000)}\n` });
        break;
      case 1:
        await call(client, 'files_read', { workspaceId, path: `src/mod${n % 100}.ts` });
        break;
      case 2: {
        const w = await call(client, 'files_write', { workspaceId, path: 'work/patch.ts', content: `export const p = ${n};\n` });
        if (w) await call(client, 'files_apply_patch', { workspaceId, path: 'work/patch.ts', oldText: `p = ${n};`, newText: `p = ${n + 1};` });
        break;
      }
      case 3:
        await call(client, 'grep_search', { workspaceId, pattern: `return x \\+ ${n % 100};`, maxResults: 20 });
        break;
      case 4:
        // Now and then a command that writes a byte at a time (a test runner's dots): many tiny chunks.
        await call(client, 'exec_run', { workspaceId, command: n % 40 === 4 ? 'for i in $(seq 2000); do printf .; done; echo' : `echo run ${n}; ls src | wc -l` });
        break;
      case 5:
        await call(client, 'git_status', { workspaceId });
        break;
      case 6:
        if (n % 50 === 6) {
          await call(client, 'git_add', { workspaceId, all: true });
          await call(client, 'git_commit', { workspaceId, message: `soak ${i} ${n}`, authorName: 'Soak', authorEmail: 'soak@example.com' });
        } else await call(client, 'files_read', { workspaceId, path: lastWritten });
        break;
      default:
        if (shell) {
          const r = await call(client, 'shell_io', { workspaceId, shellId: shell.shellId, input: n % 3 === 0 ? `echo shell ${n}\n` : undefined, cursor, waitMs: 50 });
          if (r) cursor = r.cursor;
        }
    }
  }
  const st = await call(client, 'workspace_status', { workspaceId });
  return { workspaceId, restarts: st?.sandboxRestarts ?? 0, note: st?.sandboxNote };
}

// ---- run ----
const samples = [];
const sample = () => {
  const ds = daemons();
  samples.push({
    t: Date.now(),
    daemons: ds,
    daemonRssKb: ds.reduce((a, d) => a + d.rssKb, 0) / Math.max(1, ds.length),
    daemonMaxRssKb: Math.max(0, ...ds.map((d) => d.rssKb)),
    runnerRssKb: field(status(svc.pid), 'VmRSS'),
    runnerFds: fds(svc.pid),
    calls: total,
  });
};
let results;
let started;
try {
  const prepared = [];
  for (let i = 0; i < CLIENTS; i++) prepared.push(await prepare(i));
  total = 0; // the calls of the load only
  started = Date.now();
  const deadline = started + SECONDS * 1000;
  const timer = setInterval(sample, SAMPLE_MS);
  try {
    results = await Promise.all(prepared.map((p, i) => worker(i, deadline, p)));
  } finally {
    clearInterval(timer);
  }
} catch (err) {
  await closeAll();
  await svc.stop();
  await host.close();
  throw err;
}
await closeAll();
// (No sample after the run: the workers have closed their workspaces by now.)
const wall = (Date.now() - started) / 1000;

// Daemon pids seen over the run: more than one per workspace means one died (or was restarted).
const pidsSeen = new Set(samples.flatMap((s) => s.daemons.map((d) => d.pid)));
const errors = [...calls.values()].reduce((a, c) => a + c.failed, 0);
const restarts = results.reduce((a, r) => a + r.restarts, 0);
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
// Samples once every workspace's daemon runs; of those the first fifth is warm-up. Flat: the last
// fifth against the second fifth.
const ready = samples.filter((s) => s.daemons.length >= CLIENTS);
if (ready.length < 5) throw new Error(`only ${ready.length} memory samples with every daemon running: run longer or sample more often (SOAK_SAMPLE_MS)`);
const fifth = Math.max(1, Math.floor(ready.length / 5));
const early = ready.slice(fifth, 2 * fifth);
const late = ready.slice(-fifth);
const ratio = (k) => mean(late.map((s) => s[k])) / mean(early.map((s) => s[k]));
const mb = (kb) => `${(kb / 1024).toFixed(1)} MiB`;

console.log(`soak: ${CLIENTS} clients, ${wall.toFixed(0)} s, ${total} calls, ${(total / wall).toFixed(0)} calls/s${openRetries ? ` (workspace_open retried ${openRetries} time(s) before the load)` : ''}`);
for (const [name, c] of [...calls.entries()].sort()) console.log(`  ${name.padEnd(18)} ok ${c.ok} failed ${c.failed}`);
for (const [k, v] of failures) console.log(`  failure x${v}: ${k}`);
console.log(`errors: ${errors}; daemon restarts (workspace_status sandboxRestarts): ${restarts}; daemon pids seen: ${pidsSeen.size} (${CLIENTS} workspaces and the spare sandbox)`);
for (const r of results) if (r.restarts) console.log(`  ${r.workspaceId}: ${r.restarts} restart(s); sandboxNote: ${r.note ?? ''}`);
const rD = ratio('daemonRssKb');
const rDmax = ratio('daemonMaxRssKb');
const rR = ratio('runnerRssKb');
const rF = ratio('runnerFds');
console.log(`daemon RSS: mean ${mb(mean(early.map((s) => s.daemonRssKb)))} after warm-up, ${mb(mean(late.map((s) => s.daemonRssKb)))} at the end (ratio ${rD.toFixed(2)}x); largest ${mb(Math.max(...late.map((s) => s.daemonMaxRssKb)))} (ratio ${rDmax.toFixed(2)}x)`);
console.log(`runner RSS: ${mb(mean(early.map((s) => s.runnerRssKb)))} after warm-up, ${mb(mean(late.map((s) => s.runnerRssKb)))} at the end (ratio ${rR.toFixed(2)}x); descriptors ${mean(early.map((s) => s.runnerFds)).toFixed(0)} -> ${mean(late.map((s) => s.runnerFds)).toFixed(0)} (ratio ${rF.toFixed(2)}x)`);
if (process.env.SOAK_TRACE) for (const s of samples) console.log(`  t+${((s.t - started) / 1000).toFixed(0)}s calls ${s.calls} daemons ${s.daemons.map((d) => `${d.pid}:${mb(d.rssKb)}`).join(' ')} runner ${mb(s.runnerRssKb)} fds ${s.runnerFds}`);
const flat = rD <= FLAT && rDmax <= FLAT && rR <= FLAT && rF <= FLAT;
const met = errors === 0 && restarts === 0;
console.log(`goal: 0 errors and no daemon death over ${wall.toFixed(0)} s: ${met ? 'met' : 'NOT met'}; memory flat after warm-up (ratios <= ${FLAT}x): ${flat ? 'met' : 'NOT met'}${SMOKE ? ' (smoke: too short to judge flatness)' : ''}`);

await svc.stop();
await host.close();
process.exit(met ? 0 : 1);
