/**
 * The socket tunnel of short-lived Kubernetes Pods (src/sandbox/kubernetes/tunnel.ts, the Pod end
 * src/sandbox/daemon/tunnel.ts): runner sockets, the operation's proxy and small files reach a
 * Pod over an exec stream, and nothing else does.
 *
 * - The runner end against a hostile Pod end (frames written by hand): a listener tag it did not
 *   configure, an id the Pod never opened, an oversized frame, too many connections.
 * - Through the driver and the fixture API server (root): a short-lived Pod reaches the runner's
 *   socket directory, the proxy at 127.0.0.1:3128 and the CA file, with a deny-all policy; the
 *   credential broker's answer crosses only as the broker protocol; another operation's Pod has
 *   none of it.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FRAME, frame, FrameReader, MAX_CONNECTIONS, MAX_PAYLOAD, RECEIVE_LIMIT } from '../../src/sandbox/daemon/tunnel-frames.js';
import { KubernetesExecutor } from '../../src/sandbox/kubernetes/index.js';
import { TunnelEnd } from '../../src/sandbox/kubernetes/tunnel.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';
import { startCredentialBroker } from '../../src/services/repos/broker.js';
import { startKubeApiServer, type KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { assertDaemonBuilt, isRoot } from './helpers.js';

function serve(file: string, reply: (data: string) => string): Promise<Server> {
  const s = createServer((c) => {
    let got = '';
    c.on('data', (d) => {
      got += d.toString();
      if (got.includes('\n')) c.end(reply(got));
    });
    c.on('error', () => undefined);
  });
  return new Promise((resolve) => s.listen(file, () => resolve(s)));
}

/** A hand-driven Pod end: what it writes goes to the runner end; what the runner end writes is parsed. */
function hostilePod(targets: Map<string, string>) {
  const fromPod = new PassThrough();
  const toPod = new PassThrough();
  const got: Array<{ type: number; id: number; payload: string }> = [];
  const reader = new FrameReader((type, id, payload) => got.push({ type, id, payload: payload.toString() }));
  toPod.on('data', (c: Buffer) => reader.push(c));
  const end = new TunnelEnd(fromPod, toPod, targets);
  return { end, got, send: (b: Buffer) => fromPod.write(b) };
}

const tick = () => new Promise((r) => setTimeout(r, 20));
async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !cond(); i++) await tick();
  expect(cond()).toBe(true);
}

describe('socket tunnel: the runner end refuses what the operation did not ask for', () => {
  let dir: string;
  let echo: Server;
  beforeAll(async () => {
    dir = mkdtempSync('/tmp/atl-tun-');
    echo = await serve(path.join(dir, 'ok.sock'), (d) => `echo:${d}`);
  });
  afterAll(() => {
    echo?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('carries a connection on a configured tag both ways, with half-close', async () => {
    const p = hostilePod(new Map([['s0/ok.sock', path.join(dir, 'ok.sock')]]));
    p.send(frame(FRAME.OPEN, 7, 's0/ok.sock'));
    p.send(frame(FRAME.DATA, 7, 'hello\n'));
    await until(() => p.got.some((f) => f.type === FRAME.CLOSE && f.id === 7));
    expect(p.got.filter((f) => f.type === FRAME.DATA && f.id === 7).map((f) => f.payload).join('')).toBe('echo:hello\n');
    expect(p.end.counters).toMatchObject({ opened: 1, refusedTag: 0, refusedId: 0 });
    p.end.close();
  });

  it('a listener tag outside the operation (another socket, a path) is refused and connects nothing', async () => {
    let reached = 0;
    const other = await serve(path.join(dir, 'other.sock'), () => (reached++, 'x'));
    const p = hostilePod(new Map([['s0/ok.sock', path.join(dir, 'ok.sock')]]));
    for (const [i, tag] of ['s0/other.sock', path.join(dir, 'other.sock'), '../other.sock', 'proxy'].entries()) {
      p.send(frame(FRAME.OPEN, 10 + i, tag));
      p.send(frame(FRAME.DATA, 10 + i, 'x\n'));
    }
    await until(() => p.got.filter((f) => f.type === FRAME.CLOSE).length === 4);
    expect(p.got.filter((f) => f.type === FRAME.CLOSE).every((f) => f.payload === 'not a socket of this operation')).toBe(true);
    expect(p.end.counters.refusedTag).toBe(4);
    expect(p.end.counters.opened).toBe(0);
    expect(reached).toBe(0);
    other.close();
    p.end.close();
  });

  it('DATA for a connection id the Pod never opened is refused; an id opened twice ends the tunnel', async () => {
    const p = hostilePod(new Map([['s0/ok.sock', path.join(dir, 'ok.sock')]]));
    p.send(frame(FRAME.DATA, 99, 'sneak\n'));
    await until(() => p.got.some((f) => f.type === FRAME.CLOSE && f.id === 99));
    expect(p.end.counters.refusedId).toBe(1);
    p.send(frame(FRAME.OPEN, 5, 's0/ok.sock'));
    p.send(frame(FRAME.OPEN, 5, 's0/ok.sock'));
    await until(() => p.end.counters.failure !== undefined);
    expect(p.end.counters.failure).toContain('opened twice');
  });

  it('an oversized frame or an unknown type ends the tunnel', async () => {
    const p = hostilePod(new Map());
    const h = Buffer.alloc(9);
    h.writeUInt8(FRAME.DATA, 0);
    h.writeUInt32BE(1, 1);
    h.writeUInt32BE(MAX_PAYLOAD + 1, 5);
    p.send(h);
    await until(() => p.end.counters.failure !== undefined);
    expect(p.end.counters.failure).toMatch(/over the limit/);
    const q = hostilePod(new Map());
    q.send(frame(42, 1, 'x'));
    await until(() => q.end.counters.failure !== undefined);
    expect(q.end.counters.failure).toMatch(/unknown frame type 42/);
  });

  it('a Pod end that ignores the window (sends past it without ACKs) ends the tunnel', async () => {
    const hold = createServer((c) => c.pause());
    await new Promise<void>((r) => hold.listen(path.join(dir, 'slow.sock'), () => r()));
    const p = hostilePod(new Map([['s', path.join(dir, 'slow.sock')]]));
    p.send(frame(FRAME.OPEN, 1, 's'));
    const chunk = Buffer.alloc(MAX_PAYLOAD, 1);
    for (let i = 0; i < (2 * RECEIVE_LIMIT) / MAX_PAYLOAD + 64 && p.end.counters.failure === undefined; i++) {
      p.send(frame(FRAME.DATA, 1, chunk));
      if (i % 16 === 0) await tick();
    }
    await until(() => p.end.counters.failure !== undefined);
    expect(p.end.counters.failure).toMatch(/unacknowledged/);
    hold.close();
  });

  it(`at most ${MAX_CONNECTIONS} connections at once`, async () => {
    const hold = createServer(() => undefined);
    await new Promise<void>((r) => hold.listen(path.join(dir, 'hold.sock'), () => r()));
    const p = hostilePod(new Map([['h', path.join(dir, 'hold.sock')]]));
    for (let i = 1; i <= MAX_CONNECTIONS + 3; i++) p.send(frame(FRAME.OPEN, i, 'h'));
    await until(() => p.end.counters.opened + p.end.counters.refusedLimit === MAX_CONNECTIONS + 3);
    expect(p.end.counters).toMatchObject({ opened: MAX_CONNECTIONS, refusedLimit: 3 });
    p.end.close();
    hold.close();
  });
});

const LIMITS = { memoryBytes: 512 * 1024 * 1024, pidsMax: 256, cpuQuotaPercent: 100 };

describe.skipIf(!isRoot)('socket tunnel through the driver and the fixture API server', () => {
  let api: KubeApiServer;
  let base: string;
  let ex: KubernetesExecutor;
  const servers: Server[] = [];

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer();
    base = mkdtempSync('/tmp/atl-ktn-');
    chmodSync(base, 0o711);
    ex = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'atelier', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run') });
  });
  afterAll(async () => {
    for (const s of servers) s.close();
    await ex?.close();
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('a short-lived Pod reaches the bound socket directory, the proxy at 127.0.0.1:3128 and the CA file; its policy stays deny-all', async () => {
    const sockDir = mkdtempSync(path.join(base, 's-'));
    chmodSync(sockDir, 0o711);
    servers.push(await serve(path.join(sockDir, 'svc.sock'), (d) => `svc got ${d.trim()}\n`));
    const proxySock = path.join(base, 'p.sock');
    servers.push(await serve(proxySock, (d) => `proxy got ${d.trim()}\n`));
    const ca = path.join(base, 'ca.pem');
    writeFileSync(ca, 'PEM BYTES\n', { mode: 0o644 });
    const client = (target: string) => `node -e "const s=require('net').connect(${target});s.on('connect',()=>s.write('hi\\\\n'));s.pipe(process.stdout)"`;
    let policy: unknown;
    const r = await ex.runEphemeral({
      id: 'eph-tunnel1',
      command: [
        'cat /dev/shm/atelier/ca.pem',
        client("'/dev/shm/atelier/x/svc.sock'"),
        client('3128,\'127.0.0.1\''),
        'echo "$HTTPS_PROXY"',
        'ls /dev/shm/atelier/x',
      ].join(' && '),
      binds: [
        { source: sockDir, target: '/dev/shm/atelier/x', readOnly: true, sockets: true },
        { source: ca, target: '/dev/shm/atelier/ca.pem', readOnly: true },
      ],
      limits: LIMITS,
      network: { proxySocket: proxySock },
      onOutput: () => {
        policy ??= api.store.find('networkpolicies', 'atelier', objectName('eph-tunnel1'));
      },
    });
    expect(r.stderr).toBe('');
    expect(r).toMatchObject({ exitCode: 0, stdout: 'PEM BYTES\nsvc got hi\nproxy got hi\nhttp://127.0.0.1:3128\nsvc.sock\n' });
    expect((policy as { spec?: { egress?: unknown[] } } | undefined)?.spec?.egress ?? []).toEqual([]);
    expect(api.store.list('pods', 'atelier', 'atelier.dev/role=ephemeral')).toEqual([]);
  });

  it('bulk bytes both ways keep their order and count through the windows (8 MiB down and 8 MiB up on one connection)', async () => {
    const { createHash, randomBytes } = await import('node:crypto');
    const down = randomBytes(8 * 1024 * 1024);
    const proxySock = path.join(base, 'bulk.sock');
    let upHash = '';
    const bulk = createServer((c) => {
      const h = createHash('sha256');
      let n = 0;
      c.on('data', (d: Buffer) => {
        h.update(d);
        n += d.length;
      });
      c.on('end', () => {
        upHash = `${n} ${h.digest('hex')}`;
        c.end();
      });
      c.write(down);
    });
    await new Promise<void>((r) => bulk.listen(proxySock, () => r()));
    servers.push(bulk);
    // In the Pod: one connection sends 8 MiB and reads what it is sent; both hashed there.
    const script = `const c=require('crypto'),net=require('net');const s=net.connect(3128,'127.0.0.1');const h=c.createHash('sha256');let n=0;s.on('data',d=>{h.update(d);n+=d.length});s.on('end',()=>{console.log(n+' '+h.digest('hex'))});s.on('connect',()=>{const b=Buffer.alloc(1<<20,7);let i=0;const w=()=>{while(i<8){i++;if(!s.write(b)){s.once('drain',w);return}}s.end()};w()})`;
    const r = await ex.runEphemeral({ id: 'eph-bulk1', argv: ['node', '-e', script], binds: [], limits: LIMITS, network: { proxySocket: proxySock }, timeoutMs: 120_000 });
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe(`${down.length} ${createHash('sha256').update(down).digest('hex')}`);
    expect(upHash).toBe(`${8 * 1024 * 1024} ${createHash('sha256').update(Buffer.alloc(8 * 1024 * 1024, 7)).digest('hex')}`);
  }, 180_000);

  it('sockets and files only under the Pod\'s /dev/shm/atelier; a file that is not a small readable regular file is refused by name', async () => {
    const sockDir = mkdtempSync(path.join(base, 's-'));
    await expect(ex.runEphemeral({ argv: ['true'], binds: [{ source: sockDir, target: '/run/atelier-cred', readOnly: true, sockets: true }], limits: LIMITS, network: 'none' })).rejects.toMatchObject({ code: 'NOT_SUPPORTED', details: { field: 'binds', target: '/run/atelier-cred' } });
    const secret = path.join(base, 'secret');
    writeFileSync(secret, 'x', { mode: 0o600 });
    await expect(ex.runEphemeral({ argv: ['true'], binds: [{ source: secret, target: '/dev/shm/atelier/s', readOnly: true }], limits: LIMITS, network: 'none' })).rejects.toMatchObject({ code: 'NOT_SUPPORTED', details: { field: 'binds', target: '/dev/shm/atelier/s' } });
    await expect(ex.runEphemeral({ argv: ['true'], binds: [{ source: '/etc/hostname', target: '/etc/hostname', readOnly: true }], limits: LIMITS, network: 'none' })).rejects.toMatchObject({ code: 'NOT_SUPPORTED' });
  });

  it('git\'s credential helper gets the broker\'s answer through the tunnel; another operation\'s Pod has no way to that broker', async () => {
    const runDir = path.join(base, 'brk');
    const { mkdirSync } = await import('node:fs');
    mkdirSync(runDir, { mode: 0o711 });
    const token = 'tok-' + 'S3cret'.repeat(4);
    const broker = await startCredentialBroker({ runDir, repo: { authority: 'git.example:443', host: 'git.example', port: 443, path: '/o/r.git', url: 'https://git.example/o/r.git' } as never, credential: { username: 'u', token }, uid: 0, gid: 0 });
    const layout = ex.ephemeralLayout;
    const helper = layout.credentialHelper(`${layout.credSocketDir}/cred.sock`);
    const [a, b] = await Promise.all([
      ex.runEphemeral({
        id: 'eph-cred-a',
        // The operation's host gets the credential; another host, through the same broker, nothing.
        command: `printf 'protocol=https\\nhost=git.example:443\\npath=o/r.git\\n' | ${helper} get | grep -c password=${token}; printf 'protocol=https\\nhost=evil.example\\n' | ${helper} get | grep -c password; sleep 1`,
        binds: [{ source: broker.dir, target: layout.credSocketDir, readOnly: true, sockets: true }],
        limits: LIMITS,
        network: 'none',
      }),
      // Another operation at the same time: its Pod has no tunnel to anything, and no socket.
      ex.runEphemeral({ id: 'eph-cred-b', command: `ls -A /dev/shm; ${helper} get </dev/null; echo rc=$?`, binds: [], limits: LIMITS, network: 'none' }),
    ]);
    expect(a).toMatchObject({ stdout: '1\n0\n' });
    expect(b.stdout).not.toContain('cred');
    expect(b.stdout).not.toContain(token);
    expect(broker.served()).toBe(1);
    await broker.close();
  });
});
