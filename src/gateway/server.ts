/**
 * The model gateway: raw node:http, no framework. Agents call POST /v1/chat/completions and
 * POST /v1/responses with their lease token; the runner drives /admin/* with a shared secret.
 * Bodies stream through (only the request JSON is parsed: to route, reserve and clamp). See
 * docs/gateway.md for the whole contract.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Agent as HttpAgent, createServer, request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { AddressInfo } from 'node:net';
import { randomToken } from '../core/ids.js';
import { effectivePrices, type EffectivePrices, type Usage } from '../core/pricing.js';
import { authHeader, endpointFor, GATEWAY_USER_AGENT, PROVIDER_F_SESSION_HEADER, resolveProviders, type ApiMode, type ProviderInfo } from '../core/providers.js';
import { Budget, BudgetError, INPUT_PER_ITEM_ALLOWANCE, INPUT_TEMPLATE_ALLOWANCE, STREAM_DELTA_SLACK, type Lease, type Reservation } from './budget.js';
import type { GatewayStatus, LeaseRequest, Snapshot, SnapshotRoute, SpendPolicies } from '../contracts/gateway.js';
import { NO_POLICIES } from '../contracts/gateway.js';
import { eventEnd, findUsage, hasUsageKey, isUsageOnlyChunk } from './usage.js';

export interface GatewayOptions {
  host: string;
  port: number;
  adminSecret: string;
  /** Request JSON cap in bytes. */
  maxBodyBytes?: number;
  /** After a client disconnects, how long upstream is still read for its usage. */
  drainMs?: number;
  /** Default MODEL_GATEWAY_SESSION_HEADER (a snapshot may set it too). */
  sessionHeader?: string | null;
  now?: () => number;
  log?: (level: 'info' | 'warn' | 'error', msg: string, extra?: Record<string, unknown>) => void;
}

interface Route {
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

const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'proxy-connection', 'upgrade', 'te', 'trailer']);
const OPAQUE_KEYS = new Set(['image_url', 'file_id', 'file_data', 'file_url', 'input_audio', 'audio']);

/** True when a request body refers to content whose token count its bytes do not bound (images, files, audio, server-side state). */
function hasOpaqueInput(v: unknown, depth = 0): boolean {
  if (depth > 64 || v === null || typeof v !== 'object') return false;
  if (Array.isArray(v)) {
    for (const x of v) if (hasOpaqueInput(x, depth + 1)) return true;
    return false;
  }
  for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
    if (OPAQUE_KEYS.has(k)) return true;
    if (k === 'type' && typeof x === 'string' && /image|file|audio/.test(x)) return true;
    if (typeof x === 'object' && hasOpaqueInput(x, depth + 1)) return true;
  }
  return false;
}

function sha(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

export interface RunningGateway {
  url: string;
  port: number;
  bootId: string;
  budget: Budget;
  close(): Promise<void>;
}

export async function startGateway(opts: GatewayOptions): Promise<RunningGateway> {
  const now = opts.now ?? Date.now;
  const log = opts.log ?? (() => undefined);
  const maxBody = opts.maxBodyBytes ?? 32 * 1024 * 1024;
  const drainMs = opts.drainMs ?? 120_000;
  const secretHash = sha(opts.adminSecret);
  const bootId = 'boot_' + randomToken(16);
  const startedAt = new Date().toISOString();
  const budget = new Budget(now);
  const agents = new Map<string, HttpAgent>();
  let routes = new Map<string, Route>();
  let generation: number | null = null;
  let sessionHeader: string | null = opts.sessionHeader?.toLowerCase() || null;
  let inflight = 0;

  const agentFor = (u: URL): HttpAgent => {
    const k = u.protocol + u.host;
    let a = agents.get(k);
    if (!a) {
      const o = { keepAlive: true, maxSockets: 1024, maxFreeSockets: 256, scheduling: 'lifo' as const };
      a = u.protocol === 'https:' ? new HttpsAgent(o) : new HttpAgent(o);
      agents.set(k, a);
    }
    return a;
  };

  function buildRoutes(s: Snapshot): Map<string, Route> {
    const reg = resolveProviders(s.providers ?? null);
    const out = new Map<string, Route>();
    const problems: string[] = [];
    for (const r of s.routes ?? []) {
      const key = `${r.profileId}@${r.revision}`;
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
      out.set(key, { key, src: r, provider: p, url: ep.url, https: ep.url.protocol === 'https:', agent: agentFor(ep.url), headers, prices: typeof prices === 'string' ? null : prices, priceProblem: typeof prices === 'string' ? prices : null });
    }
    if (problems.length) throw Object.assign(new Error(`snapshot refused: ${problems.join('; ')}`), { status: 400 });
    return out;
  }

  const json = (res: ServerResponse, status: number, body: unknown, extra: OutgoingHttpHeaders = {}) => {
    const b = JSON.stringify(body);
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(b), ...extra });
    res.end(b);
  };
  /** OpenAI-shaped error body, so agent clients surface the message. */
  const fail = (res: ServerResponse, status: number, code: string, message: string, details: Record<string, unknown> = {}) => {
    if (res.headersSent) return void res.destroy();
    json(res, status, { error: { message, type: 'atelier_gateway_error', code, param: null, details } }, status === 429 || status === 402 ? { 'x-should-retry': 'false' } : {});
  };

  const readBody = (req: IncomingMessage, cap: number): Promise<Buffer | null> =>
    new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let n = 0;
      req.on('data', (c: Buffer) => {
        n += c.length;
        if (n > cap) {
          resolve(null);
          req.removeAllListeners('data');
          req.resume();
          return;
        }
        chunks.push(c);
      });
      req.on('end', () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, n)));
      req.on('error', reject);
    });

  // ---------------------------------------------------------------- admin
  function adminAuthorized(req: IncomingMessage): boolean {
    const m = /^Bearer (.+)$/.exec(req.headers.authorization ?? '');
    return !!m && timingSafeEqual(sha(m[1]!), secretHash);
  }

  function status(): GatewayStatus {
    return { bootId, startedAt, generation, profileCount: routes.size, noProfilesSinceRestart: generation === null, leases: budget.leasesById.size, inflight, lastEventSeq: budget.seq };
  }

  async function admin(req: IncomingMessage, res: ServerResponse, path: string, query: URLSearchParams): Promise<void> {
    if (!adminAuthorized(req)) return fail(res, 401, 'unauthenticated', 'admin secret required');
    const m = req.method;
    if (m === 'GET' && path === '/admin/status') return json(res, 200, status());
    if (m === 'PUT' && path === '/admin/snapshot') {
      const raw = await readBody(req, 64 * 1024 * 1024);
      if (!raw) return fail(res, 413, 'body_too_large', 'snapshot too large');
      let s: Snapshot;
      try {
        s = JSON.parse(raw.toString('utf8')) as Snapshot;
        if (!s || typeof s !== 'object' || !Number.isSafeInteger(s.generation) || !Array.isArray(s.routes)) throw new Error('needs generation (integer) and routes (array)');
      } catch (e) {
        return fail(res, 400, 'invalid_snapshot', `snapshot: ${(e as Error).message}`);
      }
      let next: Map<string, Route>;
      try {
        next = buildRoutes(s);
      } catch (e) {
        return fail(res, 400, 'invalid_snapshot', (e as Error).message);
      }
      // Replace whole: requests in flight keep the Route object (and key) they started with.
      routes = next;
      generation = s.generation;
      budget.policies = { ...NO_POLICIES, ...(s.policies ?? {}) } as SpendPolicies;
      budget.setBaselines(s.windows);
      if (s.sessionHeader !== undefined) sessionHeader = s.sessionHeader ? s.sessionHeader.toLowerCase() : (opts.sessionHeader?.toLowerCase() || null);
      log('info', 'snapshot applied', { generation, profiles: routes.size });
      return json(res, 200, { ...status(), windows: budget.windowTotals() });
    }
    if (m === 'POST' && path === '/admin/leases') {
      const raw = await readBody(req, 1024 * 1024);
      let b: LeaseRequest;
      try {
        b = JSON.parse(raw?.toString('utf8') ?? '') as LeaseRequest;
      } catch {
        return fail(res, 400, 'invalid_lease', 'lease: not JSON');
      }
      const bad = leaseProblem(b);
      if (bad) return fail(res, 400, 'invalid_lease', `lease: ${bad}`);
      const route = routes.get(`${b.profileId}@${b.revision}`);
      if (!route) return fail(res, 409, 'route_unavailable', `profile ${b.profileId} revision ${b.revision} is not in the current snapshot`, { noProfilesSinceRestart: generation === null });
      const lim = route.src.limits ?? {};
      const budgets = {
        maxInputTokens: Math.min(b.budgets.maxInputTokens, lim.maxInputTokens ?? Infinity),
        maxOutputTokens: Math.min(b.budgets.maxOutputTokens, lim.maxOutputTokens ?? Infinity),
        maxCostMicros: Math.min(b.budgets.maxCostMicros, lim.maxCostMicros ?? Infinity),
      };
      const { lease, token } = budget.issue({ ...b, budgets });
      return json(res, 201, { ...budget.info(lease), token });
    }
    // Agent trees (docs/agents.md): a child's cost budget is carved out of its parent's lease, and what the child did not spend goes back.
    const bm = /^\/admin\/leases\/([A-Za-z0-9_-]+)\/cost-budget$/.exec(path);
    if (bm && m === 'POST') {
      const l = budget.leasesById.get(bm[1]!);
      let delta: unknown;
      try {
        delta = (JSON.parse((await readBody(req, 4096))?.toString('utf8') ?? '') as { deltaMicros?: unknown }).deltaMicros;
      } catch {
        return fail(res, 400, 'invalid_request', 'body: not JSON');
      }
      if (!Number.isSafeInteger(delta)) return fail(res, 400, 'invalid_request', 'deltaMicros must be an integer');
      if (!l || l.revoked) return fail(res, 404, 'not_found', 'no such live lease');
      const next = l.budgets.maxCostMicros + (delta as number);
      const floor = l.usedCost + l.resCost;
      if (next < floor) return fail(res, 409, 'budget_exceeded', `the lease has ${Math.max(0, l.budgets.maxCostMicros - floor)} micro-USD left`, { remainingMicros: Math.max(0, l.budgets.maxCostMicros - floor) });
      l.budgets.maxCostMicros = next;
      return json(res, 200, budget.info(l));
    }
    const lm = /^\/admin\/leases\/([A-Za-z0-9_-]+)$/.exec(path);
    if (lm && (m === 'GET' || m === 'DELETE')) {
      const l = m === 'DELETE' ? budget.revoke(lm[1]!) : budget.leasesById.get(lm[1]!);
      if (!l) return fail(res, 404, 'not_found', 'no such lease');
      return json(res, 200, budget.info(l));
    }
    if (m === 'GET' && path === '/admin/usage') {
      const after = Number(query.get('after') ?? '0');
      const limit = Math.min(10_000, Math.max(1, Number(query.get('limit') ?? '5000')));
      const events = budget.eventsAfter(Number.isSafeInteger(after) && after >= 0 ? after : 0, limit);
      return json(res, 200, { bootId, events, lastSeq: budget.seq, oldestSeq: budget.events[0]?.seq ?? budget.seq + 1 });
    }
    if (m === 'GET' && path === '/admin/windows') return json(res, 200, { windows: budget.windowTotals(), policies: budget.policies });
    return fail(res, 404, 'not_found', `no admin route ${m} ${path}`);
  }

  function leaseProblem(b: LeaseRequest): string | null {
    if (!b || typeof b !== 'object') return 'must be an object';
    if (typeof b.agentId !== 'string' || !/^[A-Za-z0-9_-]{1,100}$/.test(b.agentId)) return 'agentId must be an identifier';
    if (typeof b.profileId !== 'string' || !b.profileId) return 'profileId is required';
    if (!Number.isSafeInteger(b.revision)) return 'revision must be an integer';
    const bu = b.budgets;
    if (!bu || typeof bu !== 'object') return 'budgets are required';
    for (const k of ['maxInputTokens', 'maxOutputTokens', 'maxCostMicros'] as const) if (!Number.isSafeInteger(bu[k]) || bu[k] < 0) return `budgets.${k} must be a non-negative integer`;
    if (typeof b.expiresAt !== 'string' || Number.isNaN(Date.parse(b.expiresAt))) return 'expiresAt must be an ISO time';
    return null;
  }

  // ---------------------------------------------------------------- proxy
  async function proxy(req: IncomingMessage, res: ServerResponse, mode: ApiMode): Promise<void> {
    const m = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '');
    const lease = m ? budget.byToken(m[1]!) : undefined;
    if (!lease || lease.revoked) {
      req.resume();
      return fail(res, 401, 'invalid_lease', 'a valid agent lease token is required (Authorization: Bearer)');
    }
    if (lease.expiresAtMs <= now()) {
      req.resume();
      return fail(res, 401, 'lease_expired', 'the agent lease has expired');
    }
    const raw = await readBody(req, maxBody);
    if (!raw) return fail(res, 413, 'body_too_large', `request body over ${maxBody} bytes`);
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw.toString('utf8'));
      if (!body || typeof body !== 'object' || Array.isArray(body)) throw new Error('not an object');
    } catch {
      return fail(res, 400, 'invalid_request', 'request body must be a JSON object');
    }
    const route = routes.get(`${lease.profileId}@${lease.revision}`);
    if (!route) return fail(res, 503, 'route_unavailable', `profile ${lease.profileId} revision ${lease.revision} does not route now (disabled, deleted, or the gateway has had no snapshot since it restarted)`, { noProfilesSinceRestart: generation === null });
    if (route.src.apiMode !== mode) return fail(res, 400, 'unsupported_endpoint', `this agent's profile speaks ${route.src.apiMode}, not ${mode}`);
    if (!route.prices) return fail(res, 400, 'price_unknown', `refused before sending: the cost of this request cannot be bounded: ${route.priceProblem}`);

    // Bounds: output from the request (clamped below), input from the bytes (a token is at least one byte) unless opaque.
    const chat = mode === 'chat-completions';
    const nChoices = chat && Number.isSafeInteger(body.n) && (body.n as number) > 1 ? (body.n as number) : 1;
    const reqOutRaw = chat ? (body.max_completion_tokens ?? body.max_tokens) : body.max_output_tokens;
    const requestedOut = typeof reqOutRaw === 'number' && Number.isSafeInteger(reqOutRaw) && reqOutRaw > 0 ? reqOutRaw * nChoices : null;
    const opaque = (!chat && (body.previous_response_id != null || body.conversation != null || body.prompt != null)) || hasOpaqueInput(chat ? body.messages : body.input) || hasOpaqueInput(body.tools);
    const inRoom = lease.budgets.maxInputTokens - lease.usedIn - lease.resIn;
    const items = chat ? (Array.isArray(body.messages) ? body.messages.length : 0) : Array.isArray(body.input) ? body.input.length : 1;
    const inputBound = opaque ? Math.max(1, inRoom) : raw.length + INPUT_TEMPLATE_ALLOWANCE + INPUT_PER_ITEM_ALLOWANCE * items;

    let r: Reservation;
    try {
      r = budget.reserve(lease, inputBound, requestedOut, route.prices);
    } catch (e) {
      if (e instanceof BudgetError) return fail(res, 429, e.code, e.message, e.details);
      throw e;
    }

    body.model = route.src.model;
    const perChoice = Math.max(1, Math.floor(r.outputLimit / nChoices));
    let stripUsage = false;
    if (chat) {
      if (body.max_tokens !== undefined && body.max_completion_tokens === undefined) body.max_tokens = perChoice;
      else body.max_completion_tokens = perChoice;
      if (body.stream === true) {
        const so = (body.stream_options && typeof body.stream_options === 'object' ? body.stream_options : {}) as Record<string, unknown>;
        stripUsage = so.include_usage !== true;
        body.stream_options = { ...so, include_usage: true };
      }
    } else body.max_output_tokens = r.outputLimit;
    const out = Buffer.from(JSON.stringify(body));
    const headers: OutgoingHttpHeaders = { ...route.headers, 'content-length': out.length, accept: req.headers.accept ?? (body.stream === true ? 'text/event-stream' : 'application/json') };
    if (route.provider.sessionHeader) headers[route.provider.sessionHeader] = lease.agentId;
    else if (sessionHeader && sessionHeader !== PROVIDER_F_SESSION_HEADER) headers[sessionHeader] = lease.agentId;

    inflight++;
    let done = false;
    let clientGone = false;
    let drainTimer: NodeJS.Timeout | null = null;
    const finish = (usage: Usage | null, unreconciled: boolean, reason?: string) => {
      if (done) return;
      done = true;
      inflight--;
      if (drainTimer) clearTimeout(drainTimer);
      budget.settle(r, usage ?? { inputTokens: 0, cachedInputTokens: 0, cacheWriteTokens: 0, outputTokens: 0, reasoningTokens: 0 }, unreconciled, reason);
    };
    const estimate = (outputTokens: number): Usage => ({
      inputTokens: Math.min(r.inputBound, Math.ceil(raw.length / 4)),
      cachedInputTokens: 0,
      cacheWriteTokens: 0,
      outputTokens: Math.min(r.outputLimit, outputTokens),
      reasoningTokens: 0,
    });

    const up = (route.https ? httpsRequest : httpRequest)(route.url, { method: 'POST', agent: route.agent, headers });
    let sent = false;
    up.on('finish', () => (sent = true));
    res.on('close', () => {
      if (res.writableFinished) return;
      clientGone = true;
      if (!done) drainTimer = setTimeout(() => up.destroy(new Error('drain bound reached')), drainMs);
    });

    let responded = false;
    up.on('error', (err: NodeJS.ErrnoException) => {
      if (done || responded) return; // after the response started, its own close handler settles
      if (!sent) finish(null, false, 'upstream unreachable');
      else finish(estimate(0), true, 'upstream failed before responding');
      if (!clientGone) fail(res, 502, 'upstream_unreachable', `the provider could not be reached (${err.code ?? err.message})`);
    });

    up.on('response', (ur) => {
      responded = true;
      ur.on('error', () => undefined); // a cut shows up as close without end
      const st = ur.statusCode ?? 502;
      if (st >= 300 && st < 400) {
        // Never follow a redirect, and never hand one to the client (its client would follow it with the lease token).
        ur.resume();
        finish(null, false, 'upstream redirect refused');
        return fail(res, 502, 'upstream_redirect_refused', `the provider answered ${st} (a redirect); the gateway never follows redirects with a key`);
      }
      const ok = st >= 200 && st < 300;
      const sse = String(ur.headers['content-type'] ?? '').includes('text/event-stream');
      const h: OutgoingHttpHeaders = {};
      for (const [k, v] of Object.entries(ur.headers)) if (v !== undefined && !HOP.has(k)) h[k] = v;
      if (sse) delete h['content-length'];
      if (!clientGone) res.writeHead(st, h);
      let usage: Usage | null = null;

      if (sse) {
        let pending: Buffer | null = null;
        let deltas = 0;
        ur.on('data', (chunk: Buffer) => {
          const buf = pending ? Buffer.concat([pending, chunk]) : chunk;
          let pos = 0;
          let keepFrom = 0;
          const parts: Buffer[] = [];
          for (let end = eventEnd(buf, 0); end > 0; end = eventEnd(buf, pos)) {
            const ev = buf.subarray(pos, end);
            if (ev.indexOf('"delta"') >= 0 && ++deltas > r.outputLimit + STREAM_DELTA_SLACK * nChoices && !done) {
              // The provider ignores the clamped output limit: stop relaying and stop paying (docs/spend.md).
              if (pos > keepFrom) parts.push(buf.subarray(keepFrom, pos));
              if (!clientGone) {
                for (const p of parts) res.write(p);
                res.end(overrunEvent(chat, r.outputLimit));
              }
              finish({ ...estimate(0), outputTokens: deltas }, true, `provider overran the output limit of ${r.outputLimit} tokens; the gateway cut the stream`);
              ur.destroy();
              return;
            }
            if (hasUsageKey(ev)) {
              const u = findUsage(ev);
              if (u) {
                usage = u;
                if (stripUsage && isUsageOnlyChunk(ev)) {
                  if (pos > keepFrom) parts.push(buf.subarray(keepFrom, pos));
                  keepFrom = end;
                }
              }
            }
            pos = end;
          }
          if (pos > keepFrom) parts.push(buf.subarray(keepFrom, pos));
          pending = pos < buf.length ? buf.subarray(pos) : null;
          if (!clientGone) for (const p of parts) res.write(p);
          else if (usage) ur.destroy(); // the client is gone and the usage is in: stop reading
        });
        ur.on('end', () => {
          if (pending) {
            const u = hasUsageKey(pending) ? findUsage(pending) : null;
            if (u) usage = u;
            if (!clientGone) res.write(pending);
          }
          if (usage) finish(usage, false);
          else if (ok) finish(estimate(deltas), true, 'stream ended without usage');
          else finish(null, false, `provider error ${st}`);
          if (!clientGone) res.end();
        });
        ur.on('close', () => {
          if (done) return;
          if (usage) finish(usage, false);
          else finish(estimate(deltas), true, clientGone ? 'client disconnected; usage not received within the bound' : 'stream cut before its usage arrived');
          if (!clientGone) res.destroy();
        });
      } else {
        const chunks: Buffer[] = [];
        let size = 0;
        ur.on('data', (chunk: Buffer) => {
          chunks.push(chunk);
          size += chunk.length;
          while (size > 16 * 1024 * 1024 && chunks.length > 1) size -= chunks.shift()!.length;
          if (!clientGone) res.write(chunk);
        });
        ur.on('end', () => {
          const all = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
          usage = hasUsageKey(all) ? findUsage(all) : null;
          if (usage) finish(usage, false);
          else if (ok) finish(estimate(Math.ceil(all.length / 4)), true, 'response without usage');
          else finish(null, false, `provider error ${st}`);
          if (!clientGone) res.end();
        });
        ur.on('close', () => {
          if (done) return;
          finish(estimate(Math.ceil(size / 4)), true, 'response cut before its usage arrived');
          if (!clientGone) res.destroy();
        });
      }
    });
    up.end(out);
  }

  /** The last SSE event of a stream the gateway cut for a provider overrun: an error the openai client raises. */
  function overrunEvent(chat: boolean, limit: number): string {
    const message = `the provider passed the output limit of ${limit} tokens the gateway set; the stream was cut, the true cost recorded and this agent's lease ended`;
    return chat
      ? `data: ${JSON.stringify({ error: { message, type: 'provider_overrun', code: 'provider_overrun', param: null } })}\n\n`
      : `event: error\ndata: ${JSON.stringify({ type: 'error', code: 'provider_overrun', message, param: null })}\n\n`;
  }

  // ---------------------------------------------------------------- server
  const server: Server = createServer({ keepAliveTimeout: 65_000, headersTimeout: 30_000, requestTimeout: 300_000 }, (req, res) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const handle = async () => {
      if (req.method === 'POST' && path === '/v1/chat/completions') return proxy(req, res, 'chat-completions');
      if (req.method === 'POST' && path === '/v1/responses') return proxy(req, res, 'responses');
      if (path.startsWith('/admin/')) return admin(req, res, path, new URLSearchParams(q < 0 ? '' : url.slice(q + 1)));
      if (req.method === 'GET' && path === '/healthz') return json(res, 200, { status: 'ok', bootId });
      req.resume();
      return fail(res, 404, 'not_found', `the gateway serves POST /v1/chat/completions and POST /v1/responses only (got ${req.method} ${path})`);
    };
    handle().catch((err) => {
      log('error', 'gateway request failed', { err: String(err?.stack ?? err) });
      fail(res, 500, 'internal', 'internal gateway error');
    });
  });
  const sweeper = setInterval(() => budget.sweep(), 600_000);
  sweeper.unref();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return {
    url: `http://${host}:${port}`,
    port,
    bootId,
    budget,
    async close() {
      clearInterval(sweeper);
      await new Promise<void>((r) => {
        server.close(() => r());
        server.closeIdleConnections();
        setTimeout(() => {
          server.closeAllConnections();
          r();
        }, 2000).unref();
      });
      for (const a of agents.values()) a.destroy();
    },
  };
}

export type { Lease };
