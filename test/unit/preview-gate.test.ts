/**
 * The preview gate's bound on connections (issue #33): a preview link (a public one may be in
 * anyone's hands) holds at most maxConnections relays into its workspace at once; past it 429,
 * and a slot is given back when its connection closes. The gate runs on a node:http server here;
 * the relay is a plain loopback connection to a server that holds every answer until told.
 */
import { createServer as createHttpServer, request, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PreviewGate } from '../../src/services/previews-http.js';
import type { PreviewService, ResolvedLink } from '../../src/services/previews.js';

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
  const gate = new PreviewGate({
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
    maxConnections: 3,
  });
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
