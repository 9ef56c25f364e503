/**
 * Model catalog (issue #7, routing rule 4): per provider, the catalog source of the registry
 * (the provider's models endpoint with the caller's key, or the public catalog without a key;
 * custom has none). Listings are cached in the database; a fresh copy is used for CATALOG_FRESH_MS,
 * then refilled; when the source fails the last good copy is served and marked stale. The
 * repricing review and catalog verification read only the cache (never fetch). See docs/models.md.
 */
import { randomBytes } from 'node:crypto';
import type { DB } from '../../store/db.js';
import type { CursorCodec } from '../../core/cursor.js';
import { ServiceError } from '../../core/errors.js';
import { nowIso } from '../../core/clock.js';
import { sha256Hex } from '../../core/crypto.js';
import { authHeader, GATEWAY_USER_AGENT, PROVIDER_F_SESSION_HEADER, type ProviderId, type ProviderInfo } from '../../core/providers.js';
import type { FullPricing, ModelService } from './profiles.js';
import type { PriceList } from './price-list.js';

/** How long a listing is used without a refill (10 minutes; ATELIER_MODEL_CATALOG_FRESH_SECONDS overrides it). */
const envFresh = Number(process.env.ATELIER_MODEL_CATALOG_FRESH_SECONDS);
export const CATALOG_FRESH_MS = Number.isFinite(envFresh) && envFresh > 0 ? envFresh * 1000 : 10 * 60 * 1000;
const FETCH_TIMEOUT_MS = 20_000;

export type Capability = 'tools' | 'reasoning' | 'vision';

export interface CatalogEntry {
  providerModelId: string;
  pricing: {
    inputMicrosPerMillionTokens: number | null;
    outputMicrosPerMillionTokens: number | null;
    cachedReadMicrosPerMillionTokens: number | null;
    cachedWriteMicrosPerMillionTokens: number | null;
    provenance: { sourceModelId: string; source: string; fetchedAt: string };
  };
  availability: 'public_catalog' | 'listed_for_credential';
  capabilities: Capability[];
  /** Protocols the listing says the model is served on, when it says so. */
  supportedEndpoints?: string[];
}

interface CacheRow {
  cache_key: string;
  provider: string;
  entries_json: string;
  fetched_at: string;
  last_error: string | null;
}

/** USD-per-token strings or numbers (OpenRouter style) to integer micro-USD per million tokens. */
function usdPerTokenToMicros(value: unknown): number | null {
  if (value === null || value === undefined || value === '') return null;
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) return null;
  return Math.round(n * 1e12);
}

function intOrNull(value: unknown): number | null {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : null;
}

/** Extra headers of provider_f (routing rule 9): user agent and a fresh random session id per call. */
export function providerExtraHeaders(providerInfo: ProviderInfo): Record<string, string> {
  const h: Record<string, string> = { 'user-agent': GATEWAY_USER_AGENT };
  if (providerInfo.id === 'provider_f') h[providerInfo.sessionHeader ?? PROVIDER_F_SESSION_HEADER] = 'chk_' + randomBytes(12).toString('base64url');
  return h;
}

export class ModelCatalog {
  constructor(private readonly opts: { db: DB; cursors: CursorCodec; models: ModelService; prices?: PriceList }) {
    opts.models.catalogPrice = (provider, model) => this.cachedPrice(provider, model);
  }

  /** Parses an OpenAI-style listing ({ data: [...] } or [...]). */
  parse(providerInfo: ProviderInfo, body: unknown, availability: CatalogEntry['availability'], fetchedAt: string): CatalogEntry[] {
    const list = Array.isArray(body) ? body : Array.isArray((body as { data?: unknown })?.data) ? (body as { data: unknown[] }).data : Array.isArray((body as { models?: unknown })?.models) ? (body as { models: unknown[] }).models : null;
    if (!list) throw new Error('the listing is not a models list');
    const out: CatalogEntry[] = [];
    for (const raw of list) {
      const record = raw as Record<string, any>;
      const id = typeof record?.id === 'string' ? record.id : typeof record?.name === 'string' ? record.name : null;
      if (!id || id.length > 200) continue;
      const pr = (record.pricing ?? {}) as Record<string, unknown>;
      let pricing: Omit<CatalogEntry['pricing'], 'provenance'>;
      if ('inputMicrosPerMillionTokens' in pr || 'outputMicrosPerMillionTokens' in pr) {
        pricing = {
          inputMicrosPerMillionTokens: intOrNull(pr.inputMicrosPerMillionTokens),
          outputMicrosPerMillionTokens: intOrNull(pr.outputMicrosPerMillionTokens),
          cachedReadMicrosPerMillionTokens: intOrNull(pr.cachedReadMicrosPerMillionTokens),
          cachedWriteMicrosPerMillionTokens: intOrNull(pr.cachedWriteMicrosPerMillionTokens),
        };
      } else {
        pricing = {
          inputMicrosPerMillionTokens: usdPerTokenToMicros(pr.prompt),
          outputMicrosPerMillionTokens: usdPerTokenToMicros(pr.completion),
          cachedReadMicrosPerMillionTokens: usdPerTokenToMicros(pr.input_cache_read),
          cachedWriteMicrosPerMillionTokens: usdPerTokenToMicros(pr.input_cache_write),
        };
      }
      // A listing without prices: the price list shipped with the service, or the operator's, fills them.
      let priceSource: string = providerInfo.catalogSource;
      if (pricing.inputMicrosPerMillionTokens === null && pricing.outputMicrosPerMillionTokens === null) {
        const listed = this.opts.prices?.lookup(providerInfo.id, id);
        if (listed) {
          pricing = { ...listed.price };
          priceSource = listed.source;
        }
      }
      // Rule 9: provider_f's catalog shows unknown prices (entered on the profile as an override).
      if (providerInfo.id === 'provider_f') {
        pricing = { inputMicrosPerMillionTokens: null, outputMicrosPerMillionTokens: null, cachedReadMicrosPerMillionTokens: null, cachedWriteMicrosPerMillionTokens: null };
        priceSource = providerInfo.catalogSource;
      }
      const caps = new Set<Capability>();
      const tags: unknown[] = [...(Array.isArray(record.capabilities) ? record.capabilities : []), ...(Array.isArray(record.supported_parameters) ? record.supported_parameters : [])];
      for (const t of tags) {
        if (t === 'tools' || t === 'tool_choice' || t === 'function_calling') caps.add('tools');
        if (t === 'reasoning' || t === 'include_reasoning') caps.add('reasoning');
        if (t === 'vision') caps.add('vision');
      }
      const mods = record.architecture?.input_modalities;
      if (Array.isArray(mods) && mods.includes('image')) caps.add('vision');
      const catalogEntry: CatalogEntry = {
        providerModelId: id,
        pricing: { ...pricing, provenance: { sourceModelId: id, source: priceSource, fetchedAt } },
        availability,
        capabilities: [...caps].sort(),
      };
      if (Array.isArray(record.supported_endpoints)) catalogEntry.supportedEndpoints = record.supported_endpoints.filter((x: unknown) => typeof x === 'string');
      out.push(catalogEntry);
    }
    return out;
  }

  /** GETs a provider's listing. Redirects are never followed; the key goes only to the registry host. */
  async fetchListing(providerInfo: ProviderInfo, key: string | null, authMode: 'bearer' | 'x-api-key' | undefined, signal?: AbortSignal): Promise<{ status: number; body: unknown }> {
    if (!providerInfo.baseUrl) throw new Error(`${providerInfo.id} has no base URL`);
    const url = new URL(providerInfo.baseUrl + '/models');
    if (!providerInfo.hosts.includes(url.host.toLowerCase())) throw new Error(`host ${url.host} is not a registry host of ${providerInfo.id}`);
    const headers: Record<string, string> = { accept: 'application/json', ...providerExtraHeaders(providerInfo) };
    if (key) {
      const h = authHeader(providerInfo, authMode, key);
      if (typeof h === 'string') throw new Error(h);
      headers[h[0]] = h[1];
    }
    const response = await fetch(url, { headers, redirect: 'manual', signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(FETCH_TIMEOUT_MS)]) : AbortSignal.timeout(FETCH_TIMEOUT_MS) });
    const text = await response.text();
    let body: unknown = null;
    try {
      body = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: response.status, body };
  }

  private cacheKey(provider: ProviderId, credentialId: string | null): string {
    return `${provider}:${credentialId ?? 'public'}`;
  }

  private row(key: string): CacheRow | undefined {
    return this.opts.db.prepare('SELECT * FROM model_catalog_cache WHERE cache_key = ?').get(key) as CacheRow | undefined;
  }

  /** The listing: fresh cache, else a refill; when the refill fails, the last good copy marked stale. */
  async listing(provider: ProviderId, credentialId: string | undefined, signal?: AbortSignal, progress?: (p: number, t?: number, m?: string) => void): Promise<{ entries: CatalogEntry[]; fetchedAt: string | null; stale: boolean; lastError: string | null; source: string; credentialId: string | null }> {
    const models = this.opts.models;
    const providerInfo = models.registry()[provider];
    if (providerInfo.catalogSource === 'none') return { entries: [], fetchedAt: null, stale: false, lastError: null, source: 'none', credentialId: null };
    let credId: string | null = null;
    let key: string | null = null;
    let authMode: 'bearer' | 'x-api-key' | undefined;
    if (credentialId) {
      const c = models.credential(credentialId);
      if (c.provider !== provider) throw new ServiceError('INVALID_ARGUMENT', `credentialId: ${credentialId} is a ${c.provider} credential, not ${provider}`, { field: 'credentialId' });
      if (c.status !== 'active') throw new ServiceError('FAILED_PRECONDITION', `credentialId: ${credentialId} is disabled`, { field: 'credentialId' });
      credId = c.id;
    } else if (providerInfo.catalogSource === 'provider-models-endpoint') {
      const c = models.listCredentials(provider).find((x) => x.status === 'active');
      if (!c) throw new ServiceError('FAILED_PRECONDITION', `${provider} lists models only with a key: the owner has no active ${provider} credential (add one on the dashboard)`, { field: 'credentialId' });
      credId = c.id;
    }
    if (credId && providerInfo.catalogSource === 'provider-models-endpoint') {
      key = models.keyOf(credId);
      authMode = models.credential(credId).authHeader;
    }
    const ck = this.cacheKey(provider, providerInfo.catalogSource === 'public-catalog' ? null : credId);
    const cached = this.row(ck);
    if (cached && !cached.last_error && Date.now() - Date.parse(cached.fetched_at) < CATALOG_FRESH_MS)
      return { entries: JSON.parse(cached.entries_json), fetchedAt: cached.fetched_at, stale: false, lastError: null, source: providerInfo.catalogSource, credentialId: credId };
    const now = nowIso();
    try {
      progress?.(0, 2, `refilling the ${provider} catalog from its source`);
      const r = await this.fetchListing(providerInfo, key, authMode, signal);
      progress?.(1, 2, `the ${provider} catalog answered; reading it`);
      if (r.status < 200 || r.status > 299) throw new Error(`the catalog source answered HTTP ${r.status}`);
      const entries = this.parse(providerInfo, r.body, providerInfo.catalogSource === 'public-catalog' ? 'public_catalog' : 'listed_for_credential', now);
      this.opts.db
        .prepare(
          `INSERT INTO model_catalog_cache (cache_key, provider, entries_json, fetched_at, last_error, last_attempt_at) VALUES (?, ?, ?, ?, NULL, ?)
           ON CONFLICT(cache_key) DO UPDATE SET entries_json = excluded.entries_json, fetched_at = excluded.fetched_at, last_error = NULL, last_attempt_at = excluded.last_attempt_at`,
        )
        .run(ck, provider, JSON.stringify(entries), now, now);
      progress?.(2, 2, `the ${provider} catalog is refilled: ${entries.length} models`);
      return { entries, fetchedAt: now, stale: false, lastError: null, source: providerInfo.catalogSource, credentialId: credId };
    } catch (e) {
      let msg = (e as Error).message || 'fetch failed';
      if (key) msg = msg.split(key).join('[redacted]');
      msg = msg.slice(0, 300);
      if (cached) {
        this.opts.db.prepare('UPDATE model_catalog_cache SET last_error = ?, last_attempt_at = ? WHERE cache_key = ?').run(msg, now, ck);
        return { entries: JSON.parse(cached.entries_json), fetchedAt: cached.fetched_at, stale: true, lastError: msg, source: providerInfo.catalogSource, credentialId: credId };
      }
      throw new ServiceError('UNAVAILABLE', `the ${provider} catalog cannot be read and nothing is cached yet: ${msg}`, { provider });
    }
  }

  async search(args: { provider: ProviderId; credentialId?: string; query?: string; cursor?: string; limit?: number; capability?: Capability }, signal?: AbortSignal, progress?: (p: number, t?: number, m?: string) => void) {
    const limit = args.limit ?? 25;
    const filterHash = sha256Hex(JSON.stringify([args.provider, args.credentialId ?? null, args.query ?? '', args.capability ?? null])).slice(0, 16);
    let offset = 0;
    if (args.cursor) {
      const c = this.opts.cursors.decode<{ o: number; f: string }>('catalog', args.cursor);
      if (c.f !== filterHash) throw new ServiceError('INVALID_ARGUMENT', 'cursor: belongs to a search with other parameters', { field: 'cursor' });
      offset = c.o;
    }
    const listing = await this.listing(args.provider, args.credentialId, signal, progress);
    const q = (args.query ?? '').toLowerCase();
    const all = listing.entries
      .filter((e) => !q || e.providerModelId.toLowerCase().includes(q))
      .filter((e) => !args.capability || e.capabilities.includes(args.capability))
      .sort((a, b) => a.providerModelId.localeCompare(b.providerModelId));
    const page = all.slice(offset, offset + limit).map(({ supportedEndpoints: _s, ...e }) => e);
    const next = offset + limit < all.length ? this.opts.cursors.encode('catalog', { o: offset + limit, f: filterHash }) : null;
    return {
      provider: args.provider,
      source: listing.source,
      credentialId: listing.credentialId,
      entries: page,
      total: all.length,
      nextCursor: next,
      fetchedAt: listing.fetchedAt,
      stale: listing.stale,
      ...(listing.lastError ? { lastError: listing.lastError } : {}),
      note:
        listing.source === 'none'
          ? 'custom has no catalog: type the model id, and enter prices on the profile (an override)'
          : 'Prices are integer micro-USD per million tokens; null = unknown, never free. public_catalog does not prove your key can call a model: use model_connection_verify.',
    };
  }

  /** The cached catalog entry for a model (any cache of that provider), never fetched. */
  cachedEntry(provider: ProviderId, modelId: string): (CatalogEntry & { stale: boolean; fetchedAt: string }) | null {
    const rows = this.opts.db.prepare('SELECT * FROM model_catalog_cache WHERE provider = ? ORDER BY fetched_at DESC').all(provider) as CacheRow[];
    for (const r of rows) {
      const e = (JSON.parse(r.entries_json) as CatalogEntry[]).find((x) => x.providerModelId === modelId);
      if (e) return { ...e, stale: !!r.last_error || Date.now() - Date.parse(r.fetched_at) >= CATALOG_FRESH_MS, fetchedAt: r.fetched_at };
    }
    return null;
  }

  /**
   * The cached catalog price of `model` (the entry whose providerModelId it is) and where that price
   * comes from (its pricing.provenance.sourceModelId). Looked up by the routed model, never by a
   * client's catalogPriceRef: another model's entry is never this model's price.
   */
  private cachedPrice(provider: ProviderId, model: string): { pricing: FullPricing; sourceModelId: string; fetchedAt: string; stale: boolean } | null {
    const e = this.cachedEntry(provider, model);
    if (!e || e.pricing.inputMicrosPerMillionTokens === null || e.pricing.outputMicrosPerMillionTokens === null) return null;
    const { provenance, ...pr } = e.pricing;
    return { pricing: pr as FullPricing, sourceModelId: provenance.sourceModelId, fetchedAt: e.fetchedAt, stale: e.stale };
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type ModelCatalogSearchResult = Awaited<ReturnType<ModelCatalog['search']>>;
