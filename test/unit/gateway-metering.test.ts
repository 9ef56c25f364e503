import { describe, expect, it } from 'vitest';
import { effectivePrices, type EffectivePrices } from '../../src/core/pricing.js';
import { Budget, INPUT_PER_ITEM_ALLOWANCE, INPUT_TEMPLATE_ALLOWANCE, STREAM_DELTA_SLACK } from '../../src/gateway/budget.js';
import { BodyMeter, estimateUsage, hasOpaqueInput, overrunEvent, requestBounds, rewriteForProvider, SseMeter, streamOverrun } from '../../src/gateway/metering.js';
import { upstreamHeaders } from '../../src/gateway/proxy.js';

const lease = (maxInputTokens = 1_000_000) => ({ budgets: { maxInputTokens, maxOutputTokens: 1_000_000, maxCostMicros: 1_000_000 }, usedIn: 0, resIn: 0 });
const sse = (obj: unknown) => `data: ${JSON.stringify(obj)}\n\n`;
const chatDelta = (text: string) => sse({ choices: [{ index: 0, delta: { content: text } }] });
const usageChunk = sse({ choices: [], usage: { prompt_tokens: 11, completion_tokens: 3 } });

describe('request bounds', () => {
  it('input: the request bytes plus the template allowance and one per message; output: max_completion_tokens times n', () => {
    const body = { messages: [{ role: 'user', content: 'hi' }, { role: 'user', content: 'there' }], max_completion_tokens: 50, n: 3 };
    const b = requestBounds(body, 200, 'chat-completions', lease());
    expect(b).toEqual({ chat: true, choices: 3, requestedOutput: 150, opaque: false, inputBound: 200 + INPUT_TEMPLATE_ALLOWANCE + 2 * INPUT_PER_ITEM_ALLOWANCE });
    expect(requestBounds({ messages: [], max_tokens: 7 }, 10, 'chat-completions', lease()).requestedOutput).toBe(7);
    // max_completion_tokens wins over max_tokens.
    expect(requestBounds({ max_tokens: 7, max_completion_tokens: 9 }, 10, 'chat-completions', lease()).requestedOutput).toBe(9);
  });

  it('Responses: max_output_tokens, n ignored, a string input counts as one item', () => {
    const b = requestBounds({ input: 'hello', max_output_tokens: 40, n: 5 }, 100, 'responses', lease());
    expect(b).toEqual({ chat: false, choices: 1, requestedOutput: 40, opaque: false, inputBound: 100 + INPUT_TEMPLATE_ALLOWANCE + INPUT_PER_ITEM_ALLOWANCE });
    expect(requestBounds({ input: [1, 2, 3, 4] }, 100, 'responses', lease()).inputBound).toBe(100 + INPUT_TEMPLATE_ALLOWANCE + 4 * INPUT_PER_ITEM_ALLOWANCE);
  });

  it('hostile output limits are no limit (the budget clamps instead)', () => {
    for (const v of [0, -5, 1.5, '100', null, 2 ** 60, Infinity, NaN, { a: 1 }]) {
      expect(requestBounds({ max_completion_tokens: v }, 10, 'chat-completions', lease()).requestedOutput).toBeNull();
      expect(requestBounds({ max_output_tokens: v }, 10, 'responses', lease()).requestedOutput).toBeNull();
    }
    for (const n of [0, 1, -3, 2.5, '4', 2 ** 60]) expect(requestBounds({ n, max_tokens: 10 }, 10, 'chat-completions', lease()).choices).toBe(1);
  });

  it('opaque input (images, files, audio, server-side state) reserves the whole input room left', () => {
    const room = { budgets: { maxInputTokens: 5000, maxOutputTokens: 1, maxCostMicros: 1 }, usedIn: 1000, resIn: 500 };
    const img = { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:...' } }] }] };
    expect(requestBounds(img, 100, 'chat-completions', room)).toMatchObject({ opaque: true, inputBound: 3500 });
    expect(requestBounds({ input: 'x', previous_response_id: 'resp_1' }, 10, 'responses', room)).toMatchObject({ opaque: true, inputBound: 3500 });
    expect(requestBounds({ input: 'x', conversation: 'c' }, 10, 'responses', room).opaque).toBe(true);
    // previous_response_id means nothing to Chat Completions.
    expect(requestBounds({ messages: [], previous_response_id: 'r' }, 10, 'chat-completions', room).opaque).toBe(false);
    // An exhausted room still reserves at least one token (the budget then refuses).
    expect(requestBounds(img, 100, 'chat-completions', { ...room, usedIn: 5000 }).inputBound).toBe(1);
  });

  it('finds opaque content at any depth up to the bound, in tools too, and survives hostile nesting', () => {
    expect(hasOpaqueInput([{ content: [{ type: 'input_file', file_id: 'f' }] }])).toBe(true);
    expect(hasOpaqueInput([{ type: 'input_audio' }])).toBe(true);
    expect(hasOpaqueInput([{ role: 'user', content: 'an image of a file' }])).toBe(false);
    expect(requestBounds({ messages: [], tools: [{ type: 'function', function: { parameters: { properties: { audio: {} } } } }] }, 10, 'chat-completions', lease()).opaque).toBe(true);
    let deep: unknown = { image_url: 'x' };
    for (let i = 0; i < 10_000; i++) deep = [deep];
    expect(hasOpaqueInput(deep)).toBe(false); // beyond depth 64: not searched, and no stack overflow
    let shallow: unknown = { image_url: 'x' };
    for (let i = 0; i < 30; i++) shallow = { a: [shallow] };
    expect(hasOpaqueInput(shallow)).toBe(true);
  });
});

describe('the rewrite for the provider', () => {
  it('sets the route model and the clamped limit per choice in the field the caller used', () => {
    const a: Record<string, unknown> = { model: 'whatever', max_tokens: 9999, n: 3, messages: [] };
    expect(rewriteForProvider(a, 'm-1', 'chat-completions', 100, 3)).toEqual({ stripUsage: false });
    expect(a).toMatchObject({ model: 'm-1', max_tokens: 33 });
    expect(a.max_completion_tokens).toBeUndefined();
    const b: Record<string, unknown> = { messages: [] };
    rewriteForProvider(b, 'm-1', 'chat-completions', 2, 5);
    expect(b.max_completion_tokens).toBe(1); // never 0
    const c: Record<string, unknown> = { input: 'x', max_output_tokens: 1e9 };
    rewriteForProvider(c, 'm-2', 'responses', 64, 1);
    expect(c).toEqual({ input: 'x', max_output_tokens: 64, model: 'm-2' });
  });

  it('asks for usage in a Chat Completions stream, and strips it from the relay only when the caller did not ask', () => {
    const a: Record<string, unknown> = { stream: true, stream_options: { foo: 1 } };
    expect(rewriteForProvider(a, 'm', 'chat-completions', 10, 1)).toEqual({ stripUsage: true });
    expect(a.stream_options).toEqual({ foo: 1, include_usage: true });
    const b: Record<string, unknown> = { stream: true, stream_options: { include_usage: true } };
    expect(rewriteForProvider(b, 'm', 'chat-completions', 10, 1)).toEqual({ stripUsage: false });
    const c: Record<string, unknown> = { stream: true, stream_options: 'junk' };
    expect(rewriteForProvider(c, 'm', 'chat-completions', 10, 1)).toEqual({ stripUsage: true });
    expect(c.stream_options).toEqual({ include_usage: true });
    const d: Record<string, unknown> = { stream: 'true' };
    rewriteForProvider(d, 'm', 'chat-completions', 10, 1);
    expect(d.stream_options).toBeUndefined();
  });

  it('sends the agent id in the session header, never the instance header to provider_f', () => {
    const plain = { headers: { authorization: 'Bearer k' }, provider: { sessionHeader: undefined } } as never;
    expect(upstreamHeaders(plain, 12, undefined, true, 'x-session-id', 'agent_1')).toEqual({ authorization: 'Bearer k', 'content-length': 12, accept: 'text/event-stream', 'x-session-id': 'agent_1' });
    expect(upstreamHeaders(plain, 12, 'text/plain', false, null, 'agent_1')).toEqual({ authorization: 'Bearer k', 'content-length': 12, accept: 'text/plain' });
    expect(upstreamHeaders(plain, 1, undefined, false, 'x-provider-f-session', 'a')).not.toHaveProperty('x-provider-f-session');
    const own = { headers: {}, provider: { sessionHeader: 'x-own' } } as never;
    expect(upstreamHeaders(own, 1, undefined, false, 'x-session-id', 'a')).toEqual({ 'content-length': 1, accept: 'application/json', 'x-own': 'a' });
  });
});

describe('usage estimates and the overrun rule', () => {
  it('estimates input at a quarter of the request bytes and output as counted, each capped by the reservation', () => {
    const r = { inputBound: 100, outputLimit: 50 };
    expect(estimateUsage(r, 41, 7)).toEqual({ inputTokens: 11, cachedInputTokens: 0, cacheWriteTokens: 0, outputTokens: 7, reasoningTokens: 0 });
    expect(estimateUsage(r, 10_000, 10_000)).toMatchObject({ inputTokens: 100, outputTokens: 50 });
  });

  it('a stream overruns past the limit plus the delta slack per choice', () => {
    expect(streamOverrun(10 + STREAM_DELTA_SLACK, 10, 1)).toBe(false);
    expect(streamOverrun(11 + STREAM_DELTA_SLACK, 10, 1)).toBe(true);
    expect(streamOverrun(10 + 3 * STREAM_DELTA_SLACK, 10, 3)).toBe(false);
  });

  it('the overrun event is an error each protocol raises', () => {
    const chat = overrunEvent(true, 42);
    expect(chat.endsWith('\n\n')).toBe(true);
    expect(JSON.parse(chat.slice(6))).toMatchObject({ error: { code: 'provider_overrun', type: 'provider_overrun' } });
    const resp = overrunEvent(false, 42);
    expect(resp.startsWith('event: error\ndata: ')).toBe(true);
    expect(JSON.parse(resp.split('\n')[1]!.slice(6))).toMatchObject({ type: 'error', code: 'provider_overrun' });
    expect(resp).toContain('42 tokens');
  });

  it('a settled overrun records the true cost and ends the lease (reservation maths)', () => {
    const prices = effectivePrices({ inputMicrosPerMillionTokens: 1_000_000, outputMicrosPerMillionTokens: 1_000_000, cachedReadMicrosPerMillionTokens: null, cachedWriteMicrosPerMillionTokens: null }, false) as EffectivePrices;
    const b = new Budget();
    const { lease: l } = b.issue({ agentId: 'a', profileId: 'p', revision: 1, budgets: { maxInputTokens: 10_000, maxOutputTokens: 10_000, maxCostMicros: 10_000 }, expiresAt: new Date(Date.now() + 60_000).toISOString() });
    const bounds = requestBounds({ messages: [{ role: 'user', content: 'x' }], max_completion_tokens: 100 }, 60, 'chat-completions', l);
    const r = b.reserve(l, bounds.inputBound, bounds.requestedOutput, prices);
    expect(r.inputBound).toBe(60 + INPUT_TEMPLATE_ALLOWANCE + INPUT_PER_ITEM_ALLOWANCE);
    expect(r.outputLimit).toBe(100);
    expect(r.micros).toBe(r.inputBound + 100);
    const cut = new SseMeter(r.outputLimit, 1, false);
    let overrun = false;
    for (let i = 0; i < 200 && !overrun; i++) overrun = cut.push(Buffer.from(chatDelta('t'))).overrun;
    expect(overrun).toBe(true);
    b.settle(r, { ...estimateUsage(r, 60, 0), outputTokens: cut.deltas }, true, 'cut');
    expect(cut.deltas).toBe(100 + STREAM_DELTA_SLACK + 1);
    expect(l.revoked).toBe(true);
    expect(l.usedOut).toBe(cut.deltas);
    // The true cost (15 estimated input + 109 output) stays under the reserved worst case (204 + 100), so no micros
    // past it, but the output passed the clamp: an overrun all the same, recorded on the settle event.
    expect(l.usedCost).toBe(15 + 100 + STREAM_DELTA_SLACK + 1);
    expect(l.overrunMicros).toBe(0);
    expect(l.revokedReason).toMatch(/provider overrun .*9 output and 0 input tokens past the reservation/);
    const settle = b.events.find((e) => e.type === 'settle');
    expect(settle).toMatchObject({ unreconciled: true, overrun: { micros: 0, outputTokens: STREAM_DELTA_SLACK + 1, inputTokens: 0, leaseRevoked: true } });
    expect(l.resCost).toBe(0);
  });
});

describe('stream meter', () => {
  const all = (m: SseMeter, chunks: string[]) => {
    const out: string[] = [];
    for (const c of chunks) out.push(...m.push(Buffer.from(c)).forward.map((b) => b.toString()));
    const tail = m.end();
    if (tail) out.push(tail.toString());
    return out.join('');
  };

  it('relays whole events unchanged, whatever the chunking, and keeps the last usage', () => {
    const stream = chatDelta('a') + chatDelta('b') + usageChunk + 'data: [DONE]\n\n';
    for (const size of [1, 3, 7, 64, stream.length]) {
      const m = new SseMeter(100, 1, false);
      const chunks: string[] = [];
      for (let i = 0; i < stream.length; i += size) chunks.push(stream.slice(i, i + size));
      expect(all(m, chunks)).toBe(stream);
      expect(m.usage).toEqual({ inputTokens: 11, cachedInputTokens: 0, cacheWriteTokens: 0, outputTokens: 3, reasoningTokens: 0 });
      expect(m.deltas).toBe(2);
    }
  });

  it('strips the usage-only chunk it asked for on the caller\'s behalf, and only that', () => {
    const withUsageInChoice = sse({ choices: [{ index: 0, delta: {} }], usage: { prompt_tokens: 1, completion_tokens: 1 } });
    const m = new SseMeter(100, 1, true);
    const out = all(m, [chatDelta('a'), usageChunk, withUsageInChoice, 'data: [DONE]\n\n']);
    expect(out).toBe(chatDelta('a') + withUsageInChoice + 'data: [DONE]\n\n');
    expect(m.usage).toMatchObject({ inputTokens: 1, outputTokens: 1 });
  });

  it('accepts CRLF event ends and reads usage from a last event without its blank line', () => {
    const m = new SseMeter(100, 1, false);
    const last = 'event: response.completed\r\ndata: {"response":{"usage":{"input_tokens":5,"output_tokens":2}}}';
    expect(all(m, ['event: response.output_text.delta\r\ndata: {"delta":"x"}\r\n\r\n', last])).toContain(last);
    expect(m.usage).toMatchObject({ inputTokens: 5, outputTokens: 2 });
    expect(m.deltas).toBe(1);
  });

  it('cuts at the first event past the rule, relaying what came before it in the chunk, then meters nothing', () => {
    const m = new SseMeter(2, 1, false);
    const many = Array.from({ length: 2 + STREAM_DELTA_SLACK + 5 }, (_, i) => chatDelta(String(i))).join('');
    const r = m.push(Buffer.from(many));
    expect(r.overrun).toBe(true);
    expect(Buffer.concat(r.forward).toString()).toBe(Array.from({ length: 2 + STREAM_DELTA_SLACK }, (_, i) => chatDelta(String(i))).join(''));
    expect(m.deltas).toBe(2 + STREAM_DELTA_SLACK + 1);
    expect(m.push(Buffer.from(chatDelta('late')))).toEqual({ forward: [], overrun: false });
    expect(m.end()).toBeNull();
  });

  it('counts only events that carry a "delta" key: a stream of other events never overruns', () => {
    const m = new SseMeter(1, 1, false);
    const text = sse({ type: 'response.created', note: 'no deltas here' });
    for (let i = 0; i < 50; i++) expect(m.push(Buffer.from(text)).overrun).toBe(false);
    expect(m.deltas).toBe(0);
  });

  it('holds a huge event without a blank line until it ends (nothing relayed half-way)', () => {
    const m = new SseMeter(100, 1, false);
    const big = 'data: ' + 'x'.repeat(1_000_000);
    expect(m.push(Buffer.from(big)).forward).toEqual([]);
    expect(m.push(Buffer.from('\n\n')).forward.map((b) => b.length)).toEqual([big.length + 2]);
  });
});

describe('body meter', () => {
  it('reads the usage of a non-streamed answer from its last bytes', () => {
    const m = new BodyMeter();
    const body = JSON.stringify({ choices: [{ message: { content: 'x' } }], usage: { prompt_tokens: 4, completion_tokens: 2 } });
    for (let i = 0; i < body.length; i += 5) m.push(Buffer.from(body.slice(i, i + 5)));
    expect(m.finish()).toMatchObject({ inputTokens: 4, outputTokens: 2 });
    expect(m.keptBytes).toBe(body.length);
  });

  it('keeps a bounded tail of a huge answer (always the last chunk), and none gives no usage', () => {
    const m = new BodyMeter(100);
    for (let i = 0; i < 50; i++) m.push(Buffer.alloc(60, 0x61));
    expect(m.keptBytes).toBe(60);
    m.push(Buffer.from('{"usage":{"input_tokens":3,"output_tokens":1}}'));
    expect(m.finish()).toMatchObject({ inputTokens: 3, outputTokens: 1 });
    expect(new BodyMeter().finish()).toBeNull();
    const noUsage = new BodyMeter();
    noUsage.push(Buffer.from('{"error":{"message":"usage: none"}}'));
    expect(noUsage.finish()).toBeNull();
  });
});
