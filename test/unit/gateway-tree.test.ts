/**
 * Agent trees at the gateway (issue #31 item 1; docs/agents.md "Trees"): a child's budgets are
 * carved out of its parent's lease, and what an ended lease leaves goes back to its nearest live
 * ancestor once nothing of it is in flight. Property: over random trees (depth up to 4, fan-out up
 * to 3), random spending (requests reserved, settled, some left in flight across an end), random
 * end orders (parents before their children included), the sum charged over the tree never passes
 * the root's budget nor any subtree its carve, in cost and in both token budgets; and nothing is
 * created or lost: what the root was given is always exactly accounted for.
 */
import { describe, expect, it } from 'vitest';
import { Budget, BudgetError, type Amounts, type Lease, type Reservation } from '../../src/gateway/budget.js';
import { effectivePrices, type EffectivePrices, ZERO_USAGE } from '../../src/core/pricing.js';
import { seeded as rng } from '../fixtures/seeded.js';

const prices = effectivePrices({ inputMicrosPerMillionTokens: 3_000_000, outputMicrosPerMillionTokens: 15_000_000 }, false) as EffectivePrices;


interface Node {
  lease: Lease;
  depth: number;
  children: Node[];
  /** What was carved for it (the root: what it was given). */
  given: Amounts;
  open: Reservation[];
  ended: boolean;
}

const DIMS = ['inputTokens', 'outputTokens', 'costMicros'] as const;
const used = (l: Lease): Amounts => ({ inputTokens: l.usedIn, outputTokens: l.usedOut, costMicros: l.usedCost });
const add = (a: Amounts, b: Amounts): Amounts => ({ inputTokens: a.inputTokens + b.inputTokens, outputTokens: a.outputTokens + b.outputTokens, costMicros: a.costMicros + b.costMicros });
const ZERO: Amounts = { inputTokens: 0, outputTokens: 0, costMicros: 0 };
const subtreeUsed = (n: Node): Amounts => n.children.reduce((acc, c) => add(acc, subtreeUsed(c)), used(n.lease));
const all = (n: Node): Node[] => [n, ...n.children.flatMap(all)];
const req = (agentId: string, b: Amounts, carveId?: string) => ({
  agentId,
  profileId: 'p',
  revision: 1,
  budgets: { maxInputTokens: b.inputTokens, maxOutputTokens: b.outputTokens, maxCostMicros: b.costMicros },
  expiresAt: new Date(Date.now() + 3600_000).toISOString(),
  ...(carveId ? { carveId } : {}),
});

function checkTree(budget: Budget, root: Node, heldCarves: Amounts): void {
  // The tree's total charge stays within the root's budget, and each subtree within its carve.
  // (Plain comparisons, with expect only on a failure: this runs after every step of every tree.)
  const check = (n: Node): Amounts => {
    const u = n.children.reduce((acc, c) => add(acc, check(c)), used(n.lease));
    for (const d of DIMS) if (u[d] > n.given[d]) expect(u[d], `${d} of the subtree of ${n.lease.agentId}`).toBeLessThanOrEqual(n.given[d]);
    return u;
  };
  check(root);
  // Conservation: what the root was given is held by live leases, spent by ended ones, set aside
  // in carves, or given up when no live ancestor was left. Nothing is created.
  let accounted = add(heldCarves, budget.forfeited);
  for (const n of all(root)) {
    const l = n.lease;
    accounted = add(accounted, l.returned ? used(l) : { inputTokens: l.budgets.maxInputTokens, outputTokens: l.budgets.maxOutputTokens, costMicros: l.budgets.maxCostMicros });
  }
  for (const d of DIMS) if (accounted[d] !== root.given[d]) expect(accounted[d], `conservation of ${d}`).toBe(root.given[d]);
}

function runTree(seed: number): { agents: number; refused: number; spent: Amounts; depth: number } {
  const r = rng(seed);
  const pick = <T>(xs: T[]): T => xs[Math.floor(r() * xs.length)]!;
  const budget = new Budget();
  const given: Amounts = { inputTokens: 200_000, outputTokens: 40_000, costMicros: 1_000_000 };
  const { lease } = budget.issue(req('root', given));
  const root: Node = { lease, depth: 0, children: [], given, open: [], ended: false };
  const held = new Map<string, { parent: Node; amounts: Amounts }>();
  let agents = 1;
  let refused = 0;
  const heldTotal = () => [...held.values()].reduce((a, h) => add(a, h.amounts), ZERO);
  for (let step = 0; step < 400; step++) {
    const live = all(root).filter((n) => !n.ended);
    const openAny = all(root).filter((n) => n.open.length);
    if (!live.length && !openAny.length && !held.size) break;
    const x = r();
    if (x < 0.3 && live.length) {
      // Spawn: carve a random part of what the parent has left (sometimes more than it has).
      const p = pick(live);
      if (p.depth < 4 && p.children.length + [...held.values()].filter((h) => h.parent === p).length < 3) {
        const room = budget.room(p.lease);
        const part = (v: number) => Math.floor(v * (r() < 0.15 ? 1.5 : r() * 0.7));
        const amounts = { inputTokens: part(room.inputTokens), outputTokens: part(room.outputTokens), costMicros: part(room.costMicros) };
        const c = budget.carve(p.lease.id, amounts);
        if (!c.ok) {
          refused++;
          expect(c.reason).toBe('exceeded');
        } else held.set(c.carve.id, { parent: p, amounts });
      }
    } else if (x < 0.45 && held.size) {
      // The child's lease is issued from its carve (sometimes capped lower by the profile), or the spawn failed and the carve goes back.
      const [id, h] = pick([...held.entries()]);
      held.delete(id);
      if (r() < 0.15) budget.releaseCarve(id);
      else {
        const cap = r() < 0.2 ? { inputTokens: Math.floor(h.amounts.inputTokens / 2), outputTokens: h.amounts.outputTokens, costMicros: Math.floor(h.amounts.costMicros / 3) } : h.amounts;
        const { lease: l } = budget.issue(req(`a${agents++}`, cap, id));
        expect(l.parent).toBe(h.parent.lease);
        h.parent.children.push({ lease: l, depth: h.parent.depth + 1, children: [], given: h.amounts, open: [], ended: false });
      }
    } else if (x < 0.82 && live.length) {
      // A request: reserved (clamped to every budget), then settled now or left in flight.
      const n = pick(live);
      const inputBound = 1 + Math.floor(r() * 3000);
      try {
        const res = budget.reserve(n.lease, inputBound, r() < 0.5 ? null : 1 + Math.floor(r() * 4000), prices);
        if (r() < 0.3) n.open.push(res);
        else budget.settle(res, { ...ZERO_USAGE, inputTokens: Math.floor(r() * (inputBound + 1)), outputTokens: Math.floor(r() * (res.outputLimit + 1)) }, false);
      } catch (e) {
        expect(e).toBeInstanceOf(BudgetError);
      }
    } else if (x < 0.9 && live.length && (step > 20 || r() < 0.3)) {
      // An agent ends: any of them, a parent before its children included (a runtime that says final early).
      const n = pick(live);
      n.ended = true;
      budget.revoke(n.lease.id);
    } else if (openAny.length) {
      // A request in flight settles, possibly after its agent ended.
      const n = pick(openAny);
      const res = n.open.splice(Math.floor(r() * n.open.length), 1)[0]!;
      budget.settle(res, { ...ZERO_USAGE, inputTokens: Math.floor(r() * (res.inputBound + 1)), outputTokens: Math.floor(r() * (res.outputLimit + 1)) }, r() < 0.2);
    }
    checkTree(budget, root, heldTotal());
  }
  // End everything that is left; the invariants still hold and every lease gave back what it left.
  for (const n of all(root)) {
    for (const res of n.open.splice(0)) budget.settle(res, { ...ZERO_USAGE, outputTokens: res.outputLimit, inputTokens: res.inputBound }, false);
    if (!n.ended) budget.revoke(n.lease.id);
  }
  for (const id of [...held.keys()]) budget.releaseCarve(id);
  held.clear();
  checkTree(budget, root, ZERO);
  for (const n of all(root)) expect(n.lease.returned).toBe(true);
  return { agents, refused, spent: subtreeUsed(root), depth: Math.max(...all(root).map((n) => n.depth)) };
}

describe('agent trees at the gateway', () => {
  it('random trees, spending and end orders: the tree never charges past its root, a subtree never past its carve, and nothing is created or lost', () => {
    let agents = 0;
    let refused = 0;
    let deep = 0;
    let depth4 = 0;
    for (let seed = 1; seed <= 300; seed++) {
      const out = runTree(seed);
      agents += out.agents;
      refused += out.refused;
      if (out.agents >= 8) deep++;
      if (out.depth === 4) depth4++;
    }
    // The generator exercised what it should: many agents, refused carves, sizeable trees.
    console.log(`gateway tree property: ${agents} agents, ${refused} carves refused, ${deep} trees of 8 or more, ${depth4} reaching depth 4`);
    expect(agents).toBeGreaterThan(1500);
    expect(refused).toBeGreaterThan(20);
    expect(deep).toBeGreaterThan(80);
    expect(depth4).toBeGreaterThan(40);
  });

  it('a middle agent that ends while its child runs gives back only what is left of its own lease, and the child\'s leftovers skip it', () => {
    const b = new Budget();
    const given = { inputTokens: 10_000, outputTokens: 10_000, costMicros: 1_000_000 };
    const root = b.issue(req('root', given)).lease;
    const c1 = b.carve(root.id, { inputTokens: 4000, outputTokens: 4000, costMicros: 600_000 });
    if (!c1.ok) throw new Error('carve');
    const mid = b.issue(req('mid', { inputTokens: 4000, outputTokens: 4000, costMicros: 600_000 }, c1.carve.id)).lease;
    const c2 = b.carve(mid.id, { inputTokens: 3000, outputTokens: 3000, costMicros: 500_000 });
    if (!c2.ok) throw new Error('carve');
    const leaf = b.issue(req('leaf', { inputTokens: 3000, outputTokens: 3000, costMicros: 500_000 }, c2.carve.id)).lease;
    expect(root.budgets.maxCostMicros).toBe(400_000);
    // The middle agent ends at once, having spent nothing: only its own 100_000 goes back, not the child's 500_000.
    b.revoke(mid.id);
    expect(root.budgets.maxCostMicros).toBe(500_000);
    // The child spends 200_000 and ends: its 300_000 left goes past the ended middle agent to the root.
    const res = b.reserve(leaf, 1000, 1000, prices);
    b.settle(res, { ...ZERO_USAGE, inputTokens: 1000, outputTokens: 1000 }, false); // 3000 + 15000 micros
    const spentLeaf = leaf.usedCost;
    b.revoke(leaf.id);
    expect(root.budgets.maxCostMicros).toBe(500_000 + 500_000 - spentLeaf);
    expect(root.budgets.maxCostMicros + spentLeaf).toBe(1_000_000);
    // Token budgets are carved and given back the same way.
    expect(root.budgets.maxInputTokens + leaf.usedIn).toBe(10_000);
    expect(root.budgets.maxOutputTokens + leaf.usedOut).toBe(10_000);
  });

  it('a lease ended with requests in flight gives back only after they settle, and only what they did not use', () => {
    const b = new Budget();
    const root = b.issue(req('root', { inputTokens: 100_000, outputTokens: 100_000, costMicros: 1_000_000 })).lease;
    const c = b.carve(root.id, { inputTokens: 50_000, outputTokens: 50_000, costMicros: 500_000 });
    if (!c.ok) throw new Error('carve');
    const child = b.issue(req('child', { inputTokens: 50_000, outputTokens: 50_000, costMicros: 500_000 }, c.carve.id)).lease;
    const r = b.reserve(child, 2000, 2000, prices);
    b.revoke(child.id);
    expect(root.budgets.maxCostMicros).toBe(500_000); // nothing yet: the request may still spend
    b.settle(r, { ...ZERO_USAGE, inputTokens: 1000, outputTokens: 500 }, false);
    expect(root.budgets.maxCostMicros).toBe(1_000_000 - child.usedCost);
    expect(child.returned).toBe(true);
  });

  it('refuses a carve past what the lease has left, naming the budget, and changes nothing', () => {
    const b = new Budget();
    const root = b.issue(req('root', { inputTokens: 1000, outputTokens: 1000, costMicros: 1000 })).lease;
    const before = { ...root.budgets };
    for (const [amounts, field] of [
      [{ inputTokens: 1001, outputTokens: 1, costMicros: 1 }, 'maxInputTokens'],
      [{ inputTokens: 1, outputTokens: 1001, costMicros: 1 }, 'maxOutputTokens'],
      [{ inputTokens: 1, outputTokens: 1, costMicros: 1001 }, 'maxCostMicros'],
    ] as const) {
      const out = b.carve(root.id, amounts);
      expect(out).toMatchObject({ ok: false, reason: 'exceeded', field });
    }
    expect(root.budgets).toEqual(before);
    b.revoke(root.id);
    expect(b.carve(root.id, { inputTokens: 1, outputTokens: 1, costMicros: 1 })).toMatchObject({ ok: false, reason: 'not_found' });
  });
});
