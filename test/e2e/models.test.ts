/**
 * The model control plane (issue #7) against the real `atelier serve`: credentials on REST (keys in,
 * never out), model_provider_list, profiles over MCP and REST (create/replay/CONFLICT, generations,
 * every constraint-2 escalation refused and audited with actor mcp, custom URL binding across
 * revisions and after deletion), owner activation/disable/delete, the snapshot push (a request
 * through the gateway reaches the fake provider with the rotated key) and agent-model-config-status.
 * Finally every tool result, REST body, log line and the database files are searched for the keys.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFakeProvider, type FakeProvider } from '../fixtures/fake-provider.js';
import { call, connectV2, httpRequest, startService, type Service, dashboardLogin } from './harness.js';
import { until } from './gateway-harness.js';

const KEY_A1 = 'sk-provA-first-' + 'Q'.repeat(24);
const KEY_A2 = 'sk-provA-rotated-' + 'Z'.repeat(24);
const KEY_C = 'sk-custom-key-' + 'W'.repeat(24);
const KEYS = [KEY_A1, KEY_A2, KEY_C];

let fake: FakeProvider;
let svc: Service;
const seen: string[] = []; // every MCP result and REST body
let cookie = '';
let csrf = '';

beforeAll(async () => {
  fake = await startFakeProvider();
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-models-'));
  writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ providers: { provider_a: { baseUrl: fake.url + '/v1' } } }));
  svc = await startService({ dataDir, args: ['--unsafe-dev-no-sandbox'] });
  ({ cookie, csrf } = await dashboardLogin(svc));
}, 60_000);

afterAll(async () => {
  await svc?.dispose();
  await fake?.close();
});

async function rest(method: string, path: string, body?: unknown, opts: { csrf?: boolean } = {}) {
  const h: Record<string, string> = { cookie };
  if (opts.csrf !== false) h['x-csrf-token'] = csrf;
  if (body !== undefined) h['content-type'] = 'application/json';
  const r = await httpRequest(svc.url, method, path, h, body === undefined ? undefined : JSON.stringify(body));
  seen.push(r.body);
  return { status: r.status, body: JSON.parse(r.body || '{}') };
}

const PRICING = { inputMicrosPerMillionTokens: 2_000_000, outputMicrosPerMillionTokens: 8_000_000, cachedReadMicrosPerMillionTokens: 500_000, cachedWriteMicrosPerMillionTokens: null };
const LIMITS = { maxInputTokens: 100_000, maxOutputTokens: 8_000, maxCostMicros: 5_000_000 };

describe('model control plane', () => {
  let credA = '';
  let credC = '';
  let credA2 = '';
  let mcp: Awaited<ReturnType<typeof connectV2>>;
  const tool = async (name: string, args: Record<string, unknown>) => {
    const r = await call(mcp, name, args);
    seen.push(JSON.stringify(r));
    return r;
  };

  it('credentials: dashboard only, keys in and never out, rotation, disable, auth header modes', async () => {
    mcp = await connectV2(svc);
    expect((await httpRequest(svc.url, 'GET', '/api/v1/provider-credentials')).status).toBe(401);
    expect((await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_a', key: KEY_A1 }, { csrf: false })).status).toBe(403);
    expect((await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_a', key: KEY_A1, authHeader: 'x-api-key' })).status).toBe(400);
    expect((await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_z', key: KEY_A1 })).status).toBe(400);
    const broken = await httpRequest(svc.url, 'POST', '/api/v1/provider-credentials', { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' }, `{"provider":"provider_a","key": ${KEY_A1}}`);
    seen.push(broken.body);
    expect(broken.status).toBe(400);
    expect(JSON.parse(broken.body).error.code).toBe('INVALID_ARGUMENT');
    const a = await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_a', key: KEY_A1, label: 'main' });
    expect(a.status).toBe(201);
    expect(a.body.credential).toMatchObject({ provider: 'provider_a', status: 'active', keyVersion: 1, authHeader: 'bearer' });
    credA = a.body.credential.id;
    expect(credA).toMatch(/^cred_[A-Za-z0-9_-]{20,80}$/);
    const c = await rest('POST', '/api/v1/provider-credentials', { provider: 'custom', key: KEY_C, authHeader: 'x-api-key' });
    expect(c.status).toBe(201);
    credC = c.body.credential.id;
    const a2 = await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_a', key: KEY_A1 + 'x' });
    credA2 = a2.body.credential.id;
    const rot = await rest('POST', `/api/v1/provider-credentials/${credA}/rotate`, { key: KEY_A2 });
    expect(rot.body.credential.keyVersion).toBe(2);
    expect((await rest('POST', `/api/v1/provider-credentials/${credA2}/disable`)).body.credential.status).toBe('disabled');
    const list = await rest('GET', '/api/v1/provider-credentials?provider=provider_a');
    expect(list.body.credentials.map((x: { id: string }) => x.id).sort()).toEqual([credA, credA2].sort());
    const reg = await rest('GET', '/api/v1/model-providers');
    expect(reg.body.providers.map((p: { provider: string }) => p.provider)).toEqual(['provider_a', 'provider_b', 'provider_c', 'provider_d', 'provider_e', 'provider_f', 'custom']);
    expect(reg.body.providers[0]).toMatchObject({ authHeaderModes: ['bearer'], catalogSource: 'provider-models-endpoint', hosts: [fake.host] });
    expect(reg.body.unsupportedSignIn.length).toBe(3);
    const t = await tool('model_provider_list', { provider: 'custom' });
    expect(t.ok).toBe(true);
    if (t.ok) {
      expect(t.result.providers).toHaveLength(1);
      expect(t.result.credentials).toEqual([expect.objectContaining({ id: credC, provider: 'custom', status: 'active', keyVersion: 1, lastCheck: null })]);
    }
  });

  it('profiles: create disabled, replay, CONFLICT, stale generation, non-escalating update', async () => {
    const args = { profileId: 'coder', displayName: 'Coder', credentialId: credA, model: 'model-a', apiMode: 'chat-completions', pricing: PRICING, limits: LIMITS, maxProxyOperations: ['files_read', 'grep_search'], idempotencyKey: 'create-coder-1' };
    const r1 = await tool('model_profile_create', args);
    expect(r1.ok).toBe(true);
    if (!r1.ok) return;
    expect(r1.result.profile).toMatchObject({ profileId: 'coder', status: 'disabled', generation: 1, latestRevision: 1, activeRevision: null, verified: 'Not verified' });
    const r2 = await tool('model_profile_create', args);
    expect(r2.ok && r2.result.replayed).toBe(true);
    const r3 = await tool('model_profile_create', { ...args, displayName: 'Other' });
    expect(!r3.ok && r3.error.code).toBe('CONFLICT');
    const dup = await tool('model_profile_create', { ...args, idempotencyKey: 'create-coder-2' });
    expect(!dup.ok && dup.error.code).toBe('CONFLICT');
    const stale = await tool('model_profile_update', { profileId: 'coder', expectedGeneration: 7, idempotencyKey: 'upd-stale-1', displayName: 'X' });
    expect(!stale.ok && stale.error.code).toBe('CONFLICT');
    const up = await tool('model_profile_update', { profileId: 'coder', expectedGeneration: 1, idempotencyKey: 'upd-coder-1', displayName: 'Coder 2', limits: { ...LIMITS, maxCostMicros: 1_000_000 }, maxProxyOperations: ['files_read'] });
    expect(up.ok).toBe(true);
    if (up.ok) expect(up.result.profile).toMatchObject({ status: 'disabled', generation: 2, latestRevision: 2, displayName: 'Coder 2', model: 'model-a', pricing: PRICING });
    const l = await tool('model_profile_list', { profileId: 'coder' });
    expect(l.ok && (l.result.profiles as unknown[]).length).toBe(1);
  });

  it('every escalation is refused with OWNER_APPROVAL_REQUIRED, changes nothing, and is audited with actor mcp', async () => {
    const base = { profileId: 'coder', expectedGeneration: 2 };
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['credential', { credentialId: credA2 }, 'credential_change'],
      ['limit', { limits: { ...LIMITS, maxCostMicros: 2_000_000 } }, 'limit_raised'],
      ['price', { pricing: { ...PRICING, outputMicrosPerMillionTokens: 1 } }, 'price_lowered_unverified'],
      ['newroute', { model: 'model-b' }, 'price_unverified_for_new_route'],
      ['proxy', { maxProxyOperations: ['files_read', 'exec_run'] }, 'proxy_operations_widened'],
    ];
    let i = 0;
    for (const [name, change, kind] of cases) {
      const v = await tool('model_profile_validate', { action: 'update', ...base, ...change });
      expect(v.ok).toBe(true);
      if (v.ok) expect((v.result.escalations as Array<{ kind: string }>).map((e) => e.kind), name).toContain(kind);
      const r = await tool('model_profile_update', { ...base, ...change, idempotencyKey: `esc-${name}-${i++}` });
      expect(r.ok, name).toBe(false);
      if (!r.ok) {
        expect(r.error.code).toBe('OWNER_APPROVAL_REQUIRED');
        expect((r.error.details.escalations as Array<{ kind: string }>).map((e) => e.kind)).toContain(kind);
      }
    }
    const l = await tool('model_profile_list', { profileId: 'coder' });
    expect(l.ok, l.ok ? '' : l.text).toBe(true);
    if (l.ok) expect((l.result.profiles as Array<Record<string, unknown>>)[0]).toMatchObject({ generation: 2, latestRevision: 2, credentialId: credA, model: 'model-a' });
    const audit = (await rest('GET', '/api/v1/audit-log?actor=mcp&outcome=refused&action=model_profile_update')).body.entries as Array<Record<string, unknown>>;
    expect(audit.filter((e) => String(e.reason).startsWith('OWNER_APPROVAL_REQUIRED')).length).toBeGreaterThanOrEqual(cases.length);
  });

  it('custom URL binding: unbound refused over MCP, bound by an owner profile (also by an older revision), unbound after deletion', async () => {
    const U1 = fake.url + '/v1';
    const U2 = fake.url + '/alt/v1';
    const mk = (profileId: string, url: string, key: string) => ({ profileId, displayName: profileId, credentialId: credC, model: 'cm', apiMode: 'responses', customUpstreamUrl: url, pricing: PRICING, limits: LIMITS, maxProxyOperations: [], idempotencyKey: key });
    const refused = await tool('model_profile_create', mk('c-mcp', U1, 'custom-mcp-1'));
    expect(!refused.ok && refused.error.code).toBe('OWNER_APPROVAL_REQUIRED');
    const audit = (await rest('GET', '/api/v1/audit-log?actor=mcp&outcome=refused&action=model_profile_create')).body.entries as Array<Record<string, unknown>>;
    expect(audit.some((e) => e.target === 'c-mcp')).toBe(true);
    // The owner binds U1 on the dashboard, then moves that profile to U2 (revision 2): U1 stays bound.
    const own = await rest('POST', '/api/v1/agent-model-profiles', mk('c-owner', U1, 'rest-owner-1'));
    expect(own.status).toBe(201);
    const moved = await rest('PATCH', '/api/v1/agent-model-profiles', { profileId: 'c-owner', expectedGeneration: 1, customUpstreamUrl: U2, idempotencyKey: 'rest-owner-2' });
    expect(moved.status).toBe(200);
    expect(moved.body.profile).toMatchObject({ latestRevision: 2, customUpstreamUrl: U2 });
    const ok = await tool('model_profile_create', mk('c-mcp', U1, 'custom-mcp-2'));
    expect(ok.ok).toBe(true);
    // Deleting both profiles that used U1 unbinds it.
    expect((await rest('DELETE', '/api/v1/agent-model-profiles/c-owner')).body.deleted).toBe(true);
    expect((await rest('DELETE', '/api/v1/agent-model-profiles/c-mcp')).body.deleted).toBe(true);
    const again = await tool('model_profile_create', mk('c-mcp2', U1, 'custom-mcp-3'));
    expect(!again.ok && again.error.code).toBe('OWNER_APPROVAL_REQUIRED');
    const v = await tool('model_profile_validate', { action: 'create', ...mk('c-mcp2', U1, 'x'), idempotencyKey: undefined });
    expect(v.ok, v.ok ? '' : v.text).toBe(true);
    if (v.ok) expect(v.result.escalations).toEqual([expect.objectContaining({ kind: 'custom_url_unbound' })]);
  });

  it('owner activation routes the profile through the gateway with the rotated key; disable stops it; status says so', async () => {
    expect((await rest('POST', '/api/v1/agent-model-profiles/coder/activate', {}, { csrf: false })).status).toBe(403);
    const act = await rest('POST', '/api/v1/agent-model-profiles/coder/activate', { expectedGeneration: 2 });
    expect(act.status).toBe(200);
    expect(act.body.profile).toMatchObject({ status: 'active', activeRevision: 2, generation: 3 });
    expect(act.body.gatewayPush).toEqual({ ok: true });
    const st = await rest('GET', '/api/v1/agent-model-config-status');
    expect(st.body.gateway.answered).toBe(true);
    expect(st.body.push.lastAttemptAt).toBeTruthy();
    expect(st.body.routes).toEqual([{ profileId: 'coder', revision: 2, provider: 'provider_a', credentialId: credA }]);
    expect(st.body.inSync).toBe(true);
    expect(st.body.gateway.profileCount).toBe(1);

    // A request through the gateway reaches the fake with the rotated key.
    const gwUrl = await until(() => /"url":"(http:\/\/127\.0\.0\.1:\d+)"/.exec(svc.stderr())?.[1]);
    const secret = readFileSync(join(svc.dataDir, 'state', 'gateway-admin.secret'), 'utf8').trim();
    const lease = await fetch(gwUrl + '/admin/leases', {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}`, 'content-type': 'application/json' },
      body: JSON.stringify({ agentId: 'agent_' + 'm'.repeat(22), profileId: 'coder', revision: 2, budgets: { maxInputTokens: 10000, maxOutputTokens: 100, maxCostMicros: 100000 }, expiresAt: new Date(Date.now() + 60_000).toISOString() }),
    }).then((r) => r.json());
    expect(lease.token).toMatch(/^atlg_/);
    fake.reset();
    const chat = await fetch(gwUrl + '/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${lease.token}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }) });
    expect(chat.status).toBe(200);
    expect(fake.requests.at(-1)!.headers.authorization).toBe(`Bearer ${KEY_A2}`);
    expect(fake.requests.at(-1)!.body.model).toBe('model-a');

    // No MCP tool can activate; update keeps the status.
    const up = await tool('model_profile_update', { profileId: 'coder', expectedGeneration: 3, idempotencyKey: 'upd-active-1', displayName: 'Still active' });
    expect(up.ok && (up.result.profile as Record<string, unknown>).status).toBe('active');
    const dis = await rest('POST', '/api/v1/agent-model-profiles/coder/disable');
    expect(dis.body.profile.status).toBe('disabled');
    const st2 = await rest('GET', '/api/v1/agent-model-config-status');
    expect(st2.body.routes).toEqual([]);
    expect(st2.body.gateway.profileCount).toBe(0);
  });

  it('credential deletion drops it; no key in any tool result, REST body, log line or database file', async () => {
    const del = await rest('DELETE', `/api/v1/provider-credentials/${credA2}`);
    expect(del.body.deleted).toBe(true);
    const l = await tool('model_profile_list', {});
    expect(l.ok).toBe(true);
    await mcp.close();
    const all = [...seen, svc.stdout(), svc.stderr()];
    for (const f of readdirSync(svc.dataDir)) if (f.startsWith('atelier.db')) all.push(readFileSync(join(svc.dataDir, f)).toString('latin1'));
    for (const k of KEYS) for (const text of all) expect(text.includes(k), `key ${k.slice(0, 12)}… leaked`).toBe(false);
    expect(seen.length).toBeGreaterThan(30);
  });
});

describe('saves succeed while the gateway is unreachable (routing rule 7)', () => {
  let down: Service;
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'atelier-models-down-'));
    const secretFile = join(dir, 'gw.secret');
    writeFileSync(secretFile, 'a-very-long-shared-admin-secret\n', { mode: 0o600 });
    down = await startService({ args: ['--unsafe-dev-no-sandbox', '--gateway-url', 'http://127.0.0.1:9', '--gateway-admin-secret-file', secretFile] });
  }, 60_000);
  afterAll(async () => {
    await down?.dispose();
  });

  it('credential and profile saves answer with gatewayPush.ok false; config status says the gateway did not answer', async () => {
    const link = new URL(down.loginLink);
    const first = await httpRequest(down.url, 'GET', link.pathname + link.search);
    const ck = String(first.headers['set-cookie']).split(';')[0]!;
    const tok = JSON.parse((await httpRequest(down.url, 'GET', '/api/v1/session', { cookie: ck })).body).csrfToken;
    const h = { cookie: ck, 'x-csrf-token': tok, 'content-type': 'application/json' };
    const c = await httpRequest(down.url, 'POST', '/api/v1/provider-credentials', h, JSON.stringify({ provider: 'provider_f', key: KEY_A1 }));
    expect(c.status).toBe(201);
    const cred = JSON.parse(c.body);
    expect(cred.gatewayPush.ok).toBe(false);
    const mcp = await connectV2(down);
    const made = await call(mcp, 'model_profile_create', { profileId: 'pf', displayName: 'F', credentialId: cred.credential.id, model: 'f-1', apiMode: 'responses', pricing: PRICING, limits: LIMITS, maxProxyOperations: [], idempotencyKey: 'pf-create-1' });
    expect(made.ok).toBe(true);
    if (made.ok) expect(made.result.gatewayPush).toMatchObject({ ok: false });
    // provider_f: a model change over MCP must be made on the dashboard.
    const pf = await call(mcp, 'model_profile_update', { profileId: 'pf', expectedGeneration: 1, model: 'f-2', pricing: PRICING, idempotencyKey: 'pf-update-1' });
    expect(!pf.ok && (pf.error.details.escalations as Array<{ kind: string }>).map((e) => e.kind)).toContain('provider_f_route_change');
    await mcp.close();
    const st = JSON.parse((await httpRequest(down.url, 'GET', '/api/v1/agent-model-config-status', { cookie: ck })).body);
    expect(st.gateway.answered).toBe(false);
    expect(st.push.lastAttemptAt).toBeTruthy();
    expect(st.push.lastError).toBeTruthy();
    expect(st.inSync).toBe(false);
    expect(down.stderr().includes(KEY_A1)).toBe(false);
  });
});
