/**
 * Reads token usage out of provider bytes without re-encoding them: finds the last "usage" key in a
 * buffer, matches its object and parses only that. Works on non-streamed bodies and single SSE
 * events alike (Chat Completions and Responses shapes).
 */
import type { Usage } from '../core/pricing.js';

const USAGE_KEY = Buffer.from('"usage"');
const Q = 0x22;
const BS = 0x5c;

const num = (v: unknown): number => (typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : 0);

/** Normalises a Chat Completions or Responses usage object; null when it carries no token counts. */
export function normaliseUsage(u: unknown): Usage | null {
  if (!u || typeof u !== 'object') return null;
  const o = u as Record<string, any>;
  const chat = 'prompt_tokens' in o || 'completion_tokens' in o;
  const resp = 'input_tokens' in o || 'output_tokens' in o;
  if (!chat && !resp) return null;
  const inDet = (chat ? o.prompt_tokens_details : o.input_tokens_details) ?? {};
  const outDet = (chat ? o.completion_tokens_details : o.output_tokens_details) ?? {};
  return {
    inputTokens: num(chat ? o.prompt_tokens : o.input_tokens),
    cachedInputTokens: num(inDet.cached_tokens),
    cacheWriteTokens: num(inDet.cache_write_tokens) || num(inDet.cache_creation_tokens) || num(o.cache_creation_input_tokens),
    outputTokens: num(chat ? o.completion_tokens : o.output_tokens),
    reasoningTokens: num(outDet.reasoning_tokens),
  };
}

/** End (exclusive) of the JSON object starting at `start` ('{'), or -1. */
function matchObject(buf: Buffer, start: number, end: number): number {
  let depth = 0;
  let inStr = false;
  for (let i = start; i < end; i++) {
    const c = buf[i]!;
    if (inStr) {
      if (c === BS) i++;
      else if (c === Q) inStr = false;
    } else if (c === Q) inStr = true;
    else if (c === 0x7b) depth++;
    else if (c === 0x7d) {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

/** The last non-null usage object in buf[0..end), or null. */
export function findUsage(buf: Buffer, end = buf.length): Usage | null {
  let at = buf.lastIndexOf(USAGE_KEY, end - USAGE_KEY.length);
  while (at >= 0) {
    if (at === 0 || buf[at - 1] !== BS) {
      let i = at + USAGE_KEY.length;
      while (i < end && (buf[i] === 0x20 || buf[i] === 0x0a || buf[i] === 0x0d || buf[i] === 0x09)) i++;
      if (buf[i] === 0x3a) {
        i++;
        while (i < end && (buf[i] === 0x20 || buf[i] === 0x0a || buf[i] === 0x0d || buf[i] === 0x09)) i++;
        if (buf[i] === 0x7b) {
          const close = matchObject(buf, i, end);
          if (close > 0) {
            try {
              const u = normaliseUsage(JSON.parse(buf.toString('utf8', i, close)));
              if (u) return u;
            } catch {
              /* not JSON: keep looking */
            }
          }
        }
      }
    }
    at = at === 0 ? -1 : buf.lastIndexOf(USAGE_KEY, at - 1);
  }
  return null;
}

export function hasUsageKey(buf: Buffer): boolean {
  return buf.indexOf(USAGE_KEY) >= 0;
}

/**
 * End offset (exclusive) of the first complete SSE event in buf at or after `from` (an event ends
 * with a blank line: LF LF, or CRLF CRLF), or -1.
 */
export function eventEnd(buf: Buffer, from: number): number {
  let i = buf.indexOf(0x0a, from);
  while (i >= 0 && i + 1 < buf.length) {
    const n = buf[i + 1];
    if (n === 0x0a) return i + 2;
    if (n === 0x0d && buf[i + 2] === 0x0a) return i + 3;
    i = buf.indexOf(0x0a, i + 1);
  }
  return -1;
}

/** The concatenated data: lines of one SSE event. */
export function eventData(ev: Buffer): string {
  const s = ev.toString('utf8');
  let out = '';
  for (const line of s.split(/\r?\n/)) {
    if (line.startsWith('data:')) out += (out ? '\n' : '') + line.slice(line[5] === ' ' ? 6 : 5);
  }
  return out;
}

/**
 * True when the event is the Chat Completions usage-only chunk (choices empty, usage set): the one
 * the gateway asked for on the caller's behalf and strips when the caller did not ask for it.
 */
export function isUsageOnlyChunk(ev: Buffer): boolean {
  try {
    const j = JSON.parse(eventData(ev)) as { choices?: unknown[]; usage?: unknown };
    return Array.isArray(j.choices) && j.choices.length === 0 && j.usage !== null && typeof j.usage === 'object';
  } catch {
    return false;
  }
}
