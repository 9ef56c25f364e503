/**
 * Behind a reverse proxy (issue #42 item 11), through the real `atelier serve` and real HTTP
 * proxies on loopback: the service trusts 127.0.0.1 (--trusted-proxies); the proxies listen there,
 * connect to the service from there and append the client they saw to X-Forwarded-For or
 * Forwarded, naming each client by a documentation address (203.0.113.N, or 2001:db8:0:N::1 with
 * a port in Forwarded) made from the loopback address it came from (127.0.0.N): header values only,
 * no traffic goes to them. Direct clients leave from other loopback addresses, which are not trusted.
 *
 * One client's failed logins lock that client only (the proxy and the others log in), the audit
 * log and the dashboard name the client, the same headers from an untrusted peer are ignored, the
 * /oauth/authorize fetch limit counts each client on its own, and hostile headers (garbage,
 * thousands of hops, IPv6 brackets and ports, obfuscated Forwarded identifiers, high bytes) never
 * break a request and fall back to the proxy's own address.
 */
import { createServer, request as httpRequestRaw, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dashboardLogin, httpRequest, runCli, serveExpectingFailure, startService, type Service } from './harness.js';
import { cimdDocument, startCimdHost, type CimdHost } from '../fixtures/cimd-host.js';
import { requestFrom } from './from-address.js';

const PASSWORD = 'correct horse battery staple';
const REDIRECT = 'http://127.0.0.1:9/callback';

/** An HTTP request to 127.0.0.1:`port` (the service or a proxy) leaving from the loopback address `from`. */
const send = (port: number, from: string, method: string, path: string, headers: Record<string, string> = {}, body?: string) => requestFrom(`http://127.0.0.1:${port}`, from, method, path, headers, body);

interface Proxy {
  port: number;
  close(): Promise<void>;
}

/**
 * A reverse proxy as nginx's `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for` (or a
 * Forwarded one) works: what the client sent is kept, the client it saw is appended.
 */
async function startProxy(servicePort: number, mode: 'x-forwarded-for' | 'forwarded'): Promise<Proxy> {
  const server: Server = createServer((req, res) => {
    const n = (req.socket.remoteAddress ?? '').split('.').pop();
    const headers = { ...req.headers };
    const seen = mode === 'x-forwarded-for' ? `203.0.113.${n}` : `for="[2001:db8:0:${n}::1]:${req.socket.remotePort}";proto=http`;
    headers[mode] = [req.headers[mode], seen].filter(Boolean).join(', ');
    const up = httpRequestRaw({ host: '127.0.0.1', port: servicePort, localAddress: '127.0.0.1', method: req.method, path: req.url, headers, agent: false }, (r) => {
      res.writeHead(r.statusCode!, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as AddressInfo).port, close: () => new Promise((r) => server.close(() => r())) };
}

/** A service whose owner password is set (before start: setting it ends every session). */
async function serviceWithPassword(args: string[], env: Record<string, string>): Promise<Service> {
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-proxy-'));
  const pw = await runCli(['owner', 'set-password', '--data-dir', dataDir], { input: PASSWORD + '\n' });
  expect(pw.code, pw.stderr).toBe(0);
  return startService({ dataDir, args: ['--unsafe-dev-no-sandbox', ...args], env });
}

let svc: Service;
let host: CimdHost;
let xff: Proxy;
let fwd: Proxy;
let owner: { cookie: string; csrf: string };
const servicePort = () => Number(new URL(svc.url).port);
const login = (port: number, from: string, password: string, headers: Record<string, string> = {}) => send(port, from, 'POST', '/login', { 'content-type': 'application/json', ...headers }, JSON.stringify({ password }));

async function audit(action: string): Promise<Array<Record<string, any>>> {
  return JSON.parse((await httpRequest(svc.url, 'GET', `/api/v1/audit-log?action=${action}&limit=200`, { cookie: owner.cookie })).body).entries;
}

/** Wrong passwords until the answer is a lockout of the client's own address (2 failures lock: --login-lockout-failures 2). */
async function lockOut(port: number, from: string, headers: Record<string, string> = {}): Promise<void> {
  expect((await login(port, from, 'wrong 1', headers)).status).toBe(401);
  expect((await login(port, from, 'wrong 2', headers)).status).toBe(401);
  const r = await login(port, from, PASSWORD, headers);
  expect(r.status, r.body).toBe(429);
  expect(JSON.parse(r.body).error.details).toMatchObject({ reason: 'lockout', scope: 'address' });
}

beforeAll(async () => {
  host = await startCimdHost();
  svc = await serviceWithPassword(
    ['--trusted-proxies', '127.0.0.1', '--oauth-cimd-allow-loopback', '--oauth-cimd-ca-file', host.caCertPath, '--oauth-cimd-fetches-per-minute', '1'],
    { ATELIER_LOGIN_LOCKOUT_FAILURES: '2', ATELIER_LOGIN_LOCKOUT_FAILURES_OVERALL: '1000' },
  );
  owner = await dashboardLogin(svc);
  xff = await startProxy(servicePort(), 'x-forwarded-for');
  fwd = await startProxy(servicePort(), 'forwarded');
}, 90_000);

afterAll(async () => {
  await xff?.close();
  await fwd?.close();
  await svc?.dispose();
  await host?.close();
});

describe('behind a trusted reverse proxy', () => {
  it("X-Forwarded-For: one client's failed logins lock that client only; the proxy and other clients log in; audit and dashboard name the client", async () => {
    await lockOut(xff.port, '127.0.0.21');
    // Another client behind the same proxy, and the proxy's own address, are not locked.
    expect((await login(xff.port, '127.0.0.22', PASSWORD)).status).toBe(200);
    expect((await login(servicePort(), '127.0.0.1', PASSWORD)).status).toBe(200);

    const lockouts = (await audit('login_lockout')).filter((e) => e.target === '203.0.113.21');
    expect(lockouts).toHaveLength(1);
    expect(lockouts[0]!.reason).toMatch(/^2 failed password logins from 203\.0\.113\.21: password login locked for this address/);
    const logins = await audit('login');
    expect(logins.filter((e) => e.target === '203.0.113.21' && e.outcome === 'refused')).toHaveLength(2);
    expect(logins.some((e) => e.target === '203.0.113.22' && e.outcome === 'ok')).toBe(true);
    expect(logins.some((e) => e.target === '127.0.0.1' && e.outcome === 'ok')).toBe(true);
    const overview = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/overview', { cookie: owner.cookie })).body);
    const row = overview.login.addresses.find((a: { address: string }) => a.address === '203.0.113.21');
    expect(row?.lockedUntil).toBeTruthy();
    expect(overview.login.addresses.some((a: { address: string }) => a.address === '127.0.0.1')).toBe(false);
  });

  it('Forwarded with bracketed IPv6 and ports: the client is its /64, locked on its own', async () => {
    await lockOut(fwd.port, '127.0.0.23');
    expect((await login(fwd.port, '127.0.0.24', PASSWORD)).status).toBe(200);
    const lockouts = await audit('login_lockout');
    expect(lockouts.some((e) => e.target === '2001:db8:0:23::/64')).toBe(true);
    expect((await audit('login')).some((e) => e.target === '2001:db8:0:24::/64' && e.outcome === 'ok')).toBe(true);
  });

  it('the same headers from an untrusted peer are ignored; a client that forges them through the proxy is still itself', async () => {
    // 127.0.0.31 is not a trusted proxy: its X-Forwarded-For and Forwarded naming client 203.0.113.22 count for nothing.
    const forged = { 'x-forwarded-for': '203.0.113.22', forwarded: 'for=203.0.113.22' };
    await lockOut(servicePort(), '127.0.0.31', forged);
    expect((await audit('login_lockout')).some((e) => e.target === '127.0.0.31')).toBe(true);
    expect((await login(xff.port, '127.0.0.22', PASSWORD)).status).toBe(200); // the client it named is not locked
    // Through the proxy, a forged hop is to the left of the one the proxy appended: never reached.
    await lockOut(xff.port, '127.0.0.32', { 'x-forwarded-for': '203.0.113.22' });
    expect((await audit('login_lockout')).some((e) => e.target === '203.0.113.32')).toBe(true);
    expect((await login(xff.port, '127.0.0.22', PASSWORD)).status).toBe(200);
  });

  it('the /oauth/authorize fetch limit counts each client behind the proxy on its own', async () => {
    const url = `${host.origin}/proxy/client.json`;
    host.set('/proxy/client.json', { body: cimdDocument(url, REDIRECT), headers: { 'cache-control': 'no-store' } });
    const path = `/oauth/authorize?${new URLSearchParams({ response_type: 'code', client_id: url, redirect_uri: REDIRECT, state: 's', code_challenge: 'x'.repeat(43), code_challenge_method: 'S256', resource: svc.mcpUrl })}`;
    // (Host as the service's own: the issuer, and so the resource, is taken from it, as a proxy keeping Host sends it.)
    // --oauth-cimd-fetches-per-minute 1: the first request of a client fetches, its second within the minute is refused without a fetch.
    expect((await send(xff.port, '127.0.0.41', 'GET', path, { host: new URL(svc.url).host })).status).toBe(303);
    const fetched = host.requests('/proxy/client.json').length;
    const again = await send(xff.port, '127.0.0.41', 'GET', path, { host: new URL(svc.url).host });
    expect(again.status).toBe(429);
    expect(Number(again.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(again.body).toMatch(/too many client metadata documents were fetched for requests from this address \(at most 1 a minute\)/);
    expect(host.requests('/proxy/client.json').length).toBe(fetched);
    // Another client behind the same proxy has its own allowance.
    expect((await send(xff.port, '127.0.0.42', 'GET', path, { host: new URL(svc.url).host })).status).toBe(303);
    expect(host.requests('/proxy/client.json').length).toBe(fetched + 1);
  });
});

describe('the settings', () => {
  it('a bad --trusted-proxies, --oauth-cimd-dns-servers or --oauth-cimd-fetches-per-minute stops start-up naming the setting and the entry', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'atelier-proxy-cfg-'));
    try {
      const cases: Array<[string[], Record<string, string>, RegExp]> = [
        [['--trusted-proxies', '127.0.0.1,proxy.internal'], {}, /invalid setting --trusted-proxies \/ ATELIER_TRUSTED_PROXIES: "proxy\.internal" must be an IP address or a CIDR/],
        [[], { ATELIER_TRUSTED_PROXIES: '10.0.0.0/99' }, /invalid setting --trusted-proxies \/ ATELIER_TRUSTED_PROXIES: "10\.0\.0\.0\/99" has a prefix length over 32/],
        [['--oauth-cimd-dns-servers', 'dns.example'], {}, /invalid setting --oauth-cimd-dns-servers \/ ATELIER_OAUTH_CIMD_DNS_SERVERS: "dns\.example" must be a name server address/],
        [['--oauth-cimd-fetches-per-minute', '0'], {}, /invalid setting --oauth-cimd-fetches-per-minute \/ ATELIER_OAUTH_CIMD_FETCHES_PER_MINUTE: must be an integer from 1 to 100000/],
      ];
      for (const [args, env, why] of cases) {
        const r = await serveExpectingFailure(['--data-dir', dataDir, '--port', '0', '--unsafe-dev-no-sandbox', ...args], env);
        expect(r.code, r.stderr).not.toBe(0);
        expect(r.stderr).toMatch(why);
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe('hostile forwarding headers from the trusted address', () => {
  // A service of its own, whose address limits the table cannot reach (each case is one failed login).
  let hostile: Service;
  let hostileOwner: { cookie: string; csrf: string };
  const port = () => Number(new URL(hostile.url).port);
  beforeAll(async () => {
    hostile = await serviceWithPassword(['--trusted-proxies', '127.0.0.1,fd00::/8'], { ATELIER_LOGIN_LOCKOUT_FAILURES: '1000', ATELIER_LOGIN_LOCKOUT_FAILURES_OVERALL: '100000' });
    hostileOwner = await dashboardLogin(hostile);
  }, 90_000);
  afterAll(async () => {
    await hostile?.dispose();
  });
  const lastLogin = async () => JSON.parse((await httpRequest(hostile.url, 'GET', '/api/v1/audit-log?action=login&limit=1', { cookie: hostileOwner.cookie })).body).entries[0];

  /** Sends raw bytes (what an HTTP client library would refuse to send) and reads the status line. */
  function raw(from: string, head: Buffer): Promise<string> {
    return new Promise((resolve, reject) => {
      const s = connect({ host: '127.0.0.1', port: port(), localAddress: from }, () => s.end(head));
      let got = '';
      s.on('data', (d) => (got += d.toString('latin1')));
      s.on('end', () => resolve(got.split('\r\n', 1)[0]!));
      s.on('error', reject);
    });
  }

  it('never break a request, and fall back to the address that sent them', async () => {
    const pid = hostile.proc.pid;
    const hops = Array.from({ length: 1000 }, (_, i) => `9.9.${i >> 8}.${i & 255}`).join(', ');
    // Each from 127.0.0.1 (trusted) with a wrong password: the audit entry's target is the address used.
    const cases: Array<[Record<string, string>, string]> = [
      [{ 'x-forwarded-for': 'garbage' }, '127.0.0.1'],
      [{ 'x-forwarded-for': `${hops}, 203.0.113.77` }, '203.0.113.77'],
      [{ 'x-forwarded-for': '[2001:db8::5]:8443' }, '2001:db8:0:0::/64'],
      [{ 'x-forwarded-for': '203.0.113.78:65536' }, '127.0.0.1'],
      [{ forwarded: 'for=_hidden' }, '127.0.0.1'],
      [{ forwarded: 'for="_SEVKISEK";proto=https' }, '127.0.0.1'],
      [{ forwarded: 'for=unknown, for=203.0.113.79' }, '203.0.113.79'],
      [{ forwarded: 'for="203.0.113.80' }, '127.0.0.1'],
      [{ forwarded: 'for="[2001:db8:7::1]:80", for=127.0.0.1' }, '2001:db8:7:0::/64'],
      [{ forwarded: 'for=203.0.113.81', 'x-forwarded-for': '203.0.113.82' }, '127.0.0.1'],
      [{ forwarded: ';;,,="\\', 'x-forwarded-for': ',,,' }, '127.0.0.1'],
    ];
    for (const [headers, target] of cases) {
      const what = JSON.stringify(headers).slice(0, 100);
      const r = await login(port(), '127.0.0.1', 'wrong', headers);
      expect(r.status, `${what}: ${r.body.slice(0, 200)}`).toBe(401);
      expect((await lastLogin()).target, what).toBe(target);
      // An authorization request under the same headers is answered too (a page, never a server error).
      const a = await send(port(), '127.0.0.1', 'GET', '/oauth/authorize?client_id=https%3A%2F%2F127.0.0.1%2Fx.json', headers);
      expect(a.status, what).toBe(400);
    }
    // Sent by an untrusted peer, none of them counts: the peer is the client.
    for (const [headers] of cases.slice(0, 3)) {
      expect((await login(port(), '127.0.0.51', 'wrong', headers)).status).toBe(401);
      expect((await lastLogin()).target).toBe('127.0.0.51');
    }
    // Bytes no client library sends: high bytes and a tab in the header values.
    for (const v of [Buffer.from([0xff, 0xfe, 0x2c, 0x80]), Buffer.from('203.0.113.90\t, \t[::1', 'latin1')]) {
      const head = Buffer.concat([Buffer.from(`GET /?login=throttled HTTP/1.1\r\nhost: 127.0.0.1:${port()}\r\nconnection: close\r\nx-forwarded-for: `), v, Buffer.from('\r\nforwarded: for='), v, Buffer.from('\r\n\r\n')]);
      expect(await raw('127.0.0.1', head)).toMatch(/^HTTP\/1\.1 (200|400)/);
    }
    expect((await httpRequest(hostile.url, 'GET', '/healthz')).status).toBe(200);
    expect(hostile.proc.pid).toBe(pid);
    expect(hostile.proc.exitCode).toBeNull();
  });
});
