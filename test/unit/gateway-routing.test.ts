import { describe, expect, it } from 'vitest';
import type { LeaseRequest, Snapshot, SnapshotRoute } from '../../src/contracts/gateway.js';
import { Budget } from '../../src/gateway/budget.js';
import {
  adminAuthorizer,
  authenticateLease,
  buildRoutes,
  classifyRequest,
  leaseBudgets,
  leaseProblem,
  selectRoute,
  snapshotProblem,
  splitTarget,
  UpstreamAgents,
} from '../../src/gateway/routing.js';

const PRICING = { inputMicrosPerMillionTokens: 1_000_000, outputMicrosPerMillionTokens: 2_000_000, cachedReadMicrosPerMillionTokens: null, cachedWriteMicrosPerMillionTokens: null };
const route = (over: Partial<SnapshotRoute> = {}): SnapshotRoute => ({
  profileId: 'coder',
  revision: 3,
  provider: 'provider_a',
  apiMode: 'chat-completions',
  model: 'm-1',
  credential: { id: 'cred_1', key: 'sk-test-key' },
  pricing: PRICING,
  ...over,
});
const snapshot = (routes: SnapshotRoute[]): Snapshot => ({ generation: 1, routes, providers: { provider_a: { baseUrl: 'http://127.0.0.1:9/v1' } } });
const leaseReq = (over: Partial<LeaseRequest> = {}): LeaseRequest => ({
  agentId: 'agent_1',
  profileId: 'coder',
  revision: 3,
  budgets: { maxInputTokens: 1000, maxOutputTokens: 1000, maxCostMicros: 1000 },
  expiresAt: new Date(Date.now() + 60_000).toISOString(),
  ...over,
});

describe('request classification', () => {
  it('routes the two agent endpoints by exact method and path, admin by prefix, health by GET', () => {
    expect(classifyRequest('POST', '/v1/chat/completions')).toEqual({ kind: 'proxy', mode: 'chat-completions' });
    expect(classifyRequest('POST', '/v1/responses')).toEqual({ kind: 'proxy', mode: 'responses' });
    expect(classifyRequest('GET', '/v1/chat/completions')).toEqual({ kind: 'not_found' });
    expect(classifyRequest('POST', '/v1/chat/completions/')).toEqual({ kind: 'not_found' });
    expect(classifyRequest('POST', '/V1/RESPONSES')).toEqual({ kind: 'not_found' });
    expect(classifyRequest('POST', '/v1/../v1/responses')).toEqual({ kind: 'not_found' });
    expect(classifyRequest('DELETE', '/admin/leases/x')).toEqual({ kind: 'admin' });
    expect(classifyRequest('GET', '/admin')).toEqual({ kind: 'not_found' });
    expect(classifyRequest('GET', '/healthz')).toEqual({ kind: 'health' });
    expect(classifyRequest('POST', '/healthz')).toEqual({ kind: 'not_found' });
    expect(classifyRequest(undefined, '/')).toEqual({ kind: 'not_found' });
  });

  it('splits the query off the path (the first "?"), keeping the rest as parameters', () => {
    const t = splitTarget('/admin/usage?after=5&limit=10?x');
    expect(t.path).toBe('/admin/usage');
    expect(t.query.get('after')).toBe('5');
    expect(t.query.get('limit')).toBe('10?x');
    expect(splitTarget('/v1/responses').path).toBe('/v1/responses');
    expect([...splitTarget('/x').query.keys()]).toEqual([]);
  });
});

describe('admin secret', () => {
  const ok = adminAuthorizer('s3cret-admin-secret-0123');
  it('accepts only "Bearer <exact secret>"', () => {
    expect(ok('Bearer s3cret-admin-secret-0123')).toBe(true);
    expect(ok('bearer s3cret-admin-secret-0123')).toBe(false);
    expect(ok('Bearer s3cret-admin-secret-012')).toBe(false);
    expect(ok('Bearer s3cret-admin-secret-0123 ')).toBe(false);
    expect(ok('s3cret-admin-secret-0123')).toBe(false);
    expect(ok('Bearer ')).toBe(false);
    expect(ok(undefined)).toBe(false);
    expect(ok('Bearer ' + 'x'.repeat(1_000_000))).toBe(false);
  });
});

describe('lease token authentication', () => {
  it('finds the live lease by its token, refusing unknown, malformed, revoked and expired ones', () => {
    let now = Date.now();
    const b = new Budget(() => now);
    const { lease, token } = b.issue(leaseReq());
    expect(authenticateLease(b, `Bearer ${token}`, now)).toEqual({ lease });
    for (const h of [undefined, '', token, `Bearer ${token}x`, `Bearer  ${token}`, `Bearer ${token} extra`, `Basic ${token}`, 'Bearer atlg_' + 'a'.repeat(100_000)]) {
      expect(authenticateLease(b, h, now)).toMatchObject({ status: 401, code: 'invalid_lease' });
    }
    now = Date.parse(leaseReq().expiresAt) + 120_000;
    expect(authenticateLease(b, `Bearer ${token}`, now)).toMatchObject({ status: 401, code: 'lease_expired' });
    b.revoke(lease.id);
    expect(authenticateLease(b, `Bearer ${token}`, Date.now())).toMatchObject({ status: 401, code: 'invalid_lease' });
  });

  it('a lease ended by a provider overrun stops authenticating at once', () => {
    const b = new Budget();
    const { lease, token } = b.issue(leaseReq());
    lease.revoked = true;
    expect(authenticateLease(b, `Bearer ${token}`, Date.now())).toMatchObject({ code: 'invalid_lease' });
  });
});

describe('routes from a snapshot', () => {
  it('compiles a route: provider URL, auth header, user agent, prices; one keep-alive agent per upstream host', () => {
    const agents = new UpstreamAgents();
    const routes = buildRoutes(snapshot([route(), route({ profileId: 'other', revision: 1 })]), agents);
    if (typeof routes === 'string') throw new Error(routes);
    const r = routes.get('coder@3')!;
    expect(r.url.href).toBe('http://127.0.0.1:9/v1/chat/completions');
    expect(r.https).toBe(false);
    expect(r.headers.authorization).toBe('Bearer sk-test-key');
    expect(r.headers['accept-encoding']).toBe('identity');
    expect(r.prices).not.toBeNull();
    expect(r.agent).toBe(routes.get('other@1')!.agent);
    agents.destroyAll();
  });

  it('refuses a snapshot whole, naming every bad route', () => {
    const agents = new UpstreamAgents();
    const bad = buildRoutes(
      snapshot([route(), route({ profileId: 'a', provider: 'nope' as never }), route({ profileId: 'b', credential: { id: 'c', key: '' } }), route({ profileId: 'c', provider: 'custom', upstreamUrl: 'http://evil.example/v1' })]),
      agents,
    );
    expect(bad).toBeTypeOf('string');
    expect(bad).toMatch(/^snapshot refused: /);
    expect(bad).toContain('a@3: unknown provider nope');
    expect(bad).toContain('b@3: no credential key');
    expect(bad).toContain('c@3: ');
    expect(bad).not.toContain('sk-test-key');
    agents.destroyAll();
  });

  it('keeps a route whose prices cannot bound a cost, with the problem, so its requests are refused before sending', () => {
    const agents = new UpstreamAgents();
    const routes = buildRoutes(snapshot([route({ pricing: { ...PRICING, outputMicrosPerMillionTokens: null } })]), agents) as Map<string, never>;
    const sel = selectRoute(routes, { profileId: 'coder', revision: 3 }, 'chat-completions', false);
    expect(sel).toMatchObject({ status: 400, code: 'price_unknown' });
    agents.destroyAll();
  });

  it('checks a snapshot body structurally first', () => {
    expect(snapshotProblem({ generation: 1, routes: [] })).toBeNull();
    for (const s of [null, 5, 'x', [], {}, { generation: 1.5, routes: [] }, { generation: 1, routes: {} }, { generation: '1', routes: [] }, { generation: 2 ** 60, routes: [] }]) {
      expect(snapshotProblem(s)).toMatch(/needs generation/);
    }
  });
});

describe('route selection', () => {
  const agents = new UpstreamAgents();
  const routes = buildRoutes(snapshot([route(), route({ profileId: 'resp', apiMode: 'responses' })]), agents) as Map<string, never>;
  it('serves a lease from its exact profile revision and endpoint', () => {
    expect(selectRoute(routes, { profileId: 'coder', revision: 3 }, 'chat-completions', false)).toHaveProperty('route');
    expect(selectRoute(routes, { profileId: 'coder', revision: 4 }, 'chat-completions', false)).toMatchObject({ status: 503, code: 'route_unavailable', details: { noProfilesSinceRestart: false } });
    expect(selectRoute(new Map(), { profileId: 'coder', revision: 3 }, 'chat-completions', true)).toMatchObject({ status: 503, details: { noProfilesSinceRestart: true } });
    expect(selectRoute(routes, { profileId: 'coder', revision: 3 }, 'responses', false)).toMatchObject({ status: 400, code: 'unsupported_endpoint' });
    expect(selectRoute(routes, { profileId: 'resp', revision: 3 }, 'chat-completions', false)).toMatchObject({ status: 400, code: 'unsupported_endpoint' });
    // The key separator cannot be forged from a profile id.
    expect(selectRoute(routes, { profileId: 'coder@3', revision: NaN }, 'chat-completions', false)).toMatchObject({ status: 503 });
    agents.destroyAll();
  });
});

describe('lease requests', () => {
  it('validates every field', () => {
    expect(leaseProblem(leaseReq())).toBeNull();
    expect(leaseProblem(null as never)).toBe('must be an object');
    expect(leaseProblem(leaseReq({ agentId: '../x' }))).toMatch(/agentId/);
    expect(leaseProblem(leaseReq({ agentId: 'a'.repeat(101) }))).toMatch(/agentId/);
    expect(leaseProblem(leaseReq({ profileId: '' }))).toMatch(/profileId/);
    expect(leaseProblem(leaseReq({ revision: 1.5 }))).toMatch(/revision/);
    expect(leaseProblem(leaseReq({ budgets: undefined as never }))).toMatch(/budgets are required/);
    expect(leaseProblem(leaseReq({ budgets: { maxInputTokens: -1, maxOutputTokens: 1, maxCostMicros: 1 } }))).toBe('budgets.maxInputTokens must be a non-negative integer');
    expect(leaseProblem(leaseReq({ budgets: { maxInputTokens: 1, maxOutputTokens: 1e300, maxCostMicros: 1 } }))).toMatch(/maxOutputTokens/);
    expect(leaseProblem(leaseReq({ budgets: { maxInputTokens: 1, maxOutputTokens: 1, maxCostMicros: '5' as never } }))).toMatch(/maxCostMicros/);
    expect(leaseProblem(leaseReq({ expiresAt: 'tomorrow' }))).toMatch(/expiresAt/);
  });

  it('caps each budget by the profile limit', () => {
    const asked = { maxInputTokens: 1000, maxOutputTokens: 1000, maxCostMicros: 1000 };
    expect(leaseBudgets(asked, undefined)).toEqual(asked);
    expect(leaseBudgets(asked, { maxOutputTokens: 10 })).toEqual({ maxInputTokens: 1000, maxOutputTokens: 10, maxCostMicros: 1000 });
    expect(leaseBudgets(asked, { maxInputTokens: 5000, maxCostMicros: 0 })).toEqual({ maxInputTokens: 1000, maxOutputTokens: 1000, maxCostMicros: 0 });
  });
});
