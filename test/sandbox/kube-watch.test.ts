/**
 * The Kubernetes driver waits on the API server by watching, not polling (issue #34): a Pod
 * becoming Running, a Sandbox's Pod, a Sandbox or Pod being deleted. Against the fixture API
 * server (test/fixtures/kube-apiserver/), whose Pods can be held Pending (runtime.holdStarts(), as
 * on a node pulling the image) so each step is driven by the test, not by timing:
 *
 * - the wait is a `?watch=true` request from the create's resourceVersion (no polling GETs);
 * - a watch answered 410 Gone (the fixture's ERROR event with an Expired Status) and a dropped
 *   watch are followed by a re-list and a new watch, and the create completes;
 * - a bounded wait: a Pod that never runs fails with DEADLINE_EXCEEDED naming the Pod and its last
 *   phase;
 * - no watch stays open after any wait (counted on the server side: zero).
 *
 * Needs root (each Pod is a bubblewrap sandbox) and a build (npx tsc -p .).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubernetesExecutor } from '../../src/sandbox/kubernetes/index.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';
import type { SandboxSpec } from '../../src/sandbox/executor.js';
import { startKubeApiServer, type KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { assertDaemonBuilt, isRoot, until } from './helpers.js';

const LIMITS = { memoryBytes: 512 * 1024 * 1024, pidsMax: 256, cpuQuotaPercent: 100 };

describe.skipIf(!isRoot)('kubernetes driver: watches instead of polling (Pod path)', () => {
  let api: KubeApiServer;
  let base: string;
  const drivers: KubernetesExecutor[] = [];
  const driver = (o: { startTimeoutMs?: number } = {}): KubernetesExecutor => {
    const ex = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'atelier', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, `run${drivers.length}`), ...o });
    drivers.push(ex);
    return ex;
  };
  const spec = (id: string): SandboxSpec => ({ id, rootDir: path.join(base, 'workspaces', id), limits: LIMITS, network: 'none' });
  const count = (k: string): number => api.requests.get(k) ?? 0;

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer();
    base = mkdtempSync('/tmp/atl-k8s-watch-');
  });
  afterAll(async () => {
    api?.runtime.releaseStarts();
    for (const ex of drivers) await ex.close();
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('create watches its Pod from the create answer: one watch request, no polling GETs, nothing left open', async () => {
    const ex = driver();
    const before = { get: count('GET pods'), watch: count('GET pods watch') };
    const h = await ex.create(spec('ws_Watch1'));
    // One GET is the look for an existing Pod before the create; the wait itself is a watch.
    expect(count('GET pods') - before.get).toBe(1);
    expect(count('GET pods watch') - before.watch).toBe(1);
    expect(ex.watchCounters).toMatchObject({ lists: 0, watches: 1, expired: 0, dropped: 0 });
    await until(() => (api.openWatches() === 0 ? true : undefined), 'no open watch');
    expect((await ex.exec(h, { argv: ['echo', 'watched'] })).stdout).toBe('watched\n');
    await ex.destroy(h);
  });

  it('a watch answered 410 Gone, then one dropped, while the Pod is Pending: re-listed and watched again; the create completes', async () => {
    const ex = driver();
    api.runtime.holdStarts();
    const creating = ex.create(spec('ws_Watch2'));
    await until(() => (api.openWatches('pods') === 1 ? true : undefined), 'the driver watching its Pod');
    const lists = count('GET pods');
    expect(api.endWatches('expired', 'pods')).toBe(1);
    // The driver lists again (the version it had may be compacted) and watches from the list's version.
    await until(() => (api.openWatches('pods') === 1 && ex.watchCounters.watches === 2 ? true : undefined), 'a new watch after the 410');
    expect(ex.watchCounters).toMatchObject({ expired: 1, lists: 1 });
    expect(count('GET pods')).toBe(lists + 1);
    expect(api.endWatches('dropped', 'pods')).toBe(1);
    await until(() => (api.openWatches('pods') === 1 && ex.watchCounters.watches === 3 ? true : undefined), 'a new watch after the drop');
    expect(ex.watchCounters).toMatchObject({ expired: 1, dropped: 1, lists: 2 });
    api.runtime.releaseStarts();
    const h = await creating;
    expect((await ex.exec(h, { argv: ['echo', 'survived'] })).stdout).toBe('survived\n');
    await until(() => (api.openWatches() === 0 ? true : undefined), 'no open watch');
    await ex.destroy(h);
  });

  it('the wait is bounded: a Pod that never runs fails with DEADLINE_EXCEEDED naming it and its last phase; no watch stays open', async () => {
    const ex = driver({ startTimeoutMs: 1_500 });
    api.runtime.holdStarts();
    const s = spec('ws_Watch3');
    const name = objectName(s.id);
    try {
      await expect(ex.create(s)).rejects.toMatchObject({ code: 'DEADLINE_EXCEEDED', message: `pod atelier/${name} was not running within 2 s (last phase Pending)`, details: { pod: name, phase: 'Pending' } });
      await until(() => (api.openWatches() === 0 ? true : undefined), 'no open watch');
      await ex.destroy({ id: s.id, socketPath: '', pid: -1 });
      expect(api.store.find('pods', 'atelier', name)).toBeUndefined();
    } finally {
      api.runtime.releaseStarts();
    }
  });

  it('a Pod that fails while watched ends the wait at once with its phase and message', async () => {
    const ex = driver();
    api.runtime.holdStarts();
    const s = spec('ws_Watch4');
    const name = objectName(s.id);
    const creating = ex.create(s);
    await until(() => (api.openWatches('pods') === 1 ? true : undefined), 'the driver watching its Pod');
    api.store.mutate('pods', 'atelier', name, (o) => void (o.status = { phase: 'Failed', message: 'node shut down' }));
    try {
      await expect(creating).rejects.toMatchObject({ code: 'FAILED_PRECONDITION', message: `pod ${name} ended before its daemon answered (Failed: node shut down)` });
      await until(() => (api.openWatches() === 0 ? true : undefined), 'no open watch');
      await ex.destroy({ id: s.id, socketPath: '', pid: -1 });
    } finally {
      api.runtime.releaseStarts();
    }
  });

  it('a Pod still being deleted (a finalizer) is waited for, watched, before its replacement is made', async () => {
    const ex = driver();
    const s = spec('ws_Watch5');
    const name = objectName(s.id);
    // What a runner killed mid-delete leaves: the old Pod, deletionTimestamp set, kept by a finalizer.
    api.store.create('pods', 'atelier', { apiVersion: 'v1', kind: 'Pod', metadata: { name, deletionTimestamp: new Date().toISOString(), finalizers: ['example.com/hold'] } as never, spec: { containers: [{ name: 'main', image: 'x' }] }, status: { phase: 'Running' } });
    const orig = api.store.delete.bind(api.store);
    // The finalizer holds the object through the driver's DELETE; the test removes it later.
    let hold = true;
    api.store.delete = (r, ns, n) => (hold && r === 'pods' && n === name ? (api.store.find(r, ns, n) as never) : orig(r, ns, n));
    try {
      const creating = ex.create(s);
      await until(() => (api.openWatches('pods') === 1 ? true : undefined), 'the driver watching the old Pod go');
      expect(api.store.find('pods', 'atelier', name)?.metadata.deletionTimestamp).toBeDefined();
      hold = false;
      orig('pods', 'atelier', name);
      const h = await creating;
      expect((await ex.exec(h, { argv: ['echo', 'replaced'] })).stdout).toBe('replaced\n');
      await until(() => (api.openWatches() === 0 ? true : undefined), 'no open watch');
      await ex.destroy(h);
    } finally {
      api.store.delete = orig;
    }
  });
});

describe.skipIf(!isRoot)('kubernetes driver: watches instead of polling (agent-sandbox)', () => {
  let api: KubeApiServer;
  let base: string;
  let ex: KubernetesExecutor;

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer({ agentSandbox: true });
    base = mkdtempSync('/tmp/atl-k8s-watchsb-');
    ex = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'default', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run') });
  });
  afterAll(async () => {
    api?.runtime.releaseStarts();
    await ex?.close();
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it("create watches the Sandbox and its Pod (no polling), survives a 410 on both, and leaves no watch open", async () => {
    const s: SandboxSpec = { id: 'ws_WatchSb1', rootDir: path.join(base, 'ws1'), limits: LIMITS, network: 'none' };
    api.runtime.holdStarts();
    const creating = ex.create(s);
    await until(() => (api.openWatches('pods') === 1 && api.openWatches('sandboxes') === 1 ? true : undefined), 'the driver watching the Sandbox and its Pod');
    expect(api.endWatches('expired')).toBe(2);
    await until(() => (api.openWatches('pods') === 1 && api.openWatches('sandboxes') === 1 && ex.watchCounters.watches >= 4 ? true : undefined), 'new watches after the 410s');
    expect(ex.watchCounters.expired).toBe(2);
    api.runtime.releaseStarts();
    const h = await creating;
    expect(h.placement).toMatchObject({ kind: 'kubernetes-sandbox' });
    expect((await ex.exec(h, { argv: ['echo', 'sandboxed'] })).stdout).toBe('sandboxed\n');
    expect(api.requests.get('GET sandboxes watch')).toBeGreaterThanOrEqual(2);
    await until(() => (api.openWatches() === 0 ? true : undefined), 'no open watch');
    await ex.destroy(h);
  });

  it('a Sandbox still being deleted (a finalizer) is waited for, watched, before a new one of that name is made', async () => {
    const s: SandboxSpec = { id: 'ws_WatchSb2', rootDir: path.join(base, 'ws2'), limits: LIMITS, network: 'none' };
    const name = objectName(s.id);
    api.store.create('sandboxes', 'default', { apiVersion: 'agents.x-k8s.io/v1beta1', kind: 'Sandbox', metadata: { name, deletionTimestamp: new Date().toISOString(), finalizers: ['example.com/hold'] } as never, spec: { operatingMode: 'Running' } });
    const creating = ex.create(s);
    await until(() => (api.openWatches('sandboxes') === 1 ? true : undefined), 'the driver watching the old Sandbox go');
    expect(api.store.find('sandboxes', 'default', name)?.metadata.deletionTimestamp).toBeDefined();
    api.store.delete('sandboxes', 'default', name);
    const h = await creating;
    expect(api.store.find('sandboxes', 'default', name)?.metadata.deletionTimestamp).toBeUndefined();
    expect((await ex.exec(h, { argv: ['echo', 'new'] })).stdout).toBe('new\n');
    await until(() => (api.openWatches() === 0 ? true : undefined), 'no open watch');
    await ex.destroy(h);
  });
});
