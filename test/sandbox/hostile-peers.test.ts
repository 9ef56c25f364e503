/**
 * Issue #42 item 1: the runner's own ends of sockets whose other end is code in a sandbox, fed
 * hostile bytes by a peer on that socket. The peers stand in for what a workspace can become: a
 * Pod's daemon behind the Kubernetes exec relay runs as the workspace user (its socket is that
 * user's), a short-lived sandbox's git talks to the credential broker. The runner's components are
 * the real ones (DaemonClient, openRelay, startCredentialBroker). Any throw in one of their socket
 * callbacks would be an uncaught exception, which fails this file (vitest reports it); each case
 * also checks that the component keeps serving the next, well-formed exchange.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/core/errors.js';
import { DaemonClient } from '../../src/sandbox/client.js';
import { openRelay } from '../../src/sandbox/relay.js';
import { startCredentialBroker } from '../../src/services/repos/broker.js';
import { collect } from '../../src/sandbox/bwrap/index.js';
import { spawn } from 'node:child_process';

let dir: string;
const uncaught: unknown[] = [];
const onUncaught = (err: unknown): void => void uncaught.push(err);

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'atl-hostile-'));
  process.on('uncaughtException', onUncaught);
});

afterAll(() => {
  process.off('uncaughtException', onUncaught);
  rmSync(dir, { recursive: true, force: true });
});

/** A peer that answers each request line with `answer(id)`'s bytes (or nothing when it returns null). */
async function fakeDaemon(name: string, answer: (id: number, method: string, sock: Socket) => Buffer | string | null): Promise<{ server: Server; socketPath: string }> {
  const socketPath = path.join(dir, `${name}.sock`);
  const server = createServer((sock) => {
    let buf = '';
    sock.on('error', () => undefined);
    sock.on('data', (d) => {
      buf += d.toString('utf8');
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const req = JSON.parse(buf.slice(0, nl)) as { id: number; method: string };
        buf = buf.slice(nl + 1);
        if (req.method === 'cancel') continue;
        const out = answer(req.id, req.method, sock);
        if (out !== null && !sock.destroyed) sock.write(out);
      }
    });
  });
  await new Promise<void>((r) => server.listen(socketPath, r));
  return { server, socketPath };
}

const ok = (id: number) => `{"id":${id},"result":{"pong":true}}\n`;

describe('the daemon client against a hostile daemon', () => {
  // Each case: what the daemon answers the first request with, and how that request ends. The
  // second request on the same client is answered well and must succeed.
  const cases: Array<[string, (id: number) => Buffer | string, 'rejects' | 'resolves']> = [
    ['a null message', (id) => `null\n${ok(id)}`, 'resolves'],
    ['an array, a number, a string, an empty object', (id) => `[]\n5\n"x"\n{}\n{"id":"${id}"}\n${ok(id)}`, 'resolves'],
    ['an error that is null', (id) => `{"id":${id},"error":null}\n`, 'rejects'],
    ['an error that is a string', (id) => `{"id":${id},"error":"boom"}\n`, 'rejects'],
    ['an error with a code of the wrong type and a huge message', (id) => `{"id":${id},"error":{"code":{"x":1},"message":"${'m'.repeat(1 << 20)}","details":[1,2]}}\n`, 'rejects'],
    ['an event without a name', (id) => `{"id":${id},"event":5,"data":null}\n`, 'rejects'],
    ['a message that is neither', (id) => `{"id":${id},"what":1}\n`, 'rejects'],
    ['a reply to an id never sent, then the real one', (id) => `{"id":999999,"result":1}\n{"id":-1,"error":null}\n{"id":1e400,"result":2}\n${ok(id)}`, 'resolves'],
    ['invalid UTF-8 inside the reply', (id) => Buffer.concat([Buffer.from(`{"id":${id},"result":{"s":"`), Buffer.from([0xff, 0xfe, 0xc3, 0x28]), Buffer.from('"}}\n')]), 'resolves'],
    ['events after the reply (frames out of order)', (id) => `${ok(id)}{"id":${id},"event":"stdout","data":"eA=="}\n{"id":${id},"error":{"code":"INTERNAL","message":"late"}}\n`, 'resolves'],
    ['a raw body with a bad encoding', (id) => `#3\nabc{"id":${id},"result":{},"body":{"field":"content","encoding":"bogus"}}\n`, 'rejects'],
    ['a raw body for a result that is not an object', (id) => `#3\nabc{"id":${id},"result":7,"body":{"field":"content","encoding":"utf-8"}}\n`, 'rejects'],
    ['a raw body announced with a bad size', () => '#-1\n', 'rejects'],
    ['a raw body larger than any reply', () => '#99999999999\n', 'rejects'],
    ['a line longer than any reply, never ended', () => Buffer.alloc(33 * 1024 * 1024, 0x61), 'rejects'],
  ];
  for (const [label, first, outcome] of cases) {
    it(`${label}: ${outcome === 'resolves' ? 'ignored' : 'fails that request only'}, and the client keeps working`, async () => {
      let n = 0;
      const { server, socketPath } = await fakeDaemon(label.replace(/\W+/g, '-').slice(0, 40), (id) => (++n === 1 ? first(id) : ok(id)));
      const client = new DaemonClient(socketPath);
      try {
        const firstReply = client.request('ping', undefined, { timeoutMs: 20_000 });
        if (outcome === 'resolves') await expect(firstReply).resolves.toBeDefined();
        else await expect(firstReply).rejects.toBeInstanceOf(ServiceError);
        // The next request works, on this connection or (after one the client dropped) a new one.
        expect(await client.request('ping', undefined, { timeoutMs: 20_000 })).toEqual({ pong: true });
        expect(uncaught).toEqual([]);
      } finally {
        client.close();
        server.close();
      }
    }, 60_000);
  }

  it('an error reply keeps its bounds: the message is cut, an unknown code is INTERNAL', async () => {
    const { server, socketPath } = await fakeDaemon('bounded', (id) => `{"id":${id},"error":{"code":"NO_SUCH","message":"${'m'.repeat(1 << 20)}"}}\n`);
    const client = new DaemonClient(socketPath);
    try {
      const err = (await client.request('ping', undefined, { timeoutMs: 20_000 }).catch((e: unknown) => e)) as ServiceError;
      expect(err.code).toBe('INTERNAL');
      expect(err.message.length).toBeLessThanOrEqual(64 * 1024);
      expect(err.details.daemonCode).toBe('NO_SUCH');
    } finally {
      client.close();
      server.close();
    }
  });

  it('a consumer whose event callback throws fails that request only (the daemon is told to cancel)', async () => {
    const cancels: number[] = [];
    const socketPath = path.join(dir, 'throwing.sock');
    const server = createServer((sock) => {
      let buf = '';
      sock.on('data', (d) => {
        buf += d.toString();
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const req = JSON.parse(buf.slice(0, nl)) as { id: number; method: string; params?: { id?: number } };
          buf = buf.slice(nl + 1);
          if (req.method === 'cancel') cancels.push(req.params!.id!);
          else if (req.method === 'exec') sock.write(`{"id":${req.id},"event":"started","data":null}\n`);
          else sock.write(ok(req.id));
        }
      });
    });
    await new Promise<void>((r) => server.listen(socketPath, r));
    const client = new DaemonClient(socketPath);
    try {
      const onEvent = (_e: string, data: unknown): void => {
        // What the bubblewrap exec path did with a started event before it checked the data.
        const { execId } = data as { execId: string };
        void execId;
      };
      const r = client.request('exec', { command: 'true' }, { onEvent, timeoutMs: 20_000 });
      await expect(r).rejects.toThrow(/the sandbox daemon sent a message its handler could not take/);
      expect(await client.request('ping', undefined, { timeoutMs: 20_000 })).toEqual({ pong: true });
      expect(cancels).toHaveLength(1);
      expect(uncaught).toEqual([]);
    } finally {
      client.close();
      server.close();
    }
  });

  it('a daemon that half-closes or resets mid-reply fails what was in flight', async () => {
    for (const how of ['end', 'destroy'] as const) {
      const { server, socketPath } = await fakeDaemon(`half-${how}`, (_id, _m, sock) => {
        sock.write('{"id":1,"res');
        if (how === 'end') sock.end();
        else sock.destroy();
        return null;
      });
      const client = new DaemonClient(socketPath);
      try {
        await expect(client.request('ping', undefined, { timeoutMs: 20_000 })).rejects.toThrow(/connection to the sandbox daemon was lost/);
        expect(uncaught).toEqual([]);
      } finally {
        client.close();
        server.close();
      }
    }
  });
});

describe("the preview relay's first reply from a hostile daemon", () => {
  const cases: Array<[string, string | Buffer]> = [
    ['null', 'null\n'],
    ['an array', '[1]\n'],
    ['an error that is null', '{"id":1,"error":null}\n'],
    ['an error that is a number', '{"id":1,"error":5}\n'],
    ['a result that is a string', '{"id":1,"result":"relayed"}\n'],
    ['invalid UTF-8', Buffer.from([0xff, 0xfe, 0x0a])],
    ['a line past the limit', Buffer.alloc(20_000, 0x7b)],
  ];
  for (const [label, bytes] of cases) {
    it(`${label}: the relay is refused, nothing throws`, async () => {
      const { server, socketPath } = await fakeDaemon(`relay-${label.replace(/\W+/g, '-')}`, () => bytes);
      try {
        await expect(openRelay(socketPath, 3000, 10_000)).rejects.toBeInstanceOf(ServiceError);
        expect(uncaught).toEqual([]);
      } finally {
        server.close();
      }
    });
  }

  it('a well-formed reply still opens the relay, with the bytes after it kept', async () => {
    const { server, socketPath } = await fakeDaemon('relay-good', () => '{"id":1,"result":{"relayed":true}}\nHTTP/1.1 200 OK\r\n');
    try {
      const sock = await openRelay(socketPath, 3000, 10_000);
      const first = await new Promise<string>((r) => {
        sock.once('data', (d: Buffer) => r(d.toString()));
        sock.resume();
      });
      expect(first).toBe('HTTP/1.1 200 OK\r\n');
      sock.destroy();
    } finally {
      server.close();
    }
  });
});

describe('the credential broker against a hostile git', () => {
  const repo = { url: 'https://git.example/approved/r.git', host: 'git.example', port: 443, authority: 'git.example', path: '/approved/r.git' };

  async function talk(socketPath: string, parts: Array<string | Buffer>, end: 'end' | 'destroy' | 'none' = 'none'): Promise<string> {
    return new Promise((resolve) => {
      const s = connect(socketPath);
      let got = '';
      s.on('data', (d) => (got += d.toString()));
      s.on('error', () => undefined);
      s.on('close', () => resolve(got));
      s.on('connect', () => {
        for (const p of parts) s.write(p);
        if (end === 'end') s.end();
        if (end === 'destroy') s.destroy();
      });
      setTimeout(() => s.destroy(), 5_000).unref();
    });
  }

  it('answers one request per connection, whatever follows it, and survives what git should never send', async () => {
    const seen: string[] = [];
    const lease = await startCredentialBroker({
      runDir: dir,
      repo,
      credential: { username: 'x-access-token', token: 'sekrit' },
      uid: process.getuid?.() ?? 0,
      gid: process.getgid?.() ?? 0,
      onRequest: (d) => {
        seen.push(d.host);
        if (d.host === 'throw.example') throw new Error('an audit hook that fails');
      },
    });
    const sock = path.join(lease.dir, 'cred.sock');
    try {
      const get = 'get\nprotocol=https\nhost=git.example\npath=approved/r.git\n\n';
      // A second request after the first on the same connection is not answered again.
      expect(await talk(sock, [get + get + get])).toBe('username=x-access-token\npassword=sekrit\n\n');
      expect(lease.served()).toBe(1);
      // Oversized, half-closed before the end, reset, invalid UTF-8, a multibyte character split
      // across writes, inherited names, an audit hook that throws.
      expect(await talk(sock, ['get\n' + 'x'.repeat(20_000)])).toBe('');
      expect(await talk(sock, ['get\nprotocol=https\n'], 'end')).toBe('');
      await talk(sock, ['get\nprotocol=ht'], 'destroy');
      expect(await talk(sock, [Buffer.from([0x67, 0x65, 0x74, 0x0a, 0xff, 0xfe, 0x0a, 0x0a])])).toBe('\n');
      expect(await talk(sock, [Buffer.from('get\nprotocol=https\nhost=git.ex'), Buffer.from([0xc3]), Buffer.from([0xa9]), Buffer.from('ample\n\n')])).toBe('\n');
      expect(await talk(sock, ['get\n__proto__=x\nconstructor=y\nprotocol=https\npath=approved/r.git\n\n'])).toBe('\n');
      expect(await talk(sock, ['get\nprotocol=https\nhost=throw.example\n\n'])).toBe('\n');
      expect(seen).toContain('git.ex\u00e9ample');
      // Still serving.
      expect(await talk(sock, [get])).toBe('username=x-access-token\npassword=sekrit\n\n');
      expect(lease.served()).toBe(2);
      expect(uncaught).toEqual([]);
    } finally {
      await lease.close();
    }
  });
});

describe("a short-lived sandbox's output", () => {
  it('a consumer whose onOutput throws gets no more of it; the run is still collected whole', async () => {
    const child = spawn('/bin/sh', ['-c', 'head -c 300000 /dev/urandom; printf "\\377\\376" >&2; echo done'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let calls = 0;
    const r = await collect(
      child,
      {
        binds: [],
        limits: { memoryBytes: 1 << 26, pidsMax: 16, cpuQuotaPercent: 100 },
        network: 'none',
        command: 'unused',
        maxOutputBytes: 1 << 20,
        onOutput: () => {
          calls++;
          throw new Error('a consumer that fails on the bytes it is given');
        },
      },
      Date.now(),
      async () => undefined,
    );
    expect(r).toMatchObject({ exitCode: 0, stdoutBytes: 300005, stderrBytes: 2 });
    expect(calls).toBe(1);
    expect(uncaught).toEqual([]);
  });
});
