/**
 * The model gateway (issue #8) driven as a real `atelier gateway` process with the official openai
 * client, against a scripted fake provider on loopback. Snapshots and leases go through the admin
 * API, as the runner does.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startFakeProvider, type FakeProvider } from '../fixtures/fake-provider.js';
import { PRICES, route, sleep, startGatewayProc, until, type GatewayProc } from './gateway-harness.js';

let gw: GatewayProc;
let fakeA: FakeProvider; // provider_a, provider_b, provider_f, custom all point at loopback fakes
let fakeF: FakeProvider;
let fakeOther: FakeProvider; // "another host" for redirects
let snapshot: Record<string, any>;
const AGENT = 'agent_' + 'a'.repeat(24);

const client = (token: string) => new OpenAI({ baseURL: gw.url + '/v1', apiKey: token, maxRetries: 0 });

beforeAll(async () => {
  [fakeA, fakeF, fakeOther] = await Promise.all([startFakeProvider(), startFakeProvider(), startFakeProvider({ host: 'localhost' })]);
  fakeA.redirectTo = fakeOther.url + '/v1/chat/completions';
  gw = await startGatewayProc({ env: { MODEL_GATEWAY_SESSION_HEADER: 'x-atelier-session' } });
  snapshot = {
    generation: 1,
    providers: { provider_a: { baseUrl: fakeA.url + '/v1' }, provider_b: { baseUrl: fakeA.url + '/b/v1' }, provider_f: { baseUrl: fakeF.url + '/v1' } },
    routes: [
      route('chat-a', 'provider_a', 'chat-completions', 'KEY-A'),
      route('resp-a', 'provider_a', 'responses', 'KEY-A'),
      route('chat-b', 'provider_b', 'chat-completions', 'KEY-B', { credential: { authHeader: 'x-api-key' } }),
      route('chat-f', 'provider_f', 'chat-completions', 'KEY-F'),
      route('resp-f', 'provider_f', 'responses', 'KEY-F'),
      route('custom-x', 'custom', 'chat-completions', 'KEY-C', { upstreamUrl: fakeA.url + '/custom/v1/chat/completions', credential: { authHeader: 'x-api-key' } }),
      route('noprice', 'provider_a', 'chat-completions', 'KEY-A', { pricing: { ...PRICES, outputMicrosPerMillionTokens: null } }),
    ],
    policies: { dailyCapMicros: null, monthlyCapMicros: null, perAgentCapMicros: null },
  };
});

afterAll(async () => {
  await gw?.stop();
  await Promise.all([fakeA?.close(), fakeF?.close(), fakeOther?.close()]);
});

describe('gateway lifecycle and admin API', () => {
  it('after a start it has no profiles and says so; the admin API needs the secret', async () => {
    const st = await gw.admin('GET', '/admin/status');
    expect(st.body).toMatchObject({ noProfilesSinceRestart: true, profileCount: 0, generation: null });
    const noAuth = await fetch(gw.url + '/admin/status');
    expect(noAuth.status).toBe(401);
    const wrong = await fetch(gw.url + '/admin/status', { headers: { authorization: 'Bearer wrong-secret' } });
    expect(wrong.status).toBe(401);
    const pushed = await gw.push(snapshot);
    expect(pushed).toMatchObject({ noProfilesSinceRestart: false, profileCount: 7, generation: 1 });
  });

  it('refuses requests without a valid lease token', async () => {
    await expect(client('atlg_not-a-lease').chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] })).rejects.toMatchObject({ status: 401 });
  });
});

describe('Chat Completions and Responses through the openai client', () => {
  it('chat, not streamed: routes to the profile, sets the model, clamps the output limit, never forwards the lease token', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-a', budgets: { maxOutputTokens: 500 } });
    fakeA.reset();
    const r = await client(l.token).chat.completions.create({ model: 'whatever', messages: [{ role: 'user', content: 'hello' }], max_completion_tokens: 1000 });
    expect(r.choices[0]!.message.content).toBe('w0 w1 w2 w3 ');
    expect(r.usage).toMatchObject({ prompt_tokens: 120, completion_tokens: 30 });
    const rec = fakeA.requests[0]!;
    expect(rec.path).toBe('/v1/chat/completions');
    expect(rec.headers.authorization).toBe('Bearer KEY-A');
    expect(rec.body.model).toBe('model-chat-a');
    expect(rec.body.max_completion_tokens).toBe(500);
    expect(JSON.stringify(rec.headers)).not.toContain(l.token);
    // Metering: 100 uncached at 2, 20 cached at 0.5, 30 output at 8 micro-USD per token = 450.
    const info = await gw.leaseInfo(l.leaseId);
    expect(info.used).toEqual({ inputTokens: 120, outputTokens: 30, costMicros: 450 });
    expect(info.reserved).toEqual({ inputTokens: 0, outputTokens: 0, costMicros: 0 });
  });

  it('chat, streamed: bytes unchanged except the usage chunk the gateway asked for', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-a' });
    for (const callerAsks of [false, true]) {
      fakeA.reset();
      const res = await fetch(gw.url + '/v1/chat/completions', {
        method: 'POST',
        headers: { authorization: `Bearer ${l.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi #deltas=8' }], ...(callerAsks ? { stream_options: { include_usage: true } } : {}) }),
      });
      const got = Buffer.from(await res.arrayBuffer()).toString('utf8');
      const rec = fakeA.requests[0]!;
      expect(rec.body.stream_options).toEqual({ include_usage: true });
      const sent = rec.sent.toString('utf8');
      const usageChunk = sent.split('\n\n').find((e) => e.includes('"choices":[]'))! + '\n\n';
      expect(usageChunk).toContain('"usage":{');
      expect(got).toBe(callerAsks ? sent : sent.replace(usageChunk, ''));
    }
    const info = await gw.leaseInfo(l.leaseId);
    expect(info.used.costMicros).toBe(900);
  });

  it('chat, streamed through the openai client, and tool calls passing through (streamed and not)', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-a' });
    const c = client(l.token);
    const stream = await c.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi #deltas=16' }] });
    let text = '';
    let chunks = 0;
    for await (const ch of stream) {
      chunks++;
      text += ch.choices[0]?.delta?.content ?? '';
      expect(ch.choices.length).toBeGreaterThan(0); // the usage chunk was stripped
    }
    expect(text.split(' ').length).toBe(17);
    expect(chunks).toBe(18);
    const tools = [{ type: 'function' as const, function: { name: 'files_read', parameters: { type: 'object', properties: { path: { type: 'string' } } } } }];
    const t1 = await c.chat.completions.create({ model: 'm', tools, messages: [{ role: 'user', content: 'read #scenario=tool' }] });
    expect(t1.choices[0]!.message.tool_calls![0]).toMatchObject({ id: 'call_1', function: { name: 'files_read', arguments: '{"path":"README.md"}' } });
    expect(fakeA.requests.at(-1)!.body.tools).toEqual(tools);
    const s2 = c.chat.completions.stream({ model: 'm', tools, messages: [{ role: 'user', content: 'read #scenario=tool' }] });
    const final = await s2.finalChatCompletion();
    expect(final.choices[0]!.message.tool_calls![0]!.function).toEqual({ name: 'files_read', arguments: '{"path":"README.md"}' });
  });

  it('responses, streamed and not, with a tool call', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'resp-a' });
    const c = client(l.token);
    fakeA.reset();
    const r = await c.responses.create({ model: 'm', input: 'hello', max_output_tokens: 64 });
    expect(r.output_text).toBe('w0 w1 w2 w3 ');
    expect(fakeA.requests[0]!.path).toBe('/v1/responses');
    expect(fakeA.requests[0]!.body.max_output_tokens).toBe(64);
    const s = await c.responses.create({ model: 'm', input: 'hello #deltas=10', stream: true });
    let text = '';
    let completed: any = null;
    for await (const ev of s) {
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type === 'response.completed') completed = ev.response;
    }
    expect(text.split(' ').length).toBe(11);
    expect(completed.usage.input_tokens).toBe(120);
    const t = await c.responses.create({ model: 'm', input: 'read #scenario=tool', tools: [{ type: 'function', name: 'files_read', parameters: { type: 'object', properties: {} }, strict: false }] });
    expect(t.output[0]).toMatchObject({ type: 'function_call', name: 'files_read', arguments: '{"path":"README.md"}' });
    const info = await gw.leaseInfo(l.leaseId);
    expect(info.used).toEqual({ inputTokens: 360, outputTokens: 90, costMicros: 1350 });
    // A chat call on a responses profile is refused: the profile pins the protocol.
    await expect(c.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] })).rejects.toMatchObject({ status: 400 });
  });
});

describe('header rules per provider', () => {
  it('provider_a: Bearer and the instance session header; provider_b and custom: x-api-key; provider_f: its own header and user agent win', async () => {
    const ask = async (profileId: string) => {
      const l = await gw.lease({ agentId: AGENT, profileId });
      await client(l.token).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'h' }] });
    };
    fakeA.reset();
    fakeF.reset();
    await ask('chat-a');
    await ask('chat-b');
    await ask('custom-x');
    await ask('chat-f');
    const [a, b, cu] = fakeA.requests;
    expect(a!.headers).toMatchObject({ authorization: 'Bearer KEY-A', 'x-atelier-session': AGENT, 'user-agent': 'atelier-model-gateway' });
    expect(a!.headers['x-provider-f-session']).toBeUndefined();
    expect(b!.path).toBe('/b/v1/chat/completions');
    expect(b!.headers['x-api-key']).toBe('KEY-B');
    expect(b!.headers.authorization).toBeUndefined();
    expect(cu!.path).toBe('/custom/v1/chat/completions');
    expect(cu!.headers['x-api-key']).toBe('KEY-C');
    const f = fakeF.requests[0]!;
    expect(f.headers).toMatchObject({ authorization: 'Bearer KEY-F', 'x-provider-f-session': AGENT, 'user-agent': 'atelier-model-gateway' });
    expect(f.headers['x-atelier-session']).toBeUndefined();
    // No other provider's key went anywhere else.
    expect(fakeF.requests.every((r) => r.headers.authorization === 'Bearer KEY-F')).toBe(true);
  });

  it("a provider's own error (plan allowance) passes through unchanged and costs nothing", async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-f' });
    fakeF.reset();
    const res = await fetch(gw.url + '/v1/chat/completions', { method: 'POST', headers: { authorization: `Bearer ${l.token}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: '#scenario=allowance' }] }) });
    expect(res.status).toBe(429);
    expect(res.headers.get('x-provider-error')).toBe('allowance');
    expect(await res.text()).toBe(fakeF.requests[0]!.sent.toString());
    await expect(client(l.token).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: '#scenario=allowance' }] })).rejects.toMatchObject({ status: 429, code: 'allowance_exceeded' });
    expect((await gw.leaseInfo(l.leaseId)).used.costMicros).toBe(0);
  });

  it('a redirect to another host never carries the key (never followed, not handed to the client)', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-a' });
    fakeOther.reset();
    const err = await client(l.token).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: '#scenario=redirect' }] }).catch((e) => e);
    expect(err.status).toBe(502);
    expect(err.code).toBe('upstream_redirect_refused');
    await sleep(100);
    expect(fakeOther.requests).toHaveLength(0);
    const info = await gw.leaseInfo(l.leaseId);
    expect(info.reserved.costMicros).toBe(0);
  });

  it('a route whose host is not the provider registry host is refused at push time', async () => {
    const r = await gw.admin('PUT', '/admin/snapshot', { ...snapshot, generation: 99, routes: [route('x', 'provider_a', 'chat-completions', 'K', { upstreamUrl: 'https://evil.example' }), route('y', 'custom', 'chat-completions', 'K', { upstreamUrl: 'http://evil.example/v1' })] });
    expect(r.status).toBe(400);
    expect(r.body.error.message).toContain('https://');
    expect((await gw.admin('GET', '/admin/status')).body.generation).toBe(1);
  });
});

describe('pricing and budgets', () => {
  it('unknown prices are refused before anything is sent', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'noprice' });
    fakeA.reset();
    const err = await client(l.token).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }).catch((e) => e);
    expect(err.status).toBe(400);
    expect(err.code).toBe('price_unknown');
    expect(err.message).toMatch(/cannot be bounded/);
    expect(fakeA.requests).toHaveLength(0);
  });

  it('64 concurrent requests against a tight budget never overspend, and refusals say why', async () => {
    const budget = 40_000;
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-a', budgets: { maxCostMicros: budget } });
    fakeA.reset();
    let ok = 0;
    let spent = 0;
    const refusals: string[] = [];
    const c = client(l.token);
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        for (;;) {
          try {
            const r = await c.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'go #delay=15' }], max_completion_tokens: 200 });
            ok++;
            // 450 micro-USD at the fake's 30 output tokens; fewer when the clamp stopped it earlier (8 per output token).
            spent += 450 - (30 - r.usage!.completion_tokens) * 8;
          } catch (e: any) {
            refusals.push(e.code);
            return;
          }
        }
      }),
    );
    const info = await gw.leaseInfo(l.leaseId);
    expect(info.reserved.costMicros).toBe(0);
    expect(info.used.costMicros).toBe(spent);
    expect(info.used.costMicros).toBeLessThanOrEqual(budget);
    expect(ok).toBeGreaterThan(5);
    expect(new Set(refusals)).toEqual(new Set(['budget_exceeded']));
    // Every request sent upstream had its output limit within what the budget allowed.
    for (const r of fakeA.requests) expect(r.body.max_completion_tokens).toBeLessThanOrEqual(200);
  });

  it('a daily spend policy binds across leases', async () => {
    await gw.push({ ...snapshot, generation: 2, policies: { dailyCapMicros: 12_000, monthlyCapMicros: null, perAgentCapMicros: null } });
    const l1 = await gw.lease({ agentId: AGENT, profileId: 'chat-a' });
    const err = await client(l1.token).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] }).catch((e) => e);
    // Today's spend by earlier tests is already over 12000 micro-USD.
    expect(err.status).toBe(429);
    expect(err.code).toBe('policy_exceeded');
    await gw.push({ ...snapshot, generation: 3 });
  });
});

describe('streams cut short, clients gone, snapshots replaced', () => {
  it('a client that disconnects still has its usage settled exactly', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-a' });
    const before = (await gw.usage()).lastSeq;
    const ac = new AbortController();
    const stream = await client(l.token).chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: '#deltas=20 #deltaDelay=20' }] }, { signal: ac.signal });
    let n = 0;
    try {
      for await (const _ of stream) if (++n === 2) ac.abort();
    } catch {
      /* aborted */
    }
    expect(n).toBe(2);
    const settle = await until(async () => (await gw.usage(before)).events.find((e) => e.type === 'settle'), 5000);
    expect(settle).toMatchObject({ unreconciled: false, costMicros: 450 });
    const info = await gw.leaseInfo(l.leaseId);
    expect(info.used.costMicros).toBe(450);
    expect(info.reserved.costMicros).toBe(0);
  });

  it('a stream cut before its usage is settled with an estimate and marked unreconciled, never dropped', async () => {
    for (const profileId of ['chat-a', 'resp-a']) {
      const l = await gw.lease({ agentId: AGENT, profileId });
      const before = (await gw.usage()).lastSeq;
      const c = client(l.token);
      const run = async () => {
        if (profileId === 'chat-a') for await (const _ of await c.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: '#scenario=cut #deltas=10' }] }));
        else for await (const _ of await c.responses.create({ model: 'm', stream: true, input: '#scenario=cut #deltas=10' }));
      };
      await expect(run()).rejects.toThrow();
      const settle = await until(async () => (await gw.usage(before)).events.find((e) => e.type === 'settle'), 5000);
      expect(settle.unreconciled, JSON.stringify(settle)).toBe(true);
      expect(settle.usage.outputTokens, JSON.stringify(settle)).toBeGreaterThanOrEqual(5);
      expect(settle.costMicros).toBeGreaterThan(0);
      expect(settle.usage.outputTokens).toBeGreaterThanOrEqual(5);
      const info = await gw.leaseInfo(l.leaseId);
      expect(info.reserved.costMicros).toBe(0);
      expect(info.used.costMicros).toBe(settle.costMicros);
    }
  });

  it('a snapshot that drops a profile stops its routing while a stream in flight finishes with its key', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-f' });
    const c = client(l.token);
    fakeF.reset();
    const stream = await c.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: '#deltas=20 #deltaDelay=15' }] });
    const collected = (async () => {
      let t = '';
      for await (const ch of stream) t += ch.choices[0]?.delta?.content ?? '';
      return t;
    })();
    await sleep(60);
    await gw.push({ ...snapshot, generation: 4, routes: snapshot.routes.filter((r: any) => r.profileId !== 'chat-f') });
    const err = await c.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] }).catch((e) => e);
    expect(err.status).toBe(503);
    expect(err.code).toBe('route_unavailable');
    expect((await collected).split(' ').length).toBe(21);
    expect(fakeF.requests).toHaveLength(1);
    expect(fakeF.requests[0]!.headers.authorization).toBe('Bearer KEY-F');
    await gw.push({ ...snapshot, generation: 5 });
  });

  it('a revoked lease stops at once', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-a' });
    expect((await gw.admin('DELETE', `/admin/leases/${l.leaseId}`)).status).toBe(200);
    await expect(client(l.token).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'x' }] })).rejects.toMatchObject({ status: 401 });
  });
});
