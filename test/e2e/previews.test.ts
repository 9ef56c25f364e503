/**
 * Preview URLs (issue #33 item 4): a small HTTP server with a WebSocket inside a workspace
 * (started with tasks_run), reached through its preview link with real clients (fetch, a
 * WebSocket handshake and frames over node:http, chromium for the dashboard), and refused without
 * the signature, after expiry, after revoke, for any other port, workspace or host.
 */
import { createHash, randomBytes } from 'node:crypto';
import { Agent, request as agentRequest, request as httpRequestRaw, type IncomingMessage } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { chromium, type Browser, type Page } from 'playwright-core';
import { call, connectV2, httpRequest, runCli, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;
let ws: string;
let ws2: string;

async function ok(name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

/**
 * The workspace's server: HTTP on PORT (GET / answers the request it saw as JSON, /set-cookie
 * sets cookies, /redirect redirects to an absolute path, /ws echoes WebSocket text frames), and
 * a second server on OTHER that a preview of PORT must never reach.
 */
const SERVER = String.raw`
const http = require('node:http');
const crypto = require('node:crypto');
const [port, other] = process.argv.slice(2).map(Number);
const page = '<!doctype html><title>preview</title><body><script src="app.js"></script></body>';
const app = 'fetch("api").then(r=>r.json()).then(j=>{document.title="api:"+j.path;document.body.dataset.seencookie=j.headers.cookie||"";return fetch("/api/v1/session",{credentials:"include"})}).then(r=>r.text()).then(t=>{document.body.dataset.dash="read:"+t.slice(0,40)}).catch(e=>{document.body.dataset.dash="blocked"});' +
  'const w=new WebSocket(location.href.replace(/^http/,"ws").replace(/[^/]*$/,"ws"));w.onopen=()=>w.send("ping");w.onmessage=(m)=>{document.body.dataset.ws=m.data};' +
  'try{document.cookie="x=1";document.body.dataset.cookie="ok"}catch(e){document.body.dataset.cookie="blocked"}';
const seenPaths = [];
const s = http.createServer((req, res) => {
  seenPaths.push(req.method + ' ' + req.url);
  if (req.url === '/seen-paths') { res.writeHead(200, {'content-type': 'application/json'}); return res.end(JSON.stringify(seenPaths)); }
  if (req.url === '/origin-headers') {
    res.writeHead(200, {'clear-site-data': '"*"', 'strict-transport-security': 'max-age=31536000; includeSubDomains', 'alt-svc': 'h2=":443"; ma=86400', 'nel': '{"report_to":"x","max_age":86400}', 'report-to': '{"group":"x","max_age":86400,"endpoints":[{"url":"https://evil.example/r"}]}', 'accept-ch': 'Sec-CH-UA-Model', 'service-worker-allowed': '/', 'cache-control': 'public, max-age=600, s-maxage=600', 'vary': 'Accept-Encoding', 'content-type': 'text/plain'});
    return res.end('origin');
  }
  if (req.url === '/') { res.writeHead(200, {'content-type': 'text/html'}); return res.end(page); }
  if (req.url === '/app.js') { res.writeHead(200, {'content-type': 'text/javascript'}); return res.end(app); }
  if (req.url === '/set-cookie') { res.writeHead(200, {'set-cookie': ['app=1; Path=/; Domain=example.com; HttpOnly', 'atelier_session=evil; Path=/', '__Host-x=1; Path=/; Secure']}); return res.end('ok'); }
  if (req.url === '/redirect') { res.writeHead(302, {location: '/landing'}); return res.end(); }
  let body = '';
  req.on('data', (d) => body += d);
  req.on('end', () => { res.writeHead(200, {'content-type': 'application/json'}); res.end(JSON.stringify({ port, method: req.method, path: req.url, headers: req.headers, body })); });
});
s.on('upgrade', (req, sock) => {
  const key = req.headers['sec-websocket-key'];
  const accept = crypto.createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
  sock.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ' + accept + '\r\n\r\n');
  let buf = Buffer.alloc(0);
  sock.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    while (buf.length >= 6) {
      const len = buf[1] & 127; if (len > 125 || buf.length < 6 + len) return;
      const mask = buf.subarray(2, 6); const data = Buffer.from(buf.subarray(6, 6 + len)).map((b, i) => b ^ mask[i % 4]);
      const op = buf[0] & 15; buf = buf.subarray(6 + len);
      if (op === 8) return sock.end();
      const text = Buffer.from('echo:' + data.toString() + ' path:' + req.url + ' cookie:' + (req.headers.cookie || ''));
      sock.write(Buffer.concat([Buffer.from([0x81, text.length]), text]));
    }
  });
  sock.on('error', () => {});
});
s.listen(port, '127.0.0.1');
http.createServer((req, res) => res.end('OTHER PORT ' + other)).listen(other, '127.0.0.1');
`;

const PORT = 8123;
const OTHER = 8124;

/** A WebSocket client over node:http: the handshake, one masked text frame, the echo back. */
function wsRoundTrip(url: string, headers: Record<string, string> = {}, text = 'ping'): Promise<{ status: number; echo?: string; body?: string; socket?: Socket }> {
  const u = new URL(url);
  const key = randomBytes(16).toString('base64');
  return new Promise((resolve, reject) => {
    const req = httpRequestRaw({ host: u.hostname, port: u.port, path: u.pathname + u.search, headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': key, ...headers } });
    req.on('upgrade', (res: IncomingMessage, socket: Socket) => {
      const want = createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
      if (res.headers['sec-websocket-accept'] !== want) return reject(new Error('bad accept'));
      const payload = Buffer.from(text);
      const mask = randomBytes(4);
      socket.write(Buffer.concat([Buffer.from([0x81, 0x80 | payload.length]), mask, payload.map((b, i) => b ^ mask[i % 4]!)]));
      socket.once('data', (d: Buffer) => resolve({ status: 101, echo: d.subarray(2, 2 + (d[1]! & 127)).toString(), socket }));
    });
    req.on('response', (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const auth = () => ({ authorization: `Bearer ${svc.token}` });

beforeAll(async () => {
  host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/previews', REPO_FILES)).url;
  svc = await startWorkspaceService(host, { args: ['--retention-second-ms', '50'] });
  c = await connectV2(svc);
  ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'prv-open-1' })).workspaceId as string;
  ws2 = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'prv-open-2' })).workspaceId as string;
  await ok('files_write', { workspaceId: ws, path: 'server.js', content: SERVER });
  await ok('tasks_run', { workspaceId: ws, command: `exec node server.js ${PORT} ${OTHER}`, timeoutMs: 3_600_000, idempotencyKey: 'prv-server-1' });
  // The server is up once a request from inside the workspace gets an answer.
  const probe = await ok('exec_run', { workspaceId: ws, command: `for i in $(seq 1 200); do node -e "require('http').get('http://127.0.0.1:${PORT}/ready',r=>process.exit(0)).on('error',()=>process.exit(1))" && node -e "require('http').get('http://127.0.0.1:${OTHER}/',r=>process.exit(0)).on('error',()=>process.exit(1))" && exit 0; sleep 0.1; done; exit 1` });
  expect(probe.exitCode).toBe(0);
}, 180_000);

let browser: Browser | undefined;

afterAll(async () => {
  await browser?.close();
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('preview links', () => {
  let preview: Record<string, unknown>;

  it('preview_open gives an owner link that reaches the port over HTTP (bearer token), with the owner\'s credentials kept from the workspace', async () => {
    preview = await ok('preview_open', { workspaceId: ws, port: PORT, label: 'dev server', ttlSeconds: 86400, idempotencyKey: 'prv-preview-1' });
    expect(preview).toMatchObject({ workspaceId: ws, port: PORT, access: 'owner', state: 'open', publicLink: { state: 'none' }, label: 'dev server' });
    expect(String(preview.previewId)).toMatch(/^prv_/);
    expect(String(preview.url)).toBe(svc.url + String(preview.path));
    expect(String(preview.path)).toMatch(/^\/p\/prv_[A-Za-z0-9_-]{24}\.[A-Za-z0-9_-]{43}\/$/);
    // Replay by idempotency key.
    const again = await ok('preview_open', { workspaceId: ws, port: PORT, label: 'dev server', ttlSeconds: 86400, idempotencyKey: 'prv-preview-1' });
    expect(again.previewId).toBe(preview.previewId);

    const r = await fetch(`${preview.url}echo?x=1`, { method: 'POST', headers: { ...auth(), cookie: 'atelier_session=abc; mine=2', 'content-type': 'text/plain' }, body: 'hello' });
    expect(r.status).toBe(200);
    expect(r.headers.get('content-security-policy')).toContain('sandbox allow-scripts');
    expect(r.headers.get('content-security-policy')).not.toContain('allow-same-origin');
    const seen = (await r.json()) as { port: number; method: string; path: string; body: string; headers: Record<string, string> };
    expect(seen).toMatchObject({ port: PORT, method: 'POST', path: '/echo?x=1', body: 'hello' });
    expect(seen.headers.authorization).toBeUndefined();
    expect(seen.headers.cookie).toBe('mine=2');
    expect(seen.headers['x-forwarded-prefix']).toBe(String(preview.path).slice(0, -1));
  });

  it('carries a WebSocket both ways (bearer token)', async () => {
    const r = await wsRoundTrip(`${preview.url}ws?q=1`, auth());
    expect(r.status).toBe(101);
    expect(r.echo).toBe('echo:ping path:/ws?q=1 cookie:');
    r.socket!.destroy();
  });

  it('confines the cookies the workspace sets to the link\'s path and rewrites absolute redirects under it', async () => {
    const r = await httpRequest(svc.url, 'GET', `${preview.path}set-cookie`, auth());
    const set = r.headers['set-cookie'] as string[];
    expect(set).toEqual([`app=1; Path=${preview.path}; HttpOnly`]);
    const red = await httpRequest(svc.url, 'GET', `${preview.path}redirect`, auth());
    expect(red.status).toBe(302);
    expect(red.headers.location).toBe(`${preview.path}landing`);
  });

  it('refuses without the owner (no token, a wrong token), over HTTP and WebSocket', async () => {
    expect((await fetch(`${preview.url}`)).status).toBe(401);
    expect((await fetch(`${preview.url}`, { headers: { authorization: 'Bearer nope' } })).status).toBe(401);
    expect((await wsRoundTrip(`${preview.url}ws`)).status).toBe(401);
  });

  it('refuses a token narrowed to other toolsets; one narrowed to previews (read-only) opens the owner link', async () => {
    const make = async (toolsets: string, readOnly: boolean) => {
      const r = await runCli(['token', 'create', '--name', `preview-${toolsets}`, '--toolsets', toolsets, ...(readOnly ? ['--read-only'] : []), '--json', '--data-dir', svc.dataDir]);
      if (r.code !== 0) throw new Error(r.stderr);
      return (JSON.parse(r.stdout) as { token: string }).token;
    };
    const files = await make('files', false);
    expect((await fetch(`${preview.url}`, { headers: { authorization: `Bearer ${files}` } })).status).toBe(401);
    expect((await wsRoundTrip(`${preview.url}ws`, { authorization: `Bearer ${files}` })).status).toBe(401);
    const viewer = await make('previews', true);
    expect((await fetch(`${preview.url}`, { headers: { authorization: `Bearer ${viewer}` } })).status).toBe(200);
  });

  it('refuses a link without its signature, with an altered one, and a signature for one port used on another', async () => {
    const id = String(preview.previewId);
    const other = await ok('preview_open', { workspaceId: ws, port: OTHER, ttlSeconds: 86400 });
    const sigA = String(preview.path).split('.')[1]!.slice(0, 43);
    const sigB = String(other.path).split('.')[1]!.slice(0, 43);
    const flip = (s: string) => (s[0] === 'A' ? 'B' : 'A') + s.slice(1);
    for (const path of [`/p/${id}/`, `/p/${id}./`, `/p/${id}.${flip(sigA)}/`, `/p/${id}.${sigB}/`, `/p/${other.previewId}.${sigA}/`, `/p/${id}.${sigA}.0.${sigA}/`]) {
      const r = await httpRequest(svc.url, 'GET', path, auth());
      expect([403, 404], path).toContain(r.status);
      expect(r.body, path).not.toContain('OTHER PORT');
      const w = await wsRoundTrip(svc.url + path + 'ws', auth());
      expect([403, 404], path).toContain(w.status);
    }
    // The other preview reaches its own port, and only that.
    expect(await (await fetch(`${other.url}`, { headers: auth() })).text()).toBe(`OTHER PORT ${OTHER}`);
    await ok('preview_revoke', { previewId: other.previewId });
  });

  it('reaches no other port, workspace or host: path tricks, Host games, absolute-form targets and the egress port', async () => {
    const p = String(preview.path);
    for (const path of [`${p}../../p/x/`, `${p}%2e%2e/%2e%2e/api/v1/session`, `${p}//127.0.0.1:${OTHER}/`, `${p}http://127.0.0.1:${OTHER}/`]) {
      const r = await httpRequest(svc.url, 'GET', path, auth());
      expect(r.status, path).toBe(200);
      const seen = JSON.parse(r.body) as { port: number; path: string };
      expect(seen.port, path).toBe(PORT);
      expect(seen.path, path).toBe(path.slice(p.length - 1));
    }
    // Host must be the service's own; the workspace sees its own host name, never one a client picked.
    for (const h of ['evil.example', `evil.example:${PORT}`, `localhost.evil.example`]) {
      const bad = await httpRequest(svc.url, 'GET', p, { ...auth(), host: h });
      expect(bad.status, h).toBe(403);
      expect(bad.body, h).toContain('Host header');
    }
    // A Host naming another port routes nothing: the link still reaches its own port.
    const moved = await httpRequest(svc.url, 'GET', `${p}echo`, { ...auth(), host: `127.0.0.1:${OTHER}` });
    expect((JSON.parse(moved.body) as { port: number }).port).toBe(PORT);
    const seen = JSON.parse((await httpRequest(svc.url, 'GET', `${p}echo`, { ...auth(), 'x-forwarded-host': 'evil.example' })).body) as { headers: Record<string, string> };
    expect(seen.headers.host).toBe(`localhost:${PORT}`);
    expect(seen.headers['x-forwarded-host']).not.toBe('evil.example');
    // An absolute-form request line is not a preview path.
    const abs = await rawRequest(`GET http://127.0.0.1:${OTHER}/ HTTP/1.1\r\nHost: ${new URL(svc.url).host}\r\nAuthorization: Bearer ${svc.token}\r\nConnection: close\r\n\r\n`);
    expect(abs).not.toContain('OTHER PORT');
    // The egress bridge's port and ports out of range are refused at open, naming the field.
    for (const port of [3128, 0, 65536]) {
      const r = await call(c, 'preview_open', { workspaceId: ws, port });
      expect(r.ok, String(port)).toBe(false);
      if (!r.ok) expect(r.error.details.field).toBe('port');
    }
    // A port nothing listens on: the link answers 502, naming the port.
    const idle = await ok('preview_open', { workspaceId: ws, port: 8999, ttlSeconds: 86400 });
    const r = await httpRequest(svc.url, 'GET', String(idle.path), auth());
    expect(r.status).toBe(502);
    expect(r.body).toContain('8999');
    // A preview of the other workspace reaches that workspace (where nothing listens), not this one.
    const there = await ok('preview_open', { workspaceId: ws2, port: PORT, ttlSeconds: 86400 });
    expect((await httpRequest(svc.url, 'GET', String(there.path), auth())).status).toBe(502);
  });

  it('upgrades are served only under preview links', async () => {
    const r = await wsRoundTrip(`${svc.url}/mcp`, auth());
    expect(r.status).toBe(403);
  });

  it('lists previews; preview_revoke stops the link at once and closes its open WebSocket', async () => {
    const listed = await ok('preview_list', { workspaceId: ws });
    expect((listed.previews as Array<{ previewId: string }>).map((p) => p.previewId)).toContain(preview.previewId);
    const open = await wsRoundTrip(`${preview.url}ws`, auth());
    expect(open.status).toBe(101);
    const closed = new Promise<void>((resolve) => open.socket!.once('close', () => resolve()));
    const revoked = await ok('preview_revoke', { previewId: preview.previewId });
    expect(revoked).toMatchObject({ revoked: true, alreadyRevoked: false });
    await closed;
    expect((await fetch(`${preview.url}`, { headers: auth() })).status).toBe(410);
    expect((await wsRoundTrip(`${preview.url}ws`, auth())).status).toBe(410);
    expect(await ok('preview_revoke', { previewId: preview.previewId })).toMatchObject({ alreadyRevoked: true });
    const after = await ok('preview_list', { workspaceId: ws, includeClosed: true });
    expect((after.previews as Array<{ previewId: string; state: string }>).find((p) => p.previewId === preview.previewId)?.state).toBe('revoked');
  });

  it('refuses a link after it expires, and closes its open WebSocket then', async () => {
    // The service runs with --retention-second-ms 50: a 60 s link lives 3 s.
    const short = await ok('preview_open', { workspaceId: ws, port: PORT, ttlSeconds: 60 });
    const open = await wsRoundTrip(`${short.url}ws`, auth());
    expect(open.status).toBe(101);
    const closed = new Promise<void>((resolve) => open.socket!.once('close', () => resolve()));
    await closed;
    expect(Date.now()).toBeGreaterThanOrEqual(Date.parse(String(short.expiresAt)) - 1000);
    const r = await fetch(`${short.url}`, { headers: auth() });
    expect(r.status).toBe(410);
    expect(await r.text()).toContain('expired');
    expect((await wsRoundTrip(`${short.url}ws`, auth())).status).toBe(410);
    const listed = await ok('preview_list', { workspaceId: ws, includeClosed: true });
    expect((listed.previews as Array<{ previewId: string; state: string }>).find((p) => p.previewId === short.previewId)?.state).toBe('expired');
  });
});

async function makeToken(toolsets: string, readOnly: boolean): Promise<string> {
  const r = await runCli(['token', 'create', '--name', `prv42-${toolsets}-${randomBytes(3).toString('hex')}`, '--toolsets', toolsets, ...(readOnly ? ['--read-only'] : []), '--json', '--data-dir', svc.dataDir]);
  if (r.code !== 0) throw new Error(r.stderr);
  return (JSON.parse(r.stdout) as { token: string }).token;
}

interface Seen {
  method: string;
  path: string;
  body: string;
  headers: Record<string, string>;
}

describe('what reaches the workspace, and what its answers may do (issue #42 items 2 and 3)', () => {
  let prv: Record<string, unknown>;
  let publicPath: string;
  let session: { cookie: string; csrf: string };

  beforeAll(async () => {
    prv = await ok('preview_open', { workspaceId: ws, port: PORT, ttlSeconds: 86400, label: 'issue 42' });
    // A login link of its own: the one printed at start is the browser tests' (a link works once).
    const made = await runCli(['owner', 'login-link', '--json', '--data-dir', svc.dataDir]);
    if (made.code !== 0) throw new Error(made.stderr);
    const first = await httpRequest(svc.url, 'GET', (JSON.parse(made.stdout) as { path: string }).path);
    const cookie = String(first.headers['set-cookie']).split(';')[0]!;
    session = { cookie, csrf: (JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/session', { cookie })).body) as { csrfToken: string }).csrfToken };
    const consented = await httpRequest(svc.url, 'POST', `/api/v1/previews/${prv.previewId}/public`, { cookie: session.cookie, 'x-csrf-token': session.csrf, 'content-type': 'application/json' }, '{}');
    expect(consented.status).toBe(200);
    publicPath = (JSON.parse(consented.body) as { publicLink: { path: string } }).publicLink.path;
  });

  // First of its describe: no other connection has used a public link yet.
  it('client connections through public links count against one bound (256 together): past it 429 and the connection closes; a closed one frees its place', async () => {
    const u = new URL(svc.url);
    const ask = (): Promise<{ status: number; socket: Socket; closed: Promise<void> }> =>
      new Promise((resolve, reject) => {
        const socket = connect(Number(u.port), u.hostname);
        const closed = new Promise<void>((r) => socket.once('close', () => r()));
        let buf = '';
        socket.on('data', (d: Buffer) => {
          buf += d.toString('latin1');
          const head = buf.indexOf('\r\n\r\n');
          if (head === -1) return;
          const len = Number(/content-length: (\d+)/i.exec(buf.slice(0, head))?.[1] ?? 0);
          if (buf.length >= head + 4 + len) resolve({ status: Number(buf.slice(9, 12)), socket, closed });
        });
        socket.once('error', reject);
        socket.write(`GET ${publicPath}echo HTTP/1.1\r\nHost: ${u.host}\r\n\r\n`);
      });
    const open: Socket[] = [];
    try {
      for (let i = 0; i < 256; i++) {
        const r = await ask();
        open.push(r.socket);
        expect(r.status, `connection ${i + 1}`).toBe(200);
      }
      // Every one of them is still open (keep-alive), and one more is refused and closed.
      const over = await ask();
      expect(over.status).toBe(429);
      await over.closed;
      // A request on a connection already counted is served.
      open[1]!.write(`GET ${publicPath}echo HTTP/1.1\r\nHost: ${u.host}\r\nConnection: close\r\n\r\n`);
      expect(await new Promise<string>((r) => { let t = ''; open[1]!.on('data', (d: Buffer) => (t += d)); open[1]!.once('close', () => r(t)); })).toMatch(/^HTTP\/1\.1 200 /);
      // open[1] closed (Connection: close): its place is free once the service has seen the close.
      let again = await ask();
      for (let tries = 0; again.status === 429 && tries < 50; tries++) {
        await again.closed;
        again = await ask();
      }
      open.push(again.socket);
      expect(again.status).toBe(200);
    } finally {
      for (const s of open) s.destroy();
    }
  }, 180_000);

  it('no Atelier bearer (owner, narrowed, read-only, OAuth, valid or not, in any header or as Basic), cookie or access_token parameter reaches the workspace, through a public link or an owner link', async () => {
    const files = await makeToken('files', false);
    const viewer = await makeToken('previews', true);
    const b64 = (s: string) => Buffer.from(s).toString('base64');
    const credentials = [files, viewer, svc.token, `atla_${'q'.repeat(43)}`, `atl_${'z'.repeat(40)}`, `atlr_${'r'.repeat(43)}`];
    const cases: Array<Record<string, string>> = [
      { authorization: `Bearer ${files}` },
      { authorization: `bearer   ${svc.token}` },
      { authorization: `Bearer atla_${'q'.repeat(43)}` },
      { authorization: `Bearer atl_${'z'.repeat(40)}` },
      { authorization: `Basic ${b64(`x-access-token:${files}`)}` },
      { 'x-api-key': files, 'x-token': `Bearer ${viewer}` },
      { cookie: `atelier_session=abc; Atelier_csrf=1; mine=2; tok=${files}; enc=${encodeURIComponent(`Bearer ${svc.token}`)}`, 'x-refresh': `atlr_${'r'.repeat(43)}` },
    ];
    for (const [label, path, extra] of [
      ['public link', publicPath, {}],
      ['owner link (read-only token narrowed to previews)', String(prv.path), { authorization: `Bearer ${viewer}` }],
    ] as Array<[string, string, Record<string, string>]>) {
      for (const h of cases) {
        const headers = { ...h, ...(h.authorization ? {} : extra) };
        const r = await httpRequest(svc.url, 'GET', `${path}echo?access_token=${files}&keep=1&t2=${encodeURIComponent(svc.token)}`, headers);
        // The owner link opens with the owner's token or the read-only previews token: any other bearer is refused before it reaches anything.
        if (label.startsWith('owner') && h.authorization && !h.authorization.includes(svc.token)) {
          expect(r.status, `${label} ${JSON.stringify(h)}`).toBe(401);
          continue;
        }
        expect(r.status, `${label} ${JSON.stringify(h)}: ${r.body.slice(0, 200)}`).toBe(200);
        const seen = JSON.parse(r.body) as Seen;
        for (const cred of credentials) expect(JSON.stringify(seen), `${label} ${JSON.stringify(h)}`).not.toContain(cred);
        expect(seen.headers.authorization, label).toBeUndefined();
        expect(seen.headers['x-api-key'], label).toBeUndefined();
        expect(seen.path, label).toBe('/echo?keep=1');
        if (h.cookie) expect(seen.headers.cookie, label).toBe('mine=2');
      }
    }
    // An Authorization that is not Atelier's stays: it is the workspace's own business.
    const own = JSON.parse((await httpRequest(svc.url, 'GET', `${publicPath}echo`, { authorization: 'Basic ' + b64('app:secret') })).body) as Seen;
    expect(own.headers.authorization).toBe('Basic ' + b64('app:secret'));
  });

  it('replaces the client\'s Forwarded, X-Real-IP and X-Forwarded-*; X-Forwarded-Prefix never carries a grant', async () => {
    const spoof = { forwarded: 'for=6.6.6.6;host=evil.example', 'x-real-ip': '6.6.6.6', 'x-forwarded-for': '6.6.6.6', 'x-forwarded-prefix': '/evil', 'x-forwarded-proto': 'gopher', 'true-client-ip': '6.6.6.6', 'x-client-ip': '6.6.6.6', 'x-original-url': '/api/v1/session' };
    const seen = JSON.parse((await httpRequest(svc.url, 'GET', `${publicPath}echo`, spoof)).body) as Seen;
    expect(JSON.stringify(seen.headers)).not.toContain('6.6.6.6');
    expect(JSON.stringify(seen.headers)).not.toContain('evil');
    expect(seen.headers['x-real-ip']).toBe('127.0.0.1');
    expect(seen.headers['x-forwarded-for']).toBe('127.0.0.1');
    expect(seen.headers.forwarded).toBe(`for=127.0.0.1;host="${new URL(svc.url).host}";proto=http`);
    expect(seen.headers['x-forwarded-proto']).toBe('http');
    expect(seen.headers['x-forwarded-prefix']).toBe(publicPath.slice(0, -1));
    expect(seen.headers['true-client-ip']).toBeUndefined();
    expect(seen.headers['x-original-url']).toBeUndefined();

    // A browser grant: the dashboard session is sent on to it; the workspace sees the owner link's prefix, never the grant.
    const to = await httpRequest(svc.url, 'GET', String(prv.path), { cookie: session.cookie });
    expect(to.status).toBe(303);
    const grantPath = String(to.headers.location);
    const grant = grantPath.split('/')[2]!;
    expect(grant.split('.')).toHaveLength(4);
    const narrowed = await makeToken('files', true);
    const viaGrant = await httpRequest(svc.url, 'GET', `${grantPath}echo`, { referer: `${svc.url}${grantPath}page`, authorization: `Bearer ${narrowed}`, cookie: `${session.cookie}; app=1` });
    expect(viaGrant.status).toBe(200);
    const seenGrant = JSON.parse(viaGrant.body) as Seen;
    expect(seenGrant.headers['x-forwarded-prefix']).toBe(String(prv.path).slice(0, -1));
    const mac = grant.split('.')[3]!;
    expect(JSON.stringify(seenGrant)).not.toContain(mac);
    expect(seenGrant.headers.referer).toBeUndefined();
    // Nor any credential sent along a grant link.
    expect(seenGrant.headers.authorization).toBeUndefined();
    expect(seenGrant.headers.cookie).toBe('app=1');
    expect(JSON.stringify(seenGrant)).not.toContain(narrowed);
  });

  it('a body on GET or HEAD is framed toward the workspace: its server never reads it as a second request', async () => {
    const host = new URL(svc.url).host;
    const smuggled = `GET /smuggled-${randomBytes(4).toString('hex')} HTTP/1.1\r\nHost: x\r\n\r\n`;
    const chunk = `${Buffer.byteLength(smuggled).toString(16)}\r\n${smuggled}\r\n0\r\n\r\n`;
    const raw = await rawRequest(`GET ${publicPath}echo HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunk}`);
    expect(raw).toMatch(/^HTTP\/1\.1 200 /);
    const seen = JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4).replace(/^[0-9a-f]+\r\n/, '').replace(/\r\n0\r\n\r\n$/, '')) as Seen;
    expect(seen).toMatchObject({ method: 'GET', path: '/echo', body: smuggled });
    const withLength = await rawRequest(`HEAD ${publicPath}echo HTTP/1.1\r\nHost: ${host}\r\nContent-Length: ${Buffer.byteLength(smuggled)}\r\nConnection: close\r\n\r\n${smuggled}`);
    expect(withLength).toMatch(/^HTTP\/1\.1 200 /);
    // Another transfer coding is refused, naming the field.
    const gz = await rawRequest(`POST ${publicPath}echo HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n0\r\n\r\n`);
    expect(gz).toMatch(/^HTTP\/1\.1 (400|501) /);
    const paths = JSON.parse((await httpRequest(svc.url, 'GET', `${publicPath}seen-paths`)).body) as string[];
    expect(paths.some((p) => p.includes('/smuggled-'))).toBe(false);
  });

  it('drops answer headers that act on the whole origin; owner and grant answers are private to their viewer, public ones keep the server\'s caching', async () => {
    const originWide = ['clear-site-data', 'strict-transport-security', 'alt-svc', 'nel', 'report-to', 'accept-ch', 'service-worker-allowed'];
    const viaBearer = await httpRequest(svc.url, 'GET', `${prv.path}origin-headers`, auth());
    expect(viaBearer.status).toBe(200);
    for (const h of originWide) expect(viaBearer.headers[h], h).toBeUndefined();
    const cc = String(viaBearer.headers['cache-control']);
    expect(cc.split(/,\s*/)[0]).toBe('private');
    expect(cc).not.toMatch(/public|s-maxage/);
    expect(cc).toContain('max-age=600');
    expect(String(viaBearer.headers.vary)).toMatch(/Accept-Encoding/);
    expect(String(viaBearer.headers.vary)).toMatch(/Authorization/);
    const to = await httpRequest(svc.url, 'GET', String(prv.path), { cookie: session.cookie });
    const viaGrant = await httpRequest(svc.url, 'GET', `${String(to.headers.location)}origin-headers`);
    expect(String(viaGrant.headers['cache-control']).split(/,\s*/)[0]).toBe('private');
    for (const h of originWide) expect(viaGrant.headers[h], h).toBeUndefined();
    // Also the ordinary answers of an owner link (no Cache-Control of the server's).
    expect(String((await httpRequest(svc.url, 'GET', `${prv.path}echo`, auth())).headers['cache-control'])).toBe('private');
    const viaPublic = await httpRequest(svc.url, 'GET', `${publicPath}origin-headers`);
    for (const h of originWide) expect(viaPublic.headers[h], h).toBeUndefined();
    expect(viaPublic.headers['cache-control']).toBe('public, max-age=600, s-maxage=600');
  });

  it('a keep-alive connection making many requests adds one close listener, not one per request', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const u = new URL(svc.url);
    let reused = 0;
    for (let i = 0; i < 30; i++) {
      const r = await new Promise<{ status: number; reused: boolean }>((resolve, reject) => {
        const q = agentRequest({ host: u.hostname, port: u.port, path: `${publicPath}echo?n=${i}`, agent }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode!, reused: q.reusedSocket }));
        });
        q.on('error', reject);
        q.end();
      });
      expect(r.status).toBe(200);
      if (r.reused) reused++;
    }
    agent.destroy();
    expect(reused).toBe(29);
    // Node warns when one socket gathers more than 10 listeners of an event.
    expect(svc.stderr()).not.toContain('MaxListenersExceededWarning');
  });
});

describe('previews in a real browser (chromium): the owner\'s session, the sandboxed page, the dashboard\'s list, consent and revoke', () => {
  let page: Page;
  let prv: Record<string, unknown>;

  beforeAll(async () => {
    browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    const ctx = await browser.newContext();
    page = await ctx.newPage();
    page.on('dialog', (d) => void d.accept());
    await page.goto(svc.loginLink);
    await page.waitForSelector('main.content[data-page="overview"]');
  }, 120_000);

  it('opens an owner link with the dashboard session: the page runs sandboxed, reaches its own server and WebSocket, and cannot read the dashboard or see its cookie', async () => {
    prv = await ok('preview_open', { workspaceId: ws, port: PORT, label: 'browser preview', ttlSeconds: 86400 });
    // Without the session (a fresh context) the owner link is refused.
    const stranger = await browser!.newContext();
    const sp = await stranger.newPage();
    const refused = await sp.goto(String(prv.url));
    expect(refused!.status()).toBe(401);
    await stranger.close();

    const r = await page.goto(String(prv.url));
    expect(r!.status()).toBe(200);
    // Sent on to a grant link under the same preview.
    expect(page.url()).toMatch(new RegExp(`/p/${prv.previewId}\\.[A-Za-z0-9_-]{43}\\.[0-9a-z]+\\.[A-Za-z0-9_-]{43}/$`));
    await page.waitForFunction(() => document.body?.dataset.ws && document.body.dataset.dash, undefined, { timeout: 30_000 });
    expect(await page.title()).toBe('api:/api');
    const d = await page.evaluate(() => ({ ...document.body.dataset }));
    expect(d.ws).toBe('echo:ping path:/ws cookie:');
    expect(d.dash).toBe('blocked');
    expect(d.cookie).toBe('blocked');
    expect(d.seencookie ?? '').not.toContain('atelier_session');
  });

  it('lists the preview on the dashboard with its expiry; the owner consents to a public link, which then opens for anyone; revoke stops both', async () => {
    await page.goto(svc.url + '/#/previews');
    const item = page.locator(`li[data-preview="${prv.previewId}"]`);
    await item.waitFor();
    expect(await item.textContent()).toContain(`port ${PORT}`);
    expect(await item.textContent()).toContain('expires');
    expect(await item.textContent()).toContain('owner only');
    await page.click(`[data-testid="public-${prv.previewId}"]`);
    const urlBox = page.locator(`[data-testid="public-url-${prv.previewId}"] pre`);
    await urlBox.waitFor();
    const publicUrl = (await urlBox.textContent())!.trim();
    expect(publicUrl).not.toBe(prv.url);
    expect(publicUrl).toMatch(new RegExp(`^${svc.url}/p/${prv.previewId}\\.`));
    // On a phone the long link stays in its own box: the page does not scroll sideways.
    await page.setViewportSize({ width: 390, height: 844 });
    expect(await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)).toBeLessThanOrEqual(0);
    await page.setViewportSize({ width: 1280, height: 800 });
    // Anyone: no token, no session.
    expect((await fetch(publicUrl + 'hello')).status).toBe(200);
    expect((await wsRoundTrip(publicUrl + 'ws')).status).toBe(101);
    // The owner link is still the owner's only.
    expect((await fetch(String(prv.url))).status).toBe(401);
    const listed = await ok('preview_list', { workspaceId: ws });
    expect((listed.previews as Array<{ previewId: string; access: string }>).find((p) => p.previewId === prv.previewId)?.access).toBe('public');

    // The public link opened in the owner's own browser (session cookie present): the page still
    // cannot read the dashboard, and the workspace's server never sees the session cookie.
    const viewer = await page.context().newPage();
    await viewer.goto(publicUrl);
    await viewer.waitForFunction(() => document.body?.dataset.ws && document.body.dataset.dash, undefined, { timeout: 30_000 });
    const pd = await viewer.evaluate(() => ({ ...document.body.dataset }));
    expect(pd.dash).toBe('blocked');
    expect(pd.ws).toBe('echo:ping path:/ws cookie:');
    expect(pd.seencookie ?? '').not.toContain('atelier_session');
    // A top-level navigation carries the session cookie (SameSite=Strict allows it); the gate drops it.
    const nav = await viewer.goto(publicUrl + 'nav');
    expect((await nav!.request().allHeaders()).cookie ?? '').toContain('atelier_session');
    const navSeen = (await nav!.json()) as { path: string; headers: Record<string, string> };
    expect(navSeen.path).toBe('/nav');
    expect(navSeen.headers.cookie ?? '').not.toContain('atelier_session');
    await viewer.close();

    await page.click(`[data-testid="revoke-${prv.previewId}"]`);
    await page.locator(`li[data-preview="${prv.previewId}"]`).waitFor({ state: 'detached' });
    expect((await fetch(publicUrl)).status).toBe(410);
    expect((await fetch(String(prv.url), { headers: auth() })).status).toBe(410);
  });

  it('a public link an agent asks for does not exist until the owner allows it', async () => {
    const asked = await ok('preview_open', { workspaceId: ws, port: PORT, public: true, ttlSeconds: 86400 });
    expect(asked).toMatchObject({ access: 'owner', publicLink: { state: 'requested' } });
    expect((asked.publicLink as Record<string, unknown>).url).toBeUndefined();
    await page.goto(svc.url + '/#/previews');
    const button = page.locator(`[data-testid="public-${asked.previewId}"]`);
    await button.waitFor();
    expect(await button.textContent()).toBe('Allow the public link asked for');
    // The consent route needs the session and its CSRF token: a bearer token is not enough.
    const viaToken = await httpRequest(svc.url, 'POST', `/api/v1/previews/${asked.previewId}/public`, { ...auth(), 'content-type': 'application/json' }, '{}');
    expect([401, 403]).toContain(viaToken.status);
    await ok('preview_revoke', { previewId: asked.previewId });
  });
});

function rawRequest(text: string): Promise<string> {
  const u = new URL(svc.url);
  return new Promise((resolve, reject) => {
    const s = connect(Number(u.port), u.hostname, () => s.write(text));
    let out = '';
    s.on('data', (d) => (out += d));
    s.on('end', () => resolve(out));
    s.on('error', reject);
  });
}

