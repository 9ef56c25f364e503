/**
 * The preview gate's bound on connections (issue #33): a preview link (a public one may be in
 * anyone's hands) holds at most maxConnections relays into its workspace at once; past it 429,
 * and a slot is given back when its connection closes. The gate runs on a node:http server here;
 * the relay is a plain loopback connection to a server that holds every answer until told.
 */
import { Agent, createServer as createHttpServer, request, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PreviewGate } from '../../src/services/previews/http-gate.js';
import type { PreviewService, ResolvedLink } from '../../src/services/previews/links.js';

let app: HttpServer;
let front: HttpServer;
const held: ServerResponse[] = [];
let revokeHook: ((id: string) => void) | undefined;

const link: ResolvedLink = {
  row: { id: 'prv_test', owner_id: 'o', workspace_id: 'ws_test', port: 1, label: null, created_at: '', created_by: 'mcp', expires_at: new Date(Date.now() + 3_600_000).toISOString(), public_state: 'granted', public_at: null, revoked_at: null, revoked_by: null, generation: 1 },
  kind: 'public',
  base: 'prv_test.sig',
};

function get(path: string): Promise<{ status: number; req: ReturnType<typeof request> }> {
  const { port } = front.address() as AddressInfo;
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false }, (res: IncomingMessage) => {
      res.resume();
      resolve({ status: res.statusCode!, req });
    });
    req.on('error', reject);
    req.end();
  });
}

/** A gate whose relays are plain loopback connections to the app server on appPort (paused, as the daemon's are). */
function gateTo(appPort: number, previews: PreviewService, bounds: { maxConnections?: number; maxPublicConnections?: number }): PreviewGate {
  return new PreviewGate({
    previews,
    handle: async () => ({ id: 'ws_test', socketPath: '/nonexistent', pid: 0 }),
    relay: () =>
      new Promise((resolve, reject) => {
        const s = connect(appPort, '127.0.0.1', () => {
          s.pause();
          resolve(s);
        });
        s.once('error', reject);
      }),
    ownerBearer: () => false,
    ownerSession: () => false,
    log: { warn: () => undefined },
    ...bounds,
  });
}

beforeAll(async () => {
  // The workspace's server: holds every answer until the test ends it.
  app = createHttpServer((_req, res) => void held.push(res));
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  const appPort = (app.address() as AddressInfo).port;
  const previews = {
    resolve: () => link,
    remainingMs: () => 3_600_000,
    grantSegment: () => 'unused',
    set onRevoke(f: (id: string) => void) {
      revokeHook = f;
    },
  } as unknown as PreviewService;
  const gate = gateTo(appPort, previews, { maxConnections: 3 });
  front = createHttpServer((req, res) => void gate.request(req, res, () => undefined));
  await new Promise<void>((r) => front.listen(0, '127.0.0.1', r));
});

afterAll(async () => {
  front?.closeAllConnections();
  app?.closeAllConnections();
  front?.close();
  app?.close();
});

describe('preview gate connection bound', () => {
  it('holds at most maxConnections relays per preview; the next is 429 until one closes; revoke closes them all', async () => {
    // Three answers held open by the workspace's server.
    const pending = [0, 1, 2].map(() => get('/p/prv_test.sig/slow'));
    while (held.length < 3) await new Promise((r) => setTimeout(r, 20));
    expect((await get('/p/prv_test.sig/one-more')).status).toBe(429);
    // One answer ends: its slot comes back.
    held.shift()!.end('done');
    expect((await pending[0]!).status).toBe(200);
    const fourth = get('/p/prv_test.sig/again');
    while (held.length < 3) await new Promise((r) => setTimeout(r, 20));
    expect((await get('/p/prv_test.sig/over')).status).toBe(429);
    // Revoking the preview closes every relay it holds; the slots come back.
    revokeHook!('prv_test');
    await Promise.allSettled([pending[1], pending[2], fourth]);
    held.length = 0;
    const after = get('/p/prv_test.sig/after-revoke');
    while (held.length < 1) await new Promise((r) => setTimeout(r, 20));
    held.shift()!.end('ok');
    expect((await after).status).toBe(200);
  });
});

/**
 * Issue #42 item 3: client connections that came in through public links are bounded together
 * (maxPublicConnections), a keep-alive connection counting once; and one connection making many
 * requests adds one close listener to its socket, not one per request.
 */
describe('public-link connections and keep-alive', () => {
  let app2: HttpServer;
  let front2: HttpServer;
  const serverSockets: Socket[] = [];

  beforeAll(async () => {
    app2 = createHttpServer((_req, res) => res.end('ok'));
    await new Promise<void>((r) => app2.listen(0, '127.0.0.1', r));
    const appPort = (app2.address() as AddressInfo).port;
    const previews = { resolve: () => link, remainingMs: () => 3_600_000, grantSegment: () => 'unused', onRevoke: undefined } as unknown as PreviewService;
    const gate = gateTo(appPort, previews, { maxPublicConnections: 2 });
    front2 = createHttpServer({ keepAliveTimeout: 60_000 }, (req, res) => void gate.request(req, res, () => undefined));
    front2.on('connection', (s: Socket) => serverSockets.push(s));
    await new Promise<void>((r) => front2.listen(0, '127.0.0.1', r));
  });

  afterAll(() => {
    front2?.closeAllConnections();
    app2?.closeAllConnections();
    front2?.close();
    app2?.close();
  });

  const via = (agent: Agent, path = '/p/prv_test.sig/x'): Promise<{ status: number; reused: boolean; connection?: string }> => {
    const { port } = front2.address() as AddressInfo;
    return new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path, agent }, (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode!, reused: req.reusedSocket, connection: res.headers.connection }));
      });
      req.on('error', reject);
      req.end();
    });
  };

  it('counts a keep-alive connection once; past the bound 429 and the connection closes; a closed one frees its place', async () => {
    const a = new Agent({ keepAlive: true, maxSockets: 1 });
    const b = new Agent({ keepAlive: true, maxSockets: 1 });
    const c = new Agent({ keepAlive: true, maxSockets: 1 });
    for (let i = 0; i < 5; i++) {
      const r = await via(a);
      expect(r.status).toBe(200);
      expect(r.reused).toBe(i > 0);
    }
    expect((await via(b)).status).toBe(200);
    const over = await via(c);
    expect(over.status).toBe(429);
    expect(over.connection).toBe('close');
    // a's connection closes: its place is free once the server has seen the close.
    const aSocket = serverSockets[0]!;
    const gone = new Promise<void>((r) => aSocket.once('close', () => r()));
    a.destroy();
    await gone;
    const again = await via(c);
    expect(again.status).toBe(200);
    b.destroy();
    c.destroy();
  });

  it('one connection making many requests adds one close listener to its socket', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const before = serverSockets.length;
    expect((await via(agent)).status).toBe(200);
    const socket = serverSockets[before]!;
    const after1 = socket.listenerCount('close');
    for (let i = 0; i < 40; i++) expect((await via(agent)).status).toBe(200);
    expect(serverSockets.length).toBe(before + 1);
    expect(socket.listenerCount('close')).toBe(after1);
    agent.destroy();
  });
});
