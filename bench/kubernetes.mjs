// bench/kubernetes: the Kubernetes driver's overhead over the bubblewrap driver (issue #34 item 5),
// against the fixture API server (test/fixtures/kube-apiserver/, where every Pod is itself a
// bubblewrap sandbox, so the ratio is what the Kubernetes path adds: API round trips, the
// exec-stream relay), in the same run: open (create to first answer) and exec (a trivial command,
// median and p90) as ratios kubernetes/bubblewrap, the same opens as agent-sandbox Sandboxes and
// claimed from a warm pool, the API requests per workspace lifecycle, the watches left open, and
// what the runner holds per remote workspace (the driver alone in a child process holding several
// workspaces). No goal: the figures size a cluster (docs/scaling.md).
//
// The measurement lives in test/sandbox/kubernetes-bench.test.ts (it drives the TypeScript fixture
// and the driver under the test runner's transform); this script runs it and prints the figures.
// Smoke mode (--smoke): 2 opens, 20 execs, 2 held workspaces; full: 10, 200, 8, the preview
// relay's throughput and its bound for a client that reads nothing (and writes
// bench/data/kubernetes-driver.json). Needs root and a build (npx tsc -p .).
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT, SMOKE } from './lib.mjs';

const dir = mkdtempSync(join(tmpdir(), 'atelier-kbench-'));
const out = join(dir, 'figures.json');
const env = { ...process.env, ATELIER_BENCH_KUBE: '1', ATELIER_BENCH_KUBE_OUT: out, ...(SMOKE ? {} : { ATELIER_BENCH_FULL: '1' }) };
const run = await new Promise((resolve) => {
  execFile(join(ROOT, 'node_modules/.bin/vitest'), ['run', 'test/sandbox/kubernetes-bench.test.ts'], { cwd: ROOT, env, timeout: 900_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => resolve({ err, log: stdout + stderr }));
});
let r;
try {
  r = JSON.parse(readFileSync(out, 'utf8'));
} catch {
  process.stderr.write(run.log);
  console.error('bench/kubernetes: the measurement wrote no figures (its log is above)');
  process.exit(1);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
const ms = (x) => `${x.toFixed(1)} ms`;
const per = (o) => Object.entries(o).map(([k, v]) => `${k} ${Number(v).toFixed(1)}`).join(', ');
console.log(`bench/kubernetes (node ${process.versions.node}; ${r.mode}: ${r.opens} opens, ${r.execs} execs; fixture API server, each Pod a bubblewrap sandbox)`);
console.log(`open median: kubernetes Pod ${ms(r.kubernetes.openMedianMs)}, agent-sandbox Sandbox ${ms(r.kubernetesSandbox.openMedianMs)}, bubblewrap ${ms(r.bubblewrap.openMedianMs)}; ratio ${r.ratios.open.toFixed(2)}x (Sandbox ${r.ratios.openSandbox.toFixed(2)}x)`);
console.log(`open claimed from a warm pool (--kube-warm-pool): median ${ms(r.kubernetesWarmClaim.openMedianMs)}, ratio ${r.ratios.openWarmClaim.toFixed(2)}x bubblewrap, ${(r.kubernetesWarmClaim.openMedianMs / r.kubernetesSandbox.openMedianMs).toFixed(2)}x a Sandbox of its own (${r.kubernetesWarmClaim.warmLaunches} of ${r.opens} warm)`);
console.log(`exec: median ${ms(r.kubernetes.execMedianMs)} vs ${ms(r.bubblewrap.execMedianMs)}, ratio ${r.ratios.execMedian.toFixed(2)}x; p90 ${ms(r.kubernetes.execP90Ms)} vs ${ms(r.bubblewrap.execP90Ms)}, ratio ${r.ratios.execP90.toFixed(2)}x`);
const total = (o) => Object.values(o).reduce((a, b) => a + Number(b), 0);
console.log(`API requests per workspace lifecycle: Pod path ${total(r.apiRequestsPerWorkspaceLifecycle).toFixed(1)} (${per(r.apiRequestsPerWorkspaceLifecycle)}); Sandbox path ${total(r.apiRequestsPerSandboxWorkspaceLifecycle).toFixed(1)}; watches open after close: ${r.openWatchesAfter}`);
const h = r.runnerHeldPerWorkspace;
if (r.relay) console.log(`preview relay (one exec stream): ${r.relay.throughputMiBps.toFixed(0)} MiB/s to a reading client; a client that reads nothing lets the server write ${r.relay.heldMiBWhenNotRead.toFixed(1)} MiB of 256 (back-pressure)`);
else console.log('preview relay throughput: full runs only');
console.log(`runner holds per remote workspace (${h.workspaces} held): ${(h.heapBytesPerWorkspace / 1024).toFixed(0)} KB heap, ${(h.externalBytesPerWorkspace / 1024).toFixed(0)} KB buffers, ${(h.rssBytesPerWorkspace / 1024).toFixed(0)} KB RSS, ${h.activeHandlesPerWorkspace.toFixed(1)} handles; exec streams per workspace ${r.execStreamsPerWorkspace.toFixed(1)}`);
