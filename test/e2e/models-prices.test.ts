/**
 * Prices over MCP stay the owner's (issue #31 item 8) against the real `atelier serve`, with
 * provider_a pointed at a scripted models endpoint in front of the fake provider. A catalog-verified
 * price is the cached catalog price of the model the profile routes to: a client that re-prices an
 * active profile of an expensive model at a cheap model's catalog price (catalogPriceRef naming the
 * cheap model), with or without a model change in the same update, is refused with
 * OWNER_APPROVAL_REQUIRED (validate lists the escalation, the refusal is audited with actor mcp),
 * nothing changes, and the gateway still meters the expensive price. The correct catalog price of
 * the routed model still passes, and the repricing review compares with the routed model.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFakeProvider, type FakeProvider } from '../fixtures/fake-provider.js';
import { startFakeCatalog, type FakeCatalog } from '../fixtures/fake-catalog.js';
import { call, connectV2, httpRequest, startService, type Service, dashboardLogin } from './harness.js';
import { until } from './gateway-harness.js';

const KEY = 'sk-prices-A-' + 'P'.repeat(30);
const P = (input: number, output: number) => ({ inputMicrosPerMillionTokens: input, outputMicrosPerMillionTokens: output, cachedReadMicrosPerMillionTokens: null, cachedWriteMicrosPerMillionTokens: null });
const BIG = P(10_000_000, 40_000_000);
const BIGGER = P(12_000_000, 48_000_000);
const TINY = P(1_000_000, 4_000_000);
const LIMITS = { maxInputTokens: 100_000, maxOutputTokens: 1_000, maxCostMicros: 1_000_000 };
/**
 * What the fake provider's usage (120 input of which 20 cached reads, 30 output) costs at a price
 * with an unknown cached-read price (charged at the input price): (100 + 20) x input + 30 x output.
 */
const costAt = (p: ReturnType<typeof P>) => Math.ceil((120 * p.inputMicrosPerMillionTokens + 30 * p.outputMicrosPerMillionTokens) / 1_000_000);

let fake: FakeProvider;
let cat: FakeCatalog;
let svc: Service;
let cookie = '';
let csrf = '';

beforeAll(async () => {
  fake = await startFakeProvider({ usage: { input: 120, cached: 20, output: 30, reasoning: 5 } });
  cat = await startFakeCatalog(fake.url);
  cat.acceptKeys = [KEY];
  cat.models = [
    { id: 'big-model', pricing: BIG },
    { id: 'bigger-model', pricing: BIGGER },
    { id: 'tiny-model', pricing: TINY },
  ];
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-models-prices-'));
  writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ providers: { provider_a: { baseUrl: cat.url + '/v1' } } }));
  svc = await startService({ dataDir, args: ['--unsafe-dev-no-sandbox'] });
  ({ cookie, csrf } = await dashboardLogin(svc));
}, 60_000);

afterAll(async () => {
  await svc?.dispose();
  await cat?.close();
  await fake?.close();
});

async function rest(method: string, path: string, body?: unknown) {
  const h: Record<string, string> = { cookie, 'x-csrf-token': csrf };
  if (body !== undefined) h['content-type'] = 'application/json';
  const r = await httpRequest(svc.url, method, path, h, body === undefined ? undefined : JSON.stringify(body));
  return { status: r.status, body: JSON.parse(r.body || '{}') };
}

describe('prices over MCP stay the owner’s', () => {
  let cred = '';
  let mcp: Awaited<ReturnType<typeof connectV2>>;
  const tool = (name: string, args: Record<string, unknown>) => call(mcp, name, args);
  const listed = async (profileId: string) => {
    const l = await tool('model_profile_list', { profileId });
    if (!l.ok) throw new Error(l.text);
    return (l.result.profiles as Array<Record<string, any>>)[0]!;
  };
  /** One chat request through the gateway on a lease of (profileId, revision); what the lease was charged. */
  const meteredCost = async (profileId: string, revision: number): Promise<number> => {
    const gwUrl = await until(() => /"url":"(http:\/\/127\.0\.0\.1:\d+)"/.exec(svc.stderr())?.[1]);
    const secret = readFileSync(join(svc.dataDir, 'state', 'gateway-admin.secret'), 'utf8').trim();
    const admin = { authorization: `Bearer ${secret}`, 'content-type': 'application/json' };
    const lease = await fetch(gwUrl + '/admin/leases', {
      method: 'POST',
      headers: admin,
      body: JSON.stringify({ agentId: 'agent_' + 'p'.repeat(22), profileId, revision, budgets: { maxInputTokens: 10_000, maxOutputTokens: 100, maxCostMicros: 100_000 }, expiresAt: new Date(Date.now() + 60_000).toISOString() }),
    }).then((r) => r.json());
    expect(lease.token, JSON.stringify(lease)).toMatch(/^atlg_/);
    const chat = await fetch(gwUrl + '/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${lease.token}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }) });
    expect(chat.status).toBe(200);
    await chat.text();
    const info = await fetch(`${gwUrl}/admin/leases/${lease.leaseId}`, { headers: admin }).then((r) => r.json());
    await fetch(`${gwUrl}/admin/leases/${lease.leaseId}`, { method: 'DELETE', headers: admin });
    return info.used.costMicros as number;
  };

  it('an active profile of an expensive model at its own catalog price routes and meters at it', async () => {
    mcp = await connectV2(svc);
    cred = (await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_a', key: KEY })).body.credential.id;
    const s = await tool('model_catalog_search', { provider: 'provider_a', credentialId: cred });
    expect(s.ok && s.result.total).toBe(3);
    const c = await tool('model_profile_create', { profileId: 'exp', displayName: 'Expensive', credentialId: cred, model: 'big-model', apiMode: 'chat-completions', pricing: BIG, limits: LIMITS, maxProxyOperations: [], catalogPriceRef: { sourceModelId: 'big-model' }, idempotencyKey: 'exp-create' });
    expect(c.ok, c.ok ? '' : c.text).toBe(true);
    const act = await rest('POST', '/api/v1/agent-model-profiles/exp/activate', { expectedGeneration: 1 });
    expect(act.body.profile).toMatchObject({ status: 'active', activeRevision: 1, generation: 2, priceSource: 'catalog', repricingReview: { status: 'current', sourceModelId: 'big-model' } });
    expect(await meteredCost('exp', 1)).toBe(costAt(BIG));
  });

  it('a cheap model’s catalog price on the expensive model is a lowered unverified price: validate lists it, update refuses, nothing changes', async () => {
    const change = { pricing: TINY, catalogPriceRef: { sourceModelId: 'tiny-model' } };
    const v = await tool('model_profile_validate', { action: 'update', profileId: 'exp', expectedGeneration: 2, ...change });
    expect(v.ok, v.ok ? '' : v.text).toBe(true);
    if (v.ok) {
      expect(v.result).toMatchObject({ valid: false, ownerApprovalRequired: true, revision: { priceSource: 'override' } });
      const kinds = (v.result.escalations as Array<{ kind: string; field: string }>).map((e) => `${e.kind}:${e.field}`);
      expect(kinds).toEqual(expect.arrayContaining(['price_lowered_unverified:pricing.inputMicrosPerMillionTokens', 'price_lowered_unverified:pricing.outputMicrosPerMillionTokens']));
      expect(v.result.issues).toEqual(expect.arrayContaining([expect.objectContaining({ field: 'catalogPriceRef', message: expect.stringContaining('big-model') })]));
    }
    const r = await tool('model_profile_update', { profileId: 'exp', expectedGeneration: 2, ...change, idempotencyKey: 'exp-reprice-1' });
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.code).toBe('OWNER_APPROVAL_REQUIRED');
      expect((r.error.details.escalations as Array<{ kind: string }>).map((e) => e.kind)).toContain('price_lowered_unverified');
    }
  });

  it('the same with a model change in the same update (another expensive model at the cheap model’s catalog price)', async () => {
    const change = { model: 'bigger-model', pricing: TINY, catalogPriceRef: { sourceModelId: 'tiny-model' } };
    const v = await tool('model_profile_validate', { action: 'update', profileId: 'exp', expectedGeneration: 2, ...change });
    expect(v.ok && v.result.ownerApprovalRequired).toBe(true);
    if (v.ok) expect((v.result.escalations as Array<{ kind: string }>).map((e) => e.kind)).toEqual(expect.arrayContaining(['price_lowered_unverified', 'price_unverified_for_new_route']));
    const r = await tool('model_profile_update', { profileId: 'exp', expectedGeneration: 2, ...change, idempotencyKey: 'exp-reprice-2' });
    expect(!r.ok && r.error.code).toBe('OWNER_APPROVAL_REQUIRED');
    if (!r.ok) expect(r.error.details).toMatchObject({ reason: 'price_unverified_for_new_route' });
    // A model change that keeps the old model's catalog price and names it is an override on a new route too.
    const keep = await tool('model_profile_update', { profileId: 'exp', expectedGeneration: 2, model: 'bigger-model', idempotencyKey: 'exp-reprice-3' });
    expect(!keep.ok && keep.error.code).toBe('OWNER_APPROVAL_REQUIRED');
    if (!keep.ok) expect((keep.error.details.escalations as Array<{ kind: string }>).map((e) => e.kind)).toContain('price_unverified_for_new_route');

    // Nothing changed: same generation and revisions, the active revision still the expensive model at its price.
    const p = await listed('exp');
    expect(p).toMatchObject({ status: 'active', generation: 2, latestRevision: 1, activeRevision: 1, model: 'big-model', pricing: BIG, priceSource: 'catalog', active: { revision: 1, model: 'big-model', pricing: BIG } });
    const st = await rest('GET', '/api/v1/agent-model-config-status');
    expect(st.body.routes).toEqual([{ profileId: 'exp', revision: 1, provider: 'provider_a', credentialId: cred }]);
    expect(await meteredCost('exp', 1)).toBe(costAt(BIG));
    // Every refusal is audited with actor mcp.
    const audit = (await rest('GET', '/api/v1/audit-log?actor=mcp&outcome=refused&action=model_profile_update')).body.entries as Array<Record<string, unknown>>;
    expect(audit.filter((e) => e.target === 'exp' && String(e.reason).startsWith('OWNER_APPROVAL_REQUIRED')).length).toBe(3);
  });

  it('the routed model’s own catalog price passes (also with a model change), routes at once and meters at it', async () => {
    const up = await tool('model_profile_update', { profileId: 'exp', expectedGeneration: 2, model: 'tiny-model', pricing: TINY, catalogPriceRef: { sourceModelId: 'tiny-model' }, idempotencyKey: 'exp-legit-1' });
    expect(up.ok, up.ok ? '' : up.text).toBe(true);
    if (up.ok) expect(up.result.profile).toMatchObject({ activeRevision: 2, model: 'tiny-model', priceSource: 'catalog', repricingReview: { status: 'current', sourceModelId: 'tiny-model' } });
    expect(await meteredCost('exp', 2)).toBe(costAt(TINY));
    // Back up to the expensive model at its catalog price: a higher price is no escalation.
    const back = await tool('model_profile_update', { profileId: 'exp', expectedGeneration: 3, model: 'big-model', pricing: BIG, catalogPriceRef: { sourceModelId: 'big-model' }, idempotencyKey: 'exp-legit-2' });
    expect(back.ok, back.ok ? '' : back.text).toBe(true);
    if (back.ok) expect(back.result.profile).toMatchObject({ activeRevision: 3, model: 'big-model', priceSource: 'catalog' });
  });

  it('a create claiming another model’s catalog price is an override; the repricing review compares with the routed model', async () => {
    const c = await tool('model_profile_create', { profileId: 'claim', displayName: 'Claim', credentialId: cred, model: 'big-model', apiMode: 'chat-completions', pricing: TINY, limits: LIMITS, maxProxyOperations: [], catalogPriceRef: { sourceModelId: 'tiny-model' }, idempotencyKey: 'claim-create' });
    expect(c.ok, c.ok ? '' : c.text).toBe(true);
    if (c.ok) {
      expect(c.result.profile).toMatchObject({ status: 'disabled', priceSource: 'override', pinnedPrices: { source: 'override' } });
      expect(c.result.issues).toEqual(expect.arrayContaining([expect.objectContaining({ field: 'pricing', message: expect.stringContaining('price_unverified_for_new_route') })]));
    }
    const p = await listed('claim');
    expect(p.repricingReview).toMatchObject({ status: 'differs', sourceModelId: 'big-model', catalogPricing: BIG, catalogPriceRef: { sourceModelId: 'tiny-model', matchesRoutedModel: false } });
    // The owner can still save such prices on the dashboard (the owner acting): the review still says they differ.
    const own = await rest('POST', '/api/v1/agent-model-profiles', { profileId: 'owner-claim', displayName: 'O', credentialId: cred, model: 'big-model', apiMode: 'chat-completions', pricing: TINY, limits: LIMITS, maxProxyOperations: [], catalogPriceRef: { sourceModelId: 'tiny-model' }, idempotencyKey: 'owner-claim-1' });
    expect(own.status).toBe(201);
    expect(own.body.profile).toMatchObject({ priceSource: 'override', repricingReview: { status: 'differs', sourceModelId: 'big-model' } });
    await mcp.close();
  });
});
