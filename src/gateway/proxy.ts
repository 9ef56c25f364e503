/**
 * Proxying: one agent request, from its lease token to the provider and back. Authenticates the
 * lease and picks the route (./routing.ts), bounds and reserves the request, rewrites it for the
 * provider and relays the answer, streamed (SSE) or not, settling the reservation exactly once
 * with the usage the meters read (./metering.ts). Bodies stream through: only the request JSON is
 * parsed. A client that disconnects leaves upstream read for up to drainMs, for its usage.
 */
import { request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Usage } from '../core/pricing.js';
import { PROVIDER_F_SESSION_HEADER, type ApiMode } from '../core/providers.js';
import { BudgetError, type Reservation } from './budget.js';
import type { GatewayContext } from './context.js';
import { HOP_HEADERS, readBody, sendError, sendRefusal } from './http.js';
import { BodyMeter, estimateUsage, NO_USAGE, overrunEvent, requestBounds, rewriteForProvider, SseMeter } from './metering.js';
import { authenticateLease, selectRoute, type Route } from './routing.js';
import { SpanKind, extractContext, failSpan, setAttrs, startSpan, type Span } from '../telemetry/tracing.js';

/** The headers of the upstream request: the route's (key, user agent, JSON), the body length, accept, and the session header with the agent id. */
export function upstreamHeaders(route: Pick<Route, 'headers' | 'provider'>, bodyBytes: number, accept: string | undefined, stream: boolean, sessionHeader: string | null, agentId: string): OutgoingHttpHeaders {
  const headers: OutgoingHttpHeaders = { ...route.headers, 'content-length': bodyBytes, accept: accept ?? (stream ? 'text/event-stream' : 'application/json') };
  if (route.provider.sessionHeader) headers[route.provider.sessionHeader] = agentId;
  else if (sessionHeader && sessionHeader !== PROVIDER_F_SESSION_HEADER) headers[sessionHeader] = agentId;
  return headers;
}

/**
 * One agent request, traced (src/telemetry/tracing.ts; nothing when tracing is off): a client span
 * with the GenAI semantic conventions (operation, provider, model, tokens in and out) and the cost
 * in micro-USD, child of the request's traceparent (the agent runtime sends its turn's). Never a
 * header, the lease token, the key or any message text.
 */
export async function proxyRequest(ctx: GatewayContext, req: IncomingMessage, res: ServerResponse, mode: ApiMode): Promise<void> {
  const span = startSpan('chat', { kind: SpanKind.CLIENT, parent: extractContext([req.headers]), attributes: { 'gen_ai.operation.name': 'chat', 'atelier.gateway.api_mode': mode } });
  let relayed = false;
  try {
    relayed = (await proxyInner(ctx, req, res, mode, span)) === true;
  } finally {
    if (!relayed && span) {
      setAttrs(span, { 'http.response.status_code': res.statusCode });
      if (res.statusCode >= 400) failSpan(span, null, String(res.statusCode));
      span.end();
    }
  }
}

async function proxyInner(ctx: GatewayContext, req: IncomingMessage, res: ServerResponse, mode: ApiMode, span: Span | undefined): Promise<true | void> {
  const auth = authenticateLease(ctx.budget, req.headers.authorization, ctx.now());
  if (!('lease' in auth)) {
    req.resume();
    return sendRefusal(res, auth);
  }
  const { lease } = auth;
  const raw = await readBody(req, ctx.maxBodyBytes);
  if (!raw) return sendError(res, 413, 'body_too_large', `request body over ${ctx.maxBodyBytes} bytes`);
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(raw.toString('utf8'));
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw new Error('not an object');
  } catch {
    return sendError(res, 400, 'invalid_request', 'request body must be a JSON object');
  }
  const picked = selectRoute(ctx.routes, lease, mode, ctx.generation === null);
  if (!('route' in picked)) return sendRefusal(res, picked);
  const { route } = picked;
  if (span) {
    span.updateName(`chat ${route.src.model}`);
    setAttrs(span, { 'gen_ai.provider.name': route.provider.id, 'gen_ai.request.model': route.src.model, 'atelier.agent.id': lease.agentId });
  }

  const bounds = requestBounds(body, raw.length, mode, lease);
  let r: Reservation;
  try {
    r = ctx.budget.reserve(lease, bounds.inputBound, bounds.requestedOutput, route.prices!);
  } catch (e) {
    if (e instanceof BudgetError) return sendError(res, 429, e.code, e.message, e.details);
    throw e;
  }

  const { stripUsage } = rewriteForProvider(body, route.src.model, mode, r.outputLimit, bounds.choices);
  const out = Buffer.from(JSON.stringify(body));
  const headers = upstreamHeaders(route, out.length, req.headers.accept, body.stream === true, ctx.sessionHeader, lease.agentId);
  setAttrs(span, { 'gen_ai.request.max_tokens': r.outputLimit, 'gen_ai.request.stream': body.stream === true });
  relay(ctx, res, route, r, headers, out, { chat: bounds.chat, choices: bounds.choices, stripUsage, requestBytes: raw.length }, span);
  return true;
}

/** Sends the rewritten request upstream and relays the answer, settling `r` exactly once. */
function relay(ctx: GatewayContext, res: ServerResponse, route: Route, r: Reservation, headers: OutgoingHttpHeaders, out: Buffer, o: { chat: boolean; choices: number; stripUsage: boolean; requestBytes: number }, span?: Span): void {
  ctx.inflight++;
  let done = false;
  let clientGone = false;
  let drainTimer: NodeJS.Timeout | null = null;
  const finish = (usage: Usage | null, unreconciled: boolean, reason?: string) => {
    if (done) return;
    done = true;
    ctx.inflight--;
    if (drainTimer) clearTimeout(drainTimer);
    const u = usage ?? { ...NO_USAGE };
    const cost = ctx.budget.settle(r, u, unreconciled, reason);
    if (span) {
      setAttrs(span, { 'gen_ai.usage.input_tokens': u.inputTokens, 'gen_ai.usage.output_tokens': u.outputTokens, 'atelier.gen_ai.cost_micros': cost, 'atelier.gen_ai.unreconciled': unreconciled, 'http.response.status_code': status });
      if (usage === null || unreconciled) failSpan(span, null, reason ? 'upstream_incomplete' : 'unreconciled');
      span.end();
    }
  };
  let status = 0;
  const estimate = (outputTokens: number): Usage => estimateUsage(r, o.requestBytes, outputTokens);

  const up = (route.https ? httpsRequest : httpRequest)(route.url, { method: 'POST', agent: route.agent, headers });
  let sent = false;
  up.on('finish', () => (sent = true));
  res.on('close', () => {
    if (res.writableFinished) return;
    clientGone = true;
    if (!done) drainTimer = setTimeout(() => up.destroy(new Error('drain bound reached')), ctx.drainMs);
  });

  let responded = false;
  up.on('error', (err: NodeJS.ErrnoException) => {
    if (done || responded) return; // after the response started, its own close handler settles
    if (!sent) finish(null, false, 'upstream unreachable');
    else finish(estimate(0), true, 'upstream failed before responding');
    if (!clientGone) sendError(res, 502, 'upstream_unreachable', `the provider could not be reached (${err.code ?? err.message})`);
  });

  up.on('response', (ur) => {
    responded = true;
    ur.on('error', () => undefined); // a cut shows up as close without end
    const st = ur.statusCode ?? 502;
    status = st;
    if (st >= 300 && st < 400) {
      // Never follow a redirect, and never hand one to the client (its client would follow it with the lease token).
      ur.resume();
      finish(null, false, 'upstream redirect refused');
      return sendError(res, 502, 'upstream_redirect_refused', `the provider answered ${st} (a redirect); the gateway never follows redirects with a key`);
    }
    // The provider's status and headers are relayed only as node can write them: its parser takes
    // any three digits (`HTTP/1.1 042`), which writeHead refuses with a throw in this callback, and
    // the gateway would end. Anything else is a 502 to this request.
    const unrelayable = (why: string): void => {
      ur.resume();
      finish(null, false, why);
      sendError(res, 502, 'upstream_invalid_response', `the provider's answer cannot be relayed (${why})`);
    };
    if (st < 200 || st > 599) return unrelayable(`status ${st}`);
    const ok = st >= 200 && st < 300;
    const sse = String(ur.headers['content-type'] ?? '').includes('text/event-stream');
    const h: OutgoingHttpHeaders = {};
    for (const [k, v] of Object.entries(ur.headers)) if (v !== undefined && !HOP_HEADERS.has(k)) h[k] = v;
    if (sse) delete h['content-length'];
    if (!clientGone) {
      try {
        res.writeHead(st, h);
      } catch (err) {
        return unrelayable(`its headers: ${(err as NodeJS.ErrnoException).code ?? 'invalid'}`);
      }
    }

    if (sse) {
      const meter = new SseMeter(r.outputLimit, o.choices, o.stripUsage);
      ur.on('data', (chunk: Buffer) => {
        const { forward, overrun } = meter.push(chunk);
        if (overrun) {
          if (done) return;
          if (!clientGone) {
            for (const p of forward) res.write(p);
            res.end(overrunEvent(o.chat, r.outputLimit));
          }
          finish({ ...estimate(0), outputTokens: meter.deltas }, true, `provider overran the output limit of ${r.outputLimit} tokens; the gateway cut the stream`);
          ur.destroy();
          return;
        }
        if (!clientGone) for (const p of forward) res.write(p);
        else if (meter.usage) ur.destroy(); // the client is gone and the usage is in: stop reading
      });
      ur.on('end', () => {
        const tail = meter.end();
        if (tail && !clientGone) res.write(tail);
        if (meter.usage) finish(meter.usage, false);
        else if (ok) finish(estimate(meter.deltas), true, 'stream ended without usage');
        else finish(null, false, `provider error ${st}`);
        if (!clientGone) res.end();
      });
      ur.on('close', () => {
        if (done) return;
        if (meter.usage) finish(meter.usage, false);
        else finish(estimate(meter.deltas), true, clientGone ? 'client disconnected; usage not received within the bound' : 'stream cut before its usage arrived');
        if (!clientGone) res.destroy();
      });
    } else {
      const meter = new BodyMeter();
      ur.on('data', (chunk: Buffer) => {
        meter.push(chunk);
        if (!clientGone) res.write(chunk);
      });
      ur.on('end', () => {
        const usage = meter.finish();
        if (usage) finish(usage, false);
        else if (ok) finish(estimate(Math.ceil(meter.keptBytes / 4)), true, 'response without usage');
        else finish(null, false, `provider error ${st}`);
        if (!clientGone) res.end();
      });
      ur.on('close', () => {
        if (done) return;
        finish(estimate(Math.ceil(meter.keptBytes / 4)), true, 'response cut before its usage arrived');
        if (!clientGone) res.destroy();
      });
    }
  });
  up.end(out);
}
