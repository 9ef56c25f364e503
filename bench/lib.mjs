// Shared helpers for benchmarks: start the real service, percentiles, concurrency runner.
import { execFileSync, spawn } from 'node:child_process';
import { Agent, request } from 'node:http';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const ROOT = new URL('..', import.meta.url).pathname;

/** `--smoke`: tiny counts, a few seconds, so the test suite runs every benchmark and none can rot. */
export const SMOKE = process.argv.includes('--smoke');

/** A count for a full run, or its smoke-mode stand-in. */
export const count = (full, smoke) => (SMOKE ? smoke : full);

export async function startAtelier(args = [], givenDataDir) {
  const dataDir = givenDataDir ?? mkdtempSync(join(tmpdir(), 'atelier-bench-'));
  // BENCH_SERVICE_NODE_ARGS: node flags for the service process (say --cpu-prof --cpu-prof-dir=/tmp/p), for profiling.
  const nodeArgs = (process.env.BENCH_SERVICE_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const proc = spawn(process.execPath, [...nodeArgs, join(ROOT, 'bin/atelier'), 'serve', '--port', '0', '--data-dir', dataDir, '--log-level', 'warn', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
  // A bench that fails half-way (an uncaught error ends it) takes its service with it: a service
  // left running would hold the test run's directory (the suite's last check fails on it).
  const reap = () => proc.kill('SIGKILL');
  process.once('exit', reap);
  proc.once('exit', () => process.removeListener('exit', reap));
  let out = '';
  await new Promise((resolve, reject) => {
    proc.stdout.on('data', (d) => {
      out += d;
      if (/Dashboard:/.test(out)) resolve();
    });
    proc.once('exit', (c) => reject(new Error(`atelier exited ${c}`)));
  });
  const mcpUrl = /MCP URL:\s+(\S+)/.exec(out)[1];
  const token = /Owner token:\s+(atl_\S+)/.exec(out)[1];
  return {
    mcpUrl,
    token,
    dataDir,
    /** The service's process (for cpuMs). */
    pid: proc.pid,
    async stop() {
      proc.kill('SIGTERM');
      await new Promise((r) => proc.once('exit', r));
      // Whatever a stopped service leaves mounted under its data directory (workspace filesystems, the image pool), deepest first.
      const { readFileSync } = await import('node:fs');
      const { spawnSync } = await import('node:child_process');
      const points = readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')[4]).filter((m) => m && m.startsWith(`${dataDir}/`)).sort((a, b) => b.length - a.length);
      for (const m of points) spawnSync('umount', ['-l', m], { stdio: 'ignore' });
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export function pct(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** Runs `fn` `total` times with `concurrency` in flight; returns percentiles, throughput and the sorted latencies (ms). */
export async function measure(fn, { total, concurrency, warmup = SMOKE ? 2 : 50 }) {
  for (let i = 0; i < warmup; i++) await fn();
  const lat = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < total) {
        next++;
        const s = performance.now();
        await fn();
        lat.push(performance.now() - s);
      }
    }),
  );
  const wall = performance.now() - t0;
  lat.sort((a, b) => a - b);
  return { all: lat, p50: pct(lat, 50), p99: pct(lat, 99), rps: (total / wall) * 1000 };
}

export const fmt = (ms) => `${ms.toFixed(3)} ms`;

/** Compiles and imports the HTTPS git host test fixture (TypeScript) for benchmarks. */
export async function loadGitHost() {
  const { execFileSync } = await import('node:child_process');
  const out = join(ROOT, 'bench/.build');
  execFileSync(join(ROOT, 'node_modules/.bin/tsc'), ['--ignoreConfig', '--outDir', out, '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--types', 'node', '--skipLibCheck', '--rootDir', join(ROOT, 'test/fixtures'), join(ROOT, 'test/fixtures/githost.ts')], { stdio: 'inherit' });
  const { writeFileSync } = await import('node:fs');
  writeFileSync(join(out, 'package.json'), '{"type":"module"}');
  return import(join(out, 'githost.js'));
}

/** Compiles and imports the verdaccio registry test fixture (a real npm registry on loopback, TypeScript) for benchmarks. */
export async function loadRegistry() {
  const { execFileSync } = await import('node:child_process');
  const out = join(ROOT, 'bench/.build');
  execFileSync(join(ROOT, 'node_modules/.bin/tsc'), ['--ignoreConfig', '--outDir', out, '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--types', 'node', '--skipLibCheck', '--rootDir', join(ROOT, 'test/fixtures'), join(ROOT, 'test/fixtures/verdaccio.ts')], { stdio: 'inherit' });
  const { writeFileSync } = await import('node:fs');
  writeFileSync(join(out, 'package.json'), '{"type":"module"}');
  return import(join(out, 'verdaccio.js'));
}

export function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

/**
 * Starts the service configured as an operator would for a loopback git host: the repositories
 * under approved/ allowed, the host's CA trusted, and its token given to the credential broker
 * through `atelier credentials add-token` (the only way credentials are configured).
 */
export async function startAtelierForGitHost(host, config = {}) {
  const { execFileSync } = await import('node:child_process');
  const { writeFileSync } = await import('node:fs');
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-bench-'));
  writeFileSync(join(dataDir, 'config.json'), JSON.stringify({
    repositories: { allow: [`${host.url}/approved/*`], extraCaCertificates: [host.caCertPath] },
    ...config,
  }));
  execFileSync(process.execPath, [join(ROOT, 'bin/atelier'), 'credentials', 'add-token', `${host.url}/`, '--data-dir', dataDir], { input: host.token + '\n', stdio: ['pipe', 'ignore', 'inherit'] });
  return startAtelier([], dataDir);
}

/**
 * A client of the service's /mcp with no client library: JSON-RPC requests POSTed by hand over one
 * kept-alive node:http connection. `post` resolves with the status, the answer's byte count and,
 * unless `keep` is false, its bytes (what the service itself costs, apart from a client's own share).
 */
export function wireClient(svc) {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const headers = { authorization: `Bearer ${svc.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };
  const post = (method, params, keep = true) =>
    new Promise((resolve, reject) => {
      const req = request(svc.mcpUrl, { method: 'POST', agent, headers }, (res) => {
        const chunks = [];
        let bytes = 0;
        res.on('data', (d) => {
          bytes += d.length;
          if (keep) chunks.push(d);
        });
        res.on('end', () => resolve({ status: res.statusCode, bytes, body: keep ? Buffer.concat(chunks) : undefined }));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }));
    });
  return { post, close: () => agent.destroy() };
}

let tickMs;

/**
 * The CPU time a process has used so far (user and system, ms; in clock ticks, 10 ms each here),
 * from /proc/<pid>/stat. Over a few hundred calls it gives the service's CPU per call: the work
 * itself, without the waits for wake-ups that latency includes. Versions compared in one sitting
 * agree within a few percent; across the day it drifts with the machine as latency does (no goal
 * rests on it).
 */
export function cpuMs(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  tickMs ??= 1000 / Number(execFileSync('getconf', ['CLK_TCK']).toString().trim() || 100);
  return { user: Number(f[11]) * tickMs, system: Number(f[12]) * tickMs };
}

/** Makes `calls` calls of `call`, one after another, and returns the process's CPU per call (µs). */
export async function cpuPerCall(pid, calls, call) {
  const a = cpuMs(pid);
  for (let i = 0; i < calls; i++) await call();
  const b = cpuMs(pid);
  const us = (ms) => (ms * 1000) / calls;
  const user = us(b.user - a.user);
  const system = us(b.system - a.system);
  return { user, system, total: user + system, calls };
}

/** cpuPerCall's result as printed. */
export const cpuText = (c) => `${c.total.toFixed(0)} us (user ${c.user.toFixed(0)}, system ${c.system.toFixed(0)}) over ${c.calls} calls`;
