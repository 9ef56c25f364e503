/**
 * /mcp remembers verified tokens (src/services/access/token-cache.ts); a revoked token must still fail on its very
 * next request, whether it was revoked in this process (the dashboard) or by another (the CLI), on a
 * connection that was just using it; and one token's remembered access is never widened or narrowed
 * by another request's narrowing headers.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, connectV1, connectV2, dashboardLogin, httpRequest, runCli, startService, type Service } from './harness.js';
import { ALL_TOOLS } from './spec.js';

let svc: Service;

beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => {
  await svc?.dispose();
});

const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' };
let id = 0;
const rawCall = (token: string, method: string, params: Record<string, unknown>, extra: Record<string, string> = {}) =>
  httpRequest(svc.url, 'POST', '/mcp', { ...HEADERS, authorization: `Bearer ${token}`, ...extra }, JSON.stringify({ jsonrpc: '2.0', id: ++id, method, params }));

describe('remembered token verification', () => {
  it('a token revoked on the dashboard fails at once, on the connection that was using it', async () => {
    const { cookie, csrf } = await dashboardLogin(svc);
    const made = await httpRequest(svc.url, 'POST', '/api/v1/tokens', { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' }, JSON.stringify({ name: 'cache-dash' }));
    expect(made.status).toBe(201);
    const { token, info } = JSON.parse(made.body) as { token: string; info: { id: string } };
    const c = await connectV2(svc, token);
    for (let i = 0; i < 5; i++) expect((await call(c, 'workspace_list', {})).ok).toBe(true);
    expect((await rawCall(token, 'tools/call', { name: 'workspace_list', arguments: {} })).status).toBe(200);
    const revoked = await httpRequest(svc.url, 'DELETE', `/api/v1/tokens/${info.id}`, { cookie, 'x-csrf-token': csrf });
    expect(revoked.status).toBe(200);
    await expect(c.callTool({ name: 'workspace_list', arguments: {} })).rejects.toThrow();
    const r = await rawCall(token, 'tools/call', { name: 'workspace_list', arguments: {} });
    expect(r.status).toBe(401);
    expect(r.headers['www-authenticate']).toContain('error="invalid_token"');
    await c.close().catch(() => undefined);
  });

  it('a token revoked by the CLI (another process) fails at once', async () => {
    const created = await runCli(['token', 'create', '--name', 'cache-cli', '--json', '--data-dir', svc.dataDir]);
    expect(created.code).toBe(0);
    const t = JSON.parse(created.stdout) as { id: string; token: string };
    const c = await connectV1(svc, t.token);
    for (let i = 0; i < 5; i++) expect((await call(c, 'workspace_list', {})).ok).toBe(true);
    expect((await runCli(['token', 'revoke', t.id, '--data-dir', svc.dataDir])).code).toBe(0);
    await expect(c.callTool({ name: 'workspace_list', arguments: {} })).rejects.toThrow();
    expect((await rawCall(t.token, 'tools/call', { name: 'workspace_list', arguments: {} })).status).toBe(401);
    await c.close().catch(() => undefined);
  });

  it("one request's narrowing headers do not stick to the token", async () => {
    const count = async (extra: Record<string, string>) => {
      const r = await rawCall(svc.token, 'tools/list', {}, extra);
      expect(r.status).toBe(200);
      return (JSON.parse(r.body) as { result: { tools: unknown[] } }).result.tools.length;
    };
    const all = await count({});
    expect(all).toBe(ALL_TOOLS);
    const readOnly = await count({ 'x-mcp-readonly': 'true' });
    expect(readOnly).toBeGreaterThan(0);
    expect(readOnly).toBeLessThan(all);
    const files = await count({ 'x-mcp-toolsets': 'files' });
    expect(files).toBeGreaterThan(0);
    expect(files).toBeLessThan(all);
    expect(await count({})).toBe(all);
  });

  it('unknown and malformed tokens are refused every time', async () => {
    for (let i = 0; i < 3; i++) {
      expect((await rawCall('atl_' + 'x'.repeat(40), 'tools/list', {})).status).toBe(401);
      expect((await rawCall('atla_' + 'y'.repeat(40), 'tools/list', {})).status).toBe(401);
    }
  });
});
