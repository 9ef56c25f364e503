/**
 * The model provider registry as data (spec "Model provider registry"): auth header modes, API
 * modes, catalog source, cache-write billing assumed, and the hosts a provider's key may go to
 * (routing rule 1). The real endpoints are per instance: the config file section "providers"
 * overrides baseUrl (and optionally hosts) per provider, which is also how tests point providers
 * at fakes on loopback. Plain http:// is accepted only for loopback hosts (test fakes); every other
 * upstream must be https://. Used by the gateway (routing) and, later, the control plane.
 */
import { existsSync, readFileSync } from 'node:fs';

export const PROVIDER_IDS = ['provider_a', 'provider_b', 'provider_c', 'provider_d', 'provider_e', 'provider_f', 'custom'] as const;
export type ProviderId = (typeof PROVIDER_IDS)[number];
export type AuthHeaderMode = 'bearer' | 'x-api-key';
export type ApiMode = 'chat-completions' | 'responses';
export type CatalogSource = 'provider-models-endpoint' | 'public-catalog' | 'none';

export interface ProviderInfo {
  id: ProviderId;
  /** Accepted auth header modes; the first is the default. */
  authHeaderModes: AuthHeaderMode[];
  apiModes: ApiMode[];
  /** Free-text note on the API mode (e.g. a compatibility endpoint). */
  apiNote: string;
  catalogSource: CatalogSource;
  /** Spec column "Cache-write billing assumed": unknown cache-write prices cost 2x input when true, 1x otherwise. */
  cacheWriteBilled: boolean;
  /** Base URL the endpoints hang under (…/chat/completions, …/responses, …/models); null for custom. */
  baseUrl: string | null;
  /** Hosts (URL.host: hostname plus a non-default port) this provider's key may be sent to. */
  hosts: string[];
  /** provider_f only: the session header carrying the calling agent's id (routing rule 9). */
  sessionHeader?: string;
  /** provider_f only: user agent sent upstream ("<service>-model-gateway"). */
  userAgent?: string;
}

export const SERVICE_NAME = 'atelier';
export const GATEWAY_USER_AGENT = `${SERVICE_NAME}-model-gateway`;
export const PROVIDER_F_SESSION_HEADER = 'x-provider-f-session';

const base = (id: ProviderId, host: string | null, p: Omit<ProviderInfo, 'id' | 'baseUrl' | 'hosts'>): ProviderInfo => ({
  id,
  baseUrl: host ? `https://${host}/v1` : null,
  hosts: host ? [host] : [],
  ...p,
});

/**
 * Defaults. The spec does not name the providers' hosts, so the defaults are placeholders under the
 * reserved .invalid TLD: an operator sets the real base URLs in the config file section "providers".
 */
export const PROVIDERS: Readonly<Record<ProviderId, ProviderInfo>> = Object.freeze({
  provider_a: base('provider_a', 'api.provider-a.invalid', { authHeaderModes: ['bearer'], apiModes: ['chat-completions', 'responses'], apiNote: 'Chat Completions, Responses', catalogSource: 'provider-models-endpoint', cacheWriteBilled: false }),
  provider_b: base('provider_b', 'api.provider-b.invalid', { authHeaderModes: ['bearer', 'x-api-key'], apiModes: ['chat-completions'], apiNote: 'Chat Completions (compatibility endpoint)', catalogSource: 'provider-models-endpoint', cacheWriteBilled: false }),
  provider_c: base('provider_c', 'api.provider-c.invalid', { authHeaderModes: ['bearer'], apiModes: ['chat-completions', 'responses'], apiNote: 'Chat Completions, Responses', catalogSource: 'public-catalog', cacheWriteBilled: true }),
  provider_d: base('provider_d', 'api.provider-d.invalid', { authHeaderModes: ['bearer'], apiModes: ['chat-completions'], apiNote: 'Chat Completions (compatible endpoint)', catalogSource: 'provider-models-endpoint', cacheWriteBilled: false }),
  provider_e: base('provider_e', 'api.provider-e.invalid', { authHeaderModes: ['bearer'], apiModes: ['chat-completions'], apiNote: 'Chat Completions', catalogSource: 'provider-models-endpoint', cacheWriteBilled: false }),
  provider_f: base('provider_f', 'api.provider-f.invalid', { authHeaderModes: ['bearer'], apiModes: ['chat-completions', 'responses'], apiNote: 'Chat Completions, Responses', catalogSource: 'provider-models-endpoint', cacheWriteBilled: true, sessionHeader: PROVIDER_F_SESSION_HEADER, userAgent: GATEWAY_USER_AGENT }),
  custom: base('custom', null, { authHeaderModes: ['bearer', 'x-api-key'], apiModes: ['chat-completions', 'responses'], apiNote: 'Chat Completions or Responses at one caller-entered HTTPS URL', catalogSource: 'none', cacheWriteBilled: true }),
});

export interface ProviderOverride {
  baseUrl?: string;
  hosts?: string[];
}
export type ProviderOverrides = Partial<Record<ProviderId, ProviderOverride>>;

export function isLoopbackHostname(h: string): boolean {
  const x = h.replace(/^\[|\]$/g, '').toLowerCase();
  return x === 'localhost' || x === '::1' || /^127\.\d+\.\d+\.\d+$/.test(x);
}

/** null when the URL may carry a key: https://, or http:// to a loopback host (test fakes only). */
export function upstreamUrlProblem(raw: string): string | null {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return 'not a valid URL';
  }
  if (u.username || u.password) return 'must not carry credentials';
  if (u.protocol === 'https:') return null;
  if (u.protocol === 'http:' && isLoopbackHostname(u.hostname)) return null;
  return 'must be https:// (plain http:// only to a loopback host)';
}

/** The registry with per-instance overrides applied; throws Error naming the bad entry. */
export function resolveProviders(overrides: ProviderOverrides | undefined | null): Record<ProviderId, ProviderInfo> {
  const out = {} as Record<ProviderId, ProviderInfo>;
  for (const id of PROVIDER_IDS) out[id] = { ...PROVIDERS[id], hosts: [...PROVIDERS[id].hosts] };
  if (!overrides) return out;
  if (typeof overrides !== 'object' || Array.isArray(overrides)) throw new Error('providers: must be an object keyed by provider');
  for (const [id, o] of Object.entries(overrides)) {
    if (!(PROVIDER_IDS as readonly string[]).includes(id)) throw new Error(`providers.${id}: unknown provider (known: ${PROVIDER_IDS.join(', ')})`);
    if (id === 'custom') throw new Error('providers.custom: custom routes take their URL from the profile, not the registry');
    if (!o || typeof o !== 'object') throw new Error(`providers.${id}: must be an object`);
    const p = out[id as ProviderId];
    if (o.baseUrl !== undefined) {
      if (typeof o.baseUrl !== 'string') throw new Error(`providers.${id}.baseUrl: must be a string`);
      const problem = upstreamUrlProblem(o.baseUrl);
      if (problem) throw new Error(`providers.${id}.baseUrl: ${problem}`);
      p.baseUrl = o.baseUrl.replace(/\/+$/, '');
      p.hosts = [new URL(o.baseUrl).host];
    }
    if (o.hosts !== undefined) {
      if (!Array.isArray(o.hosts) || o.hosts.some((h) => typeof h !== 'string' || !h)) throw new Error(`providers.${id}.hosts: must be a list of host names`);
      p.hosts = o.hosts.map((h) => h.toLowerCase());
    }
    if (p.baseUrl && !p.hosts.includes(new URL(p.baseUrl).host)) throw new Error(`providers.${id}: baseUrl host must be one of hosts`);
  }
  return out;
}

/** Reads the "providers" section of the config file (missing file or section: no overrides). */
export function readProviderOverrides(configPath: string): ProviderOverrides {
  if (!existsSync(configPath)) return {};
  const j = JSON.parse(readFileSync(configPath, 'utf8')) as Record<string, unknown>;
  const o = (j.providers ?? {}) as ProviderOverrides;
  resolveProviders(o); // validate
  return o;
}

const PATHS: Record<ApiMode, string> = { 'chat-completions': '/chat/completions', responses: '/responses' };

/**
 * The upstream endpoint of a route, or an error string. Registry providers: baseUrl + the API path,
 * and the host must be one of the provider's hosts. Custom: the profile's upstream URL, taken as the
 * endpoint when it already ends with the API path, else as a base URL; the key goes only to its host.
 */
export function endpointFor(p: ProviderInfo, apiMode: ApiMode, customUpstreamUrl?: string | null): { url: URL; allowedHosts: string[] } | string {
  if (!p.apiModes.includes(apiMode)) return `${p.id} does not speak ${apiMode}`;
  let raw: string;
  let allowed: string[];
  if (p.id === 'custom') {
    if (!customUpstreamUrl) return 'a custom route needs its upstream URL';
    const problem = upstreamUrlProblem(customUpstreamUrl);
    if (problem) return `custom upstream URL ${problem}`;
    const u = new URL(customUpstreamUrl);
    raw = u.pathname.replace(/\/+$/, '').endsWith(PATHS[apiMode]) ? customUpstreamUrl : customUpstreamUrl.replace(/\/+$/, '') + PATHS[apiMode];
    allowed = [u.host];
  } else {
    if (!p.baseUrl) return `${p.id} has no base URL configured`;
    raw = p.baseUrl + PATHS[apiMode];
    allowed = p.hosts;
  }
  const url = new URL(raw);
  const problem = upstreamUrlProblem(raw);
  if (problem) return `upstream URL ${problem}`;
  if (!allowed.includes(url.host.toLowerCase())) return `host ${url.host} is not a registry host of ${p.id}`;
  return { url, allowedHosts: allowed };
}

/** The auth header for a key: Authorization: Bearer, or x-api-key where the provider allows it. */
export function authHeader(p: ProviderInfo, mode: AuthHeaderMode | undefined, key: string): [string, string] | string {
  const m = mode ?? p.authHeaderModes[0]!;
  if (!p.authHeaderModes.includes(m)) return `${p.id} does not accept the ${m} auth header`;
  return m === 'bearer' ? ['authorization', `Bearer ${key}`] : ['x-api-key', key];
}
