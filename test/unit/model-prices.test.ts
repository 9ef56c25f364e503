/**
 * Catalog-verified prices at the service level (issue #31 item 8): a price is catalog-verified only
 * for the model the profile routes to, by that model's own cached catalog entry — catalogPriceRef
 * naming the model itself or the entry's pricing.provenance.sourceModelId. The listings the service
 * parses today give every entry its own id as provenance, so the case where they differ (an alias
 * priced from another id) is pinned here, with the cache row written as the catalog stores it. The
 * end-to-end behaviour through MCP is in test/e2e/models-prices.test.ts.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, type DB } from '../../src/store/db.js';
import { SecretBox } from '../../src/core/crypto.js';
import { CursorCodec } from '../../src/core/cursor.js';
import { createLogger } from '../../src/core/log.js';
import { AuditLog } from '../../src/services/instance/audit.js';
import { ModelService } from '../../src/services/models/profiles.js';
import { ModelCatalog } from '../../src/services/models/catalog.js';

const P = (input: number, output: number) => ({ inputMicrosPerMillionTokens: input, outputMicrosPerMillionTokens: output, cachedReadMicrosPerMillionTokens: null, cachedWriteMicrosPerMillionTokens: null });
const BIG = P(10_000_000, 40_000_000);
const TINY = P(1_000_000, 4_000_000);
const LIMITS = { maxInputTokens: 1000, maxOutputTokens: 100, maxCostMicros: 1000 };

let dir: string;
let db: DB;
let models: ModelService;
let cred: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'atelier-model-prices-'));
  db = openDatabase(join(dir, 'a.db'));
  const master = randomBytes(32);
  models = new ModelService({ db, secrets: new SecretBox(master), audit: new AuditLog(db, () => undefined), log: createLogger('silent'), configPath: join(dir, 'config.json') });
  new ModelCatalog({ db, cursors: new CursorCodec(master), models });
  cred = models.createCredential({ provider: 'provider_a', key: 'sk-unit-' + 'U'.repeat(20) }).id;
  const at = new Date().toISOString();
  const entry = (id: string, price: ReturnType<typeof P>, source = id) => ({ providerModelId: id, pricing: { ...price, provenance: { sourceModelId: source, source: 'provider-models-endpoint', fetchedAt: at } }, availability: 'listed_for_credential', capabilities: [] });
  // big-latest is priced by the catalog from big-2025 (its provenance); tiny-model is a cheap model.
  const entries = [entry('big-latest', BIG, 'big-2025'), entry('big-2025', BIG), entry('tiny-model', TINY)];
  db.prepare('INSERT INTO model_catalog_cache (cache_key, provider, entries_json, fetched_at, last_error, last_attempt_at) VALUES (?, ?, ?, ?, NULL, ?)').run(`provider_a:${cred}`, 'provider_a', JSON.stringify(entries), at, at);
});
afterEach(() => {
  db.close();
  rmSync(dir, { recursive: true, force: true });
});

const create = (model: string, pricing: ReturnType<typeof P>, sourceModelId: string) =>
  models.save('create', { profileId: 'p', displayName: 'P', credentialId: cred, model, apiMode: 'chat-completions', pricing, limits: LIMITS, maxProxyOperations: [], catalogPriceRef: { sourceModelId } }, 'mcp', 'tok_unit');

describe('catalog-verified prices are the routed model’s', () => {
  it('the routed model’s entry by its provenance id, or by the model itself, verifies; another model’s entry does not', () => {
    expect(create('big-latest', BIG, 'big-2025').profile).toMatchObject({ priceSource: 'catalog', repricingReview: { status: 'current', model: 'big-latest', sourceModelId: 'big-2025', catalogPriceRef: { matchesRoutedModel: true } } });
    const byModel = models.validate('create', { profileId: 'q', displayName: 'Q', credentialId: cred, model: 'big-latest', apiMode: 'chat-completions', pricing: BIG, limits: LIMITS, maxProxyOperations: [], catalogPriceRef: { sourceModelId: 'big-latest' } }, 'mcp', 'tok_unit');
    expect(byModel).toMatchObject({ revision: { priceSource: 'catalog' } });
    // The provenance id names big-2025's price: on the tiny model it pins nothing.
    const wrong = models.validate('create', { profileId: 'q', displayName: 'Q', credentialId: cred, model: 'tiny-model', apiMode: 'chat-completions', pricing: BIG, limits: LIMITS, maxProxyOperations: [], catalogPriceRef: { sourceModelId: 'big-2025' } }, 'mcp', 'tok_unit');
    expect(wrong).toMatchObject({ revision: { priceSource: 'override' }, pricingReview: { status: 'differs', sourceModelId: 'tiny-model', catalogPriceRef: { sourceModelId: 'big-2025', matchesRoutedModel: false } } });
  });

  it('an update to the cheap model’s price naming it is refused over MCP; naming the provenance id of the routed model passes', () => {
    create('big-latest', BIG, 'big-2025');
    const cheap = models.validate('update', { profileId: 'p', expectedGeneration: 1, pricing: TINY, catalogPriceRef: { sourceModelId: 'tiny-model' } }, 'mcp', 'tok_unit');
    expect(cheap).toMatchObject({ ownerApprovalRequired: true, revision: { priceSource: 'override' } });
    expect((cheap.escalations as Array<{ kind: string }>).map((e) => e.kind)).toContain('price_lowered_unverified');
    expect(() => models.save('update', { profileId: 'p', expectedGeneration: 1, pricing: TINY, catalogPriceRef: { sourceModelId: 'tiny-model' } }, 'mcp', 'tok_unit')).toThrow(expect.objectContaining({ code: 'OWNER_APPROVAL_REQUIRED' }));
    expect(models.profile('p')).toMatchObject({ generation: 1, latestRevision: 1, pricing: BIG });
    // The same price under the routed model's provenance id, and a move to tiny-model at its own price, pass.
    expect(models.save('update', { profileId: 'p', expectedGeneration: 1, displayName: 'P2', catalogPriceRef: { sourceModelId: 'big-2025' } }, 'mcp', 'tok_unit').profile).toMatchObject({ priceSource: 'catalog' });
    expect(models.save('update', { profileId: 'p', expectedGeneration: 2, model: 'tiny-model', pricing: TINY, catalogPriceRef: { sourceModelId: 'tiny-model' } }, 'mcp', 'tok_unit').profile).toMatchObject({ priceSource: 'catalog', model: 'tiny-model' });
  });
});
