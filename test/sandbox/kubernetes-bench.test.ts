/**
 * Bench (issue #34 item 5): the Kubernetes driver's overhead over the bubblewrap driver, against
 * the fixture API server (test/fixtures/kube-apiserver/, where every Pod is itself a bubblewrap
 * sandbox, so the ratio is what the Kubernetes path adds: API round trips, the exec-stream relay).
 * Run by bench/kubernetes.mjs (the suite runs its --smoke mode in test/e2e/bench-smoke.test.ts),
 * which sets ATELIER_BENCH_KUBE=1 (the measurement is skipped in a plain `vitest run`, so it runs
 * once per suite) and ATELIER_BENCH_KUBE_OUT, where the figures are written as JSON.
 * Reports, as ratios kubernetes/bubblewrap: open (create to first answer) and exec (a trivial
 * command, median and p90), plus the API requests and exec streams per workspace (on the Pod path
 * and, against a second fixture with agent-sandbox, as a Sandbox), opens claimed from a warm pool
 * (a third fixture: a SandboxWarmPool of one, refilled before each open), the watches left open (0), and
 * what the runner holds per open workspace: the driver alone in a child process (so the fixture's
 * own memory is not counted) holding HOLD workspaces at once, its RSS and heap (after a GC) and
 * its open handles per workspace. No timing is asserted.
 *
 *   node bench/kubernetes.mjs --smoke     2 opens, 20 execs
 *   node bench/kubernetes.mjs             10 opens, 200 execs (ATELIER_BENCH_FULL=1)
 *
 * ATELIER_BENCH_HOLD=N sets how many workspaces the child-process runner holds at once (8 full, 2 smoke).
 * Full runs write bench/data/kubernetes-driver.json. Needs root and a build (npx tsc -p .).
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, chmodSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { KubernetesExecutor } from '../../src/sandbox/kubernetes/index.js';
import { ExecRelay } from '../../src/sandbox/kubernetes/relay.js';
import { sandboxManifest } from '../../src/sandbox/kubernetes/sandbox-objects.js';
import type { Executor, SandboxSpec } from '../../src/sandbox/executor.js';
import { startKubeApiServer } from '../fixtures/kube-apiserver/index.js';

const FULL = process.env.ATELIER_BENCH_FULL === '1';
const OPENS = FULL ? 10 : 2;
const EXECS = FULL ? 200 : 20;
/** Workspaces held open at once by the child-process runner (memory and handles per workspace). */
const HOLD = Number(process.env.ATELIER_BENCH_HOLD) || (FULL ? 8 : 2);
const LIMITS = { memoryBytes: 512 * 1024 * 1024, pidsMax: 256, cpuQuotaPercent: 100 };
const isRoot = process.getuid?.() === 0;

const pct = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]!;

async function measure(ex: Executor, base: string, tag: string): Promise<{ open: number[]; exec: number[] }> {
  const open: number[] = [];
  const exec: number[] = [];
  for (let i = 0; i < OPENS; i++) {
    const spec: SandboxSpec = { id: `bench_${tag}${process.pid}x${i}`, rootDir: path.join(base, 'workspaces', `${tag}${i}`), limits: LIMITS, network: 'none' };
    const t0 = performance.now();
    const h = await ex.create(spec);
    await ex.exec(h, { argv: ['true'] });
    open.push(performance.now() - t0);
    for (let j = 0; j < EXECS / OPENS; j++) {
      const t = performance.now();
      const r = await ex.exec(h, { argv: ['true'] });
      exec.push(performance.now() - t);
      expect(r.exitCode).toBe(0);
    }
    await ex.destroy(h);
  }
  return { open, exec };
}

/**
 * The preview relay over one exec stream (full runs only; issue #42 item 7): MiB/s of 64 MiB from
 * a server in the Pod to a reading client, and how much of 256 MiB a server gets to write to a
 * client that reads nothing (what back-pressure leaves in the buffers between).
 */
async function relayFigures(ex: KubernetesExecutor, base: string): Promise<{ throughputMiBps: number; heldMiBWhenNotRead: number }> {
  const MiB = 1024 * 1024;
  const h = await ex.create({ id: `bench_r${process.pid}`, rootDir: path.join(base, 'workspaces', 'relay'), limits: LIMITS, network: 'none' });
  const server = (port: number, cap: number): string =>
    `nohup node -e "let n=0;setInterval(()=>require('fs').writeFileSync('/tmp/sent-${port}',String(n)),50);require('net').createServer(c=>{c.on('error',()=>{});const b=Buffer.alloc(65536,7);let m=0;const go=()=>{while(m<${cap}){m+=b.length;n+=b.length;if(!c.write(b))return c.once('drain',go)}c.end()};c.once('data',go)}).listen(${port},'127.0.0.1')" >/dev/null 2>&1 &`;
  await ex.exec(h, { command: server(8491, 64 * MiB) + server(8492, 256 * MiB), keepBackground: true });
  const open = async (port: number): Promise<import('node:net').Socket> => {
    for (let i = 0; i < 400; i++) {
      const s = await ex.relay(h, port).catch(() => undefined);
      if (s) return s;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`nothing listens on ${port} in the pod`);
  };
  const fast = await open(8491);
  let got = 0;
  const t0 = performance.now();
  await new Promise<void>((resolve) => {
    fast.on('data', (d: Buffer) => void ((got += d.length) >= 64 * MiB && resolve()));
    fast.resume();
    fast.write('GO');
  });
  const throughputMiBps = 64 / ((performance.now() - t0) / 1000);
  fast.destroy();
  const slow = await open(8492);
  slow.pause();
  slow.write('GO');
  const sent = async (): Promise<number> => Number((await ex.exec(h, { command: 'cat /tmp/sent-8492' })).stdout.trim() || 0);
  let last = -1;
  for (let quiet = 0; quiet < 4; ) {
    await new Promise((r) => setTimeout(r, 500));
    const v = await sent();
    quiet = v === last ? quiet + 1 : 0;
    last = v;
  }
  slow.destroy();
  await ex.destroy(h);
  return { throughputMiBps, heldMiBWhenNotRead: last / MiB };
}

/** API requests counted by the fixture since `before`, per workspace. */
function perWorkspace(now: Map<string, number>, before: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of now) {
    const d = v - (before.get(k) ?? 0);
    if (d > 0) out[k] = Math.round((d / OPENS) * 10) / 10;
  }
  return out;
}

/**
 * The driver alone in a child process (the runner's part: relay sockets, exec streams, daemon
 * clients), holding `n` workspaces at once: RSS, heap + external (after a GC) and active handles
 * per workspace, against a baseline taken after one warm-up workspace (the client loaded).
 */
const HOLD_SCRIPT = `
const [distUrl, kubeconfig, runDir, n] = process.argv.slice(1);
const { KubernetesExecutor } = await import(distUrl);
const ex = new KubernetesExecutor({ kubeconfig, namespace: 'hold', workspaceImage: 'atelier-workspace:bench', runDir });
const limits = { memoryBytes: 512 * 1024 * 1024, pidsMax: 256, cpuQuotaPercent: 100 };
const spec = (i) => ({ id: 'bench_hold' + process.pid + 'x' + i, rootDir: runDir + '/ws' + i, limits, network: 'none' });
const warm = await ex.create(spec('w'));
await ex.exec(warm, { argv: ['true'] });
await ex.destroy(warm);
const sample = () => { globalThis.gc(); globalThis.gc(); const m = process.memoryUsage(); return { rss: m.rss, heap: m.heapUsed, external: m.external, handles: process.getActiveResourcesInfo().length, kinds: process.getActiveResourcesInfo() }; };
const m0 = sample();
const hs = [];
for (let i = 0; i < Number(n); i++) { const h = await ex.create(spec(i)); await ex.exec(h, { argv: ['true'] }); hs.push(h); }
const m1 = sample();
for (const h of hs) await ex.destroy(h);
await ex.close();
const per = (k) => Math.round((m1[k] - m0[k]) / Number(n));
const kinds = {};
for (const k of m1.kinds) kinds[k] = (kinds[k] ?? 0) + 1 / Number(n);
for (const k of m0.kinds) kinds[k] = (kinds[k] ?? 0) - 1 / Number(n);
for (const k of Object.keys(kinds)) if (Math.abs(kinds[k]) < 1e-9) delete kinds[k]; else kinds[k] = Math.round(kinds[k] * 100) / 100;
process.stdout.write(JSON.stringify({ workspaces: Number(n), heapBytesPerWorkspace: per('heap'), externalBytesPerWorkspace: per('external'), rssBytesPerWorkspace: per('rss'), activeHandlesPerWorkspace: (m1.handles - m0.handles) / Number(n), activeHandleKindsPerWorkspace: kinds }));
process.exit(0);
`;

function holdInChild(kubeconfig: string, runDir: string, n: number): Promise<Record<string, number>> {
  const dist = pathToFileURL(path.resolve(__dirname, '../../dist/sandbox/kubernetes/index.js')).href;
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--expose-gc', '--input-type=module', '-e', HOLD_SCRIPT, dist, kubeconfig, runDir, String(n)], { timeout: 480_000, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${err.message}\n${stderr}`));
      resolve(JSON.parse(stdout) as Record<string, number>);
    });
  });
}

describe.skipIf(!isRoot || process.env.ATELIER_BENCH_KUBE !== '1')('kubernetes driver overhead over bubblewrap (fixture API server)', () => {
  it('measures open and exec as ratios, API requests and exec streams per workspace', async () => {
    const base = mkdtempSync('/tmp/atl-kbench-');
    chmodSync(base, 0o711);
    mkdirSync(path.join(base, 'workspaces'), { mode: 0o711 });
    const api = await startKubeApiServer();
    try {
      const bw = api.runtime.executor;
      const bubble = await measure(bw, base, 'b');
      const before = new Map(api.requests);
      const kube = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'bench', workspaceImage: 'atelier-workspace:bench', runDir: path.join(base, 'run') });
      const k8s = await measure(kube, base, 'k');
      const podPath = perWorkspace(api.requests, before);
      const streams = ExecRelay.streamsOpened / OPENS;
      const relay = FULL ? await relayFigures(kube, base) : null;
      await kube.close();
      const openWatchesAfter = api.openWatches();
      const held = await holdInChild(api.kubeconfig, path.join(base, 'hold'), HOLD);
      // The same opens as agent-sandbox Sandboxes, against a fixture that serves the CRDs.
      const sbApi = await startKubeApiServer({ agentSandbox: true });
      let sandboxPath: Record<string, number>;
      let sandboxOpen: number[];
      try {
        const sbBefore = new Map(sbApi.requests);
        const sbKube = new KubernetesExecutor({ kubeconfig: sbApi.kubeconfig, namespace: 'bench', workspaceImage: 'atelier-workspace:bench', runDir: path.join(base, 'run-sb') });
        sandboxOpen = (await measure(sbKube, base, 's')).open;
        sandboxPath = perWorkspace(sbApi.requests, sbBefore);
        await sbKube.close();
        expect(sbApi.openWatches()).toBe(0);
      } finally {
        await sbApi.close();
      }
      // Claims from a warm pool (--kube-warm-pool): each open takes a Sandbox whose Pod runs already
      // (the pool refilled before each open, outside the timing), against the opens above.
      const wpApi = await startKubeApiServer({ agentSandbox: true });
      const warmOpen: number[] = [];
      let warmLaunches = 0;
      try {
        const tpl = sandboxManifest({ name: 'tmpl', id: 'warm-template', version: 'v1beta1', limits: LIMITS, o: { namespace: 'bench', workspaceImage: 'atelier-workspace:bench', runDir: base } });
        const podTemplate = tpl.spec.podTemplate as { metadata: { labels: Record<string, string> } };
        delete podTemplate.metadata.labels['atelier.dev/policy'];
        delete podTemplate.metadata.labels['atelier.dev/workspace'];
        wpApi.store.create('sandboxtemplates', 'bench', { apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxTemplate', metadata: { name: 'warm' }, spec: { podTemplate, volumeClaimTemplates: tpl.spec.volumeClaimTemplates } });
        wpApi.store.create('sandboxwarmpools', 'bench', { apiVersion: 'extensions.agents.x-k8s.io/v1beta1', kind: 'SandboxWarmPool', metadata: { name: 'warm' }, spec: { replicas: 1, sandboxTemplateRef: { name: 'warm' } } });
        const poolReady = async (): Promise<void> => {
          for (let i = 0; i < 1200; i++) {
            const st = (wpApi.store.find('sandboxwarmpools', 'bench', 'warm') as { status?: { readyReplicas?: number } } | undefined)?.status;
            if ((st?.readyReplicas ?? 0) >= 1) return;
            await new Promise((r) => setTimeout(r, 50));
          }
          throw new Error('the warm pool did not refill within 60 s');
        };
        const wpKube = new KubernetesExecutor({ kubeconfig: wpApi.kubeconfig, namespace: 'bench', workspaceImage: 'atelier-workspace:bench', runDir: path.join(base, 'run-wp'), warmPool: 'warm' });
        for (let i = 0; i < OPENS; i++) {
          await poolReady();
          const spec: SandboxSpec = { id: `bench_w${process.pid}x${i}`, rootDir: path.join(base, 'workspaces', `w${i}`), limits: LIMITS, network: 'none' };
          const t0 = performance.now();
          const h = await wpKube.create(spec);
          await wpKube.exec(h, { argv: ['true'] });
          warmOpen.push(performance.now() - t0);
          if (h.placement?.claim?.launch === 'warm') warmLaunches++;
          await wpKube.destroy(h);
        }
        await wpKube.close();
      } finally {
        await wpApi.close();
      }
      const med = (xs: number[]) => pct(xs, 0.5);
      const result = {
        mode: FULL ? 'full' : 'smoke',
        opens: OPENS,
        execs: EXECS,
        bubblewrap: { openMedianMs: med(bubble.open), execMedianMs: med(bubble.exec), execP90Ms: pct(bubble.exec, 0.9) },
        kubernetes: { openMedianMs: med(k8s.open), execMedianMs: med(k8s.exec), execP90Ms: pct(k8s.exec, 0.9) },
        kubernetesSandbox: { openMedianMs: med(sandboxOpen) },
        kubernetesWarmClaim: { openMedianMs: med(warmOpen), warmLaunches },
        ratios: { open: med(k8s.open) / med(bubble.open), openSandbox: med(sandboxOpen) / med(bubble.open), openWarmClaim: med(warmOpen) / med(bubble.open), execMedian: med(k8s.exec) / med(bubble.exec), execP90: pct(k8s.exec, 0.9) / pct(bubble.exec, 0.9) },
        apiRequestsPerWorkspaceLifecycle: podPath,
        apiRequestsPerSandboxWorkspaceLifecycle: sandboxPath,
        openWatchesAfter,
        // Held by the runner per remote workspace while it is used: one relay socket, one exec
        // stream (WebSocket) per daemon connection, one DaemonClient.
        execStreamsPerWorkspace: streams,
        runnerHeldPerWorkspace: held,
        // The preview relay (full runs only): throughput to a reading client, MiB a server wrote to one that reads nothing.
        relay,
      };
      if (FULL) writeFileSync(path.resolve(__dirname, '../../bench/data/kubernetes-driver.json'), JSON.stringify(result, null, 2) + '\n');
      console.log(JSON.stringify(result, null, 2));
      if (process.env.ATELIER_BENCH_KUBE_OUT) writeFileSync(process.env.ATELIER_BENCH_KUBE_OUT, JSON.stringify(result) + '\n');
      expect(result.ratios.open).toBeGreaterThan(0);
      expect(result.ratios.execMedian).toBeGreaterThan(0);
      expect(openWatchesAfter).toBe(0);
    } finally {
      await api.close();
      rmSync(base, { recursive: true, force: true });
    }
  }, 600_000);
});
