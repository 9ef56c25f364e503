/**
 * Egress proxy tests. Every server these tests start listens on loopback only, and fake
 * resolvers map names to loopback (or to addresses the proxy must refuse before connecting), so
 * no traffic leaves the machine except the one real registry test at the end.
 */
import { spawn } from 'node:child_process';
import { existsSync, statSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { lookup } from 'node:dns/promises';
import net, { type AddressInfo, type Server, type Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DEFAULT_REGISTRY_RULES,
  isPrivateAddress,
  startEgressProxy,
  type EgressDecision,
  type EgressProxyOptions,
  type EgressRule,
} from '../../src/sandbox/egress.js';

// ---------------------------------------------------------------------------------------------
// Helpers

let dir: string;
let echo: Server;
let echoPort: number;
const echoConns = new Set<Socket>();
const opened: Array<{ close(): Promise<void> }> = [];
let counter = 0;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'atelier-egress-'));
  echo = net.createServer((s) => {
    echoConns.add(s);
    s.on('close', () => echoConns.delete(s));
    s.on('error', () => {});
    s.pipe(s);
  });
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
  echoPort = (echo.address() as AddressInfo).port;
});

afterEach(async () => {
  await Promise.all(opened.splice(0).map((p) => p.close()));
});

afterAll(async () => {
  for (const s of echoConns) s.destroy();
  await new Promise<void>((r) => echo.close(() => r()));
  await rm(dir, { recursive: true, force: true });
});

interface Harness {
  socketPath: string;
  decisions: EgressDecision[];
  lookups: string[];
  proxy: Awaited<ReturnType<typeof startEgressProxy>>;
}

/** A proxy on a fresh socket with a fake resolver (name -> addresses) that records its calls. */
async function harness(
  rules: EgressRule[],
  table: Record<string, string[]> = {},
  extra: Partial<EgressProxyOptions> = {},
): Promise<Harness> {
  const socketPath = path.join(dir, `p${counter++}.sock`);
  const decisions: EgressDecision[] = [];
  const lookups: string[] = [];
  const proxy = await startEgressProxy({
    socketPath,
    workspaceId: 'ws-test',
    rules,
    onDecision: (d) => decisions.push(d),
    resolver: async (host) => {
      lookups.push(host);
      const found = table[host];
      if (!found) throw Object.assign(new Error(`not found ${host}`), { code: 'ENOTFOUND' });
      return found;
    },
    ...extra,
  });
  opened.push(proxy);
  return { socketPath, decisions, lookups, proxy };
}

function connectUnix(socketPath: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(socketPath);
    s.once('connect', () => resolve(s));
    s.once('error', reject);
  });
}

/** Sends raw bytes and reads everything until the proxy closes the connection. */
async function rawRequest(socketPath: string, raw: string | Buffer): Promise<{ status: number; text: string }> {
  const s = await connectUnix(socketPath);
  const chunks: Buffer[] = [];
  s.on('data', (c: Buffer) => chunks.push(c));
  const closed = new Promise<void>((r) => s.once('close', () => r()));
  s.on('error', () => {});
  s.write(raw);
  await closed;
  const text = Buffer.concat(chunks).toString('latin1');
  const m = /^HTTP\/1\.1 (\d{3}) /.exec(text);
  return { status: m ? Number(m[1]) : 0, text };
}

/** Sends a CONNECT and waits for the response head; on 200 returns the open socket. */
async function openTunnel(
  socketPath: string,
  target: string,
  after = '',
  headers = '',
): Promise<{ status: number; head: string; socket: Socket; rest: Buffer }> {
  const s = await connectUnix(socketPath);
  s.on('error', () => {});
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    const onData = (c: Buffer): void => {
      buf = Buffer.concat([buf, c]);
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      s.off('data', onData);
      s.off('close', onClose);
      const head = buf.subarray(0, end).toString('latin1');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
      resolve({ status, head, socket: s, rest: buf.subarray(end + 4) });
    };
    const onClose = (): void => reject(new Error(`closed before a response: ${buf.toString('latin1')}`));
    s.on('data', onData);
    s.on('close', onClose);
    s.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${headers}\r\n${after}`);
  });
}

/** Reads from a socket until `n` bytes arrived (starting with `initial`). */
function readBytes(s: Socket, n: number, initial: Buffer = Buffer.alloc(0)): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let buf = initial;
    if (buf.length >= n) return resolve(buf);
    const onData = (c: Buffer): void => {
      buf = Buffer.concat([buf, c]);
      if (buf.length >= n) {
        s.off('data', onData);
        resolve(buf);
      }
    };
    s.on('data', onData);
    s.once('close', () => reject(new Error(`closed after ${buf.length} bytes`)));
  });
}

function waitClosed(s: Socket): Promise<void> {
  return new Promise((r) => (s.destroyed ? r() : s.once('close', () => r())));
}

async function until(cond: () => boolean, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

const fixtureRule = (extra: Partial<EgressRule> = {}): EgressRule => ({
  host: 'git.fixture.test',
  ports: [echoPort],
  allowPrivate: true,
  ...extra,
});

// ---------------------------------------------------------------------------------------------

describe('isPrivateAddress', () => {
  const cases: Array<[string, boolean]> = [
    // IPv4 private / special
    ['0.0.0.0', true],
    ['0.1.2.3', true],
    ['10.0.0.1', true],
    ['10.255.255.255', true],
    ['100.64.0.1', true],
    ['100.127.255.255', true],
    ['127.0.0.1', true],
    ['127.255.255.254', true],
    ['169.254.169.254', true],
    ['172.16.0.1', true],
    ['172.31.255.255', true],
    ['192.0.0.8', true],
    ['192.88.99.1', true],
    ['192.168.1.1', true],
    ['198.18.0.1', true],
    ['198.19.255.255', true],
    ['224.0.0.1', true],
    ['239.255.255.250', true],
    ['240.0.0.1', true],
    ['255.255.255.255', true],
    // IPv4 public, edges just outside the private ranges
    ['1.1.1.1', false],
    ['8.8.8.8', false],
    ['9.255.255.255', false],
    ['11.0.0.0', false],
    ['100.63.255.255', false],
    ['100.128.0.0', false],
    ['126.255.255.255', false],
    ['128.0.0.0', false],
    ['169.253.255.255', false],
    ['172.15.255.255', false],
    ['172.32.0.0', false],
    ['192.167.255.255', false],
    ['192.169.0.0', false],
    ['198.17.255.255', false],
    ['198.20.0.0', false],
    ['223.255.255.255', false],
    ['104.16.0.35', false],
    // documentation ranges: deliberately allowed (see PRIVATE_V4)
    ['192.0.2.1', false],
    ['198.51.100.7', false],
    ['203.0.113.80', false],
    // IPv6
    ['::', true],
    ['::1', true],
    ['0:0:0:0:0:0:0:1', true],
    ['[::1]', true],
    ['::127.0.0.1', true], // IPv4-compatible, deprecated
    ['fe80::1', true],
    ['febf:ffff::1', true],
    ['fec0::1', true],
    ['fc00::1', true],
    ['fd00::2', true],
    ['fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', true],
    ['ff02::1', true],
    ['ff05::1:3', true],
    ['100::1', true],
    ['64:ff9b:1::1', true],
    ['2001::1', true], // Teredo
    ['2001:1::1', true],
    ['2001:10::1', true], // ORCHID
    ['2002:7f00:1::1', true], // 6to4 of 127.0.0.1
    ['2002:808:808::1', true], // 6to4 refused whole
    ['2606:4700::6810:123', false],
    ['2a04:4e42::223', false],
    ['2001:200::1', false],
    ['2001:db8::1', false], // documentation
    ['3fff::1', false], // documentation
    ['3fff:ffff::1', false],
    ['4000::1', true], // outside 2000::/3
    // IPv4-mapped IPv6
    ['::ffff:127.0.0.1', true],
    ['::ffff:7f00:1', true],
    ['::FFFF:10.0.0.1', true],
    ['::ffff:169.254.169.254', true],
    ['::ffff:192.168.0.1', true],
    ['0:0:0:0:0:ffff:100.64.0.1', true],
    ['::ffff:8.8.8.8', false],
    ['::ffff:0808:0808', false],
    // NAT64 well-known prefix: judged by the embedded IPv4
    ['64:ff9b::10.0.0.1', true],
    ['64:ff9b::7f00:1', true],
    ['64:ff9b::8.8.8.8', false],
    // not strict literals: fail closed
    ['fe80::1%eth0', true],
    ['127.1', true],
    ['0x7f.0.0.1', true],
    ['2130706433', true],
    ['010.0.0.1', true],
    ['1.2.3.4 ', true],
    ['localhost', true],
    ['', true],
    ['::ffff:1.2.3', true],
  ];
  it.each(cases)('%s -> %s', (ip, expected) => {
    expect(isPrivateAddress(ip)).toBe(expected);
  });
});

describe('DEFAULT_REGISTRY_RULES', () => {
  it('is the minimal frozen registry set on 443 without private access', () => {
    expect(DEFAULT_REGISTRY_RULES.map((r) => r.host).sort()).toEqual(
      ['files.pythonhosted.org', 'pypi.org', 'registry.npmjs.org'].sort(),
    );
    for (const r of DEFAULT_REGISTRY_RULES) {
      expect(r.ports ?? [443]).toEqual([443]);
      expect(r.allowPrivate ?? false).toBe(false);
    }
    expect(Object.isFrozen(DEFAULT_REGISTRY_RULES)).toBe(true);
  });
});

describe('egress proxy', () => {
  it('tunnels to an allowPrivate host: bytes flow both ways, decision logged', async () => {
    const h = await harness([fixtureRule()], { 'git.fixture.test': ['127.0.0.1'] });
    const t = await openTunnel(h.socketPath, `git.fixture.test:${echoPort}`);
    expect(t.head).toBe('HTTP/1.1 200 Connection Established');
    t.socket.write('hello through the tunnel');
    expect((await readBytes(t.socket, 24, t.rest)).toString()).toBe('hello through the tunnel');
    const big = Buffer.alloc(256 * 1024, 7);
    t.socket.write(big);
    expect((await readBytes(t.socket, big.length)).equals(big)).toBe(true);
    expect(h.lookups).toEqual(['git.fixture.test']);
    expect(h.decisions).toHaveLength(1);
    expect(h.decisions[0]).toMatchObject({
      workspaceId: 'ws-test',
      method: 'CONNECT',
      host: 'git.fixture.test',
      port: echoPort,
      allowed: true,
      resolved: '127.0.0.1',
    });
    expect(h.decisions[0]!.reason).toContain('git.fixture.test');
    expect(Number.isNaN(Date.parse(h.decisions[0]!.at))).toBe(false);
    // Client closes: the upstream side of the tunnel closes too.
    expect(echoConns.size).toBe(1);
    t.socket.destroy();
    await until(() => echoConns.size === 0);
  });

  it('forwards bytes sent right after the CONNECT header', async () => {
    const h = await harness([fixtureRule()], { 'git.fixture.test': ['127.0.0.1'] });
    const t = await openTunnel(h.socketPath, `git.fixture.test:${echoPort}`, 'early-bytes');
    expect(t.status).toBe(200);
    expect((await readBytes(t.socket, 11, t.rest)).toString()).toBe('early-bytes');
    t.socket.destroy();
  });

  it('closes the client when the upstream closes', async () => {
    const h = await harness([fixtureRule()], { 'git.fixture.test': ['127.0.0.1'] });
    const t = await openTunnel(h.socketPath, `git.fixture.test:${echoPort}`);
    expect(t.status).toBe(200);
    await until(() => echoConns.size === 1);
    for (const s of echoConns) s.destroy();
    await waitClosed(t.socket);
  });

  it('propagates a half-close and still delivers the reply', async () => {
    const h = await harness([fixtureRule()], { 'git.fixture.test': ['127.0.0.1'] });
    const t = await openTunnel(h.socketPath, `git.fixture.test:${echoPort}`);
    const chunks: Buffer[] = [t.rest];
    t.socket.on('data', (c: Buffer) => chunks.push(c));
    t.socket.end('last words');
    await waitClosed(t.socket);
    expect(Buffer.concat(chunks).toString()).toBe('last words');
  });

  it('refuses the same host without allowPrivate because it resolves to loopback', async () => {
    const h = await harness([fixtureRule({ allowPrivate: false })], { 'git.fixture.test': ['127.0.0.1'] });
    const r = await rawRequest(h.socketPath, `CONNECT git.fixture.test:${echoPort} HTTP/1.1\r\n\r\n`);
    expect(r.status).toBe(403);
    expect(r.text).toContain('atelier egress: host resolves to a private address (127.0.0.1)');
    expect(h.lookups).toEqual(['git.fixture.test']);
    expect(h.decisions).toMatchObject([{ method: 'CONNECT', host: 'git.fixture.test', allowed: false }]);
    expect(h.decisions[0]!.reason).toContain('private');
    expect(echoConns.size).toBe(0);
  });

  it('refuses when any resolved address is private (mapped, link-local, v6)', async () => {
    const h = await harness([{ host: 'pkg.example.test' }], {
      'pkg.example.test': ['::ffff:127.0.0.1', '169.254.169.254'],
      'v6.example.test': ['fd00::1'],
    });
    h.proxy.setRules([{ host: 'pkg.example.test' }, { host: 'v6.example.test' }]);
    const a = await rawRequest(h.socketPath, 'CONNECT pkg.example.test:443 HTTP/1.1\r\n\r\n');
    expect(a.status).toBe(403);
    expect(a.text).toContain('private address (::ffff:127.0.0.1)');
    const b = await rawRequest(h.socketPath, 'CONNECT v6.example.test:443 HTTP/1.1\r\n\r\n');
    expect(b.status).toBe(403);
    expect(h.decisions.map((d) => d.allowed)).toEqual([false, false]);
  });

  it('refuses a host not in the rules before any DNS lookup', async () => {
    const h = await harness([fixtureRule()], { 'evil.test': ['127.0.0.1'] });
    const r = await rawRequest(h.socketPath, 'CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n');
    expect(r.status).toBe(403);
    expect(r.text).toMatch(/^HTTP\/1\.1 403 Forbidden\r\n/);
    expect(r.text).toContain('atelier egress: host not in the allowed registries');
    expect(h.lookups).toEqual([]);
    expect(h.decisions).toMatchObject([
      { method: 'CONNECT', host: 'evil.test', port: 443, allowed: false, reason: 'host not in the allowed registries' },
    ]);
    expect(h.decisions[0]!.resolved).toBeUndefined();
  });

  it('refuses IP literals unless a rule names that exact IP', async () => {
    const h = await harness([{ host: 'registry.example.test' }], {});
    for (const target of ['1.1.1.1:443', '[::1]:443', '[2606:4700::1111]:443', '[::ffff:1.1.1.1]:443']) {
      const r = await rawRequest(h.socketPath, `CONNECT ${target} HTTP/1.1\r\n\r\n`);
      expect(r.status, target).toBe(403);
      expect(r.text).toContain('IP address not named by any rule');
    }
    expect(h.lookups).toEqual([]);
    expect(h.decisions).toHaveLength(4);
    expect(h.decisions.every((d) => !d.allowed)).toBe(true);
    expect(h.decisions.map((d) => d.host)).toEqual(['1.1.1.1', '::1', '2606:4700::1111', '::ffff:101:101']);
    expect(h.decisions[0]).toMatchObject({ port: 443 });

    // A rule naming the exact IP (a loopback fixture) allows it; IPv6 compares by value.
    h.proxy.setRules([
      { host: '127.0.0.1', ports: [echoPort], allowPrivate: true },
      { host: '::1', ports: [echoPort] },
    ]);
    const t = await openTunnel(h.socketPath, `127.0.0.1:${echoPort}`);
    expect(t.status).toBe(200);
    t.socket.write('ip');
    expect((await readBytes(t.socket, 2, t.rest)).toString()).toBe('ip');
    t.socket.destroy();
    expect(h.decisions.at(-1)).toMatchObject({ host: '127.0.0.1', allowed: true, resolved: '127.0.0.1' });
    // The ::1 rule lacks allowPrivate: matched by value, then refused as private, never connected.
    const r = await rawRequest(h.socketPath, `CONNECT [0:0::1]:${echoPort} HTTP/1.1\r\n\r\n`);
    expect(r.status).toBe(403);
    expect(r.text).toContain('private address (::1)');
    expect(h.lookups).toEqual([]);
  });

  it('refuses a port that the rule does not list (default only 443)', async () => {
    const h = await harness([{ host: 'registry.example.test' }], { 'registry.example.test': ['127.0.0.1'] });
    for (const port of [80, 8443, 22]) {
      const r = await rawRequest(h.socketPath, `CONNECT registry.example.test:${port} HTTP/1.1\r\n\r\n`);
      expect(r.status).toBe(403);
      expect(r.text).toContain(`port ${port} not allowed`);
    }
    expect(h.lookups).toEqual([]);
    expect(h.decisions.map((d) => [d.port, d.allowed])).toEqual([
      [80, false],
      [8443, false],
      [22, false],
    ]);
  });

  it('refuses plain HTTP requests with 403 and logs them', async () => {
    const h = await harness([{ host: 'registry.example.test', ports: [80, 443] }], {});
    const r = await rawRequest(
      h.socketPath,
      'GET http://registry.example.test/is-number HTTP/1.1\r\nHost: registry.example.test\r\n\r\n',
    );
    expect(r.status).toBe(403);
    expect(r.text).toContain('atelier egress: plain HTTP is not allowed');
    const p = await rawRequest(h.socketPath, 'POST https://registry.example.test:8443/x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc');
    expect(p.status).toBe(403);
    expect(h.lookups).toEqual([]);
    expect(h.decisions).toMatchObject([
      { method: 'GET', host: 'registry.example.test', port: 80, allowed: false },
      { method: 'POST', host: 'registry.example.test', port: 8443, allowed: false },
    ]);
  });

  it('answers malformed requests with 400 and logs them', async () => {
    const h = await harness([{ host: 'registry.example.test' }], { 'registry.example.test': ['127.0.0.1'] });
    const bad: Array<string | Buffer> = [
      'garbage\r\n\r\n',
      'GET / HTTP/1.1\r\nHost: x\r\n\r\n', // origin-form: not a proxy request
      'CONNECT registry.example.test HTTP/1.1\r\n\r\n', // no port
      'CONNECT registry.example.test:0 HTTP/1.1\r\n\r\n',
      'CONNECT registry.example.test:65536 HTTP/1.1\r\n\r\n',
      'CONNECT registry.example.test:+443 HTTP/1.1\r\n\r\n',
      'CONNECT user@registry.example.test:443 HTTP/1.1\r\n\r\n',
      'CONNECT user:pw@registry.example.test:443 HTTP/1.1\r\n\r\n',
      'CONNECT registry_example.test:443 HTTP/1.1\r\n\r\n',
      'CONNECT registry..example.test:443 HTTP/1.1\r\n\r\n',
      'CONNECT registry.example.test..:443 HTTP/1.1\r\n\r\n',
      'CONNECT -registry.example.test:443 HTTP/1.1\r\n\r\n',
      'CONNECT registry.example.test%2f:443 HTTP/1.1\r\n\r\n',
      'CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\n\r\n',
      'CONNECT 127.1:443 HTTP/1.1\r\n\r\n', // inet_aton shorthand
      'CONNECT 2130706433:443 HTTP/1.1\r\n\r\n',
      'CONNECT example.0x7f:443 HTTP/1.1\r\n\r\n',
      'CONNECT registry.example.test:443 HTTP/2.0\r\n\r\n',
      'CONNECT registry.example.test:443 HTTP/1.1\r\n bad folding\r\n\r\n',
      'CONNECT registry.example.test:443 HTTP/1.1\nHost: x\n\n', // bare LF
      Buffer.from('CONNECT registry.example.test:443 HTTP/1.1\r\nX: \u00e9\r\n\r\n', 'utf8'),
      Buffer.from('CONNECT registry.\u212Aexample.test:443 HTTP/1.1\r\n\r\n', 'utf8'), // Kelvin sign
      Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00]), // a TLS ClientHello without CONNECT
    ];
    for (const raw of bad) {
      const r = await rawRequest(h.socketPath, raw);
      expect(r.status, JSON.stringify(raw.toString())).toBe(400);
      expect(r.text).toContain('atelier egress: malformed');
    }
    expect(h.lookups).toEqual([]);
    expect(h.decisions).toHaveLength(bad.length);
    expect(h.decisions.every((d) => !d.allowed && d.reason.startsWith('malformed'))).toBe(true);
  });

  it('normalises case and one trailing dot before matching and resolving', async () => {
    const h = await harness([{ host: 'Git.Fixture.Test.', ports: [echoPort], allowPrivate: true }], {
      'git.fixture.test': ['127.0.0.1'],
    });
    for (const target of ['GIT.fixture.TEST', 'git.fixture.test.']) {
      const t = await openTunnel(h.socketPath, `${target}:${echoPort}`);
      expect(t.status, target).toBe(200);
      t.socket.destroy();
    }
    expect(h.lookups).toEqual(['git.fixture.test', 'git.fixture.test']);
    expect(h.decisions.map((d) => d.host)).toEqual(['git.fixture.test', 'git.fixture.test']);
  });

  it('matches a wildcard rule on subdomains only, not the apex', async () => {
    const h = await harness([{ host: '*.fixture.test', ports: [echoPort], allowPrivate: true }], {
      'a.fixture.test': ['127.0.0.1'],
      'x.y.fixture.test': ['127.0.0.1'],
      'fixture.test': ['127.0.0.1'],
      'evilfixture.test': ['127.0.0.1'],
    });
    for (const host of ['a.fixture.test', 'x.y.fixture.test']) {
      const t = await openTunnel(h.socketPath, `${host}:${echoPort}`);
      expect(t.status, host).toBe(200);
      t.socket.destroy();
    }
    for (const host of ['fixture.test', 'evilfixture.test', 'fixture.test.evil.test']) {
      const r = await rawRequest(h.socketPath, `CONNECT ${host}:${echoPort} HTTP/1.1\r\n\r\n`);
      expect(r.status, host).toBe(403);
      expect(r.text).toContain('host not in the allowed registries');
    }
    expect(h.lookups).toEqual(['a.fixture.test', 'x.y.fixture.test']);
    expect(h.decisions.map((d) => d.allowed)).toEqual([true, true, false, false, false]);
  });

  it('rejects invalid rules; setRules is atomic and affects new connections only', async () => {
    const h = await harness([fixtureRule()], { 'git.fixture.test': ['127.0.0.1'], 'other.test': ['127.0.0.1'] });
    const t = await openTunnel(h.socketPath, `git.fixture.test:${echoPort}`);
    expect(t.status).toBe(200);

    for (const rules of [
      [{ host: '*' }],
      [{ host: '*.com' }],
      [{ host: 'a b' }],
      [{ host: 'x.test', ports: [0] }],
      [{ host: 'x.test', ports: [] }],
      [{ host: 'x.test', ports: [443.5] }],
      [{ host: 'x.test' }, { host: 'user@x.test' }],
    ] as EgressRule[][]) {
      expect(() => h.proxy.setRules(rules), JSON.stringify(rules)).toThrow(TypeError);
    }
    await expect(
      startEgressProxy({ socketPath: path.join(dir, 'never.sock'), workspaceId: 'w', rules: [{ host: '*.com' }], onDecision: () => {} }),
    ).rejects.toThrow(TypeError);
    // A failed setRules kept the old rules.
    const still = await openTunnel(h.socketPath, `git.fixture.test:${echoPort}`);
    expect(still.status).toBe(200);
    still.socket.destroy();

    h.proxy.setRules([{ host: 'other.test', ports: [echoPort], allowPrivate: true }]);
    const r = await rawRequest(h.socketPath, `CONNECT git.fixture.test:${echoPort} HTTP/1.1\r\n\r\n`);
    expect(r.status).toBe(403);
    const o = await openTunnel(h.socketPath, `other.test:${echoPort}`);
    expect(o.status).toBe(200);
    o.socket.destroy();
    // The tunnel opened under the old rules keeps working.
    t.socket.write('still here');
    expect((await readBytes(t.socket, 10, t.rest)).toString()).toBe('still here');
    t.socket.destroy();
  });

  it('caps concurrent tunnels (503) and frees the slot when a tunnel closes', async () => {
    const h = await harness([fixtureRule()], { 'git.fixture.test': ['127.0.0.1'] }, { maxTunnels: 1 });
    const t = await openTunnel(h.socketPath, `git.fixture.test:${echoPort}`);
    expect(t.status).toBe(200);
    const r = await rawRequest(h.socketPath, `CONNECT git.fixture.test:${echoPort} HTTP/1.1\r\n\r\n`);
    expect(r.status).toBe(503);
    expect(r.text).toContain('too many open tunnels');
    t.socket.destroy();
    await waitClosed(t.socket);
    await until(() => echoConns.size === 0);
    const again = await openTunnel(h.socketPath, `git.fixture.test:${echoPort}`);
    expect(again.status).toBe(200);
    again.socket.destroy();
    expect(h.decisions.map((d) => d.allowed)).toEqual([true, false, true]);
  });

  it('limits the header size (431) and the header time (408)', async () => {
    const h = await harness([fixtureRule()], {}, { maxHeaderBytes: 1024, headerTimeoutMs: 200 });
    const big = `CONNECT git.fixture.test:${echoPort} HTTP/1.1\r\nX-Pad: ${'a'.repeat(2000)}\r\n\r\n`;
    const r = await rawRequest(h.socketPath, big);
    expect(r.status).toBe(431);
    const s = await rawRequest(h.socketPath, `CONNECT git.fixture.test:${echoPort} HTTP/1.1\r\n`);
    expect(s.status).toBe(408);
    expect(h.decisions.map((d) => d.reason)).toEqual(['request header too large', 'request header timeout']);
    // A 16 KiB default is enough for an ordinary CONNECT with a few headers.
    const h2 = await harness([fixtureRule()], { 'git.fixture.test': ['127.0.0.1'] });
    const t = await openTunnel(h2.socketPath, `git.fixture.test:${echoPort}`, '', `User-Agent: npm/10 ${'x'.repeat(8000)}\r\n`);
    expect(t.status).toBe(200);
    t.socket.destroy();
  });

  it('answers 504 when resolving or connecting exceeds connectTimeoutMs, 502 on DNS or connect failure', async () => {
    const socketPath = path.join(dir, `p${counter++}.sock`);
    const decisions: EgressDecision[] = [];
    const proxy = await startEgressProxy({
      socketPath,
      workspaceId: 'ws-test',
      rules: [fixtureRule(), { host: 'slow.test', ports: [echoPort], allowPrivate: true }, { host: 'nx.test' }],
      onDecision: (d) => decisions.push(d),
      connectTimeoutMs: 200,
      resolver: async (host) => {
        if (host === 'slow.test') return new Promise<string[]>(() => {}); // never answers
        if (host === 'nx.test') throw Object.assign(new Error('nx'), { code: 'ENOTFOUND' });
        return ['127.0.0.1'];
      },
    });
    opened.push(proxy);
    const started = Date.now();
    const slow = await rawRequest(socketPath, `CONNECT slow.test:${echoPort} HTTP/1.1\r\n\r\n`);
    expect(slow.status).toBe(504);
    expect(Date.now() - started).toBeLessThan(5000);
    const nx = await rawRequest(socketPath, 'CONNECT nx.test:443 HTTP/1.1\r\n\r\n');
    expect(nx.status).toBe(502);
    expect(nx.text).toContain('DNS lookup failed: ENOTFOUND');

    // A closed loopback port: refused connection -> 502 with the attempted address.
    const closedServer = net.createServer();
    await new Promise<void>((r) => closedServer.listen(0, '127.0.0.1', r));
    const closedPort = (closedServer.address() as AddressInfo).port;
    await new Promise<void>((r) => closedServer.close(() => r()));
    proxy.setRules([fixtureRule({ ports: [closedPort] })]);
    const refused = await rawRequest(socketPath, `CONNECT git.fixture.test:${closedPort} HTTP/1.1\r\n\r\n`);
    expect(refused.status).toBe(502);
    expect(refused.text).toContain('connect failed: ECONNREFUSED');
    expect(decisions).toMatchObject([
      { host: 'slow.test', allowed: false, reason: 'timed out resolving the host' },
      { host: 'nx.test', allowed: false },
      { host: 'git.fixture.test', allowed: false, resolved: '127.0.0.1' },
    ]);
  });

  it('falls back to the next resolved address without resolving again', async () => {
    // Nothing listens on 127.0.0.2 (the echo server is bound to 127.0.0.1 only): refused, then 127.0.0.1.
    const h = await harness([fixtureRule()], { 'git.fixture.test': ['127.0.0.2', '127.0.0.1'] });
    const t = await openTunnel(h.socketPath, `git.fixture.test:${echoPort}`);
    expect(t.status).toBe(200);
    t.socket.destroy();
    expect(h.lookups).toHaveLength(1);
    expect(h.decisions[0]).toMatchObject({ allowed: true, resolved: '127.0.0.1' });
  });

  it('a throwing onDecision does not break the proxy', async () => {
    const socketPath = path.join(dir, `p${counter++}.sock`);
    const proxy = await startEgressProxy({
      socketPath,
      workspaceId: 'w',
      rules: [],
      onDecision: () => {
        throw new Error('logger down');
      },
    });
    opened.push(proxy);
    expect((await rawRequest(socketPath, 'CONNECT a.test:443 HTTP/1.1\r\n\r\n')).status).toBe(403);
    expect((await rawRequest(socketPath, 'CONNECT a.test:443 HTTP/1.1\r\n\r\n')).status).toBe(403);
  });

  it('close() stops listening, destroys tunnels and removes the socket file', async () => {
    const h = await harness([fixtureRule()], { 'git.fixture.test': ['127.0.0.1'] });
    expect(existsSync(h.socketPath)).toBe(true);
    const t = await openTunnel(h.socketPath, `git.fixture.test:${echoPort}`);
    expect(t.status).toBe(200);
    await until(() => echoConns.size === 1);
    await h.proxy.close();
    await h.proxy.close(); // idempotent
    await waitClosed(t.socket);
    await until(() => echoConns.size === 0);
    expect(existsSync(h.socketPath)).toBe(false);
    await expect(connectUnix(h.socketPath)).rejects.toThrow();
  });

  it('replaces a stale socket file but never a live socket or a regular file', async () => {
    const stale = path.join(dir, `stale${counter++}.sock`);
    const first = await startEgressProxy({ socketPath: stale, workspaceId: 'w', rules: [], onDecision: () => {} });
    // A second proxy on a live socket fails.
    await expect(
      startEgressProxy({ socketPath: stale, workspaceId: 'w', rules: [], onDecision: () => {} }),
    ).rejects.toThrow(/in use/);
    await first.close();
    // Leave a stale socket file behind: a process that listened on it and was SIGKILLed.
    const child = spawn(process.execPath, [
      '-e',
      `require('node:net').createServer().listen(${JSON.stringify(stale)}, () => console.log('up'))`,
    ]);
    await new Promise<void>((r) => child.stdout.once('data', () => r()));
    child.kill('SIGKILL');
    await new Promise<void>((r) => child.once('exit', () => r()));
    expect(existsSync(stale)).toBe(true);
    const second = await startEgressProxy({ socketPath: stale, workspaceId: 'w', rules: [], onDecision: () => {} });
    opened.push(second);
    const regular = path.join(dir, `regular${counter++}`);
    await writeFile(regular, 'x');
    await expect(
      startEgressProxy({ socketPath: regular, workspaceId: 'w', rules: [], onDecision: () => {} }),
    ).rejects.toThrow(/not a socket/);
    expect(existsSync(regular)).toBe(true);
  });

  it('applies socketMode to the socket file', async () => {
    const h = await harness([], {}, { socketMode: 0o666 });
    expect(statSync(h.socketPath).mode & 0o777).toBe(0o666);
  });
});

describe('egress proxy against the real npm registry', () => {
  it('CONNECT registry.npmjs.org:443 with the default rules and real DNS, then HTTPS GET /is-number -> 200', async (ctx) => {
    try {
      await lookup('registry.npmjs.org');
    } catch {
      ctx.skip('no DNS for registry.npmjs.org (offline)');
    }
    const socketPath = path.join(dir, `real${counter++}.sock`);
    const decisions: EgressDecision[] = [];
    const proxy = await startEgressProxy({
      socketPath,
      workspaceId: 'ws-real',
      rules: DEFAULT_REGISTRY_RULES,
      onDecision: (d) => decisions.push(d),
    });
    opened.push(proxy);
    const t = await openTunnel(socketPath, 'registry.npmjs.org:443');
    expect(t.status).toBe(200);
    expect(t.rest.length).toBe(0);
    const secure = tls.connect({ socket: t.socket, servername: 'registry.npmjs.org' });
    await new Promise<void>((resolve, reject) => {
      secure.once('secureConnect', () => resolve());
      secure.once('error', reject);
    });
    const chunks: Buffer[] = [];
    secure.on('data', (c: Buffer) => chunks.push(c));
    const ended = new Promise<void>((r) => secure.once('close', () => r()));
    secure.write(
      'GET /is-number HTTP/1.1\r\nHost: registry.npmjs.org\r\nAccept: application/json\r\nUser-Agent: atelier-egress-test\r\nConnection: close\r\n\r\n',
    );
    await ended;
    const response = Buffer.concat(chunks).toString('utf8');
    expect(response).toMatch(/^HTTP\/1\.1 200 /);
    expect(response).toContain('"is-number"');
    expect(decisions).toHaveLength(1);
    expect(decisions[0]).toMatchObject({ host: 'registry.npmjs.org', port: 443, allowed: true });
    expect(isPrivateAddress(decisions[0]!.resolved!)).toBe(false);
  });
});
