import { describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { affordableOutputTokens, costMicros, effectivePrices, worstCaseMicros, type EffectivePrices } from '../../src/core/pricing.js';
import { Budget, BudgetError } from '../../src/gateway/budget.js';
import { migrate } from '../../src/store/db.js';
import { SpendService } from '../../src/services/models/spend.js';
import { findUsage } from '../../src/gateway/usage.js';
import { endpointFor, resolveProviders } from '../../src/core/providers.js';

const P = (i: number, o: number, cr: number | null = null, cw: number | null = null) => ({ inputMicrosPerMillionTokens: i, outputMicrosPerMillionTokens: o, cachedReadMicrosPerMillionTokens: cr, cachedWriteMicrosPerMillionTokens: cw });
const U = (input: number, cached: number, write: number, output: number) => ({ inputTokens: input, cachedInputTokens: cached, cacheWriteTokens: write, outputTokens: output, reasoningTokens: 0 });

describe('pricing math (integer micro-USD per million tokens, rounded up)', () => {
  it('charges uncached input, cached reads, cache writes and output at their prices, rounding the total up once', () => {
    const pr = effectivePrices(P(2_000_000, 8_000_000, 500_000, 2_500_000), false) as EffectivePrices;
    // 100 uncached * 2 + 20 cached * 0.5 + 10 writes * 2.5 + 30 * 8 = 200 + 10 + 25 + 240
    expect(costMicros(U(130, 20, 10, 30), pr)).toBe(475);
    const cheap = effectivePrices(P(1, 1), false) as EffectivePrices;
    expect(costMicros(U(1, 0, 0, 0), cheap)).toBe(1); // 1e-6 micro-USD rounds up to 1
    expect(costMicros(U(0, 0, 0, 0), cheap)).toBe(0);
    expect(costMicros(U(1_000_000, 0, 0, 1_000_000), cheap)).toBe(2);
  });

  it('unknown cache-write prices: 2x input where the provider bills cache writes, 1x otherwise; unknown cached reads at the input price', () => {
    const yes = effectivePrices(P(3_000_000, 1, null, null), true) as EffectivePrices;
    const no = effectivePrices(P(3_000_000, 1, null, null), false) as EffectivePrices;
    expect(yes.cacheWrite).toBe(6_000_000n);
    expect(no.cacheWrite).toBe(3_000_000n);
    expect(yes.cachedRead).toBe(3_000_000n);
    expect(yes.maxInputSide).toBe(6_000_000n);
    expect(costMicros(U(1000, 0, 1000, 0), yes)).toBe(6000);
    expect(costMicros(U(1000, 0, 1000, 0), no)).toBe(3000);
  });

  it('null input or output prices are never free: the cost cannot be bounded', () => {
    expect(effectivePrices(P(1, 1), true)).not.toBeTypeOf('string');
    expect(effectivePrices({ ...P(1, 1), outputMicrosPerMillionTokens: null }, true)).toMatch(/output price is unknown/);
    expect(effectivePrices({ ...P(1, 1), inputMicrosPerMillionTokens: null }, true)).toMatch(/input price is unknown/);
    expect(effectivePrices({ ...P(1, 1), inputMicrosPerMillionTokens: 1.5 as number }, true)).toBeTypeOf('string');
  });

  it('worst case and affordable output agree exactly at the boundary, without floats', () => {
    const pr = effectivePrices(P(3_000_000, 15_000_000, null, null), true) as EffectivePrices;
    const n = affordableOutputTokens(100_000, 1000, pr);
    expect(worstCaseMicros(1000, n, pr)).toBeLessThanOrEqual(100_000);
    expect(worstCaseMicros(1000, n + 1, pr)).toBeGreaterThan(100_000);
    expect(affordableOutputTokens(5, 1000, pr)).toBe(-1);
    const big = effectivePrices(P(1_000_000_000, 1_000_000_000), false) as EffectivePrices;
    expect(worstCaseMicros(2_000_000, 2_000_000, big)).toBe(4_000_000_000);
  });

  it('reads usage out of Chat and Responses bytes, ignoring escaped text', () => {
    const chat = Buffer.from('{"choices":[{"message":{"content":"say \\"usage\\": {}"}}],"usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}');
    expect(findUsage(chat)).toEqual({ inputTokens: 10, cachedInputTokens: 4, cacheWriteTokens: 0, outputTokens: 5, reasoningTokens: 2 });
    const resp = Buffer.from('event: response.completed\ndata: {"response":{"usage": {"input_tokens":7,"input_tokens_details":{"cached_tokens":1},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":1}}}}\n\n');
    expect(findUsage(resp)).toEqual({ inputTokens: 7, cachedInputTokens: 1, cacheWriteTokens: 0, outputTokens: 3, reasoningTokens: 1 });
    expect(findUsage(Buffer.from('{"usage":null}'))).toBeNull();
  });
});

describe('provider registry', () => {
  it('a key goes only to the registry hosts; plain http only to loopback', () => {
    const reg = resolveProviders({ provider_a: { baseUrl: 'http://127.0.0.1:9999/v1' } });
    const ep = endpointFor(reg.provider_a, 'chat-completions');
    expect(typeof ep === 'string' ? ep : ep.url.href).toBe('http://127.0.0.1:9999/v1/chat/completions');
    expect(() => resolveProviders({ provider_a: { baseUrl: 'http://example.com/v1' } })).toThrow(/https/);
    expect(endpointFor(reg.provider_b, 'responses')).toMatch(/does not speak responses/);
    expect(endpointFor(reg.custom, 'chat-completions', 'http://evil.example/v1')).toMatch(/https/);
    const c = endpointFor(reg.custom, 'responses', 'https://llm.example.com/api/v1');
    expect(typeof c === 'string' ? c : c.url.href).toBe('https://llm.example.com/api/v1/responses');
  });
});

describe('budgets and windows', () => {
  const prices = effectivePrices(P(1_000_000, 1_000_000), false) as EffectivePrices; // 1 micro-USD per token
  const lease = (b: Budget, cost: number) => b.issue({ agentId: 'agent_x', profileId: 'p', revision: 1, budgets: { maxInputTokens: 1_000_000, maxOutputTokens: 1_000_000, maxCostMicros: cost }, expiresAt: new Date(Date.now() + 1e9).toISOString() }).lease;

  it('clamps the output limit to the budget and refuses when not even a small answer fits', () => {
    const b = new Budget();
    const l = lease(b, 1000);
    const r = b.reserve(l, 400, 5000, prices);
    expect(r.outputLimit).toBe(600);
    expect(() => b.reserve(l, 400, 5000, prices)).toThrow(BudgetError);
    b.settle(r, U(400, 0, 0, 100), false);
    expect(l.usedCost).toBe(500);
    expect(l.resCost).toBe(0);
    expect(b.reserve(l, 100, null, prices).outputLimit).toBe(400);
  });

  it('a settlement counts in the day and month of its reservation across a UTC midnight; the new day starts empty', () => {
    let now = Date.parse('2026-01-31T23:59:59.500Z');
    const b = new Budget(() => now);
    b.policies = { dailyCapMicros: 1500, monthlyCapMicros: 2500, perAgentCapMicros: null };
    const l = lease(b, 1_000_000);
    const r1 = b.reserve(l, 500, 500, prices); // 1000 reserved on Jan 31
    now = Date.parse('2026-02-01T00:00:00.200Z');
    b.settle(r1, U(500, 0, 0, 300), false); // 800 settled, counted on Jan 31 and in January
    const totals = b.windowTotals();
    expect(totals).toEqual([
      { window: 'day', key: '2026-02-01', spentMicros: 0, reservedMicros: 0, baselineMicros: 0 },
      { window: 'month', key: '2026-02', spentMicros: 0, reservedMicros: 0, baselineMicros: 0 },
    ]);
    // February 1: a full daily cap is available again.
    const r2 = b.reserve(l, 500, 2000, prices);
    expect(r2.outputLimit).toBe(1000);
    expect(r2.day).toBe('2026-02-01');
    // The January windows hold the settlement.
    now = Date.parse('2026-01-31T12:00:00Z');
    expect(b.windowTotals()[0]).toMatchObject({ key: '2026-01-31', spentMicros: 800, reservedMicros: 0 });
    expect(b.windowTotals()[1]).toMatchObject({ key: '2026-01', spentMicros: 800 });
  });

  it('the runner ledger keeps windows across a UTC midnight and closes a dead boot as unreconciled', () => {
    const db = new Database(':memory:');
    migrate(db);
    let now = Date.parse('2026-03-31T23:59:59Z');
    const s = new SpendService(db, () => now);
    s.setPolicies({ dailyCapMicros: 5000, monthlyCapMicros: null });
    const at = new Date(now).toISOString();
    const res = (id: string, micros: number) => ({ seq: 0, type: 'reserve' as const, at, reservationId: id, leaseId: 'lease_1', agentId: 'agent_1', profileId: 'p', revision: 1, day: '2026-03-31', month: '2026-03', reservedMicros: micros });
    s.ingest('boot_1', [res('r1', 1000), res('r2', 700), res('r3', 300)], 3);
    s.ingest('boot_1', [{ seq: 4, type: 'settle', at: '2026-04-01T00:00:01Z', reservationId: 'r1', costMicros: 400, usage: U(1, 0, 0, 1), unreconciled: false }, { seq: 5, type: 'settle', at: '2026-04-01T00:00:01Z', reservationId: 'r2', costMicros: 250, usage: U(1, 0, 0, 1), unreconciled: true }], 5);
    expect(s.window('day')).toMatchObject({ key: '2026-03-31', settledMicros: 400, unreconciledMicros: 250, reservedMicros: 300, totalMicros: 950, policy: { capMicros: 5000, remainingMicros: 4050 } });
    now = Date.parse('2026-04-01T00:00:02Z');
    expect(s.window('day')).toMatchObject({ key: '2026-04-01', totalMicros: 0 });
    expect(s.window('month')).toMatchObject({ key: '2026-04', totalMicros: 0 });
    // The gateway restarted: r3 can never settle, so it counts as unreconciled at its reservation.
    s.ingest('boot_2', [], 0);
    now = Date.parse('2026-03-31T23:59:59Z');
    expect(s.window('month')).toMatchObject({ key: '2026-03', settledMicros: 400, unreconciledMicros: 550, reservedMicros: 0 });
    expect(s.baselines('boot_2')).toEqual([
      { window: 'day', key: '2026-03-31', spentMicros: 950 },
      { window: 'month', key: '2026-03', spentMicros: 950 },
    ]);
    const sum = s.summary('day') as { note: string; estimate: boolean };
    expect(sum.note).toMatch(/estimates from pinned profile prices, not provider invoices/);
    expect(() => s.setPolicies({ dailyCapMicros: -1 })).toThrow(/dailyCapMicros/);
  });
});
