/**
 * Model catalog and connection checks (issue #7) against the real `atelier serve`, with providers
 * pointed at a scripted models endpoint in front of the fake provider: cursor pages, filters,
 * availability, caching and the stale copy while the source fails, catalog-verified prices, each
 * connection-check probe (auth, model access, streaming with and without usage, tool call,
 * native-only model), the custom URL rule, the draft-attachment rules (routing rule 6) and the
 * per-principal rate limit. No key in any result, body or log line.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startFakeProvider, type FakeProvider } from '../fixtures/fake-provider.js';
import { startFakeCatalog, type FakeCatalog } from '../fixtures/fake-catalog.js';
import { call, connectV2, httpRequest, startService, type Service, dashboardLogin } from './harness.js';

const KEY_A = 'sk-catalog-A-' + 'K'.repeat(30);
const KEY_C = 'sk-catalog-C-' + 'J'.repeat(30);
const KEY_X = 'sk-custom-X-' + 'H'.repeat(30);
const RATE = 18;
const FRESH = 3;

let fake: FakeProvider;
let cat: FakeCatalog;
let svc: Service;
let cookie = '';
let csrf = '';
const seen: string[] = [];

const P = (input: number, output: number) => ({ inputMicrosPerMillionTokens: input, outputMicrosPerMillionTokens: output, cachedReadMicrosPerMillionTokens: null, cachedWriteMicrosPerMillionTokens: null });

beforeAll(async () => {
  fake = await startFakeProvider();
  cat = await startFakeCatalog(fake.url);
  cat.acceptKeys = [KEY_A, KEY_C, KEY_X];
  cat.models = [
    { id: 'alpha-large', pricing: P(3_000_000, 15_000_000), capabilities: ['tools', 'reasoning'] },
    { id: 'alpha-small', pricing: P(1_000_000, 4_000_000), capabilities: ['tools'] },
    { id: 'beta-vision', pricing: { prompt: '0.000002', completion: '0.000008' }, architecture: { input_modalities: ['text', 'image'] } },
    { id: 'fm#scenario=nousage', pricing: P(1, 1) },
    { id: 'fm#scenario=tool', pricing: P(1, 1), capabilities: ['tools'] },
    { id: 'native-only', pricing: P(1, 1), supported_endpoints: ['messages'] },
  ];
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-models-cat-'));
  writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ providers: { provider_a: { baseUrl: cat.url + '/v1' }, provider_c: { baseUrl: cat.url + '/pub/v1' }, provider_f: { baseUrl: cat.url + '/f/v1' } } }));
  svc = await startService({ dataDir, args: ['--unsafe-dev-no-sandbox'], env: { ATELIER_MODEL_CHECKS_PER_MINUTE: String(RATE), ATELIER_MODEL_CATALOG_FRESH_SECONDS: String(FRESH) } });
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
  seen.push(r.body);
  return { status: r.status, body: JSON.parse(r.body || '{}') };
}

describe('catalog and connection checks', () => {
  let credA = '';
  let credC = '';
  let credX = '';
  let mcp: Awaited<ReturnType<typeof connectV2>>;
  let checks = 0;
  const tool = async (name: string, args: Record<string, unknown>) => {
    if (name === 'model_connection_verify') checks++;
    const r = await call(mcp, name, args);
    seen.push(JSON.stringify(r));
    return r;
  };

  it('searches the catalog with pages, filters and availability; caches; serves the stale copy while the source fails', async () => {
    mcp = await connectV2(svc);
    credA = (await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_a', key: KEY_A })).body.credential.id;
    credC = (await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_c', key: KEY_C })).body.credential.id;
    credX = (await rest('POST', '/api/v1/provider-credentials', { provider: 'custom', key: KEY_X })).body.credential.id;
    cat.requests.length = 0;
    const p1 = await tool('model_catalog_search', { provider: 'provider_a', credentialId: credA, limit: 2 });
    expect(p1.ok).toBe(true);
    if (!p1.ok) return;
    expect(p1.result).toMatchObject({ total: 6, stale: false, credentialId: credA });
    const e0 = (p1.result.entries as Array<Record<string, any>>)[0]!;
    expect(e0).toMatchObject({ providerModelId: 'alpha-large', availability: 'listed_for_credential', capabilities: ['reasoning', 'tools'], pricing: { inputMicrosPerMillionTokens: 3_000_000, provenance: { sourceModelId: 'alpha-large' } } });
    expect(cat.requests[0]!.headers.authorization).toBe(`Bearer ${KEY_A}`);
    const ids: string[] = (p1.result.entries as Array<{ providerModelId: string }>).map((e) => e.providerModelId);
    let cursor = p1.result.nextCursor as string | null;
    while (cursor) {
      const p = await tool('model_catalog_search', { provider: 'provider_a', credentialId: credA, limit: 2, cursor });
      if (!p.ok) throw new Error(p.text);
      ids.push(...(p.result.entries as Array<{ providerModelId: string }>).map((e) => e.providerModelId));
      cursor = p.result.nextCursor as string | null;
    }
    expect(ids).toHaveLength(6);
    expect(cat.requests.filter((r) => r.path.endsWith('/models'))).toHaveLength(1); // cached
    const vis = await rest('GET', `/api/v1/model-catalog?provider=provider_a&capability=vision&credentialId=${credA}`);
    expect(vis.body.entries).toEqual([expect.objectContaining({ providerModelId: 'beta-vision', pricing: expect.objectContaining({ inputMicrosPerMillionTokens: 2_000_000, outputMicrosPerMillionTokens: 8_000_000 }) })]);
    const q = await tool('model_catalog_search', { provider: 'provider_a', query: 'SMALL' });
    expect(q.ok && (q.result.entries as unknown[]).length).toBe(1);
    const bad = await tool('model_catalog_search', { provider: 'provider_a', limit: 101 });
    expect(!bad.ok && bad.error.code).toBe('INVALID_ARGUMENT');

    // Public catalog: no key is sent.
    cat.acceptKeys = null;
    cat.requests.length = 0;
    const pub = await tool('model_catalog_search', { provider: 'provider_c' });
    expect(pub.ok).toBe(true);
    if (pub.ok) expect((pub.result.entries as Array<Record<string, unknown>>)[0]!.availability).toBe('public_catalog');
    expect(cat.requests.length).toBe(1);
    expect(cat.requests.every((r) => r.headers.authorization === undefined && r.headers['x-api-key'] === undefined)).toBe(true);
    const custom = await tool('model_catalog_search', { provider: 'custom' });
    expect(custom.ok && custom.result).toMatchObject({ source: 'none', entries: [] });

    // Stale: once the copy ages out (FRESH seconds here) and the source fails, the last good copy is served, marked stale.
    await new Promise((r) => setTimeout(r, FRESH * 1000 + 200));
    cat.failing = true;
    const stale = await tool('model_catalog_search', { provider: 'provider_c', limit: 3 });
    expect(stale.ok).toBe(true);
    if (stale.ok) {
      expect(stale.result).toMatchObject({ stale: true, total: 6 });
      expect(String(stale.result.lastError)).toMatch(/503/);
      expect(stale.result.fetchedAt).toBe(pub.ok ? pub.result.fetchedAt : '');
    }
    cat.failing = false;
    const fresh = await tool('model_catalog_search', { provider: 'provider_c', limit: 3 });
    expect(fresh.ok && fresh.result.stale).toBe(false);
    cat.acceptKeys = [KEY_A, KEY_C, KEY_X];
  });

  it('connection checks: every probe, stream without usage, tool call, native-only, auth failure, custom URL rule', async () => {
    const v = await tool('model_connection_verify', { credentialId: credA, model: 'alpha-small', apiMode: 'chat-completions' });
    expect(v.ok).toBe(true);
    if (!v.ok) return;
    expect(v.result.ok).toBe(true);
    expect(v.result.verificationRef).toMatch(/^vref_[A-Za-z0-9_-]{20,80}$/);
    expect((v.result.probes as Array<{ name: string; status: string }>).map((p) => `${p.name}:${p.status}`)).toEqual(['authentication:pass', 'modelAccess:pass', 'streamingInference:pass', 'toolCall:skipped']);
    const nu = await tool('model_connection_verify', { credentialId: credA, model: 'fm#scenario=nousage', apiMode: 'responses' });
    expect(nu.ok && nu.result.ok).toBe(true);
    if (nu.ok) expect(String(nu.result.warnings)).toMatch(/no usage/);
    const tc = await tool('model_connection_verify', { credentialId: credA, model: 'fm#scenario=tool', apiMode: 'chat-completions', checks: { toolCall: true } });
    expect(tc.ok && (tc.result.probes as Array<{ name: string; status: string }>).find((p) => p.name === 'toolCall')!.status).toBe('pass');
    const notool = await tool('model_connection_verify', { credentialId: credA, model: 'alpha-small', apiMode: 'responses', checks: { toolCall: true } });
    expect(notool.ok && notool.result.ok).toBe(false);
    const nat = await tool('model_connection_verify', { credentialId: credA, model: 'native-only', apiMode: 'chat-completions' });
    expect(!nat.ok && nat.error.code).toBe('unsupported_protocol');
    const notListed = await tool('model_connection_verify', { credentialId: credA, model: 'gamma', apiMode: 'chat-completions' });
    expect(notListed.ok && (notListed.result.probes as Array<{ name: string; status: string }>).find((p) => p.name === 'modelAccess')!.status).toBe('fail');
    const rot = await rest('POST', `/api/v1/provider-credentials/${credA}/rotate`, { key: 'sk-wrong-key-0000000000' });
    expect(rot.status).toBe(200);
    const auth = await tool('model_connection_verify', { credentialId: credA, model: 'alpha-small', apiMode: 'chat-completions' });
    expect(auth.ok && (auth.result.probes as Array<{ name: string; status: string }>)[0]).toMatchObject({ name: 'authentication', status: 'fail' });
    await rest('POST', `/api/v1/provider-credentials/${credA}/rotate`, { key: KEY_A });

    // Custom: over MCP only to a bound URL; an unbound one sends nothing.
    cat.requests.length = 0;
    const U = cat.url + '/v1';
    const unbound = await tool('model_connection_verify', { credentialId: credX, model: 'native-x', apiMode: 'chat-completions', customUpstreamUrl: U });
    expect(!unbound.ok && unbound.error.code).toBe('OWNER_APPROVAL_REQUIRED');
    expect(cat.requests).toHaveLength(0);
    checks--; // refused before the rate limiter
    cat.nativeOnly.add('native-x');
    const owner = await rest('POST', '/api/v1/model-connection/verify', { credentialId: credX, model: 'native-x', apiMode: 'chat-completions', customUpstreamUrl: U });
    expect(owner.status).toBe(400);
    expect(owner.body.error.code).toBe('unsupported_protocol');
    expect(cat.requests.at(-1)!.headers['authorization']).toBe(`Bearer ${KEY_X}`);
    const audit = (await rest('GET', '/api/v1/audit-log?action=model_connection_check')).body.entries as unknown[];
    expect(audit.length).toBeGreaterThanOrEqual(8);
  });

  it('draft checks attach only to the next save by the same principal with the identical route; catalog-verified prices', async () => {
    const base = { displayName: 'D', credentialId: credA, apiMode: 'chat-completions', limits: { maxInputTokens: 1000, maxOutputTokens: 100, maxCostMicros: 1000 }, maxProxyOperations: [] };
    // (1) identical route: attaches, and catalog-verified prices are marked as such.
    const v1 = await tool('model_connection_verify', { credentialId: credA, model: 'alpha-large', apiMode: 'chat-completions' });
    const ref1 = v1.ok ? (v1.result.verificationRef as string) : '';
    const val = await tool('model_profile_validate', { action: 'create', profileId: 'd1', ...base, model: 'alpha-large', pricing: P(3_000_000, 15_000_000), catalogPriceRef: { sourceModelId: 'alpha-large' }, verificationRef: ref1 });
    expect(val.ok && val.result.verificationRef).toMatchObject({ wouldAttach: true });
    const c1 = await tool('model_profile_create', { profileId: 'd1', ...base, model: 'alpha-large', pricing: P(3_000_000, 15_000_000), catalogPriceRef: { sourceModelId: 'alpha-large' }, verificationRef: ref1, idempotencyKey: 'draft-d1-1' });
    expect(c1.ok).toBe(true);
    if (c1.ok) {
      expect(c1.result.profile).toMatchObject({ verified: 'Verified', priceSource: 'catalog', repricingReview: { status: 'current' } });
      expect(c1.result.verificationAttached).toBe(true);
    }
    // A lower catalog-verified price on another model is no escalation.
    const up = await tool('model_profile_update', { profileId: 'd1', expectedGeneration: 1, model: 'alpha-small', pricing: P(1_000_000, 4_000_000), catalogPriceRef: { sourceModelId: 'alpha-small' }, idempotencyKey: 'draft-d1-2' });
    expect(up.ok).toBe(true);
    // ...but a lower hand-typed price is.
    const low = await tool('model_profile_update', { profileId: 'd1', expectedGeneration: 2, pricing: P(1, 1), catalogPriceRef: { sourceModelId: 'alpha-small' }, idempotencyKey: 'draft-d1-3' });
    expect(!low.ok && low.error.code).toBe('OWNER_APPROVAL_REQUIRED');

    // (2) a different route: the save succeeds Not verified and consumes the check.
    const v2 = await tool('model_connection_verify', { credentialId: credA, model: 'alpha-large', apiMode: 'chat-completions' });
    const ref2 = v2.ok ? (v2.result.verificationRef as string) : '';
    const c2 = await tool('model_profile_create', { profileId: 'd2', ...base, model: 'alpha-small', pricing: P(1_000_000, 4_000_000), verificationRef: ref2, idempotencyKey: 'draft-d2-1' });
    expect(c2.ok && (c2.result.profile as Record<string, unknown>).verified).toBe('Not verified');
    const c3 = await tool('model_profile_create', { profileId: 'd3', ...base, model: 'alpha-large', pricing: P(3_000_000, 15_000_000), verificationRef: ref2, idempotencyKey: 'draft-d3-1' });
    expect(c3.ok && (c3.result.profile as Record<string, unknown>).verified).toBe('Not verified');

    // (3) any other save in between consumes it.
    const v3 = await tool('model_connection_verify', { credentialId: credA, model: 'alpha-small', apiMode: 'chat-completions' });
    const ref3 = v3.ok ? (v3.result.verificationRef as string) : '';
    const other = await tool('model_profile_update', { profileId: 'd2', expectedGeneration: 1, displayName: 'renamed', idempotencyKey: 'draft-d2-2' });
    expect(other.ok).toBe(true);
    const c4 = await tool('model_profile_create', { profileId: 'd4', ...base, model: 'alpha-small', pricing: P(1_000_000, 4_000_000), verificationRef: ref3, idempotencyKey: 'draft-d4-1' });
    expect(c4.ok && (c4.result.profile as Record<string, unknown>).verified).toBe('Not verified');

    // (4) another principal's save does not consume it and cannot use it.
    const v4 = await tool('model_connection_verify', { credentialId: credA, model: 'alpha-small', apiMode: 'chat-completions' });
    const ref4 = v4.ok ? (v4.result.verificationRef as string) : '';
    const byOwner = await rest('POST', '/api/v1/agent-model-profiles', { profileId: 'd5', ...base, model: 'alpha-small', pricing: P(1_000_000, 4_000_000), verificationRef: ref4, idempotencyKey: 'draft-d5-1' });
    expect(byOwner.body.profile.verified).toBe('Not verified');
    const c6 = await tool('model_profile_create', { profileId: 'd6', ...base, model: 'alpha-small', pricing: P(1_000_000, 4_000_000), verificationRef: ref4, idempotencyKey: 'draft-d6-1' });
    expect(c6.ok && (c6.result.profile as Record<string, unknown>).verified).toBe('Verified');

    // (5) a newer draft check supersedes an older one.
    const v5 = await tool('model_connection_verify', { credentialId: credA, model: 'alpha-small', apiMode: 'chat-completions' });
    await tool('model_connection_verify', { credentialId: credA, model: 'alpha-large', apiMode: 'chat-completions' });
    const c7 = await tool('model_profile_create', { profileId: 'd7', ...base, model: 'alpha-small', pricing: P(1_000_000, 4_000_000), verificationRef: v5.ok ? v5.result.verificationRef : undefined, idempotencyKey: 'draft-d7-1' });
    expect(c7.ok && (c7.result.profile as Record<string, unknown>).verified).toBe('Not verified');

    // A saved profile's check records its last check.
    const pc = await tool('model_connection_verify', { profileId: 'd6' });
    expect(pc.ok && pc.result.verificationRef).toBeUndefined();
    const l = await tool('model_profile_list', { profileId: 'd6' });
    if (l.ok) expect((l.result.profiles as Array<Record<string, any>>)[0]!.lastCheck).toMatchObject({ ok: true });
  });

  it('provider_f: unknown catalog prices, user agent and a fresh session header per call; repricing review from the cache only', async () => {
    const credF = (await rest('POST', '/api/v1/provider-credentials', { provider: 'provider_f', key: KEY_A })).body.credential.id;
    cat.requests.length = 0;
    const s = await rest('GET', `/api/v1/model-catalog?provider=provider_f&credentialId=${credF}&query=alpha-large`);
    expect(s.status).toBe(200);
    expect(s.body.entries[0].pricing).toMatchObject({ inputMicrosPerMillionTokens: null, outputMicrosPerMillionTokens: null });
    const v = await rest('POST', '/api/v1/model-connection/verify', { credentialId: credF, model: 'alpha-large', apiMode: 'chat-completions' });
    expect(v.body.ok).toBe(true);
    const fReqs = cat.requests.filter((r) => r.path.startsWith('/f/'));
    expect(fReqs.length).toBe(3);
    const ids = fReqs.map((r) => String(r.headers['x-provider-f-session']));
    for (const id of ids) expect(id).toMatch(/^chk_/);
    expect(new Set(ids).size).toBe(3);
    expect(fReqs.every((r) => r.headers['user-agent'] === 'atelier-model-gateway')).toBe(true);

    // Repricing review: d3 pins alpha-large at the catalog price; once the cached price changes, it differs.
    const before = await tool('model_profile_list', { profileId: 'd3' });
    if (before.ok) expect((before.result.profiles as Array<Record<string, any>>)[0]!.repricingReview.status).toBe('current');
    await new Promise((r) => setTimeout(r, FRESH * 1000 + 200));
    cat.models[0] = { ...cat.models[0], pricing: P(2_500_000, 15_000_000) };
    const still = await tool('model_profile_list', { profileId: 'd3' });
    if (still.ok) expect((still.result.profiles as Array<Record<string, any>>)[0]!.repricingReview.status).toBe('current'); // never fetched by a review
    await rest('GET', `/api/v1/model-catalog?provider=provider_a&credentialId=${credA}`);
    const after = await tool('model_profile_list', { profileId: 'd3' });
    expect(after.ok).toBe(true);
    if (after.ok) expect((after.result.profiles as Array<Record<string, any>>)[0]!.repricingReview).toMatchObject({ status: 'differs', catalogPricing: { inputMicrosPerMillionTokens: 2_500_000 } });
  });

  it('rate limits connection checks per principal, and no key is anywhere', async () => {
    let refused: Awaited<ReturnType<typeof tool>> | null = null;
    while (checks < RATE + 1) {
      const r = await tool('model_connection_verify', { credentialId: credA, model: 'alpha-small', apiMode: 'chat-completions' });
      if (!r.ok && r.error.code === 'RESOURCE_EXHAUSTED') {
        refused = r;
        break;
      }
    }
    expect(refused && !refused.ok && refused.error.details.retryAfterSeconds).toBeGreaterThan(0);
    expect(checks).toBe(RATE + 1);
    await mcp.close();
    for (const k of [KEY_A, KEY_C, KEY_X]) for (const t of [...seen, svc.stdout(), svc.stderr()]) expect(t.includes(k)).toBe(false);
  });
});
