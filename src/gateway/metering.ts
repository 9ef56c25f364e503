/**
 * Metering: what one request may cost before it is sent (its input bound and requested output),
 * the rewrite that holds the provider to the reservation (model, clamped output limit, usage in
 * streams), the estimate when a provider reports no usage, and the meters that read usage out of a
 * relayed answer and detect a provider that overruns the clamp. Pure: no sockets, no clock. The
 * reservation maths itself (what fits the budgets and policies) is Budget.reserve (./budget.ts);
 * docs/spend.md has the rules.
 */
import type { Usage } from '../core/pricing.js';
import type { ApiMode } from '../core/providers.js';
import { INPUT_PER_ITEM_ALLOWANCE, INPUT_TEMPLATE_ALLOWANCE, STREAM_DELTA_SLACK, type Lease, type Reservation } from './budget.js';
import { eventEnd, findUsage, hasUsageKey, isUsageOnlyChunk } from './usage.js';

const OPAQUE_KEYS = new Set(['image_url', 'file_id', 'file_data', 'file_url', 'input_audio', 'audio']);

/** True when a request body refers to content whose token count its bytes do not bound (images, files, audio, server-side state). */
export function hasOpaqueInput(v: unknown, depth = 0): boolean {
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

export interface RequestBounds {
  chat: boolean;
  /** Choices asked for (Chat Completions `n`), at least 1. */
  choices: number;
  /** Output tokens the request itself asks for (all choices), or null when it sets no limit. */
  requestedOutput: number | null;
  /** True when the input's token count is not bounded by its bytes (images, files, server-side state). */
  opaque: boolean;
  /** Input tokens to reserve. */
  inputBound: number;
}

/**
 * The bounds of one request before it is sent. Output: from the request (clamped later by the
 * reservation). Input: a token is at least one byte, so the request's bytes plus the template
 * allowances bound it; when the input is opaque, the whole input room left on the lease (at least 1).
 */
export function requestBounds(body: Record<string, unknown>, bodyBytes: number, mode: ApiMode, lease: Pick<Lease, 'budgets' | 'usedIn' | 'resIn'>): RequestBounds {
  const chat = mode === 'chat-completions';
  const choices = chat && Number.isSafeInteger(body.n) && (body.n as number) > 1 ? (body.n as number) : 1;
  const reqOutRaw = chat ? (body.max_completion_tokens ?? body.max_tokens) : body.max_output_tokens;
  const requestedOutput = typeof reqOutRaw === 'number' && Number.isSafeInteger(reqOutRaw) && reqOutRaw > 0 ? reqOutRaw * choices : null;
  const opaque = (!chat && (body.previous_response_id != null || body.conversation != null || body.prompt != null)) || hasOpaqueInput(chat ? body.messages : body.input) || hasOpaqueInput(body.tools);
  const inRoom = lease.budgets.maxInputTokens - lease.usedIn - lease.resIn;
  const items = chat ? (Array.isArray(body.messages) ? body.messages.length : 0) : Array.isArray(body.input) ? body.input.length : 1;
  const inputBound = opaque ? Math.max(1, inRoom) : bodyBytes + INPUT_TEMPLATE_ALLOWANCE + INPUT_PER_ITEM_ALLOWANCE * items;
  return { chat, choices, requestedOutput, opaque, inputBound };
}

/**
 * Rewrites a request body in place for the provider: the route's model, the output limit clamped
 * to the reservation (split over the choices; the field the caller used, else
 * max_completion_tokens / max_output_tokens), and usage requested in Chat Completions streams.
 * Returns whether the usage-only chunk must be stripped from the relayed stream (the caller did
 * not ask for it).
 */
export function rewriteForProvider(body: Record<string, unknown>, model: string, mode: ApiMode, outputLimit: number, choices: number): { stripUsage: boolean } {
  body.model = model;
  const perChoice = Math.max(1, Math.floor(outputLimit / choices));
  let stripUsage = false;
  if (mode === 'chat-completions') {
    if (body.max_tokens !== undefined && body.max_completion_tokens === undefined) body.max_tokens = perChoice;
    else body.max_completion_tokens = perChoice;
    if (body.stream === true) {
      const so = (body.stream_options && typeof body.stream_options === 'object' ? body.stream_options : {}) as Record<string, unknown>;
      stripUsage = so.include_usage !== true;
      body.stream_options = { ...so, include_usage: true };
    }
  } else body.max_output_tokens = outputLimit;
  return { stripUsage };
}

export const NO_USAGE: Usage = Object.freeze({ inputTokens: 0, cachedInputTokens: 0, cacheWriteTokens: 0, outputTokens: 0, reasoningTokens: 0 });

/**
 * The usage recorded (as unreconciled) when the provider reports none: input at a quarter of the
 * request's bytes, output as counted, each capped by what the reservation allowed.
 */
export function estimateUsage(r: Pick<Reservation, 'inputBound' | 'outputLimit'>, requestBytes: number, outputTokens: number): Usage {
  return {
    inputTokens: Math.min(r.inputBound, Math.ceil(requestBytes / 4)),
    cachedInputTokens: 0,
    cacheWriteTokens: 0,
    outputTokens: Math.min(r.outputLimit, outputTokens),
    reasoningTokens: 0,
  };
}

/** The overrun rule of a stream: more delta events than the clamped limit plus a slack per choice. */
export function streamOverrun(deltas: number, outputLimit: number, choices: number): boolean {
  return deltas > outputLimit + STREAM_DELTA_SLACK * choices;
}

/** The last SSE event of a stream the gateway cut for a provider overrun: an error the openai client raises. */
export function overrunEvent(chat: boolean, limit: number): string {
  const message = `the provider passed the output limit of ${limit} tokens the gateway set; the stream was cut, the true cost recorded and this agent's lease ended`;
  return chat
    ? `data: ${JSON.stringify({ error: { message, type: 'provider_overrun', code: 'provider_overrun', param: null } })}\n\n`
    : `event: error\ndata: ${JSON.stringify({ type: 'error', code: 'provider_overrun', message, param: null })}\n\n`;
}

/**
 * Meters a streamed (SSE) answer as it is relayed, without re-encoding it: cuts it into whole
 * events, counts delta events, keeps the last usage seen, drops the usage-only chunk the caller
 * did not ask for, and reports an overrun once the delta count passes the rule. Bytes of an
 * incomplete event wait for the next chunk.
 */
export class SseMeter {
  usage: Usage | null = null;
  deltas = 0;
  /** Set once an overrun was reported; nothing is metered after it. */
  overran = false;
  private pending: Buffer | null = null;

  constructor(
    private readonly outputLimit: number,
    private readonly choices: number,
    private readonly stripUsage: boolean,
  ) {}

  /** The bytes to relay for one chunk; `overrun` when the stream must be cut after them. */
  push(chunk: Buffer): { forward: Buffer[]; overrun: boolean } {
    if (this.overran) return { forward: [], overrun: false };
    const buf = this.pending ? Buffer.concat([this.pending, chunk]) : chunk;
    let pos = 0;
    let keepFrom = 0;
    const forward: Buffer[] = [];
    for (let end = eventEnd(buf, 0); end > 0; end = eventEnd(buf, pos)) {
      const ev = buf.subarray(pos, end);
      if (ev.indexOf('"delta"') >= 0 && streamOverrun(++this.deltas, this.outputLimit, this.choices)) {
        // The provider ignores the clamped output limit: stop relaying and stop paying (docs/spend.md).
        if (pos > keepFrom) forward.push(buf.subarray(keepFrom, pos));
        this.overran = true;
        this.pending = null;
        return { forward, overrun: true };
      }
      if (hasUsageKey(ev)) {
        const u = findUsage(ev);
        if (u) {
          this.usage = u;
          if (this.stripUsage && isUsageOnlyChunk(ev)) {
            if (pos > keepFrom) forward.push(buf.subarray(keepFrom, pos));
            keepFrom = end;
          }
        }
      }
      pos = end;
    }
    if (pos > keepFrom) forward.push(buf.subarray(keepFrom, pos));
    this.pending = pos < buf.length ? buf.subarray(pos) : null;
    return { forward, overrun: false };
  }

  /** At the end of the stream: the bytes of a last event without its blank line (relayed as they are), reading usage from them too. */
  end(): Buffer | null {
    const tail = this.pending;
    this.pending = null;
    if (tail) {
      const u = hasUsageKey(tail) ? findUsage(tail) : null;
      if (u) this.usage = u;
    }
    return tail;
  }
}

/** At most this much of a non-streamed answer is kept to read its usage from (the usage object comes last). */
export const BODY_METER_KEEP = 16 * 1024 * 1024;

/** Meters a non-streamed answer: keeps its last chunks (at most `keep` bytes, but always the last chunk) and reads the usage at the end. */
export class BodyMeter {
  /** Bytes kept (the estimate of an answer without usage counts these). */
  keptBytes = 0;
  private readonly chunks: Buffer[] = [];

  constructor(private readonly keep = BODY_METER_KEEP) {}

  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.keptBytes += chunk.length;
    while (this.keptBytes > this.keep && this.chunks.length > 1) this.keptBytes -= this.chunks.shift()!.length;
  }

  /** The usage in the kept bytes, or null. */
  finish(): Usage | null {
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    return hasUsageKey(all) ? findUsage(all) : null;
  }
}
