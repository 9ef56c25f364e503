/**
 * dependency-access for Kubernetes workspace Pods (src/sandbox/kubernetes/proxy-tunnel.ts): the
 * runner's per-workspace egress proxy (the real one, src/sandbox/egress/server.ts, with a loopback
 * allow list) reached from the Pod at 127.0.0.1:3128 through a long-lived socket tunnel over an
 * exec stream, against the fixture API server (root: each Pod is a bubblewrap sandbox).
 *
 * - Allowed host: the fetch succeeds; another port of the same host is refused by the proxy;
 *   both decisions are the proxy's, recorded for the workspace. The policy stays deny-all.
 * - network none (setNetworkPolicy): nothing listens at 3128 any more; back to
 *   dependency-access: it does again. A first open that fails (3128 held) is said and retried.
 * - The API server drops the tunnel's exec stream: the tunnel is opened again (said in the log).
 * - Hostile (the Pod end is the workspace's to subvert: it runs as the workspace user): a Pod end
 *   writing frames by hand, against the runner end with the plan the workspace tunnel uses: an OPEN
 *   naming any other runner socket is refused, OPENs past the connection cap are refused, and
 *   nothing but the proxy socket is ever connected.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer } from 'node:net';
import { PassThrough } from 'node:stream';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FRAME, frame, MAX_CONNECTIONS } from '../../src/sandbox/daemon/tunnel-frames.js';
import { startEgressProxy, type EgressDecision, type EgressProxy } from '../../src/sandbox/egress.js';
import type { SandboxHandle, SandboxSpec } from '../../src/sandbox/executor.js';
import { KubernetesExecutor } from '../../src/sandbox/kubernetes/index.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';
import { planTunnel, TunnelEnd } from '../../src/sandbox/kubernetes/tunnel.js';
import { startKubeApiServer, type KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { assertDaemonBuilt, isRoot } from './helpers.js';

const LIMITS = { memoryBytes: 512 * 1024 * 1024, pidsMax: 256, cpuQuotaPercent: 100 };

async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function httpServer(body: string): Promise<Server> {
  const s = createServer((_req, res) => res.end(body));
  return new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve(s)));
}

describe('the workspace proxy tunnel lets through its proxy socket and nothing else', () => {
  it('hostile Pod end: an OPEN naming any other runner socket is refused; OPENs past the cap are refused; only the proxy socket is connected', async () => {
    const dir = mkdtempSync('/tmp/atl-kegh-');
    const reached: string[] = [];
    const listen = (name: string) =>
      new Promise<NetServer>((resolve) => {
        const s = createNetServer((c) => (reached.push(name), c.on('error', () => undefined)));
        s.listen(path.join(dir, name), () => resolve(s));
      });
    const servers = [await listen('eg-proxy.sock'), await listen('eg-other.sock'), await listen('relay.sock')];
    try {
      // The plan ProxyTunnel opens with, and a Pod end that writes whatever frames it likes.
      const plan = await planTunnel({ sockets: [], files: [], proxy: { socket: path.join(dir, 'eg-proxy.sock'), port: 3128 } });
      const fromPod = new PassThrough();
      const toPod = new PassThrough();
      toPod.resume();
      const end = new TunnelEnd(fromPod, toPod, plan.targets);
      const tags = ['eg-other.sock', 'relay.sock', path.join(dir, 'eg-other.sock'), '../eg-other.sock', 'proxy/../relay.sock', 's0/relay.sock', 'PROXY', 'proxy '];
      let id = 1;
      for (const tag of tags) fromPod.write(frame(FRAME.OPEN, id++, tag));
      for (let i = 0; i < MAX_CONNECTIONS + 5; i++) fromPod.write(frame(FRAME.OPEN, id++, 'proxy'));
      await until('every OPEN answered', () => end.counters.refusedTag + end.counters.refusedLimit + end.counters.opened === tags.length + MAX_CONNECTIONS + 5, 20_000);
      expect(end.counters).toMatchObject({ refusedTag: tags.length, opened: MAX_CONNECTIONS, refusedLimit: 5 });
      await until('the proxy to see its connections', () => reached.length === MAX_CONNECTIONS, 20_000);
      expect(new Set(reached)).toEqual(new Set(['eg-proxy.sock']));
      end.close();
    } finally {
      for (const s of servers) s.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('its plan: one listener (127.0.0.1:3128 in the Pod), one runner-side target (the workspace\'s proxy socket)', async () => {
    const plan = await planTunnel({ sockets: [], files: [], proxy: { socket: '/data/run/eg-x.sock', port: 3128 } });
    expect(plan.config).toEqual({ listen: [{ tag: 'proxy', port: 3128 }], files: [] });
    expect([...plan.targets]).toEqual([['proxy', '/data/run/eg-x.sock']]);
  });
});

describe.skipIf(!isRoot)('dependency-access in a workspace Pod through the runner\'s egress proxy (fixture API server)', () => {
  let api: KubeApiServer;
  let base: string;
  let ex: KubernetesExecutor;
  let proxy: EgressProxy;
  let allowed: Server;
  let other: Server;
  let h: SandboxHandle;
  let spec: SandboxSpec;
  const decisions: EgressDecision[] = [];
  const notes: string[] = [];
  const port = (s: Server) => (s.address() as AddressInfo).port;
  const fetchIn = (p: number) => `NO_PROXY= no_proxy= curl -sS -p -m 20 -o - -w ' connect=%{http_connect}' http://127.0.0.1:${p}/ 2>&1; echo " rc=$?"`;
  const sh = async (command: string) => (await ex.exec(h, { command, timeoutMs: 60_000 })).stdout;

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer();
    base = mkdtempSync('/tmp/atl-keg-');
    chmodSync(base, 0o711);
    allowed = await httpServer('registry-ok');
    other = await httpServer('must-not-be-reached');
    // The runner's egress proxy as WorkspaceEgress starts it, with an allow list of one loopback host:port.
    proxy = await startEgressProxy({ socketPath: path.join(base, 'eg.sock'), workspaceId: 'ws_KegTest1', rules: [{ host: '127.0.0.1', ports: [port(allowed)], allowPrivate: true }], onDecision: (d) => decisions.push(d), socketMode: 0o600 });
    ex = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'atelier', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run') }, (m) => notes.push(m));
    spec = { id: 'ws_KegTest1', rootDir: path.join(base, 'workspaces', 'ws_KegTest1'), limits: LIMITS, network: { proxySocket: proxy.socketPath } };
    h = await ex.create(spec);
  }, 180_000);
  afterAll(async () => {
    if (h) await ex.destroy(h).catch(() => undefined);
    await ex?.close();
    await proxy?.close();
    allowed?.close();
    other?.close();
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('reaches an allowed host through 127.0.0.1:3128 (the Pod\'s proxy variables); another is refused by the proxy; the policy stays deny-all', async () => {
    expect(await sh('echo "$HTTPS_PROXY $npm_config_proxy"')).toBe('http://127.0.0.1:3128 http://127.0.0.1:3128\n');
    expect(await sh(fetchIn(port(allowed)))).toBe('registry-ok connect=200 rc=0\n');
    const refused = await sh(fetchIn(port(other)));
    expect(refused).toContain('connect=403');
    expect(refused).not.toContain('must-not-be-reached');
    expect(decisions.map((d) => [d.workspaceId, d.port, d.allowed])).toEqual([
      ['ws_KegTest1', port(allowed), true],
      ['ws_KegTest1', port(other), false],
    ]);
    const pol = api.store.get('networkpolicies', 'atelier', objectName(spec.id)) as { spec: { egress: unknown[]; ingress: unknown[] } };
    expect(pol.spec).toMatchObject({ egress: [], ingress: [] });
    expect(ex.proxyTunnel(spec.id)?.current?.counters).toMatchObject({ opened: 2, refusedTag: 0, refusedId: 0, refusedLimit: 0 });
  }, 120_000);

  it('network none: nothing listens at 3128 in the Pod; dependency-access again: it does', async () => {
    await ex.setNetworkPolicy(h, 'none');
    expect(ex.proxyTunnel(spec.id)).toBeUndefined();
    // The tunnel program ends with its stream (bounded wait for the process to go).
    await until('3128 to stop listening', async () => (await sh(fetchIn(port(allowed)))).includes('rc=7'));
    await ex.setNetworkPolicy(h, { proxySocket: proxy.socketPath });
    expect(await sh(fetchIn(port(allowed)))).toBe('registry-ok connect=200 rc=0\n');
  }, 120_000);

  it('a first open that fails (3128 still held in the Pod) does not fail the operation: said, retried, open once 3128 is free', async () => {
    await ex.setNetworkPolicy(h, 'none');
    await until('3128 to stop listening', async () => (await sh(fetchIn(port(allowed)))).includes('rc=7'));
    // Something in the Pod holds 127.0.0.1:3128 (as a previous runner's tunnel program may, for a moment).
    await sh(`setsid node -e "require('net').createServer().listen(3128,'127.0.0.1',()=>require('fs').writeFileSync('/tmp/holder.pid',String(process.pid)))" >/dev/null 2>&1 < /dev/null & for i in $(seq 100); do [ -s /tmp/holder.pid ] && break; sleep 0.1; done; cat /tmp/holder.pid`);
    const seen = notes.length;
    await ex.setNetworkPolicy(h, { proxySocket: proxy.socketPath });
    const t = ex.proxyTunnel(spec.id)!;
    expect(t.current).toBeUndefined();
    expect(notes.slice(seen).join('\n')).toMatch(/egress proxy tunnel of pod atl-\w+ could not be opened .*EADDRINUSE/);
    await sh('kill "$(cat /tmp/holder.pid)"; rm -f /tmp/holder.pid');
    await until('the tunnel to open', () => t.current !== undefined);
    expect(await sh(fetchIn(port(allowed)))).toBe('registry-ok connect=200 rc=0\n');
  }, 120_000);

  it('the API server drops the tunnel\'s exec stream: the tunnel is opened again, said in the log', async () => {
    const t = ex.proxyTunnel(spec.id)!;
    const before = t.opens;
    expect(api.dropExecStreams('atelier', objectName(spec.id), 'tunnel.js')).toBe(1);
    await until('the tunnel to be opened again', () => t.opens === before + 1 && t.current !== undefined);
    expect(notes.join('\n')).toMatch(/egress proxy tunnel of pod atl-\w+ ended .*opening it again/);
    expect(await sh(fetchIn(port(allowed)))).toBe('registry-ok connect=200 rc=0\n');
  }, 120_000);
});
