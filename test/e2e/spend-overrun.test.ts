/**
 * Money stays exact when a provider misbehaves (issue #12 item 7; docs/spend.md "Provider overruns"):
 * the real `atelier gateway` process with the openai client against a fake provider that ignores
 * the clamped output limit (streamed and not, both APIs) or counts more input than the byte bound.
 * The true cost is recorded, the excess is marked as an overrun the owner sees in the runner's
 * ledger summary, and the lease ends. Also: the gateway's HTTPS upstream path, against the fake
 * speaking HTTPS with a throwaway CA (item 9).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import Database from 'better-sqlite3';
import { startFakeProvider, type FakeProvider } from '../fixtures/fake-provider.js';
import { generateTls } from '../fixtures/githost.js';
import { PRICES, route, startGatewayProc, until, type GatewayProc } from './gateway-harness.js';
import { migrate } from '../../src/store/db.js';
import { SpendService } from '../../src/services/models/spend.js';
import { costMicros, effectivePrices, worstCaseMicros, type EffectivePrices } from '../../src/core/pricing.js';
import { INPUT_PER_ITEM_ALLOWANCE, INPUT_TEMPLATE_ALLOWANCE, STREAM_DELTA_SLACK } from '../../src/gateway/budget.js';

let gw: GatewayProc;
let fake: FakeProvider;
const AGENT = 'agent_' + 'o'.repeat(24);
const prices = effectivePrices(PRICES as never, false) as EffectivePrices;
const client = (token: string) => new OpenAI({ baseURL: gw.url + '/v1', apiKey: token, maxRetries: 0 });

beforeAll(async () => {
  fake = await startFakeProvider();
  gw = await startGatewayProc();
  await gw.push({
    generation: 1,
    providers: { provider_a: { baseUrl: fake.url + '/v1' } },
    routes: [route('chat-a', 'provider_a', 'chat-completions', 'KEY-A'), route('resp-a', 'provider_a', 'responses', 'KEY-A')],
    policies: { dailyCapMicros: null, monthlyCapMicros: null, perAgentCapMicros: null },
  });
});

afterAll(async () => {
  await gw?.stop();
  await fake?.close();
});

/** The settle event (and its reserve) of the next request after `before`. */
async function settled(before: number): Promise<{ reserve: any; settle: any }> {
  const settle = await until(async () => (await gw.usage(before)).events.find((e) => e.type === 'settle'), 5000);
  const reserve = (await gw.usage(before)).events.find((e) => e.type === 'reserve' && e.reservationId === settle.reservationId);
  return { reserve, settle };
}

async function expectLeaseEnded(lease: { token: string; leaseId: string }): Promise<void> {
  const info = await gw.leaseInfo(lease.leaseId);
  expect(info.revoked).toBe(true);
  expect(info.revokedReason).toMatch(/provider overrun/);
  // The lease answers no further request: nothing more reaches the provider on it.
  const sentBefore = fake.requests.length;
  await expect(client(lease.token).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'again' }] })).rejects.toMatchObject({ status: 401 });
  expect(fake.requests.length).toBe(sentBefore);
}

describe('a provider that ignores the clamped output limit', () => {
  it('not streamed: the true cost is recorded, the excess marked as an overrun, the lease ended', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-a' });
    const before = (await gw.usage()).lastSeq;
    const r = await client(l.token).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'write a lot #outputTokens=5000' }], max_completion_tokens: 20 });
    expect(fake.requests.at(-1)!.body.max_completion_tokens).toBe(20); // the clamp was sent
    expect(r.usage?.completion_tokens).toBe(5000); // and ignored
    const { reserve, settle } = await settled(before);
    const trueCost = costMicros(settle.usage, prices);
    expect(settle.usage.outputTokens).toBe(5000);
    expect(settle.costMicros).toBe(trueCost);
    expect(trueCost).toBeGreaterThan(reserve.reservedMicros);
    expect(settle.overrun).toEqual({ micros: trueCost - reserve.reservedMicros, inputTokens: 0, outputTokens: 4980, leaseRevoked: true });
    const info = await gw.leaseInfo(l.leaseId);
    expect(info.used.costMicros).toBe(trueCost);
    expect(info.overrunMicros).toBe(trueCost - reserve.reservedMicros);
    expect(info.reserved.costMicros).toBe(0);
    await expectLeaseEnded(l);
  });

  for (const api of ['chat', 'responses'] as const) {
    it(`streamed (${api}): the gateway stops relaying past the limit, tells the client, records the estimate as an overrun, ends the lease`, async () => {
      const l = await gw.lease({ agentId: AGENT, profileId: api === 'chat' ? 'chat-a' : 'resp-a' });
      const before = (await gw.usage()).lastSeq;
      const c = client(l.token);
      const limit = 20;
      let deltas = 0;
      const run = async () => {
        if (api === 'chat') {
          const s = await c.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: 'go #deltas=2000 #deltaDelay=1 #outputTokens=2000' }], max_completion_tokens: limit });
          for await (const ch of s) if (ch.choices[0]?.delta?.content) deltas++;
        } else {
          const s = await c.responses.create({ model: 'm', stream: true, input: 'go #deltas=2000 #deltaDelay=1 #outputTokens=2000', max_output_tokens: limit });
          for await (const ev of s) {
            if (ev.type === 'response.output_text.delta') deltas++;
            if ((ev.type as string) === 'error') throw new Error((ev as unknown as { message: string }).message); // the SDK yields the error event
          }
        }
      };
      const err = await run().then(
        () => null,
        (e) => e,
      );
      expect(err, 'the client is told the stream was cut').not.toBeNull();
      expect(String(err.message ?? err)).toMatch(/output limit/);
      expect(deltas).toBeGreaterThan(0);
      expect(deltas).toBeLessThanOrEqual(limit + STREAM_DELTA_SLACK);
      const { reserve, settle } = await settled(before);
      expect(settle.unreconciled).toBe(true);
      expect(settle.reason).toMatch(/overran the output limit/);
      expect(settle.usage.outputTokens).toBeGreaterThan(limit);
      expect(settle.usage.outputTokens).toBeLessThanOrEqual(limit + STREAM_DELTA_SLACK + 1);
      expect(settle.costMicros).toBe(costMicros(settle.usage, prices));
      expect(settle.overrun).toMatchObject({ outputTokens: settle.usage.outputTokens - limit, leaseRevoked: true });
      expect(settle.overrun.micros).toBe(Math.max(0, settle.costMicros - reserve.reservedMicros));
      // The provider's stream was not read to its end: far fewer than 2000 deltas were relayed or paid for.
      expect(settle.usage.outputTokens).toBeLessThan(100);
      await expectLeaseEnded(l);
    });
  }
});

describe('an input whose real token count passes the byte bound', () => {
  it('is recorded at its true cost, marked as an input overrun, and ends the lease', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-a' });
    const before = (await gw.usage()).lastSeq;
    await client(l.token).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi #inputTokens=50000' }], max_completion_tokens: 50 });
    const { reserve, settle } = await settled(before);
    const bytes = Buffer.byteLength(fake.requests.at(-1)!.raw); // what the gateway sent; it bounded the caller's (smaller) body
    expect(settle.usage.inputTokens).toBe(50000);
    expect(settle.costMicros).toBe(costMicros(settle.usage, prices));
    expect(settle.overrun.inputTokens).toBeGreaterThan(50000 - bytes - INPUT_TEMPLATE_ALLOWANCE - INPUT_PER_ITEM_ALLOWANCE);
    expect(settle.overrun.micros).toBe(settle.costMicros - reserve.reservedMicros);
    await expectLeaseEnded(l);
  });
});

describe('well-behaved providers and small leases', () => {
  it('usage within the reservation is no overrun; the lease keeps working', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-a' });
    const before = (await gw.usage()).lastSeq;
    for (let i = 0; i < 3; i++) await client(l.token).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hello' }] });
    const settles = (await gw.usage(before)).events.filter((e) => e.type === 'settle');
    expect(settles).toHaveLength(3);
    for (const s of settles) expect(s.overrun).toBeUndefined();
    expect((await gw.leaseInfo(l.leaseId)).revoked).toBe(false);
  });

  it('a lease with 1,500 micro-USD can still make a request (the old 1,024-token allowance reserved over 2,000)', async () => {
    const l = await gw.lease({ agentId: AGENT, profileId: 'chat-a', budgets: { maxCostMicros: 1500 } });
    const before = (await gw.usage()).lastSeq;
    const body = { model: 'm', messages: [{ role: 'user' as const, content: 'hi #outputTokens=10' }], max_completion_tokens: 16 };
    const r = await client(l.token).chat.completions.create(body);
    expect(r.usage?.prompt_tokens).toBe(120);
    const { reserve, settle } = await settled(before);
    expect(settle.overrun).toBeUndefined();
    const bytes = Buffer.byteLength(JSON.stringify(body));
    expect(worstCaseMicros(bytes + 1024 + 16, 16, prices)).toBeGreaterThan(1500); // refused under the old bound
    expect(reserve.reservedMicros).toBeLessThanOrEqual(1500);
  });
});

describe("the runner's ledger shows overruns to the owner", () => {
  it('the spend summary counts each overrun, its excess and its lease', async () => {
    const db = new Database(':memory:');
    try {
      migrate(db);
      const spend = new SpendService(db);
      const u = await gw.usage(0);
      spend.ingest(u.bootId, u.events, u.lastSeq);
      const overruns = u.events.filter((e) => e.type === 'settle' && e.overrun);
      expect(overruns).toHaveLength(4);
      const day = (spend.summary('day').windows as Array<Record<string, any>>)[0]!;
      expect(day.overrunMicros).toBe(overruns.reduce((a, e) => a + e.overrun.micros, 0));
      expect(day.overruns).toHaveLength(4);
      for (const o of day.overruns) {
        expect(o).toMatchObject({ agentId: AGENT, leaseRevoked: true });
        expect(o.overrunMicros).toBe(Math.max(0, o.costMicros - o.reservedMicros));
        expect(o.inputTokensPastBound + o.outputTokensPastLimit + o.overrunMicros).toBeGreaterThan(0);
      }
      // The totals carry the true cost, overruns included.
      const settledCost = u.events.filter((e) => e.type === 'settle').reduce((a, e) => a + e.costMicros, 0);
      expect(day.settledMicros + day.unreconciledMicros).toBe(settledCost);
    } finally {
      db.close();
    }
  });
});

describe('the HTTPS upstream path', () => {
  let tlsDir: string;
  let tlsFake: FakeProvider;
  let trusted: GatewayProc;
  let untrusted: GatewayProc;
  const snapshot = () => ({
    generation: 1,
    providers: { provider_a: { baseUrl: tlsFake.url + '/v1' } },
    routes: [route('chat-a', 'provider_a', 'chat-completions', 'KEY-TLS')],
    policies: { dailyCapMicros: null, monthlyCapMicros: null, perAgentCapMicros: null },
  });

  beforeAll(async () => {
    tlsDir = mkdtempSync(join(tmpdir(), 'atelier-fake-tls-'));
    const tls = await generateTls(tlsDir);
    tlsFake = await startFakeProvider({ tls });
    trusted = await startGatewayProc({ env: { NODE_EXTRA_CA_CERTS: tls.caCertPath } });
    untrusted = await startGatewayProc();
    await trusted.push(snapshot());
    await untrusted.push(snapshot());
  }, 60_000);

  afterAll(async () => {
    await trusted?.stop();
    await untrusted?.stop();
    await tlsFake?.close();
    rmSync(tlsDir, { recursive: true, force: true });
  });

  it('requests reach an HTTPS provider whose CA is trusted, streamed and not, with the key and usage settled', async () => {
    expect(tlsFake.url).toMatch(/^https:\/\//);
    const l = await trusted.lease({ agentId: AGENT, profileId: 'chat-a' });
    const c = new OpenAI({ baseURL: trusted.url + '/v1', apiKey: l.token, maxRetries: 0 });
    const r = await c.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'over tls' }] });
    expect(r.usage?.completion_tokens).toBe(30);
    let text = '';
    for await (const ch of await c.chat.completions.create({ model: 'm', stream: true, messages: [{ role: 'user', content: 'stream over tls #deltas=5' }] })) text += ch.choices[0]?.delta?.content ?? '';
    expect(text).toBe('w0 w1 w2 w3 w4 ');
    expect(tlsFake.requests).toHaveLength(2);
    expect(tlsFake.requests[0]!.headers.authorization).toBe('Bearer KEY-TLS');
    const info = await trusted.leaseInfo(l.leaseId);
    expect(info.used.costMicros).toBe(900);
  });

  it('an HTTPS provider whose certificate is not trusted is never sent the request', async () => {
    const before = tlsFake.requests.length;
    const l = await untrusted.lease({ agentId: AGENT, profileId: 'chat-a' });
    const c = new OpenAI({ baseURL: untrusted.url + '/v1', apiKey: l.token, maxRetries: 0 });
    await expect(c.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'over tls' }] })).rejects.toMatchObject({ status: 502, code: 'upstream_unreachable' });
    expect(tlsFake.requests.length).toBe(before);
    expect((await untrusted.leaseInfo(l.leaseId)).used.costMicros).toBe(0);
  });
});
