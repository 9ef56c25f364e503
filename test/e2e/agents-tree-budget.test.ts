/**
 * Issue #31 item 1 through the real service: an agent tree never spends past its root. Real
 * `atelier serve`, the real gateway, real agent runtimes in their sandboxes, and the scripted fake
 * provider as every agent's model. The models spend greedily (every turn asks for all the output
 * the gateway allows), spawn children through the proxied agent_spawn, and some answer early while
 * their children still run (a parent that ends first, as a runtime that says `final` early would).
 * After every agent ended, the sum charged over the tree (cost and both token budgets, from
 * agent_status) is within the root's budget, and the sum over every subtree within its carve.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAgentEnv, type AgentEnv, runtimesLeft } from './agents-fixture.js';
import type { ScriptCtx, ScriptStep } from '../fixtures/fake-agent-provider.js';
import { seeded as rng } from '../fixtures/seeded.js';

let e: AgentEnv;
const OPS = ['agent_spawn', 'agent_list', 'agent_status'];
beforeAll(async () => {
  e = await startAgentEnv();
  // Dear output (400 USD per million tokens), so a greedy turn spends a lot and deep agents still afford a request.
  const c = await e.rest('POST', '/api/v1/agent-model-profiles', {
    profileId: 'tree-chat',
    displayName: 'tree-chat',
    credentialId: e.credentialId,
    model: 'agent-model',
    apiMode: 'chat-completions',
    pricing: { inputMicrosPerMillionTokens: 20_000_000, outputMicrosPerMillionTokens: 400_000_000, cachedReadMicrosPerMillionTokens: null, cachedWriteMicrosPerMillionTokens: null },
    limits: { maxInputTokens: 2_000_000, maxOutputTokens: 2_000_000, maxCostMicros: 1_000_000_000 },
    maxProxyOperations: OPS,
    idempotencyKey: 'make-profile-tree-chat',
  });
  expect(c.status, JSON.stringify(c.body)).toBe(201);
  const a = await e.rest('POST', '/api/v1/agent-model-profiles/tree-chat/activate', { expectedGeneration: c.body.profile.generation });
  expect(a.status, JSON.stringify(a.body)).toBe(200);
}, 180_000);
afterAll(async () => {
  await e?.dispose();
});

interface Budgets {
  maxCostMicros: number;
  maxInputTokens: number;
  maxOutputTokens: number;
}
interface PlanNode {
  id: string;
  depth: number;
  budgets: Budgets;
  children: PlanNode[];
  /** The model turn at which it answers without tool calls (ends), or null: spends until refused. */
  endAt: number | null;
  delayMs: number;
  /** Plan nodes that must have ended before this one's second turn. */
  waitEnd?: string[];
}


/** A random tree: depth up to 4, fan-out up to 3, at most `maxNodes` agents; children take random parts of their parent's budgets. */
function randomTree(seed: number, root: Budgets, maxNodes: number): PlanNode {
  const r = rng(seed);
  let count = 0;
  const make = (id: string, depth: number, budgets: Budgets): PlanNode => {
    count++;
    const node: PlanNode = { id, depth, budgets, children: [], endAt: r() < 0.4 ? 1 + Math.floor(r() * 4) : null, delayMs: 100 + Math.floor(r() * 300) };
    const fan = depth < 4 ? Math.floor(r() * 4) : 0;
    for (let i = 0; i < fan && count < maxNodes; i++) {
      const f = 0.25 + r() * 0.2;
      node.children.push(
        make(`${id}.${i}`, depth + 1, {
          maxCostMicros: Math.floor(budgets.maxCostMicros * f),
          maxInputTokens: Math.floor(budgets.maxInputTokens * f),
          maxOutputTokens: Math.floor(budgets.maxOutputTokens * f),
        }),
      );
    }
    // Parents spend beside their children for a few turns; some end while their children run.
    if (node.children.length) node.endAt = r() < 0.35 ? 2 : r() < 0.5 ? 3 + Math.floor(r() * 4) : null;
    return node;
  };
  return make('r', 0, root);
}

const plans = new Map<string, PlanNode>();
/** Agent ids by tag:node, from the spawn results the models saw. */
const agentOf = new Map<string, string>();
/** Agents whose second turn went past childrenStarted (their own subtree exists). */
const pastGate = new Set<string>();
const flat = (n: PlanNode): PlanNode[] => [n, ...n.children.flatMap(flat)];

/** The output the gateway allows this request (it rewrote max_tokens to the clamped limit). */
const allowed = (c: ScriptCtx): number => Number(c.body.max_tokens ?? c.body.max_completion_tokens ?? c.body.max_output_tokens ?? 16);

/**
 * After spawning, a parent's model waits (at most 40 s) until each child it spawned has passed the
 * same wait in its own second turn (so its subtree exists) or has ended, and until the agents named in `waitEnd` ended: the whole planned tree exists before its
 * root spends or ends, so what follows happens in the plan's order, not the machine's.
 */
async function childrenStarted(tag: string, p: PlanNode, c: ScriptCtx): Promise<void> {
  const ids = c.toolResults.slice(0, p.children.length).map((t) => /"agentId":"(agent_[A-Za-z0-9_-]+)"/.exec(t)?.[1]);
  const ended = async (agentId: string) => (await e.ok('agent_status', { agentId, workspaceId: e.ws })).terminal === true;
  const until = Date.now() + 40_000;
  while (Date.now() < until) {
    let ready = true;
    for (const [i, ch] of p.children.entries()) {
      const id = ids[i];
      if (id && !pastGate.has(`${tag}:${ch.id}`) && !(await ended(id))) ready = false;
    }
    for (const node of p.waitEnd ?? []) {
      const id = agentOf.get(`${tag}:${node}`);
      if (!id || !(await ended(id))) ready = false;
    }
    if (ready) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Every agent's model: spawn the planned children first, then spend greedily, ending early where planned. */
function treeModel(tag: string) {
  return async (c: ScriptCtx): Promise<ScriptStep> => {
    const id = /node=([r0-9.]+)/.exec(c.prompt)?.[1] ?? 'r';
    const p = plans.get(`${tag}:${id}`);
    if (p && c.step === 1) {
      c.toolResults.slice(0, p.children.length).forEach((t, i) => {
        const m = /"agentId":"(agent_[A-Za-z0-9_-]+)"/.exec(t);
        if (m) agentOf.set(`${tag}:${p.children[i]!.id}`, m[1]!);
      });
      await childrenStarted(tag, p, c);
      pastGate.add(`${tag}:${p.id}`);
    }
    const max = allowed(c);
    if (!p || !c.hasTools) return { text: `node ${id}: summary`, usage: { input: 40, output: Math.min(8, max) } };
    if (c.step === 0 && p.children.length)
      return {
        calls: p.children.map((ch) => ({
          name: 'agent_spawn',
          args: {
            prompt: `#agent=${tag} node=${ch.id}`,
            idempotencyKey: `${tag}-${ch.id}`.replace(/[^A-Za-z0-9._:-]/g, '_'),
            profileId: 'tree-chat',
            proxyOperations: OPS,
            repositoryContext: 'none',
            ttlSeconds: 180,
            ...ch.budgets,
          },
        })),
        usage: { input: 200, output: Math.min(40, max) },
      };
    if (p.endAt !== null && c.step >= p.endAt) return { text: `node ${id}: ending early`, usage: { input: 200, output: Math.min(20, max) } };
    return { calls: [{ name: 'agent_list', args: {} }], usage: { input: 300, output: max }, delayMs: p.delayMs };
  };
}

/** All agents of one tree (by rootAgentId), with their final status. */
async function treeAgents(root: string): Promise<Array<Record<string, any>>> {
  const out: Array<Record<string, any>> = [];
  let cursor: string | undefined;
  for (let i = 0; i < 100; i++) {
    const page = await e.ok('agent_list', { workspaceId: e.ws, limit: 100, ...(cursor ? { cursor } : {}) });
    out.push(...page.agents.filter((a: any) => a.rootAgentId === root));
    if (!page.nextCursor) break;
    cursor = page.nextCursor;
  }
  return Promise.all(out.map((a) => e.ok('agent_status', { agentId: a.agentId })));
}

async function waitTreeEnded(root: string, ms: number): Promise<Array<Record<string, any>>> {
  const until = Date.now() + ms;
  let all: Array<Record<string, any>> = [];
  while (Date.now() < until) {
    all = await treeAgents(root);
    if (all.length && all.every((a) => a.terminal)) {
      // A child spawned at the very end may not be listed yet: look once more after a moment.
      await new Promise((r) => setTimeout(r, 500));
      const again = await treeAgents(root);
      if (again.length === all.length && again.every((a) => a.terminal)) return again;
    }
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new Error(`tree ${root} did not end: ${JSON.stringify(all.map((a) => [a.agentId, a.status]))}`);
}

function checkTree(agents: Array<Record<string, any>>, rootId: string): { spentCost: number; count: number } {
  const byId = new Map(agents.map((a) => [a.agentId as string, a]));
  const kids = (id: string) => agents.filter((a) => a.parentAgentId === id);
  const used = (a: Record<string, any>) => ({ cost: a.budgets.maxCostMicros.used, input: a.budgets.maxInputTokens.used, output: a.budgets.maxOutputTokens.used });
  const sum = (id: string): { cost: number; input: number; output: number } => {
    const own = used(byId.get(id)!);
    for (const k of kids(id)) {
      const s = sum(k.agentId);
      own.cost += s.cost;
      own.input += s.input;
      own.output += s.output;
    }
    const a = byId.get(id)!;
    // The subtree of every agent stays within what it was given (the root's budget, a child's carve).
    expect(own.cost, `cost of the subtree of ${id}`).toBeLessThanOrEqual(a.budgets.maxCostMicros.budget);
    expect(own.input, `input tokens of the subtree of ${id}`).toBeLessThanOrEqual(a.budgets.maxInputTokens.budget);
    expect(own.output, `output tokens of the subtree of ${id}`).toBeLessThanOrEqual(a.budgets.maxOutputTokens.budget);
    return own;
  };
  const total = sum(rootId);
  return { spentCost: total.cost, count: agents.length };
}

const ROOT: Budgets = { maxCostMicros: 20_000_000, maxInputTokens: 2_000_000, maxOutputTokens: 200_000 };

describe('agent tree budgets through the real service', () => {
  it('a middle agent that ends while its child runs: the tree spends at most its root budget, and the child\'s leftovers skip the ended parent', async () => {
    const tag = 'tree-mid';
    // root -> mid (ends right after spawning) -> leaf (spends greedily); the root keeps spending greedily.
    const leaf: PlanNode = { id: 'r.0.0', depth: 2, budgets: { maxCostMicros: 7_500_000, maxInputTokens: 500_000, maxOutputTokens: 60_000 }, children: [], endAt: null, delayMs: 50 };
    const mid: PlanNode = { id: 'r.0', depth: 1, budgets: { maxCostMicros: 10_000_000, maxInputTokens: 800_000, maxOutputTokens: 80_000 }, children: [leaf], endAt: 1, delayMs: 0 };
    const root: PlanNode = { id: 'r', depth: 0, budgets: ROOT, children: [mid], endAt: null, delayMs: 100, waitEnd: ['r.0'] };
    for (const n of flat(root)) plans.set(`${tag}:${n.id}`, n);
    e.fake.scripts.set(tag, treeModel(tag));
    const spawned = await e.ok('agent_spawn', { workspaceId: e.ws, prompt: `#agent=${tag} node=r`, idempotencyKey: `${tag}-root`, profileId: 'tree-chat', proxyOperations: OPS, repositoryContext: 'none', ttlSeconds: 180, ...ROOT });
    const agents = await waitTreeEnded(spawned.agentId, 150_000);
    if (agents.length !== 3) for (const a of agents) console.log(a.agentId, a.depth, (await e.logText(a.agentId)).slice(0, 6000));
    expect(agents.length).toBe(3);
    const midAgent = agents.find((a) => a.depth === 1)!;
    const leafAgent = agents.find((a) => a.depth === 2)!;
    // The middle agent ended on its own (SUCCEEDED) while the leaf ran; the leaf was then cancelled with the reason.
    expect(midAgent.status).toBe('SUCCEEDED');
    expect(['CANCELLED', 'LIMIT_EXCEEDED']).toContain(leafAgent.status);
    const { spentCost } = checkTree(agents, spawned.agentId);
    // The root spent greedily: the whole budget is used up to rounding, and not one micro-USD more.
    expect(spentCost).toBeLessThanOrEqual(ROOT.maxCostMicros);
    expect(await runtimesLeft()).toEqual([]);
  }, 200_000);

  for (const seed of (process.env.ATELIER_TREE_SEEDS ?? '2,19,31').split(',').map(Number)) {
    it(`random tree (seed ${seed}): depth up to 4, fan-out up to 3, greedy spending, parents ending before children; nothing passes the root or a carve`, async () => {
      const tag = `tree-${seed}`;
      const plan = randomTree(seed, ROOT, 10);
      if (process.env.TREE_DEBUG) console.log(JSON.stringify(flat(plan).map((n) => [n.id, n.endAt, n.budgets.maxCostMicros])));
      for (const n of flat(plan)) plans.set(`${tag}:${n.id}`, n);
      e.fake.scripts.set(tag, treeModel(tag));
      const spawned = await e.ok('agent_spawn', { workspaceId: e.ws, prompt: `#agent=${tag} node=r`, idempotencyKey: `${tag}-root`, profileId: 'tree-chat', proxyOperations: OPS, repositoryContext: 'none', ttlSeconds: 180, ...ROOT });
      const agents = await waitTreeEnded(spawned.agentId, 170_000);
      const { spentCost, count } = checkTree(agents, spawned.agentId);
      console.log(`tree seed ${seed}: ${count} agents (planned ${flat(plan).length}), spent ${spentCost} of ${ROOT.maxCostMicros} micro-USD; statuses ${agents.map((a) => a.status).join(' ')}`);
      if (process.env.TREE_DEBUG) for (const a of agents) console.log(a.agentId, a.depth, a.status, (await e.logText(a.agentId)).split('\n').filter((l) => /tool_result|status/.test(l)).map((l) => l.slice(0, 400)).join('\n'));
      expect(spentCost).toBeLessThanOrEqual(ROOT.maxCostMicros);
      expect(await runtimesLeft()).toEqual([]);
    }, 200_000);
  }
});
