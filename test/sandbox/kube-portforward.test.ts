/**
 * The fixture API server's pods/portforward (test/fixtures/kube-apiserver/portforward.ts) checked
 * by the real kubectl port-forward (SPDY/3.1 tunnelled over a WebSocket, as kubectl 1.31+ speaks
 * it), by @kubernetes/client-node's PortForward (v4.channel.k8s.io framing) and by a raw client
 * reading the framing: the connection reaches a port a process listens on inside the Pod's own
 * network namespace, and nothing of the host. Needs root (each Pod is a bubblewrap sandbox) and a build.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Server } from 'node:net';
import path from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { KubeConfig, PortForward } from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { KubernetesExecutor } from '../../src/sandbox/kubernetes/index.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';
import type { SandboxHandle } from '../../src/sandbox/executor.js';
import { startKubeApiServer, type KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { assertDaemonBuilt, isRoot, until } from './helpers.js';

const LIMITS = { memoryBytes: 512 * 1024 * 1024, pidsMax: 256, cpuQuotaPercent: 100 };
const PORT = 8431;

/** An HTTP/1.0 GET to a local port; the whole answer ('' when the connection closes unanswered). */
function httpGet(port: number): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    s.on('data', (d: Buffer) => chunks.push(d));
    s.on('connect', () => s.write('GET / HTTP/1.0\r\nHost: pf\r\n\r\n'));
    s.on('error', () => undefined);
    s.on('close', () => resolve(Buffer.concat(chunks).toString()));
  });
}

describe.skipIf(!isRoot)('fixture pods/portforward', () => {
  let api: KubeApiServer;
  let base: string;
  let ex: KubernetesExecutor;
  let h: SandboxHandle;
  let pod: string;
  let host: Server;
  let hostPort: number;
  const forwards: ChildProcess[] = [];

  /** kubectl port-forward pod/<pod> :<port>; resolves with the local port once it says "Forwarding from". */
  async function kubectlForward(port: number, env: Record<string, string> = {}): Promise<{ local: number; stderr: () => string }> {
    const child = spawn('kubectl', ['--kubeconfig', api.kubeconfig, 'port-forward', '--address', '127.0.0.1', `pod/${pod}`, `:${port}`], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, HOME: path.dirname(api.kubeconfig), ...env } });
    forwards.push(child);
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const local = await until(() => {
      const m = /Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)/.exec(out);
      if (child.exitCode !== null) throw new Error(`kubectl port-forward exited: ${err}`);
      return m ? Number(m[1]) : undefined;
    }, 'kubectl port-forward to listen', 30_000);
    return { local, stderr: () => err };
  }

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer();
    base = mkdtempSync('/tmp/atl-k8s-pf-');
    ex = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'default', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run') });
    h = await ex.create({ id: 'ws_PortFwd1', rootDir: path.join(base, 'ws'), limits: LIMITS, network: 'none' });
    pod = objectName('ws_PortFwd1');
    await ex.exec(h, { command: `nohup node -e "require('http').createServer((q,s)=>{let n=0;q.on('data',d=>n+=d.length);q.on('end',()=>s.end(q.url==='/big'?'x'.repeat(3e6):q.url==='/count'?String(n):'hello through port-forward'))}).listen(${PORT},'127.0.0.1')" >/dev/null 2>&1 &`, keepBackground: true });
    await until(async () => ((await ex.exec(h, { command: `node -e "require('net').connect(${PORT},'127.0.0.1').on('connect',()=>process.exit(0)).on('error',()=>process.exit(1))"` })).exitCode === 0 ? true : undefined), 'the server in the pod');
    // A server on the host's own loopback: no port-forward may reach it.
    host = createServer((s) => s.end('HOST SECRET'));
    await new Promise<void>((resolve) => host.listen(0, '127.0.0.1', resolve));
    hostPort = (host.address() as AddressInfo).port;
  });
  afterAll(async () => {
    for (const f of forwards) f.kill();
    host?.close();
    await ex?.close();
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('kubectl port-forward reaches the server in the Pod, connection after connection', async () => {
    const { local } = await kubectlForward(PORT);
    for (let i = 0; i < 3; i++) expect(await httpGet(local)).toMatch(/^HTTP\/1\.1 200 OK[\s\S]*\r\n\r\nhello through port-forward$/);
    expect(api.requests.get('POST pods/portforward')).toBeGreaterThanOrEqual(1);
  });

  it('kubectl port-forward carries megabytes both ways (no flow-control stall)', async () => {
    const { local } = await kubectlForward(PORT);
    const exchange = (request: Buffer): Promise<string> =>
      new Promise((resolve) => {
        const c = connect(local, '127.0.0.1');
        const chunks: Buffer[] = [];
        c.on('data', (d: Buffer) => chunks.push(d));
        c.on('connect', () => c.write(request));
        c.on('error', () => undefined);
        c.on('close', () => resolve(Buffer.concat(chunks).toString()));
      });
    const big = await exchange(Buffer.from('GET /big HTTP/1.0\r\n\r\n'));
    expect(big.slice(big.indexOf('\r\n\r\n') + 4).length).toBe(3e6);
    const body = Buffer.alloc(2e6, 'y');
    const counted = await exchange(Buffer.concat([Buffer.from(`POST /count HTTP/1.0\r\ncontent-length: ${body.length}\r\n\r\n`), body]));
    expect(counted).toMatch(/\r\n\r\n2000000$/);
  });

  it('kubectl port-forward without WebSockets (the plain SPDY/3.1 upgrade) reaches it too', async () => {
    const before = api.requests.get('POST pods/portforward') ?? 0;
    const { local } = await kubectlForward(PORT, { KUBECTL_PORT_FORWARD_WEBSOCKETS: 'false' });
    expect(await httpGet(local)).toMatch(/\r\n\r\nhello through port-forward$/);
    expect(api.requests.get('POST pods/portforward spdy-upgrade')).toBe(1);
    expect(api.requests.get('POST pods/portforward')).toBe(before);
  });

  it('kubectl port-forward to a port nothing listens on in the Pod, or only the host does: an error, no bytes', async () => {
    for (const port of [PORT + 1, hostPort]) {
      const f = await kubectlForward(port);
      expect(await httpGet(f.local)).toBe('');
      await until(() => (/error forwarding port/.test(f.stderr()) ? true : undefined), 'kubectl to report the error', 20_000);
      expect(f.stderr()).not.toContain('HOST SECRET');
    }
  });

  it('client-node PortForward (v4.channel.k8s.io) reaches the server in the Pod', async () => {
    const kc = new KubeConfig();
    kc.loadFromFile(api.kubeconfig);
    const chunks: Buffer[] = [];
    const output = new Writable({ write: (c: Buffer, _e, cb) => void (chunks.push(c), cb()) });
    const input = new PassThrough();
    const ws = (await new PortForward(kc).portForward('default', pod, [PORT], output, null, input)) as WebSocket;
    const closed = new Promise((resolve) => ws.on('close', resolve));
    input.write('GET / HTTP/1.0\r\nHost: pf\r\n\r\n');
    await closed;
    expect(Buffer.concat(chunks).toString()).toMatch(/\r\n\r\nhello through port-forward$/);
  });

  it('the channel framing: the port first on the data and error channels; a closed port answers on the error channel', async () => {
    const open = (port: number) => new WebSocket(`${api.url.replace('https', 'wss')}/api/v1/namespaces/default/pods/${pod}/portforward?ports=${port}`, ['v4.channel.k8s.io'], { headers: { authorization: `Bearer ${api.token}` }, ca: api.ca });
    const frames = async (ws: WebSocket, send?: string): Promise<Buffer[]> => {
      const got: Buffer[] = [];
      ws.on('message', (d: Buffer) => got.push(d));
      if (send) ws.on('open', () => ws.send(Buffer.concat([Buffer.from([0]), Buffer.from(send)])));
      await new Promise((resolve) => ws.on('close', resolve));
      return got;
    };
    const ok = await frames(open(PORT), 'GET / HTTP/1.0\r\n\r\n');
    const portBytes = Buffer.alloc(2);
    portBytes.writeUInt16LE(PORT);
    expect(ok.slice(0, 2)).toEqual([Buffer.concat([Buffer.from([0]), portBytes]), Buffer.concat([Buffer.from([1]), portBytes])]);
    expect(Buffer.concat(ok.slice(2).filter((f) => f[0] === 0).map((f) => f.subarray(1))).toString()).toContain('hello through port-forward');
    const refused = await frames(open(hostPort));
    const errText = Buffer.concat(refused.slice(2).filter((f) => f[0] === 1).map((f) => f.subarray(1))).toString();
    expect(errText).toContain(`error forwarding port ${hostPort}`);
    expect(refused.slice(2).filter((f) => f[0] === 0)).toEqual([]);
    // A bad port and an unknown pod are refused at the upgrade.
    const status = (u: string) => new Promise<number>((resolve) => new WebSocket(u, ['v4.channel.k8s.io'], { headers: { authorization: `Bearer ${api.token}` }, ca: api.ca }).on('unexpected-response', (_q, res) => resolve(res.statusCode ?? 0)));
    expect(await status(`${api.url.replace('https', 'wss')}/api/v1/namespaces/default/pods/${pod}/portforward?ports=70000`)).toBe(400);
    expect(await status(`${api.url.replace('https', 'wss')}/api/v1/namespaces/default/pods/nope/portforward?ports=80`)).toBe(404);
  });
});
