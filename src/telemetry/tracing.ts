/**
 * OpenTelemetry traces (issue #35 item 4; docs/operations.md "Traces").
 *
 * Off unless --otlp-traces-endpoint (ATELIER_OTLP_TRACES_ENDPOINT) is set: then no SDK module is
 * even loaded, every helper here returns at its first line (`enabled` is false) and the API stays
 * the no-op one. On: a NodeTracerProvider (AsyncLocalStorage context, W3C trace context), spans
 * batched and sent by OTLP/HTTP (JSON) to the endpoint. The runner, the gateway child
 * (src/gateway/main.ts) and nothing else start it; agent runtimes, sandboxed with no network, carry
 * the context into their gateway requests (`traceparent`) and report their turns' span ids, which
 * the runner records (src/services/agents/agents.ts).
 *
 * Attributes: only ids, names, codes, counts and durations. `attrs()` is the one way attributes are
 * set here; it keeps only keys of the allowed prefixes and drops any string that looks like a
 * credential (a bearer, a lease, an atelier token, a key), so a careless caller cannot leak one.
 */
import { ROOT_CONTEXT, context, propagation, trace, SpanKind, SpanStatusCode, type Context, type Span, type Attributes } from '@opentelemetry/api';

export { SpanKind } from '@opentelemetry/api';
export type { Span, Context } from '@opentelemetry/api';

let enabled = false;
let shutdownHook: (() => Promise<void>) | null = null;
/** A span id the next started span takes (an agent turn whose id the runtime chose): see forcedSpanId. */
let forcedSpanId: string | null = null;

const TRACER = 'atelier';

export function tracingEnabled(): boolean {
  return enabled;
}

export interface TracingOptions {
  /** OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces. */
  endpoint: string;
  serviceName: string;
  serviceVersion: string;
  /** Extra resource attributes (service.instance.id ...). */
  resource?: Record<string, string>;
}

/** Starts the SDK (once per process). Loaded on demand so an instance without tracing loads none of it. */
export async function startTracing(opts: TracingOptions): Promise<void> {
  if (enabled || !opts.endpoint) return;
  const [{ NodeTracerProvider }, { BatchSpanProcessor, RandomIdGenerator }, { OTLPTraceExporter }, { resourceFromAttributes }] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
  ]);
  const random = new RandomIdGenerator();
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': opts.serviceName, 'service.version': opts.serviceVersion, ...opts.resource }),
    idGenerator: {
      generateTraceId: () => random.generateTraceId(),
      generateSpanId: () => {
        const forced = forcedSpanId;
        forcedSpanId = null;
        return forced ?? random.generateSpanId();
      },
    },
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: opts.endpoint }), { scheduledDelayMillis: 1000, maxQueueSize: 4096 })],
  });
  provider.register();
  enabled = true;
  shutdownHook = async () => {
    await provider.forceFlush().catch(() => undefined);
    await provider.shutdown().catch(() => undefined);
  };
}

/** Sends what is batched and stops (at shutdown). */
export async function stopTracing(): Promise<void> {
  const h = shutdownHook;
  shutdownHook = null;
  enabled = false;
  if (h) await h();
}

// ---------- attributes ----------

/** Attribute keys may start with these only (OTel semantic conventions, and atelier.*). */
const ALLOWED_PREFIXES = ['atelier.', 'gen_ai.', 'mcp.', 'rpc.', 'error.', 'server.', 'network.', 'http.', 'vcs.', 'jsonrpc.'];
/** Strings that look like a credential never become an attribute value. */
const CREDENTIAL = /(\b(atlg?_|sk-|gh[opsur]_|github_pat_|glpat-|xox[abp]-)|Bearer\s|Basic\s|-----BEGIN|[A-Za-z0-9_+/=-]{40,})/;
const MAX_STRING = 256;

/** Filters attributes to the allowed, credential-free, short form. */
export function attrs(input: Record<string, string | number | boolean | undefined | null>): Attributes {
  const out: Attributes = {};
  for (const [k, v] of Object.entries(input)) {
    if (v === undefined || v === null) continue;
    if (!ALLOWED_PREFIXES.some((p) => k.startsWith(p))) continue;
    if (typeof v === 'string') {
      if (CREDENTIAL.test(v)) continue;
      out[k] = v.length > MAX_STRING ? v.slice(0, MAX_STRING) : v;
    } else out[k] = v;
  }
  return out;
}

// ---------- spans ----------

export interface SpanOptions {
  kind?: SpanKind;
  attributes?: Record<string, string | number | boolean | undefined | null>;
  /** Parent: this context instead of the active one. */
  parent?: Context;
}

/** Runs fn inside a new span (child of the active one); ends it with fn, status ERROR when it throws. */
export function inSpan<T>(name: string, opts: SpanOptions, fn: (span: Span | undefined) => Promise<T> | T): Promise<T> {
  // Off: no promise of its own, no await (bench/telemetry.mjs measures what is left).
  if (!enabled) {
    const r = fn(undefined);
    return r instanceof Promise ? r : Promise.resolve(r);
  }
  return traced(name, opts, fn);
}

async function traced<T>(name: string, opts: SpanOptions, fn: (span: Span | undefined) => Promise<T> | T): Promise<T> {
  const tracer = trace.getTracer(TRACER);
  const parent = opts.parent ?? context.active();
  const span = tracer.startSpan(name, { kind: opts.kind ?? SpanKind.INTERNAL, attributes: opts.attributes ? attrs(opts.attributes) : undefined }, parent);
  try {
    return await context.with(trace.setSpan(parent, span), () => fn(span));
  } catch (e) {
    failSpan(span, e);
    throw e;
  } finally {
    span.end();
  }
}

/** Starts a span that the caller ends (a span that outlives the call that started it: an agent run). */
export function startSpan(name: string, opts: SpanOptions & { spanId?: string; startTime?: number } = {}): Span | undefined {
  if (!enabled) return undefined;
  const tracer = trace.getTracer(TRACER);
  if (opts.spanId && /^[0-9a-f]{16}$/.test(opts.spanId) && !/^0+$/.test(opts.spanId)) forcedSpanId = opts.spanId;
  try {
    return tracer.startSpan(name, { kind: opts.kind ?? SpanKind.INTERNAL, attributes: opts.attributes ? attrs(opts.attributes) : undefined, startTime: opts.startTime }, opts.parent ?? context.active());
  } finally {
    forcedSpanId = null;
  }
}

/** Sets attributes on a span (filtered as attrs()). */
export function setAttrs(span: Span | undefined, input: Record<string, string | number | boolean | undefined | null>): void {
  if (span) span.setAttributes(attrs(input));
}

/** Marks a span failed with an error type (a ServiceError code, or the error's class), never its message. */
export function failSpan(span: Span | undefined, e: unknown, type?: string): void {
  if (!span) return;
  const code = type ?? ((e as { code?: unknown })?.code && typeof (e as { code?: unknown }).code === 'string' ? String((e as { code: string }).code) : ((e as Error)?.name ?? 'Error'));
  span.setAttributes(attrs({ 'error.type': code }));
  span.setStatus({ code: SpanStatusCode.ERROR, message: code });
}

/** Runs fn with span as the active span (when tracing is on and there is one). */
export function withSpanContext<T>(span: Span | undefined, fn: () => T): T {
  if (!enabled || !span) return fn();
  return context.with(trace.setSpan(context.active(), span), fn);
}

// ---------- propagation ----------

const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/**
 * The context carried by a request: its `_meta` (SEP-414: traceparent, tracestate) when it has a
 * valid traceparent, else the HTTP headers', else the active one. A malformed value is ignored.
 */
export function extractContext(carriers: Array<Record<string, unknown> | undefined>, base: Context = context.active()): Context {
  if (!enabled) return base;
  for (const c of carriers) {
    if (!c) continue;
    const tp = c.traceparent;
    if (typeof tp !== 'string' || !TRACEPARENT.test(tp.trim().toLowerCase())) continue;
    const carrier: Record<string, string> = { traceparent: tp.trim().toLowerCase() };
    if (typeof c.tracestate === 'string' && c.tracestate.length <= 512) carrier.tracestate = c.tracestate;
    return propagation.extract(base, carrier);
  }
  return base;
}

/** Runs fn in the context of a request's carriers (see extractContext). */
export function withExtracted<T>(carriers: Array<Record<string, unknown> | undefined>, fn: () => T): T {
  if (!enabled) return fn();
  return context.with(extractContext(carriers), fn);
}

/** The `traceparent` (and `tracestate`) of the active span (or of `span`), for a request to another process; {} when off. */
export function injectHeaders(span?: Span): Record<string, string> {
  if (!enabled) return {};
  const out: Record<string, string> = {};
  const ctx = span ? trace.setSpan(context.active(), span) : context.active();
  propagation.inject(ctx, out);
  return out;
}

/** A synchronous step as a child span (the registry's steps); just fn() when tracing is off. */
export function stepSpan<T>(name: string, fn: () => T): T {
  if (!enabled) return fn();
  const span = trace.getTracer(TRACER).startSpan(name, { kind: SpanKind.INTERNAL });
  try {
    return context.with(trace.setSpan(context.active(), span), fn);
  } catch (e) {
    failSpan(span, e);
    throw e;
  } finally {
    span.end();
  }
}

/** Whether a recording span is active (a daemon request outside any call, a health ping, is not traced). */
export function inTrace(): boolean {
  return enabled && trace.getSpan(context.active())?.isRecording() === true;
}

/**
 * A decision with no call to hang from (an egress proxy's verdict on a connection a sandbox
 * opened): one short span of its own trace, never a child of whatever context the listener
 * happened to be created in.
 */
export function recordDecision(name: string, attributes: Record<string, string | number | boolean | undefined | null>, failed?: string): void {
  if (!enabled) return;
  const span = trace.getTracer(TRACER).startSpan(name, { kind: SpanKind.INTERNAL, attributes: attrs(attributes) }, ROOT_CONTEXT);
  if (failed) span.setStatus({ code: SpanStatusCode.ERROR, message: failed });
  span.end();
}

/** The context whose active span is `span` (the active context when there is none). */
export function contextOf(span: Span | undefined): Context {
  return span ? trace.setSpan(context.active(), span) : context.active();
}
