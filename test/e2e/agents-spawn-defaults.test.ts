/**
 * Issue #42 item 10 through the real service (real gateway, real agent runtimes, the scripted fake
 * provider as the model): under a parent that has spent tokens, agent_spawn with the budgets left
 * out is accepted, each omitted budget lowered to what the parent has left and the result saying
 * so (budgetsDefaulted); an explicit value above what the parent has left is still refused naming
 * its field. Both through the owner's own call with parentAgentId and through the parent agent's
 * proxied agent_spawn (the ordinary way an agent spawns a helper).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runtimesLeft, startAgentEnv, type AgentEnv } from './agents-fixture.js';

let e: AgentEnv;
const OPS = ['files_read', 'agent_spawn', 'agent_status'];
const DEFAULTS = { maxInputTokens: 200_000, maxOutputTokens: 32_000, maxCostMicros: 10_000_000 };

beforeAll(async () => {
  e = await startAgentEnv();
  await e.makeProfile('defaults-chat', 'chat-completions', OPS);
}, 180_000);
afterAll(async () => {
  await e?.dispose();
});

const spawn = (args: Record<string, unknown>) =>
  e.tool('agent_spawn', { workspaceId: e.ws, idempotencyKey: `d-${Math.random().toString(36).slice(2)}`, profileId: 'defaults-chat', proxyOperations: ['files_read'], repositoryContext: 'none', ...args });

/** Reads README.md every turn (spending tokens), slowly, until cancelled. */
const reading = (c: { hasTools: boolean }) =>
  c.hasTools ? { calls: [{ name: 'files_read', args: { path: 'README.md' } }], usage: { input: 400, output: 10 }, delayMs: 300 } : { text: 'SUMMARY: done', usage: { input: 50, output: 10 } };

describe('a child gets what its parent can give', () => {
  it('omitted budgets under a running parent default to what it has left, said in the result; an explicit one above it is refused naming the field', async () => {
    e.fake.scripts.set('reader', reading);
    // The root takes the spec's defaults (nothing to carve from).
    const rootSpawn = await spawn({ prompt: '#agent=reader root', proxyOperations: OPS });
    if (!rootSpawn.ok) throw new Error(rootSpawn.text);
    const root = rootSpawn.result.agentId as string;
    expect(rootSpawn.result.budgets).toMatchObject(DEFAULTS);
    expect(rootSpawn.result.budgetsDefaulted).toBeUndefined();
    await e.waitFor(root, (s) => s.status === 'RUNNING' && s.leaseId && s.budgets.maxInputTokens.used > 0);

    // Explicit and above what the root has left (it spent some of its 200 000): refused, naming the field.
    const over = await spawn({ prompt: '#agent=reader over', parentAgentId: root, maxInputTokens: 200_000, maxOutputTokens: 1_000, maxCostMicros: 1_000 });
    expect(!over.ok && over.error.code).toBe('FAILED_PRECONDITION');
    expect(!over.ok && over.error.details.field).toBe('maxInputTokens');
    expect(!over.ok && over.error.message).toMatch(new RegExp(`^maxInputTokens: 200000 would pass what parent ${root} has left of its input token budget \\(\\d+ tokens\\)`));

    // All omitted: each lowered to what the root has left, said field by field.
    const child = await spawn({ prompt: '#agent=reader child', parentAgentId: root });
    if (!child.ok) throw new Error(child.text);
    const r = child.result as Record<string, any>;
    const lowered = r.budgetsDefaulted as Array<{ field: keyof typeof DEFAULTS; specDefault: number; value: number; reason: string }>;
    expect(lowered.map((d) => d.field).sort()).toEqual(['maxCostMicros', 'maxInputTokens', 'maxOutputTokens']);
    for (const d of lowered) {
      expect(d.specDefault).toBe(DEFAULTS[d.field]);
      expect(d.value).toBeLessThan(d.specDefault);
      expect(d.value).toBeGreaterThan(0);
      expect(r.budgets[d.field]).toBe(d.value);
      expect(d.reason).toContain(root);
    }
    // The child holds what the result says, carved from the root (the tree guarantee as before).
    const cs = await e.waitFor(r.agentId, (s) => s.leaseId);
    const input = lowered.find((d) => d.field === 'maxInputTokens')!.value;
    expect(cs.budgets.maxInputTokens.budget).toBe(input);
    const rootNow = await e.ok('agent_status', { agentId: root });
    expect(rootNow.budgets.maxInputTokens.carvedToChildren).toBe(input);

    // The child took all the root had left: the root may end on its budget; both are stopped here.
    for (const id of [r.agentId as string, root]) await e.tool('agent_cancel', { agentId: id, reason: 'done' });
    expect(await runtimesLeft()).toEqual([]);
  }, 180_000);

  it('an explicit budget that fits is kept exactly; only the omitted ones beside it are lowered', async () => {
    e.fake.scripts.set('reader2', reading);
    const rootSpawn = await spawn({ prompt: '#agent=reader2 root', proxyOperations: OPS });
    if (!rootSpawn.ok) throw new Error(rootSpawn.text);
    const root = rootSpawn.result.agentId as string;
    await e.waitFor(root, (s) => s.status === 'RUNNING' && s.leaseId && s.budgets.maxInputTokens.used > 0);
    const mixed = await spawn({ prompt: '#agent=reader2 mixed', parentAgentId: root, maxInputTokens: 1_000 });
    if (!mixed.ok) throw new Error(mixed.text);
    expect(mixed.result.budgets.maxInputTokens).toBe(1_000);
    const lowered = mixed.result.budgetsDefaulted as Array<Record<string, any>>;
    expect(lowered.map((d) => d.field).sort()).toEqual(['maxCostMicros', 'maxOutputTokens']);
    for (const d of lowered) expect(mixed.result.budgets[d.field]).toBe(d.value);
    for (const id of [mixed.result.agentId as string, root]) await e.tool('agent_cancel', { agentId: id, reason: 'done' });
    expect(await runtimesLeft()).toEqual([]);
  }, 180_000);

  it('a parent agent that spent tokens spawns a helper the ordinary way (budgets omitted) through its proxy', async () => {
    e.fake.scripts.set('helper', reading);
    e.fake.scripts.set('spawner', (c) => {
      if (!c.hasTools) return { text: 'SUMMARY: spawned', usage: { input: 50, output: 10 } };
      if (c.step === 0) return { calls: [{ name: 'files_read', args: { path: 'README.md' } }], usage: { input: 400, output: 10 } };
      if (c.step === 1)
        return {
          calls: [
            { name: 'agent_spawn', args: { prompt: '#agent=helper help', idempotencyKey: 'helper-omitted', profileId: 'defaults-chat', proxyOperations: ['files_read'], repositoryContext: 'none' } },
            { name: 'agent_spawn', args: { prompt: '#agent=helper big', idempotencyKey: 'helper-explicit', profileId: 'defaults-chat', proxyOperations: ['files_read'], repositoryContext: 'none', maxInputTokens: 200_000 } },
          ],
          usage: { input: 400, output: 10 },
        };
      return { text: 'SUMMARY: spawned', usage: { input: 50, output: 10 } };
    });
    const ps = await spawn({ prompt: '#agent=spawner go', proxyOperations: OPS });
    if (!ps.ok) throw new Error(ps.text);
    const parent = ps.result.agentId as string;
    // The helper with omitted budgets exists under the parent, with budgets below the defaults.
    const until = Date.now() + 90_000;
    let kids: Array<Record<string, any>> = [];
    while (Date.now() < until) {
      kids = (await e.ok('agent_list', { parentAgentId: parent })).agents;
      if (kids.length > 0) break;
      await new Promise((res) => setTimeout(res, 200));
    }
    expect(kids.length).toBe(1);
    const helper = await e.ok('agent_status', { agentId: kids[0]!.agentId });
    expect(helper.budgets.maxInputTokens.budget).toBeLessThan(DEFAULTS.maxInputTokens);
    expect(helper.budgets.maxInputTokens.budget).toBeGreaterThan(0);
    // The explicit 200 000 was refused, naming the field, as a tool result the parent's model saw.
    let log = '';
    while (Date.now() < until) {
      log = await e.logText(parent);
      if ((log.match(/"tool_result"[^\n]*"name":"agent_spawn"|"name":"agent_spawn"[^\n]*"tool_result"/g) ?? []).length >= 2) break;
      await new Promise((res) => setTimeout(res, 200));
    }
    expect(log).toMatch(/maxInputTokens: 200000 would pass what parent/);
    for (const id of [kids[0]!.agentId as string, parent]) await e.tool('agent_cancel', { agentId: id, reason: 'done' });
    expect(await runtimesLeft()).toEqual([]);
  }, 180_000);
});
