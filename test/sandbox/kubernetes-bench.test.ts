/**
 * Bench (issue #34 item 5): the Kubernetes driver's overhead over the bubblewrap driver, against
 * the fixture API server (test/fixtures/kube-apiserver/, where every Pod is itself a bubblewrap
 * sandbox, so the ratio is what the Kubernetes path adds: API round trips, the exec-stream relay).
 * Reports, as ratios kubernetes/bubblewrap: open (create to first answer) and exec (a trivial
 * command, median and p90), plus the API requests and exec streams per workspace. No timing is
 * asserted.
 *
 *   npx vitest run test/sandbox/kubernetes-bench.test.ts                        smoke: 2 opens, 20 execs
 *   ATELIER_BENCH_FULL=1 npx vitest run test/sandbox/kubernetes-bench.test.ts   10 opens, 200 execs
 *
 * Full runs write bench/data/kubernetes-driver.json. Needs root and a build (npx tsc -p .).
 */
import { mkdirSync, mkdtempSync, chmodSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { KubernetesExecutor } from '../../src/sandbox/kubernetes/index.js';
import { ExecRelay } from '../../src/sandbox/kubernetes/relay.js';
import type { Executor, SandboxSpec } from '../../src/sandbox/executor.js';
import { startKubeApiServer } from '../fixtures/kube-apiserver/index.js';

const FULL = process.env.ATELIER_BENCH_FULL === '1';
const OPENS = FULL ? 10 : 2;
const EXECS = FULL ? 200 : 20;
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

describe.skipIf(!isRoot)('kubernetes driver overhead over bubblewrap (fixture API server)', () => {
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
      const perWorkspace: Record<string, number> = {};
      for (const [k, v] of api.requests) {
        const d = v - (before.get(k) ?? 0);
        if (d > 0) perWorkspace[k] = Math.round((d / OPENS) * 10) / 10;
      }
      await kube.close();
      const med = (xs: number[]) => pct(xs, 0.5);
      const result = {
        mode: FULL ? 'full' : 'smoke',
        opens: OPENS,
        execs: EXECS,
        bubblewrap: { openMedianMs: med(bubble.open), execMedianMs: med(bubble.exec), execP90Ms: pct(bubble.exec, 0.9) },
        kubernetes: { openMedianMs: med(k8s.open), execMedianMs: med(k8s.exec), execP90Ms: pct(k8s.exec, 0.9) },
        ratios: { open: med(k8s.open) / med(bubble.open), execMedian: med(k8s.exec) / med(bubble.exec), execP90: pct(k8s.exec, 0.9) / pct(bubble.exec, 0.9) },
        apiRequestsPerWorkspaceLifecycle: perWorkspace,
        // Held by the runner per remote workspace while it is used: one relay socket, one exec
        // stream (WebSocket) per daemon connection, one DaemonClient.
        execStreamsPerWorkspace: ExecRelay.streamsOpened / OPENS,
      };
      if (FULL) writeFileSync(path.resolve(__dirname, '../../bench/data/kubernetes-driver.json'), JSON.stringify(result, null, 2) + '\n');
      console.log(JSON.stringify(result, null, 2));
      expect(result.ratios.open).toBeGreaterThan(0);
      expect(result.ratios.execMedian).toBeGreaterThan(0);
    } finally {
      await api.close();
      rmSync(base, { recursive: true, force: true });
    }
  }, 600_000);
});
