/**
 * Routing: which endpoint a request is for, who may call it (the admin secret, an agent's lease
 * token) and which route (profile revision → provider, URL, key, prices) serves it. Everything
 * here is synchronous and free of I/O except the keep-alive agents a route holds.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Agent as HttpAgent, type OutgoingHttpHeaders } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { effectivePrices, type EffectivePrices } from '../core/pricing.js';
import { authHeader, endpointFor, GATEWAY_USER_AGENT, resolveProviders, type ApiMode, type ProviderInfo } from '../core/providers.js';
import type { LeaseRequest, Snapshot, SnapshotRoute } from '../contracts/gateway.js';
import type { Budget, Lease } from './budget.js';
import type { Refusal } from './http.js';

/** One routable profile revision, compiled from a snapshot route. */
export interface Route {
  key: string;
  src: SnapshotRoute;
  provider: ProviderInfo;
  url: URL;
  https: boolean;
  agent: HttpAgent;
  headers: OutgoingHttpHeaders;
  prices: EffectivePrices | null;
  priceProblem: string | null;
}

export type Endpoint =
  | { kind: 'proxy'; mode: ApiMode }
  | { kind: 'admin' }
  | { kind: 'health' }
  | { kind: 'not_found' };

/** What a request is for, from its method and path (query already split off). */
export function classifyRequest(method: string | undefined, path: string): Endpoint {
  if (method === 'POST' && path === '/v1/chat/completions') return { kind: 'proxy', mode: 'chat-completions' };
  if (method === 'POST' && path === '/v1/responses') return { kind: 'proxy', mode: 'responses' };
  if (path.startsWith('/admin/')) return { kind: 'admin' };
  if (method === 'GET' && path === '/healthz') return { kind: 'health' };
  return { kind: 'not_found' };
}

/** Splits a request target into its path and query. */
export function splitTarget(url: string): { path: string; query: URLSearchParams } {
  const q = url.indexOf('?');
  return { path: q < 0 ? url : url.slice(0, q), query: new URLSearchParams(q < 0 ? '' : url.slice(q + 1)) };
}

export const routeKey = (profileId: string, revision: number): string => `${profileId}@${revision}`;

/** Keep-alive agents, one per upstream scheme and host, shared by every route to it. */
export class UpstreamAgents {
  private readonly byHost = new Map<string, HttpAgent>();

  for(u: URL): HttpAgent {
    const k = u.protocol + u.host;
    let a = this.byHost.get(k);
    if (!a) {
      const o = { keepAlive: true, maxSockets: 1024, maxFreeSockets: 256, scheduling: 'lifo' as const };
      a = u.protocol === 'https:' ? new HttpsAgent(o) : new HttpAgent(o);
      this.byHost.set(k, a);
    }
    return a;
  }

  destroyAll(): void {
    for (const a of this.byHost.values()) a.destroy();
  }
}

/**
 * Compiles a snapshot's routes. Returns the routes by key, or the refusal text naming every bad
 * route (a snapshot is taken whole or not at all). A route whose prices cannot bound a cost is
 * kept, with its price problem: its requests are refused before sending.
 */
export function buildRoutes(s: Snapshot, agents: Pick<UpstreamAgents, 'for'>): Map<string, Route> | string {
  const reg = resolveProviders(s.providers ?? null);
  const out = new Map<string, Route>();
  const problems: string[] = [];
  for (const r of s.routes ?? []) {
    const key = routeKey(r.profileId, r.revision);
    const p = reg[r.provider];
    if (!p) {
      problems.push(`${key}: unknown provider ${String(r.provider)}`);
      continue;
    }
    if (!r.credential || typeof r.credential.key !== 'string' || !r.credential.key) {
      problems.push(`${key}: no credential key`);
      continue;
    }
    const ep = endpointFor(p, r.apiMode, r.upstreamUrl);
    if (typeof ep === 'string') {
      problems.push(`${key}: ${ep}`);
      continue;
    }
    const auth = authHeader(p, r.credential.authHeader, r.credential.key);
    if (typeof auth === 'string') {
      problems.push(`${key}: ${auth}`);
      continue;
    }
    const prices = effectivePrices(r.pricing, p.cacheWriteBilled);
    const headers: OutgoingHttpHeaders = { [auth[0]]: auth[1], 'user-agent': p.userAgent ?? GATEWAY_USER_AGENT, 'accept-encoding': 'identity', 'content-type': 'application/json' };
    out.set(key, { key, src: r, provider: p, url: ep.url, https: ep.url.protocol === 'https:', agent: agents.for(ep.url), headers, prices: typeof prices === 'string' ? null : prices, priceProblem: typeof prices === 'string' ? prices : null });
  }
  if (problems.length) return `snapshot refused: ${problems.join('; ')}`;
  return out;
}

/** The structural check of a snapshot body before its routes are compiled; null when fine. */
export function snapshotProblem(s: unknown): string | null {
  const o = s as Snapshot | null;
  if (!o || typeof o !== 'object' || !Number.isSafeInteger(o.generation) || !Array.isArray(o.routes)) return 'needs generation (integer) and routes (array)';
  return null;
}

const sha = (s: string): Buffer => createHash('sha256').update(s).digest();

/** Checks `Authorization: Bearer <admin secret>` in constant time (SHA-256 digests, timingSafeEqual). */
export function adminAuthorizer(secret: string): (authorization: string | undefined) => boolean {
  const secretHash = sha(secret);
  return (authorization) => {
    const m = /^Bearer (.+)$/.exec(authorization ?? '');
    return !!m && timingSafeEqual(sha(m[1]!), secretHash);
  };
}

/** The live, unexpired lease an agent request's bearer token names, or why there is none (401). */
export function authenticateLease(budget: Pick<Budget, 'byToken'>, authorization: string | undefined, nowMs: number): { lease: Lease } | Refusal {
  const m = /^Bearer (\S+)$/.exec(authorization ?? '');
  const lease = m ? budget.byToken(m[1]!) : undefined;
  if (!lease || lease.revoked) return { status: 401, code: 'invalid_lease', message: 'a valid agent lease token is required (Authorization: Bearer)' };
  if (lease.expiresAtMs <= nowMs) return { status: 401, code: 'lease_expired', message: 'the agent lease has expired' };
  return { lease };
}

/**
 * The route that serves a lease's request on an endpoint: its profile revision must be in the
 * current snapshot (503), speak the endpoint's protocol (400) and have prices that bound a cost (400).
 */
export function selectRoute(routes: ReadonlyMap<string, Route>, lease: Pick<Lease, 'profileId' | 'revision'>, mode: ApiMode, noSnapshotYet: boolean): { route: Route } | Refusal {
  const route = routes.get(routeKey(lease.profileId, lease.revision));
  if (!route) return { status: 503, code: 'route_unavailable', message: `profile ${lease.profileId} revision ${lease.revision} does not route now (disabled, deleted, or the gateway has had no snapshot since it restarted)`, details: { noProfilesSinceRestart: noSnapshotYet } };
  if (route.src.apiMode !== mode) return { status: 400, code: 'unsupported_endpoint', message: `this agent's profile speaks ${route.src.apiMode}, not ${mode}` };
  if (!route.prices) return { status: 400, code: 'price_unknown', message: `refused before sending: the cost of this request cannot be bounded: ${route.priceProblem}` };
  return { route };
}

/** What is wrong with a lease request (POST /admin/leases), or null. */
export function leaseProblem(b: LeaseRequest): string | null {
  if (!b || typeof b !== 'object') return 'must be an object';
  if (typeof b.agentId !== 'string' || !/^[A-Za-z0-9_-]{1,100}$/.test(b.agentId)) return 'agentId must be an identifier';
  if (typeof b.profileId !== 'string' || !b.profileId) return 'profileId is required';
  if (!Number.isSafeInteger(b.revision)) return 'revision must be an integer';
  const bu = b.budgets;
  if (!bu || typeof bu !== 'object') return 'budgets are required';
  for (const k of ['maxInputTokens', 'maxOutputTokens', 'maxCostMicros'] as const) if (!Number.isSafeInteger(bu[k]) || bu[k] < 0) return `budgets.${k} must be a non-negative integer`;
  if (typeof b.expiresAt !== 'string' || Number.isNaN(Date.parse(b.expiresAt))) return 'expiresAt must be an ISO time';
  if (b.carveId !== undefined && (typeof b.carveId !== 'string' || !/^carve_[A-Za-z0-9_-]{1,100}$/.test(b.carveId))) return 'carveId must be a carve_ identifier';
  return null;
}

/** A lease's budgets: what the runner asked for, each capped by the profile's limit. */
export function leaseBudgets(asked: LeaseRequest['budgets'], limits: SnapshotRoute['limits']): LeaseRequest['budgets'] {
  const lim = limits ?? {};
  return {
    maxInputTokens: Math.min(asked.maxInputTokens, lim.maxInputTokens ?? Infinity),
    maxOutputTokens: Math.min(asked.maxOutputTokens, lim.maxOutputTokens ?? Infinity),
    maxCostMicros: Math.min(asked.maxCostMicros, lim.maxCostMicros ?? Infinity),
  };
}
