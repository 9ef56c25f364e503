/**
 * Issue #42 item 7 (and item 1's Kubernetes part): what a Pod sends over Kubernetes exec streams
 * cannot make the runner buffer without bound or throw uncaught. Against the fixture API server,
 * whose kubelet passes back-pressure on as a node does (test/fixtures/kube-apiserver/channels.ts).
 *
 * - The socket tunnel's runner end against a peer that acknowledges exactly what it was sent and
 *   reads nothing (a stream that stops draining): the runner stops reading its sockets; what it
 *   holds stays under HELD_BOUND while the socket behind offers 64 MiB.
 *   An ACK for more than was sent, a malformed ACK end the tunnel; DATA after the Pod end's CLOSE
 *   of that connection is dropped.
 * - A short-lived Pod whose image's tunnel program speaks the real frames, takes its CONFIG, then
 *   never reads again and keeps acknowledging (1 MiB a millisecond, up to 1 GiB): the runner ends
 *   that tunnel and the proxy behind it hands over at most a few MiB; the next command runs.
 * - The preview relay (the daemon's relay mode over one exec stream): a server in the Pod writing
 *   to a client that does not read, and a client writing to a server in the Pod that does not
 *   read: bounded both ways; the same relay at full speed, for the throughput figure.
 * - Exec frames the runner must not trust (empty, text, unknown channels, half-closes of no
 *   stream, a status that is not JSON, frames after the status, a frame over the limit): dropped or
 *   ending that session as a failure; the runner's own stdout is never ended; nothing is uncaught.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import path from 'node:path';
import { PassThrough, Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WebSocket } from 'ws';
import { FRAME, ackFrame, frame, FrameReader } from '../../src/sandbox/daemon/tunnel-frames.js';
import { connectKube } from '../../src/sandbox/kubernetes/api.js';
import { type KubeExec, MAX_EXEC_FRAME, SEND_HIGH_WATER, type ExecStatus } from '../../src/sandbox/kubernetes/exec-stream.js';
import { KubernetesExecutor } from '../../src/sandbox/kubernetes/index.js';
import { objectName } from '../../src/sandbox/kubernetes/names.js';
import { HELD_BOUND, TunnelEnd } from '../../src/sandbox/kubernetes/tunnel.js';
import type { SandboxHandle } from '../../src/sandbox/executor.js';
import { startKubeApiServer, type KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { assertDaemonBuilt, isRoot } from './helpers.js';

const MiB = 1024 * 1024;
const LIMITS = { memoryBytes: 512 * MiB, pidsMax: 256, cpuQuotaPercent: 100 };

/** Waits for `cond` (polled; the machine may be loaded), at most `ms`. */
async function until(cond: () => boolean | Promise<boolean>, what: string | (() => string), ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${typeof what === 'string' ? what : what()}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Waits until `value()` has not grown for `quietMs` (a writer that is being held back has stopped). */
async function settled(value: () => number | Promise<number>, quietMs = 1500, ms = 60_000): Promise<number> {
  const end = Date.now() + ms;
  let last = await value();
  let since = Date.now();
  while (Date.now() < end) {
    await new Promise((r) => setTimeout(r, 100));
    const v = await value();
    if (v !== last) [last, since] = [v, Date.now()];
    else if (Date.now() - since >= quietMs) return v;
  }
  return last;
}

/** A socket server that writes `cap` bytes to each connection as fast as the connection takes them (counted as the socket accepts them). */
function firehose(file: string, cap: number): Promise<{ server: Server; sent: () => number; closed: () => number }> {
  let sent = 0;
  let closed = 0;
  const server = createServer((c) => {
    c.on('error', () => undefined);
    c.on('close', () => void closed++);
    const chunk = Buffer.alloc(64 * 1024, 0x5a);
    c.once('data', () => {
      const go = (): void => {
        while (sent < cap && !c.destroyed) {
          sent += chunk.length;
          if (!c.write(chunk)) return void c.once('drain', go);
        }
        c.end();
      };
      go();
    });
  });
  return new Promise((resolve) => server.listen(file, () => resolve({ server, sent: () => sent, closed: () => closed })));
}

describe('socket tunnel runner end: a peer that acknowledges what it is sent and reads nothing', () => {
  let dir: string;
  beforeAll(() => void (dir = mkdtempSync('/tmp/atl-kbp-')));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it(`holds at most HELD_BOUND (${HELD_BOUND / MiB} MiB) toward the Pod while the socket behind offers 64 MiB`, async () => {
    const hose = await firehose(path.join(dir, 'hose.sock'), 64 * MiB);
    const fromPod = new PassThrough();
    const toPod = new PassThrough();
    const end = new TunnelEnd(fromPod, toPod, new Map([['proxy', path.join(dir, 'hose.sock')]]));
    // The transport: as the exec stream's stdin (exec-stream.ts), it takes frames off toPod until it
    // holds SEND_HIGH_WATER it cannot send (this Pod end never reads), then stops taking them.
    // The peer acknowledges every DATA byte as it is framed: the window never closes.
    let stuck = 0;
    const reader = new FrameReader((type, id, payload) => {
      if (type === FRAME.DATA) fromPod.write(ackFrame(id, payload.length));
    });
    toPod.on('data', (b: Buffer) => {
      reader.push(b);
      stuck += b.length;
      if (stuck > SEND_HIGH_WATER) toPod.pause();
    });
    fromPod.write(frame(FRAME.OPEN, 1, 'proxy'));
    fromPod.write(frame(FRAME.DATA, 1, 'GO'));
    const held = (): number => stuck + toPod.writableLength + toPod.readableLength;
    await until(() => hose.sent() > 0, 'the first bytes');
    const sent = await settled(hose.sent);
    expect(end.counters.failure).toBeUndefined();
    // Every byte acknowledged, none read: the window said go on; the stream's buffer said stop.
    expect(end.counters.acked).toBeGreaterThan(0);
    expect(end.counters.streamPauses).toBeGreaterThan(0);
    expect(held()).toBeLessThan(HELD_BOUND);
    expect(end.counters.peakHeld).toBeLessThan(HELD_BOUND);
    // What the socket could hand the runner: what it holds plus the socket buffers between them.
    expect(sent).toBeLessThan(HELD_BOUND + 2 * MiB);
    console.log(`tunnel end, peer acks all and reads nothing: the socket behind handed over ${(sent / MiB).toFixed(2)} MiB of 64; the runner held at most ${(end.counters.peakHeld / MiB).toFixed(2)} MiB`);
    end.close();
    hose.server.close();
  });

  it('an ACK for more than was sent on a connection ends the tunnel; a malformed ACK too', async () => {
    const echo = createServer((c) => c.pipe(c));
    await new Promise<void>((r) => echo.listen(path.join(dir, 'echo.sock'), () => r()));
    for (const [ack, why] of [
      [ackFrame(1, 3), /1: 3 bytes acknowledged, but only 2 were sent/],
      [frame(FRAME.ACK, 1, Buffer.alloc(3)), /an ACK of 3 bytes/],
    ] as const) {
      const fromPod = new PassThrough();
      const toPod = new PassThrough();
      const got: number[] = [];
      const reader = new FrameReader((type) => got.push(type));
      toPod.on('data', (b: Buffer) => reader.push(b));
      const end = new TunnelEnd(fromPod, toPod, new Map([['e', path.join(dir, 'echo.sock')]]));
      fromPod.write(frame(FRAME.OPEN, 1, 'e'));
      fromPod.write(frame(FRAME.DATA, 1, 'hi'));
      await until(() => got.includes(FRAME.DATA), 'the echo');
      fromPod.write(ack);
      await until(() => end.ended, 'the tunnel to end');
      expect(end.counters.failure).toMatch(why);
    }
    echo.close();
  });

  it('DATA after the Pod end closed that connection is dropped (counted), not written to the runner socket', async () => {
    let seen = '';
    const sink = createServer((c) => c.on('data', (d: Buffer) => void (seen += d.toString())));
    await new Promise<void>((r) => sink.listen(path.join(dir, 'sink.sock'), () => r()));
    const fromPod = new PassThrough();
    const toPod = new PassThrough();
    toPod.resume();
    const end = new TunnelEnd(fromPod, toPod, new Map([['s', path.join(dir, 'sink.sock')]]));
    fromPod.write(frame(FRAME.OPEN, 1, 's'));
    fromPod.write(frame(FRAME.DATA, 1, 'before'));
    fromPod.write(frame(FRAME.CLOSE, 1));
    fromPod.write(frame(FRAME.DATA, 1, 'after'));
    await until(() => end.counters.dropped === 1 && seen === 'before', 'the late DATA to be dropped');
    expect(end.counters.failure).toBeUndefined();
    end.close();
    sink.close();
  });
});

describe.skipIf(!isRoot)('Kubernetes exec streams against a hostile Pod (driver and fixture API server)', () => {
  let api: KubeApiServer;
  let base: string;
  let ex: KubernetesExecutor;
  let h: SandboxHandle;

  beforeAll(async () => {
    assertDaemonBuilt();
    api = await startKubeApiServer();
    base = mkdtempSync('/tmp/atl-kbp-');
    // The Pods' sandboxes run as another uid: files handed to them (an image's files) must be reachable.
    chmodSync(base, 0o711);
    ex = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'atelier', workspaceImage: 'atelier-workspace:test', runDir: path.join(base, 'run') });
    h = await ex.create({ id: 'ws_KubeBackp1', rootDir: path.join(base, 'workspaces', 'ws_KubeBackp1'), limits: LIMITS, network: 'none', env: {} });
  }, 120_000);
  afterAll(async () => {
    await ex?.close();
    await api?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it('a Pod whose tunnel program keeps acknowledging bytes it never reads (1 MiB a millisecond, up to 1 GiB): the runner ends that tunnel; the proxy behind it hands over a few MiB', async () => {
    const hose = await firehose(path.join(base, 'proxy.sock'), 256 * MiB);
    // The image's /opt/atelier/daemon/tunnel.js is this program (the fixture kubelet's imageFiles):
    // it speaks the real frames (CONFIG, READY, OPEN, DATA, ACK), takes CONFIG, then never reads
    // its stdin again and keeps acknowledging on the connection it opened.
    const hostile = path.join(base, 'hostile-tunnel.js');
    writeFileSync(
      hostile,
      `const net=require('net'),fs=require('fs');
      const fr=(t,id,p)=>{const b=Buffer.isBuffer(p)?p:Buffer.from(p||'');const h=Buffer.alloc(9);h[0]=t;h.writeUInt32BE(id,1);h.writeUInt32BE(b.length,5);return Buffer.concat([h,b])};
      const ack=(n)=>{const b=Buffer.alloc(4);b.writeUInt32BE(n);return fr(${FRAME.ACK},1,b)};
      let buf=Buffer.alloc(0),configured=false;
      process.stdin.on('data',d=>{
        if(configured)return;
        buf=Buffer.concat([buf,d]);
        if(buf.length<9||buf.length<9+buf.readUInt32BE(5))return;
        configured=true;
        process.stdin.pause();
        const cfg=JSON.parse(buf.subarray(9,9+buf.readUInt32BE(5)).toString());
        const l=cfg.listen.find(x=>x.port);
        net.createServer(c=>{
          process.stdout.write(fr(${FRAME.OPEN},1,l.tag));
          c.once('data',d=>{
            process.stdout.write(fr(${FRAME.DATA},1,d));
            // 1 MiB acknowledged every millisecond or so, until 1 GiB: the window never closes.
            const batch=Buffer.concat(Array.from({length:16},()=>ack(65536)));
            let claimed=0;
            const t=setInterval(()=>{
              if(claimed>=2**30)return clearInterval(t);
              claimed+=16*65536;
              fs.writeFileSync('/tmp/claimed',String(claimed));
              process.stdout.write(batch);
            },1);
          });
        }).listen(l.port,'127.0.0.1',()=>process.stdout.write(fr(${FRAME.READY},0,JSON.stringify({ok:true}))));
      });`,
      { mode: 0o644 },
    );
    api.runtime.imageFiles.set('atelier-workspace:hostile', { '/opt/atelier/daemon/tunnel.js': hostile });
    const hx = new KubernetesExecutor({ kubeconfig: api.kubeconfig, namespace: 'atelier', workspaceImage: 'atelier-workspace:hostile', runDir: path.join(base, 'run-hostile') });
    try {
      // The command: one connection through the tunnel's proxy port, then read nothing; say what the tunnel program claimed.
      const script = `const s=require('net').connect(3128,'127.0.0.1');s.on('error',()=>{});s.on('connect',()=>s.write('GO'));s.pause();setTimeout(()=>{let c='0';try{c=require('fs').readFileSync('/tmp/claimed','utf8')}catch{};console.log(c);process.exit(0)},6000)`;
      const r = await hx.runEphemeral({ id: 'eph-ackflood', argv: ['node', '-e', script], binds: [], limits: LIMITS, network: { proxySocket: path.join(base, 'proxy.sock') }, timeoutMs: 120_000 });
      expect(r.stderr).toBe('');
      const claimed = Number(r.stdout.trim());
      const sent = await settled(hose.sent);
      console.log(`hostile tunnel program acknowledged ${(claimed / MiB).toFixed(0)} MiB it never read; the proxy behind the tunnel handed over ${(sent / MiB).toFixed(2)} MiB of 256; connections the runner ended: ${hose.closed()}`);
      // It acknowledged more than it read (1 MiB a millisecond, up to 1 GiB, for as long as its tunnel lived).
      expect(claimed).toBeGreaterThanOrEqual(MiB);
      expect(sent).toBeLessThan(HELD_BOUND + 4 * MiB);
      // The runner ended that tunnel (the connection behind it closed), not the proxy.
      await until(() => hose.closed() === 1, 'the runner to end the connection');
    } finally {
      await hx.close();
      hose.server.close();
    }
    // The runner and the driver go on.
    expect(await ex.runEphemeral({ argv: ['echo', 'next'], binds: [], limits: LIMITS, network: 'none' })).toMatchObject({ exitCode: 0, stdout: 'next\n' });
  }, 180_000);

  /** A server in the workspace Pod on `port`: each connection gets `cap` bytes as fast as it takes them (or, `sink`, is never read); what it wrote goes to /tmp/sent-<port>. */
  async function podServer(port: number, how: 'write' | 'hold'): Promise<() => Promise<number>> {
    const src =
      how === 'write'
        ? `require('net').createServer(c=>{c.on('error',()=>{});const b=Buffer.alloc(65536,7);let n=0;const go=()=>{while(n<${256 * MiB}){n+=b.length;if(!c.write(b))return c.once('drain',go)}c.end()};go();setInterval(()=>require('fs').writeFileSync('/tmp/sent-${port}',String(n)),50)}).listen(${port},'127.0.0.1')`
        : `require('net').createServer(c=>{c.on('error',()=>{});c.pause()}).listen(${port},'127.0.0.1')`;
    await ex.exec(h, { command: `nohup node -e "${src}" >/dev/null 2>&1 &`, keepBackground: true });
    return async () => Number((await ex.exec(h, { command: `cat /tmp/sent-${port} 2>/dev/null || echo 0` })).stdout.trim() || 0);
  }
  async function relayTo(port: number): Promise<Socket> {
    let sock: Socket | undefined;
    await until(async () => !!(sock = await ex.relay(h, port).catch(() => undefined)), `the server on ${port}`);
    return sock!;
  }

  it('preview relay: a server in the Pod writing to a client that does not read is held to a few MiB (it offers 256)', async () => {
    const sent = await podServer(8461, 'write');
    const sock = await relayTo(8461);
    sock.pause();
    sock.write('GO');
    await until(async () => (await sent()) > 0, 'the server to write');
    const total = await settled(sent, 2000);
    console.log(`preview relay, client not reading: the server in the Pod got ${(total / MiB).toFixed(2)} MiB written of 256`);
    expect(total).toBeLessThan(32 * MiB);
    sock.destroy();
  }, 120_000);

  it('preview relay: a client writing to a server in the Pod that does not read is held to a few MiB in the runner', async () => {
    await podServer(8462, 'hold');
    const sock = await relayTo(8462);
    let accepted = 0;
    const chunk = Buffer.alloc(64 * 1024, 9);
    const go = (): void => {
      while (accepted < 256 * MiB && !sock.destroyed) {
        accepted += chunk.length;
        if (!sock.write(chunk)) return void sock.once('drain', go);
      }
    };
    sock.on('error', () => undefined);
    go();
    const total = await settled(() => accepted, 2000);
    console.log(`preview relay, server not reading: the runner's relay took ${(total / MiB).toFixed(2)} MiB of 256`);
    expect(total).toBeLessThan(32 * MiB);
    sock.destroy();
  }, 120_000);

  it('preview relay at full speed with a client and a server that read: the figure', async () => {
    await ex.exec(h, { command: `nohup node -e "require('net').createServer(c=>{c.on('error',()=>{});const b=Buffer.alloc(65536,7);let n=0;const go=()=>{while(n<${64 * MiB}){n+=b.length;if(!c.write(b))return c.once('drain',go)}c.end()};c.once('data',go)}).listen(8463,'127.0.0.1')" >/dev/null 2>&1 &`, keepBackground: true });
    const sock = await relayTo(8463);
    const t0 = process.hrtime.bigint();
    let got = 0;
    sock.on('data', (d: Buffer) => void (got += d.length));
    sock.write('GO');
    sock.resume(); // the relay hands its socket over paused
    await until(() => got >= 64 * MiB, () => `the 64 MiB (${got} bytes so far)`, 110_000);
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    expect(got).toBe(64 * MiB);
    console.log(`preview relay throughput (Pod to runner, 64 MiB): ${(got / MiB / s).toFixed(0)} MiB/s`);
    sock.destroy();
  }, 120_000);

  it('exec frames the runner must not trust are dropped or end that session as a failure; nothing is uncaught and the runner\'s stdout stays open', async () => {
    // The exec client the driver makes (connectKube), as the runner uses it.
    const kexec = (await connectKube({ kubeconfig: api.kubeconfig, namespace: 'atelier', workspaceImage: 'x' })).exec as KubeExec;
    const st = (o: object): Buffer => frame1(3, JSON.stringify(o));
    const frame1 = (ch: number, d: string | Buffer): Buffer => Buffer.concat([Buffer.from([ch]), Buffer.from(d)]);
    const cases: Record<string, (ws: WebSocket) => void> = {
      junk: (ws) => {
        ws.send(frame1(1, 'before '));
        ws.send(Buffer.alloc(0));
        ws.send('a text frame');
        ws.send(frame1(7, 'an unknown channel'));
        ws.send(frame1(4, '{"Width":1}'));
        ws.send(Buffer.from([255]));
        ws.send(Buffer.from([255, 9]));
        ws.send(Buffer.from([255, 1, 1]));
        ws.send(frame1(1, 'after'));
        ws.send(st({ status: 'Success' }));
        // After the status: nothing more is taken.
        ws.send(frame1(1, ' too late'));
        ws.send(frame1(3, 'not json'));
      },
      badStatus: (ws) => {
        ws.send(frame1(1, 'x'));
        ws.send(frame1(3, '{"status": "Success"'));
      },
      arrayStatus: (ws) => ws.send(frame1(3, '[1,2]')),
      closesStdout: (ws) => {
        ws.send(frame1(1, 'one'));
        // A half-close of stdout ends this session's stdout (never the runner's process.stdout).
        ws.send(Buffer.from([255, 1]));
        ws.send(Buffer.from([255, 0]));
        ws.send(frame1(1, 'after close'));
        ws.send(frame1(2, 'err'));
        ws.send(st({ status: 'Success' }));
      },
      huge: (ws) => {
        ws.send(frame1(1, 'small '));
        ws.send(Buffer.concat([Buffer.from([1]), Buffer.alloc(MAX_EXEC_FRAME + 1, 0x41)]));
      },
      dropped: (ws) => {
        ws.send(frame1(1, 'partial'), () => setTimeout(() => ws.terminate(), 50));
      },
    };
    const removers = Object.entries(cases).map(([name, serve]) => api.answerExec(`HOSTILE-${name}`, serve));
    const dropped0 = kexec.counters?.dropped ?? 0;
    const run = async (name: string): Promise<{ out: string; err: string; status?: ExecStatus; closed: boolean }> => {
      let out = '';
      let err = '';
      const stdout = new Writable({ write: (c: Buffer, _e, cb) => ((out += c.toString()), cb()) });
      const stderr = new Writable({ write: (c: Buffer, _e, cb) => ((err += c.toString()), cb()) });
      const stdin = new PassThrough();
      let status: ExecStatus | undefined;
      let closed = false;
      const ws = await kexec.exec('atelier', h.placement?.pod ?? objectName(h.id), 'main', ['sh', `HOSTILE-${name}`], stdout, stderr, stdin, false, (s) => (status = s));
      ws.on('close', () => (closed = true));
      await until(() => closed, `${name}: the session to end`);
      // stdin written after the session ended goes nowhere and throws nothing.
      stdin.write('late');
      return { out, err, status, closed };
    };
    const junk = await run('junk');
    expect(junk).toMatchObject({ out: 'before after', status: { status: 'Success' } });
    expect((kexec.counters?.dropped ?? 0) - dropped0).toBeGreaterThanOrEqual(9);
    for (const name of ['badStatus', 'arrayStatus']) {
      const r = await run(name);
      expect(r.status).toMatchObject({ status: 'Failure', message: expect.stringMatching(/the exec stream broke its protocol: a status that is not a JSON Status/) });
    }
    const closes = await run('closesStdout');
    expect(closes).toMatchObject({ out: 'one', err: 'err', status: { status: 'Success' } });
    const huge = await run('huge');
    expect(huge.out).toBe('small ');
    expect(huge.status).toMatchObject({ status: 'Failure', message: expect.stringMatching(/the exec stream broke its protocol: .*Max payload size exceeded/) });
    const dropped = await run('dropped');
    expect(dropped.out).toBe('partial');
    expect(process.stdout.writableEnded).toBe(false);
    for (const rm of removers) rm();
    // The driver's own exec streams go on.
    expect(await ex.exec(h, { command: 'echo still here' })).toMatchObject({ exitCode: 0, stdout: 'still here\n' });
  }, 120_000);
});
