/**
 * Hostile servers behind the runner's relays (issue #42 item 1): a server inside a real workspace
 * (a raw TCP server started with tasks_run) answers a table of hostile byte sequences, and each
 * relay under test carries requests to it, over HTTP and over a WebSocket upgrade. Whatever the
 * server sends, the relay answers 502 where it cannot forward (or forwards a clamped answer), the
 * runner process stays the same one, /healthz answers, and another client's tool calls keep
 * succeeding throughout.
 *
 * The table (HOSTILE) is shared: a new relay joins by adding a RelayUnderTest to RELAYS (how it
 * reaches `/case/<name>` on the workspace's hostile server over HTTP and WebSocket); every row
 * then runs against it as well.
 */
import { randomBytes } from 'node:crypto';
import { request as httpRequestRaw, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, dashboardLogin, httpRequest, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import { startKubeTarget, type KubeTarget } from './kube-fixture.js';

/** What a client saw of one request through a relay. */
interface Outcome {
  /** The status of the answer's head, when one came. */
  status?: number;
  statusMessage?: string;
  headers?: IncomingMessage['headers'];
  body?: string;
  /** Whether the answer's body arrived whole (false: the connection ended mid-body). */
  complete?: boolean;
  /** The connection ended with no answer at all. */
  noAnswer?: string;
}

/** What a row expects: a 502 from the relay, an answer forwarded (status, body), an answer cut short, or a WebSocket upgrade. */
type Outcomes = { bad: true } | { status: number; body?: string; reason?: string } | { incomplete: true } | { upgraded: true };
/** One outcome, or any of several (when the server races the relay: an answer and a close at once), or a row that does not apply. */
type Expect = Outcomes | { oneOf: Outcomes[] } | 'skip';

interface HostileCase {
  name: string;
  why: string;
  /** Method of the HTTP request (GET unless said). */
  method?: string;
  /** A request body the client keeps sending (bytes), for answers that come before the request ends. */
  slowBody?: number;
  http: Expect;
  ws: Expect;
}

const BAD = { bad: true } as const;

/**
 * The hostile server, inside the workspace: `/case/<name>` answers with CASES[name] (raw bytes);
 * `/case/ok` is a plain answer that shows the relay still works after the others.
 */
const HOSTILE_SERVER = String.raw`
const net = require('node:net');
const port = Number(process.argv[2]);
const ok = (body) => 'HTTP/1.1 200 OK\r\ncontent-length: ' + Buffer.byteLength(body) + '\r\n\r\n' + body;
const CASES = {
  'ok': ok('fine'),
  'status-042': 'HTTP/1.1 042 x\r\ncontent-length: 2\r\n\r\nhi',
  'status-600': 'HTTP/1.1 600 Beyond\r\ncontent-length: 2\r\n\r\nhi',
  'status-999': 'HTTP/1.1 999 Far\r\ncontent-length: 2\r\n\r\nhi',
  'status-missing': 'HTTP/1.1 \r\ncontent-length: 2\r\n\r\nhi',
  'not-http': 'hello, this is not HTTP\r\n\r\n',
  'reason-control': 'HTTP/1.1 200 O\x01K\r\ncontent-length: 2\r\n\r\nhi',
  'reason-obs': 'HTTP/1.1 200 \xff\x80 fancy\r\ncontent-length: 2\r\n\r\nhi',
  'reason-long': 'HTTP/1.1 200 ' + 'x'.repeat(8000) + '\r\ncontent-length: 2\r\n\r\nhi',
  'header-name-space': 'HTTP/1.1 200 OK\r\nbad name: x\r\ncontent-length: 2\r\n\r\nhi',
  'header-name-colon-only': 'HTTP/1.1 200 OK\r\n: x\r\ncontent-length: 2\r\n\r\nhi',
  'header-value-control': 'HTTP/1.1 200 OK\r\nx-c: a\x01b\r\ncontent-length: 2\r\n\r\nhi',
  'header-value-del': 'HTTP/1.1 200 OK\r\nx-d: a\x7fb\r\ncontent-length: 2\r\n\r\nhi',
  'header-value-nul': 'HTTP/1.1 200 OK\r\nx-n: a\x00b\r\ncontent-length: 2\r\n\r\nhi',
  'header-value-bare-cr': 'HTTP/1.1 200 OK\r\nx-r: a\rset-cookie: evil=1\r\ncontent-length: 2\r\n\r\nhi',
  'header-huge': 'HTTP/1.1 200 OK\r\nx-big: ' + 'a'.repeat(70 * 1024) + '\r\ncontent-length: 2\r\n\r\nhi',
  'headers-thousands': 'HTTP/1.1 200 OK\r\n' + 'a:1\r\n'.repeat(1500) + 'content-length: 2\r\n\r\nhi',
  'headers-thousands-big': 'HTTP/1.1 200 OK\r\n' + 'x-header-n: value\r\n'.repeat(5000) + 'content-length: 2\r\n\r\nhi',
  'cl-and-te': 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n',
  'cl-twice': 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 7\r\n\r\nhi',
  'info-flood': 'HTTP/1.1 103 Early Hints\r\nlink: </x.css>; rel=preload\r\n\r\n'.repeat(20000) + ok('late'),
  'head-body': 'HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n',
  'upgrade-answer': 'HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n\x81\x05hello',
  'upgrade-reason-control': 'HTTP/1.1 101 Sw\x01itching\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n',
  'upgrade-bare': 'HTTP/1.1 101 Switching Protocols\r\n\r\n',
  'upgrade-many-headers': 'HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n' + 'a:1\r\n'.repeat(1500) + '\r\n',
  'mid-chunk': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n10\r\nabc',
  'bad-chunk-size': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n',
};
net.createServer((sock) => {
  sock.on('error', () => {});
  let buf = '';
  let answered = false;
  sock.on('data', (d) => {
    if (answered) return;
    buf += d.toString('latin1');
    const m = /^[A-Z]+ \/case\/([a-z0-9-]+)/.exec(buf);
    if (!m) {
      if (buf.includes('\r\n\r\n')) { answered = true; sock.end('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n'); }
      return;
    }
    const name = m[1];
    // "early": the answer comes as soon as the request line does, before the request ends (the
    // rest is read and dropped); "early-close" then closes the connection at once.
    const early = name === 'early' || name === 'early-close';
    if (!early && !buf.includes('\r\n\r\n')) return;
    answered = true;
    if (name === 'early') return void sock.write(ok('early'), 'latin1');
    if (name === 'early-close') return void sock.end(ok('early'), 'latin1');
    if (name === 'info-endless') {
      const hint = Buffer.from('HTTP/1.1 100 Continue\r\n\r\n'.repeat(1000));
      const pump = () => { while (!sock.destroyed && sock.write(hint)); if (!sock.destroyed) sock.once('drain', pump); };
      return pump();
    }
    const bytes = CASES[name];
    if (bytes === undefined) return void sock.end('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n');
    // A close mid-chunk: the bytes, then the connection is dropped.
    if (name === 'mid-chunk' || name.startsWith('upgrade-')) { sock.write(bytes, 'latin1'); return void setTimeout(() => sock.destroy(), 50); }
    sock.end(bytes, 'latin1');
  });
}).listen(port, '127.0.0.1');
`;

const HOSTILE: HostileCase[] = [
  { name: 'status-042', why: 'a status below 100 (Node would throw in writeHead)', http: BAD, ws: BAD },
  { name: 'status-600', why: 'a status above 599', http: BAD, ws: BAD },
  { name: 'status-999', why: 'a status far above 599', http: BAD, ws: BAD },
  { name: 'status-missing', why: 'a status line without a status', http: BAD, ws: BAD },
  { name: 'not-http', why: 'an answer that is not HTTP', http: BAD, ws: BAD },
  { name: 'reason-control', why: 'a control character in the reason phrase: the workspace\'s reason is never forwarded', http: { status: 200, body: 'hi', reason: 'OK' }, ws: { status: 200, body: 'hi', reason: 'OK' } },
  { name: 'reason-obs', why: 'bytes 0x80-0xff in the reason phrase', http: { status: 200, body: 'hi', reason: 'OK' }, ws: { status: 200, body: 'hi', reason: 'OK' } },
  { name: 'reason-long', why: 'an 8000-byte reason phrase', http: { status: 200, body: 'hi', reason: 'OK' }, ws: { status: 200, body: 'hi', reason: 'OK' } },
  { name: 'header-name-space', why: 'a header name with a space', http: BAD, ws: BAD },
  { name: 'header-name-colon-only', why: 'an empty header name', http: BAD, ws: BAD },
  { name: 'header-value-control', why: 'a control character in a header value', http: BAD, ws: BAD },
  { name: 'header-value-del', why: 'DEL in a header value', http: BAD, ws: BAD },
  { name: 'header-value-nul', why: 'NUL in a header value', http: BAD, ws: BAD },
  { name: 'header-value-bare-cr', why: 'a bare CR in a header value (a header smuggled after it)', http: BAD, ws: BAD },
  { name: 'header-huge', why: 'one header over 64 KiB', http: BAD, ws: BAD },
  { name: 'headers-thousands', why: '1500 small headers (within the size limit, past the count a preview forwards)', http: BAD, ws: BAD },
  { name: 'headers-thousands-big', why: '5000 headers (past the size limit)', http: BAD, ws: BAD },
  { name: 'cl-and-te', why: 'Content-Length and Transfer-Encoding together', http: BAD, ws: BAD },
  { name: 'cl-twice', why: 'two different Content-Lengths', http: BAD, ws: BAD },
  { name: 'info-flood', why: '20000 103 Early Hints before the answer', http: BAD, ws: BAD },
  { name: 'info-endless', why: '100 Continue without end', http: BAD, ws: BAD },
  { name: 'head-body', method: 'HEAD', why: 'a body on a HEAD answer (and a second answer after it)', http: { status: 200, body: '' }, ws: 'skip' },
  { name: 'upgrade-answer', why: '101 Switching Protocols to a plain request (to a WebSocket request it is the answer)', http: BAD, ws: { upgraded: true } },
  { name: 'upgrade-reason-control', why: 'a 101 with a control character in its reason phrase', http: BAD, ws: { upgraded: true } },
  { name: 'upgrade-bare', why: 'a 101 without Upgrade or Connection headers (not an upgrade: a 1xx as the final answer)', http: BAD, ws: BAD },
  { name: 'upgrade-many-headers', why: 'a 101 with 1500 headers', http: BAD, ws: BAD },
  { name: 'early', method: 'POST', slowBody: 4 * 1024 * 1024, why: 'an answer before the request ends (the server goes on reading)', http: { status: 200, body: 'early' }, ws: { status: 200, body: 'early' } },
  {
    name: 'early-close',
    method: 'POST',
    slowBody: 4 * 1024 * 1024,
    why: 'an answer before the request ends, and the connection closed at once (the answer and the broken pipe race)',
    http: { oneOf: [{ status: 200, body: 'early' }, BAD] },
    ws: { status: 200, body: 'early' },
  },
  { name: 'mid-chunk', why: 'the connection closed in the middle of a chunk', http: { incomplete: true }, ws: { incomplete: true } },
  { name: 'bad-chunk-size', why: 'a chunk size that is not hex', http: { incomplete: true }, ws: { incomplete: true } },
];

/**
 * Where a relay's requests go: the service (its runner process is the one that must survive),
 * the workspace running HOSTILE_SERVER (startHostileServer), and a client for the tool calls that
 * must keep succeeding.
 */
interface RelayEnv {
  svc: Service;
  workspaceId: string;
  client: Client;
}

/** One relay of the runner's that carries requests to a workspace's server. */
interface RelayUnderTest {
  name: string;
  /**
   * Sets the relay up (once): the environment it runs in (its own service, or a shared one), the
   * base URL `case/<name>` is appended to, and the headers a request needs.
   */
  setup(): Promise<{ env: RelayEnv; base: string; headers: Record<string, string> }>;
}

const HOSTILE_PORT = 8431;

async function ok(c: Client, name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

/** Starts HOSTILE_SERVER in a workspace (tasks_run) on HOSTILE_PORT and waits until it listens. */
async function startHostileServer(c: Client, workspaceId: string): Promise<void> {
  await ok(c, 'files_write', { workspaceId, path: 'hostile.js', content: HOSTILE_SERVER });
  await ok(c, 'tasks_run', { workspaceId, command: `exec node hostile.js ${HOSTILE_PORT}`, timeoutMs: 3_600_000, idempotencyKey: `hostile-server-${workspaceId}` });
  const probe = await ok(c, 'exec_run', {
    workspaceId,
    command: `for i in $(seq 1 300); do node -e "require('net').connect(${HOSTILE_PORT},'127.0.0.1').on('connect',()=>process.exit(0)).on('error',()=>process.exit(1))" && exit 0; sleep 0.1; done; exit 1`,
  });
  expect(probe.exitCode).toBe(0);
}

/** The bubblewrap environment the preview relays share: one service, one workspace, started once. */
let host: GitHost | undefined;
let shared: Promise<RelayEnv> | undefined;
const owned: Service[] = [];
function bubblewrapEnv(): Promise<RelayEnv> {
  shared ??= (async () => {
    host ??= await startGitHost();
    const repoUrl = (await host.createRepo('approved/hostile', REPO_FILES)).url;
    const svc = await startWorkspaceService(host);
    owned.push(svc);
    const client = await connectV2(svc);
    const workspaceId = (await ok(client, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'hostile-open' })).workspaceId as string;
    await startHostileServer(client, workspaceId);
    return { svc, workspaceId, client };
  })();
  return shared;
}

/**
 * The Kubernetes environment: its own service with `--executor kubernetes` on the fixture API
 * server (each Pod a local sandbox), whose preview relay reaches the Pod's port over the exec
 * stream (sandbox/kubernetes/relay.ts), and one workspace running the hostile server.
 */
let kube: KubeTarget | undefined;
let kubeShared: Promise<RelayEnv> | undefined;
function kubernetesEnv(): Promise<RelayEnv> {
  kubeShared ??= (async () => {
    host ??= await startGitHost();
    const repoUrl = (await host.createRepo('approved/hostile-kube', REPO_FILES)).url;
    kube = await startKubeTarget();
    const svc = await startWorkspaceService(host, { args: kube.args, config: { sandboxDiskMb: 0 } });
    owned.push(svc);
    const client = await connectV2(svc);
    const workspaceId = (await ok(client, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'hostile-kube-open' })).workspaceId as string;
    await startHostileServer(client, workspaceId);
    return { svc, workspaceId, client };
  })();
  return kubeShared;
}

const RELAYS: RelayUnderTest[] = [
  {
    name: 'preview relay (owner link, bearer token)',
    async setup() {
      const env = await bubblewrapEnv();
      const p = await ok(env.client, 'preview_open', { workspaceId: env.workspaceId, port: HOSTILE_PORT, ttlSeconds: 86400 });
      return { env, base: String(p.url), headers: { authorization: `Bearer ${env.svc.token}` } };
    },
  },
  {
    name: 'preview relay (public link the owner consented to, no credentials)',
    async setup() {
      const env = await bubblewrapEnv();
      const p = await ok(env.client, 'preview_open', { workspaceId: env.workspaceId, port: HOSTILE_PORT, ttlSeconds: 86400, public: true });
      const { cookie, csrf } = await dashboardLogin(env.svc);
      const r = await httpRequest(env.svc.url, 'POST', `/api/v1/previews/${p.previewId}/public`, { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' }, '{}');
      if (r.status !== 200) throw new Error(`consent failed: ${r.status} ${r.body}`);
      return { env, base: env.svc.url + (JSON.parse(r.body) as { publicLink: { path: string } }).publicLink.path, headers: {} };
    },
  },
  {
    name: 'preview relay of a Kubernetes workspace (owner link, bearer token)',
    async setup() {
      const env = await kubernetesEnv();
      const p = await ok(env.client, 'preview_open', { workspaceId: env.workspaceId, port: HOSTILE_PORT, ttlSeconds: 86400 });
      return { env, base: String(p.url), headers: { authorization: `Bearer ${env.svc.token}` } };
    },
  },
];

/** One request through a relay, as a plain client sees it. */
function send(url: string, headers: Record<string, string>, method = 'GET', slowBody = 0, upgrade = false): Promise<Outcome> {
  const u = new URL(url);
  return new Promise((resolve) => {
    const h: Record<string, string> = { ...headers };
    if (upgrade) Object.assign(h, { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': randomBytes(16).toString('base64') });
    const req = httpRequestRaw({ host: u.hostname, port: u.port, method, path: u.pathname + u.search, headers: h, agent: false });
    let settled = false;
    const done = (o: Outcome): void => {
      if (settled) return;
      settled = true;
      req.destroy();
      resolve(o);
    };
    req.on('upgrade', (res: IncomingMessage, socket: Socket) => {
      socket.destroy();
      done({ status: res.statusCode, headers: res.headers, complete: true });
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('latin1');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => done({ status: res.statusCode, statusMessage: res.statusMessage, headers: res.headers, body, complete: res.complete }));
      res.on('error', () => done({ status: res.statusCode, statusMessage: res.statusMessage, headers: res.headers, body, complete: false }));
      res.on('aborted', () => done({ status: res.statusCode, statusMessage: res.statusMessage, headers: res.headers, body, complete: false }));
    });
    req.on('error', (err) => done({ noAnswer: (err as NodeJS.ErrnoException).code ?? err.message }));
    if (slowBody > 0) {
      // A large body, sent in pieces while the answer may already be on its way.
      let left = slowBody;
      const piece = Buffer.alloc(64 * 1024, 0x61);
      const next = (): void => {
        if (settled) return;
        if (left <= 0) return void req.end();
        left -= piece.length;
        if (req.write(piece)) setImmediate(next);
        else req.once('drain', next);
      };
      next();
    } else req.end();
  });
}

function check(o: Outcome, want: Exclude<Expect, 'skip'>, label: string): void {
  if ('oneOf' in want) {
    const misses: string[] = [];
    for (const one of want.oneOf) {
      try {
        return check(o, one, label);
      } catch (err) {
        misses.push(String(err));
      }
    }
    throw new Error(`${label}: none of the outcomes allowed:\n${misses.join('\n')}`);
  }
  if ('bad' in want) {
    expect(o.status, `${label}: ${JSON.stringify(o).slice(0, 300)}`).toBe(502);
    expect(o.complete, label).toBe(true);
    const body = JSON.parse(o.body ?? '{}') as { error?: { message?: string } };
    expect(body.error?.message ?? '', label).toMatch(/workspace's server on port \d+/);
  } else if ('incomplete' in want) {
    expect(o.complete ?? false, `${label}: ${JSON.stringify(o).slice(0, 300)}`).toBe(false);
  } else if ('upgraded' in want) {
    expect(o.status, `${label}: ${JSON.stringify(o).slice(0, 300)}`).toBe(101);
  } else {
    expect(o.status, `${label}: ${JSON.stringify(o).slice(0, 300)}`).toBe(want.status);
    expect(o.complete, label).toBe(true);
    if (want.body !== undefined) expect(o.body, label).toBe(want.body);
    if (want.reason !== undefined) expect(o.statusMessage, label).toBe(want.reason);
  }
}

afterAll(async () => {
  // The Kubernetes workspace is closed first, so that its Pod (a sandbox of the fixture's) goes.
  const k = await kubeShared?.catch(() => undefined);
  if (k) await call(k.client, 'workspace_close', { workspaceId: k.workspaceId }).catch(() => undefined);
  for (const svc of owned) await svc.dispose();
  await kube?.close();
  await host?.close();
});

describe.each(RELAYS)('hostile workspace servers behind the $name', (relay) => {
  let svc: Service;
  let ws: string;
  let base: string;
  let headers: Record<string, string>;
  let pid: number;
  let other: Client;
  const calls = { ok: 0, failed: [] as string[] };
  let stop = false;
  let loop: Promise<void>;

  beforeAll(async () => {
    let env: RelayEnv;
    ({ env, base, headers } = await relay.setup());
    ({ svc, workspaceId: ws } = env);
    pid = svc.proc.pid!;
    // Another client's tool calls, all the while.
    other = await connectV2(svc);
    loop = (async () => {
      while (!stop) {
        try {
          const r = await call(other, 'files_read', { workspaceId: ws, path: 'README.md' });
          if (r.ok) calls.ok++;
          else calls.failed.push(r.text);
        } catch (err) {
          calls.failed.push(String(err));
          if (svc.proc.exitCode !== null || svc.proc.signalCode !== null) return;
        }
      }
    })();
  }, 300_000);

  afterAll(async () => {
    stop = true;
    await loop;
    await other?.close();
  });

  for (const row of HOSTILE) {
    for (const via of ['http', 'ws'] as const) {
      const want = row[via];
      if (want === 'skip') continue;
      it(`${row.name} over ${via === 'http' ? 'HTTP' : 'a WebSocket upgrade'}: ${row.why}`, async () => {
        const o = await send(`${base}case/${row.name}`, headers, via === 'ws' ? 'GET' : (row.method ?? 'GET'), via === 'ws' ? 0 : (row.slowBody ?? 0), via === 'ws');
        check(o, want, `${row.name}/${via}`);
        // Every answer of the relay's own keeps this origin's policy on it.
        if (o.status === 200 || o.status === 502) expect(o.headers?.['content-security-policy'] ?? '', row.name).toContain('sandbox');
        // The runner is the same process, and still serving.
        expect(svc.proc.exitCode).toBeNull();
        expect(svc.proc.signalCode).toBeNull();
      }, 60_000);
    }
  }

  it('afterwards: the relay still forwards a plain answer, the runner is the same process, /healthz answers, and every tool call of the other client succeeded', async () => {
    const o = await send(`${base}case/ok`, headers);
    check(o, { status: 200, body: 'fine' }, 'ok');
    expect(svc.proc.pid).toBe(pid);
    expect(svc.proc.exitCode).toBeNull();
    expect(() => process.kill(pid, 0)).not.toThrow();
    const health = await httpRequest(svc.url, 'GET', '/healthz');
    expect(health.status).toBe(200);
    expect(JSON.parse(health.body)).toMatchObject({ status: 'ok' });
    // One more call of the other client, then the tally.
    const r = await call(other, 'files_read', { workspaceId: ws, path: 'README.md' });
    expect(r.ok).toBe(true);
    expect(calls.failed).toEqual([]);
    expect(calls.ok).toBeGreaterThan(0);
  }, 60_000);
});
