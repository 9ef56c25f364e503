/**
 * Coding subagents (issue #14) through the real `atelier serve`, the official MCP client, the
 * real gateway and the scripted fake provider on loopback, in both API modes, streaming.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startAgentEnv, runtimeProcesses, PROVIDER_KEY, PRICING, LIMITS, type AgentEnv, runtimesLeft } from './agents-fixture.js';

let e: AgentEnv;
beforeAll(async () => {
  e = await startAgentEnv();
  await e.makeProfile('coder-chat', 'chat-completions');
  await e.makeProfile('coder-resp', 'responses');
}, 180_000);
afterAll(async () => {
  await e?.dispose();
});

const spawn = (args: Record<string, unknown>) => e.tool('agent_spawn', { workspaceId: e.ws, idempotencyKey: `k-${Math.random().toString(36).slice(2)}`, proxyOperations: ['files_read', 'grep_search', 'files_apply_patch', 'exec_run'], ...args });

describe('agent loop', () => {
  for (const [mode, profileId] of [['chat-completions', 'coder-chat'], ['responses', 'coder-resp']] as const) {
    it(`reads, greps, patches and runs the tests through proxied tools, then ends SUCCEEDED (${mode})`, async () => {
      const name = `fix-${mode}`;
      e.fake.scripts.set(name, (c) => {
        if (!c.hasTools) return { text: 'summary' };
        switch (c.step) {
          case 0:
            return { calls: [{ name: 'files_read', args: { path: 'src/parser.js' } }] };
          case 1:
            return { calls: [{ name: 'grep_search', args: { pattern: 'split' } }] };
          case 2:
            return mode === 'chat-completions'
              ? { calls: [{ name: 'files_apply_patch', args: { path: 'src/parser.js', oldText: 's.split(",")', newText: 's.split(",").map((x) => x.trim())' } }] }
              : { text: 'Patching now.', calls: [{ name: 'files_apply_patch', args: { path: 'src/parser.js', oldText: 's.split(",")', newText: 's.split(",").map((x) => x.trim())' } }] };
          case 3:
            return { calls: [{ name: 'exec_run', args: { command: 'sh test.sh' } }] };
          default:
            return { text: `Done: parser trims fields; last test output: ${c.toolResults.at(-1)?.includes('tests passed') ? 'passed' : 'unknown'}` };
        }
      });
      const before = e.fake.requests.length;
      // The client asked for MCP log messages: the spawn is announced as a milestone.
      const logs: Array<{ level: string; data: unknown }> = [];
      e.mcp.setNotificationHandler('notifications/message', (n) => void logs.push(n.params as { level: string; data: unknown }));
      await e.mcp.setLoggingLevel('info');
      const r = await spawn({ profileId, prompt: `#agent=${name} make the parser trim fields`, repositoryContext: 'profile_a' });
      expect(r.ok, JSON.stringify(r)).toBe(true);
      const id = (r as any).result.agentId as string;
      expect(JSON.stringify(logs)).toContain(`agent ${id}`);
      await e.mcp.setLoggingLevel('error');
      expect(id).toMatch(/^agent_[A-Za-z0-9_-]{20,80}$/);
      const end = await e.waitEnd(id);
      expect(end.status, JSON.stringify(end)).toBe('SUCCEEDED');
      expect(end.summary).toBe('Done: parser trims fields; last test output: passed');
      const file = await e.ok('files_read', { workspaceId: e.ws, path: 'src/parser.js' });
      expect(file.content).toContain('map((x) => x.trim())');
      // The model saw the catalog's own tool schemas, its remaining budget, and the repository instructions (profile_a: CLAUDE.md and AGENTS.md).
      const reqs = e.fake.requests.slice(before).filter((q) => q.script === name);
      expect(reqs.length).toBe(5);
      const first = reqs[0]!.body;
      expect(first.stream).toBe(true);
      const tools = first.tools.map((t: any) => t.function?.name ?? t.name).sort();
      expect(tools).toEqual(['exec_run', 'files_apply_patch', 'files_read', 'grep_search']);
      const listed = (await e.mcp.listTools()).tools.find((t) => t.name === 'files_read')!;
      const offered = first.tools.find((t: any) => (t.function?.name ?? t.name) === 'files_read');
      expect(offered.function?.parameters ?? offered.parameters).toEqual(listed.inputSchema);
      expect(offered.function?.description ?? offered.description).toBe(listed.description);
      expect(JSON.stringify(first)).toContain('Remaining budget');
      expect(JSON.stringify(first)).toContain('Keep changes small.');
      expect(JSON.stringify(first)).toContain('Always run the tests.');
      // Status carries budgets and spend; model_spend_summary counts the agent.
      expect(end.budgets.maxCostMicros.used).toBeGreaterThan(0);
      expect(end.budgets.maxInputTokens.used).toBeGreaterThan(0);
      expect(end.spend.totalMicros).toBe(end.budgets.maxCostMicros.used);
      const spend = await e.ok('model_spend_summary', {});
      expect(spend.windows[0].totalMicros).toBeGreaterThanOrEqual(end.spend.totalMicros);
      // The log has every step, and no provider key.
      const log = await e.logText(id);
      for (const t of ['"tool_call"', '"tool_result"', '"model_text"', '"SUCCEEDED"', '"usage"', 'files_apply_patch']) expect(log).toContain(t);
      expect(log).not.toContain(PROVIDER_KEY);
      // Audited as the agent.
      const audit = await e.rest('GET', `/api/v1/audit-log?actor=${id}`);
      expect(JSON.stringify(audit.body)).toContain('files_apply_patch');
      // Restore the file for the other mode.
      await e.ok('files_write', { workspaceId: e.ws, path: 'src/parser.js', content: 'export function parse(s) {\n  return s.split(",");\n}\n' });
    }, 120_000);
  }

  it('refuses a proxied tool outside the agent\'s set and reports it to the model as a tool result', async () => {
    e.fake.scripts.set('outside', (c) => {
      if (c.step === 0) return { calls: [{ name: 'files_write', args: { path: 'evil.txt', content: 'x' } }] };
      return { text: `saw: ${c.toolResults[0]}` };
    });
    const r = await spawn({ profileId: 'coder-chat', prompt: '#agent=outside write a file', proxyOperations: ['files_read'] });
    const id = (r as any).result.agentId;
    const end = await e.waitEnd(id);
    expect(end.status).toBe('SUCCEEDED');
    expect(end.summary).toContain('PERMISSION_DENIED');
    expect(end.summary).toContain('files_write is not among');
    const ls = await e.tool('files_read', { workspaceId: e.ws, path: 'evil.txt' });
    expect(ls.ok).toBe(false);
  }, 60_000);
});

const idOf = (r: Awaited<ReturnType<typeof spawn>>) => {
  if (!r.ok) throw new Error(`spawn failed: ${r.text}`);
  return r.result.agentId as string;
};

/** A script that keeps calling tools (optionally slowly) and summarises when offered no tools. */
const looping = (usage: { input: number; output: number }, delayMs = 0) => (c: { hasTools: boolean; step: number }) =>
  c.hasTools ? { calls: [{ name: 'files_read', args: { path: 'README.md' } }], usage, delayMs } : { text: 'SUMMARY: read README.md repeatedly; nothing is left', usage: { input: 50, output: 10 } };

describe('hostile tool calls from the model', () => {
  it('confines proxied calls to the workspace: .. paths, another workspace, a symlink out, bad arguments and unlisted tools come back as error results', async () => {
    await e.ok('exec_run', { workspaceId: e.ws, command: 'ln -sf /etc/passwd link-out' });
    e.fake.scripts.set('hostile', (c) => {
      if (c.step === 0)
        return {
          calls: [
            { name: 'files_read', args: { path: '../../../etc/passwd' } },
            { name: 'files_read', args: { path: 'README.md', workspaceId: 'ws_someoneelse00000000000000' } },
            { name: 'files_read', args: { path: 'link-out' } },
            { name: 'files_read', args: { path: 'README.md', extra: { deep: [[[[[[1]]]]]] } } },
            { name: 'agent_spawn', args: { prompt: 'x', idempotencyKey: 'hostile-spawn-1', profileId: 'coder-chat', proxyOperations: ['files_read'] } },
            { name: 'workspace_close', args: {} },
          ],
        };
      return { text: JSON.stringify(c.toolResults.map((t) => (JSON.parse(t).error?.code as string) ?? 'OK')) };
    });
    const id = idOf(await spawn({ profileId: 'coder-chat', prompt: '#agent=hostile escape', proxyOperations: ['files_read'], repositoryContext: 'none' }));
    const end = await e.waitEnd(id);
    expect(end.status).toBe('SUCCEEDED');
    const codes = JSON.parse(end.summary) as string[];
    expect(codes).toHaveLength(6);
    expect(codes.every((c) => c !== 'OK')).toBe(true);
    expect(codes[1]).toBe('PERMISSION_DENIED');
    expect(codes[3]).toBe('INVALID_ARGUMENT');
    expect(codes[4]).toBe('PERMISSION_DENIED');
    expect(codes[5]).toBe('PERMISSION_DENIED');
    const log = await e.logText(id);
    expect(log).not.toContain('root:x:0:0');
    expect((await e.ok('files_read', { workspaceId: e.ws, path: 'README.md' })).content).toContain('# demo'); // workspace_close was refused
    expect((await e.ok('agent_list', { limit: 100 })).agents.some((a: any) => a.parentAgentId === id)).toBe(false);
  }, 60_000);
});

describe('budgets, all hard', () => {
  it('each budget and the TTL end the agent with the right status and a summary', async () => {
    e.fake.scripts.set('loop-out', looping({ input: 100, output: 20 }));
    // Reported input stays within what each request's bytes can carry: more would be a provider
    // overrun, which ends the lease at once (docs/spend.md) instead of testing the budget.
    e.fake.scripts.set('loop-cost', looping({ input: 1000, output: 20 }));
    e.fake.scripts.set('loop-in', looping({ input: 1000, output: 10 }));
    e.fake.scripts.set('loop-bytes', looping({ input: 100, output: 10 }, 50));
    e.fake.scripts.set('loop-ttl', looping({ input: 100, output: 10 }, 1000));
    const ops = { proxyOperations: ['files_read'], profileId: 'coder-chat', repositoryContext: 'none' };
    const ids = {
      out: idOf(await spawn({ ...ops, prompt: '#agent=loop-out read', maxOutputTokens: 150 })),
      cost: idOf(await spawn({ ...ops, prompt: '#agent=loop-cost read', maxCostMicros: 12_000 })),
      input: idOf(await spawn({ ...ops, prompt: '#agent=loop-in read', maxInputTokens: 4_600 })),
      bytes: idOf(await spawn({ ...ops, prompt: '#agent=loop-bytes read', maxOutputBytes: 2048 })),
      ttl: idOf(await spawn({ ...ops, prompt: '#agent=loop-ttl read', ttlSeconds: 30 })),
    };
    const started = Date.now();
    const out = await e.waitEnd(ids.out);
    const cost = await e.waitEnd(ids.cost);
    const input = await e.waitEnd(ids.input);
    const bytes = await e.waitEnd(ids.bytes);
    for (const [s, field] of [[out, 'maxOutputTokens'], [cost, null], [input, 'maxInputTokens'], [bytes, 'maxOutputBytes']] as const) {
      expect(s.status, JSON.stringify(s)).toBe('LIMIT_EXCEEDED');
      expect(s.summary).toContain('SUMMARY: read README.md');
      if (field) expect(s.endReason).toContain(field);
      expect(s.spend.reservedMicros).toBe(0);
    }
    expect(cost.endReason).toMatch(/budget_exceeded/);
    expect(cost.spend.totalMicros).toBeLessThanOrEqual(12_000);
    expect(out.budgets.maxOutputTokens.used).toBeLessThanOrEqual(150);
    expect(input.budgets.maxInputTokens.used).toBeLessThanOrEqual(4_600);
    expect(bytes.budgets.maxOutputBytes.used).toBeLessThanOrEqual(2048);
    const ttl = await e.waitEnd(ids.ttl, 60_000);
    expect(ttl.status).toBe('TIMED_OUT');
    expect(ttl.summary).toContain('SUMMARY: read README.md');
    expect(Date.now() - started).toBeLessThan(40_000);
    expect(Date.parse(ttl.endedAt) - Date.parse(ttl.createdAt)).toBeLessThanOrEqual(31_000);
    // The summary call was tool-less and the model was told its budget every turn.
    const reqs = e.fake.requests.filter((q) => q.script === 'loop-out');
    expect(reqs.at(-1)!.body.tools).toBeUndefined();
    expect(reqs.filter((q) => q.body.tools).every((q) => JSON.stringify(q.body.messages[0]).includes('Remaining budget'))).toBe(true);
    expect(await runtimesLeft()).toEqual([]);
  }, 120_000);
});

async function gatewayAdmin(path: string): Promise<{ status: number; body: any }> {
  const line = e.svc.stderr().split('\n').filter((l) => l.includes('gateway child started')).at(-1) ?? '';
  const url = /"url":"(http:\/\/127\.0\.0\.1:\d+)"/.exec(line)?.[1];
  const secret = readFileSync(join(e.svc.dataDir, 'state', 'gateway-admin.secret'), 'utf8').trim();
  const r = await fetch(url + path, { headers: { authorization: `Bearer ${secret}` } });
  return { status: r.status, body: await r.json().catch(() => ({})) };
}

describe('trees', () => {
  it('carves a child budget out of the parent, refuses one that would pass it, and cancels a three-level tree from the root', async () => {
    e.fake.scripts.set('idle', looping({ input: 100, output: 10 }, 400));
    const ops = ['files_read', 'agent_spawn', 'agent_status'];
    const root = idOf(await spawn({ profileId: 'coder-chat', prompt: '#agent=idle root', proxyOperations: ops, maxCostMicros: 1_000_000, repositoryContext: 'none' }));
    // Token budgets are carved like cost (issue #31): children ask for a part of the root's 200 000 / 32 000.
    // A carve never takes what a request in flight holds reserved, and a turn reserves up to 8192
    // output tokens: the child gets more than that, so a grandchild fits while the child's request runs.
    const toks = { maxInputTokens: 50_000, maxOutputTokens: 12_000 };
    // The root has sent a request (its lease holds less than all 200 000 input tokens): a child
    // asking for 200 000 cannot fit, whatever moment the spawn lands on.
    await e.waitFor(root, (s) => s.status === 'RUNNING' && s.leaseId && s.budgets.maxInputTokens.used > 0);
    const tooBig = await spawn({ profileId: 'coder-chat', prompt: '#agent=idle child', proxyOperations: ['files_read'], parentAgentId: root, maxCostMicros: 2_000_000, ...toks });
    expect(!tooBig.ok && tooBig.error.code).toBe('FAILED_PRECONDITION');
    expect(!tooBig.ok && tooBig.error.details.field).toBe('maxCostMicros');
    const wider = await spawn({ profileId: 'coder-chat', prompt: '#agent=idle child', proxyOperations: ['files_read', 'grep_search'], parentAgentId: root, maxCostMicros: 1000 });
    expect(!wider.ok && wider.error.code).toBe('PERMISSION_DENIED');
    const tooManyTokens = await spawn({ profileId: 'coder-chat', prompt: '#agent=idle child', proxyOperations: ['files_read'], parentAgentId: root, maxCostMicros: 1000, maxInputTokens: 200_000 });
    expect(!tooManyTokens.ok && tooManyTokens.error.code).toBe('FAILED_PRECONDITION');
    expect(!tooManyTokens.ok && tooManyTokens.error.details.field).toBe('maxInputTokens');
    const child = idOf(await spawn({ profileId: 'coder-chat', prompt: '#agent=idle child', proxyOperations: ops, parentAgentId: root, maxCostMicros: 600_000, repositoryContext: 'none', ...toks }));
    await e.waitFor(child, (s) => s.status === 'RUNNING' && s.leaseId);
    const rootNow = await e.ok('agent_status', { agentId: root });
    expect(rootNow.budgets.maxCostMicros.carvedToChildren).toBe(600_000);
    expect(rootNow.budgets.maxCostMicros.remaining).toBeLessThanOrEqual(400_000);
    expect(rootNow.budgets.maxInputTokens.carvedToChildren).toBe(50_000);
    expect(rootNow.budgets.maxInputTokens.remaining).toBeLessThanOrEqual(150_000);
    // The parent has under 400 000 left: a second 600 000 child is refused.
    const second = await spawn({ profileId: 'coder-chat', prompt: '#agent=idle child2', proxyOperations: ops, parentAgentId: root, maxCostMicros: 600_000, ...toks });
    expect(!second.ok && second.error.code).toBe('FAILED_PRECONDITION');
    const grand = idOf(await spawn({ profileId: 'coder-chat', prompt: '#agent=idle grandchild', proxyOperations: ['files_read'], parentAgentId: child, maxCostMicros: 100_000, maxInputTokens: 10_000, maxOutputTokens: 2_000, repositoryContext: 'none' }));
    const g = await e.waitFor(grand, (s) => s.status === 'RUNNING' && s.leaseId);
    expect(g).toMatchObject({ parentAgentId: child, rootAgentId: root, depth: 2 });
    const kids = await e.ok('agent_list', { parentAgentId: root });
    expect(kids.agents.map((a: any) => a.agentId)).toEqual([child]);
    const leases = [root, child, grand].map(async (id) => (await e.ok('agent_status', { agentId: id })).leaseId as string);
    const leaseIds = await Promise.all(leases);
    for (const l of leaseIds) expect((await gatewayAdmin(`/admin/leases/${l}`)).body.revoked).toBe(false);
    const res = await e.ok('agent_cancel', { agentId: root, reason: 'enough' });
    expect([...res.cancelled].sort()).toEqual([root, child, grand].sort());
    expect(res.statuses).toEqual({ [root]: 'CANCELLED', [child]: 'CANCELLED', [grand]: 'CANCELLED' });
    for (const id of [root, child, grand]) {
      const s = await e.ok('agent_status', { agentId: id });
      expect(s.status).toBe('CANCELLED');
      expect(s.cancelReason).toBe('enough');
    }
    expect(await runtimesLeft()).toEqual([]);
    for (const l of leaseIds) {
      const a = await gatewayAdmin(`/admin/leases/${l}`);
      expect(a.status === 404 || a.body.revoked === true).toBe(true);
    }
    // Idempotent: again changes nothing.
    const again = await e.ok('agent_cancel', { agentId: root });
    expect(again.cancelled).toEqual([]);
    expect(again.status).toBe('CANCELLED');
  }, 120_000);
});

describe('messages', () => {
  it('steer changes course at the next turn boundary, skipping the queued tool calls', async () => {
    e.fake.scripts.set('steer', (c) => {
      if (c.userMessages.some((m) => m.includes('switch to the docs'))) return { text: `steered; results: ${c.toolResults.join(' | ')}` };
      return { calls: [{ name: 'files_read', args: { path: 'README.md' } }, { name: 'files_read', args: { path: 'AGENTS.md' } }], delayMs: 2000 };
    });
    const id = idOf(await spawn({ profileId: 'coder-resp', prompt: '#agent=steer read things', proxyOperations: ['files_read'], repositoryContext: 'none' }));
    await e.fake.firstRequest('steer');
    const m = await e.ok('agent_message', { agentId: id, mode: 'steer', message: 'switch to the docs', idempotencyKey: `steer-${id}` });
    expect(m.accepted).toBe(true);
    const replay = await e.ok('agent_message', { agentId: id, mode: 'steer', message: 'switch to the docs', idempotencyKey: `steer-${id}` });
    expect(replay.replayed).toBe(true);
    const conflict = await e.tool('agent_message', { agentId: id, mode: 'steer', message: 'something else', idempotencyKey: `steer-${id}` });
    expect(!conflict.ok && conflict.error.code).toBe('CONFLICT');
    const end = await e.waitEnd(id);
    expect(end.status).toBe('SUCCEEDED');
    expect(end.summary).toContain('skipped by steer');
    expect((end.summary.match(/skipped by steer/g) ?? []).length).toBe(2);
    const log = await e.logText(id);
    expect(log).toContain('"message_received"');
    expect(log).toContain('"steer_applied"');
  }, 60_000);

  it('followUp continues an agent that would end, and a message to an ended agent is refused naming its status', async () => {
    e.fake.scripts.set('follow', (c) => {
      const f = c.userMessages.find((m) => m.includes('[follow-up from the user]'));
      if (f) return { text: `followed: ${f.replace('[follow-up from the user] ', '')}` };
      return { text: 'first answer', delayMs: 1500 };
    });
    const id = idOf(await spawn({ profileId: 'coder-chat', prompt: '#agent=follow do a thing', proxyOperations: ['files_read'], repositoryContext: 'none' }));
    await e.fake.firstRequest('follow');
    await e.ok('agent_message', { agentId: id, mode: 'followUp', message: 'also add docs', idempotencyKey: `fu-${id}` });
    const end = await e.waitEnd(id);
    expect(end).toMatchObject({ status: 'SUCCEEDED', summary: 'followed: also add docs' });
    const late = await e.tool('agent_message', { agentId: id, mode: 'followUp', message: 'more', idempotencyKey: `fu2-${id}` });
    expect(!late.ok && late.error.code).toBe('FAILED_PRECONDITION');
    expect(!late.ok && late.error.message).toContain('SUCCEEDED');
  }, 60_000);
});

describe('pinning and scale', () => {
  it('an owner edit of the profile mid-run does not affect the running agent', async () => {
    await e.makeProfile('pinned', 'chat-completions');
    e.fake.scripts.set('pin', (c) => (c.step < 3 ? { calls: [{ name: 'files_read', args: { path: 'README.md' } }], delayMs: 700 } : { text: 'pinned done' }));
    const id = idOf(await spawn({ profileId: 'pinned', prompt: '#agent=pin go', proxyOperations: ['files_read'], repositoryContext: 'none' }));
    await e.fake.firstRequest('pin');
    const list = await e.rest('GET', '/api/v1/agent-model-profiles?profileId=pinned');
    const gen = (list.body.profiles?.[0] ?? list.body.profile ?? {}).generation ?? 2;
    const upd = await e.rest('PATCH', '/api/v1/agent-model-profiles', { profileId: 'pinned', expectedGeneration: gen, model: 'other-model', idempotencyKey: 'pin-edit-1' });
    expect(upd.status, JSON.stringify(upd.body)).toBe(200);
    const act = await e.rest('POST', '/api/v1/agent-model-profiles/pinned/activate', { expectedGeneration: upd.body.profile.generation });
    expect(act.status, JSON.stringify(act.body)).toBe(200);
    const end = await e.waitEnd(id);
    expect(end).toMatchObject({ status: 'SUCCEEDED', revision: 1, model: 'agent-model', summary: 'pinned done' });
    const models = e.fake.requests.filter((q) => q.script === 'pin').map((q) => q.body.model);
    expect(models.length).toBe(4);
    expect(new Set(models)).toEqual(new Set(['agent-model']));
    // A new agent uses the new revision.
    e.fake.scripts.set('pin2', () => ({ text: 'new rev' }));
    const id2 = idOf(await spawn({ profileId: 'pinned', prompt: '#agent=pin2 go', proxyOperations: ['files_read'], repositoryContext: 'none' }));
    expect(await e.waitEnd(id2)).toMatchObject({ status: 'SUCCEEDED', revision: 2, model: 'other-model' });
    expect(e.fake.requests.filter((q) => q.script === 'pin2')[0]!.body.model).toBe('other-model');
  }, 60_000);

  it('runs 16 agents at once on one workspace', async () => {
    e.fake.scripts.set('many', (c) => (c.step === 0 ? { calls: [{ name: 'grep_search', args: { pattern: 'parse' } }] } : { text: `ok ${c.toolResults[0]?.includes('parser.js') ? 'found' : 'missing'}` }));
    const ids = await Promise.all(Array.from({ length: 16 }, (_, i) => spawn({ profileId: i % 2 ? 'coder-chat' : 'coder-resp', prompt: `#agent=many n${i}`, proxyOperations: ['grep_search'], repositoryContext: 'none' }).then(idOf)));
    expect(new Set(ids).size).toBe(16);
    const ends = await Promise.all(ids.map((id) => e.waitEnd(id, 120_000)));
    for (const s of ends) expect(s, JSON.stringify(s)).toMatchObject({ status: 'SUCCEEDED', summary: 'ok found' });
    expect(await runtimesLeft()).toEqual([]);
    const page1 = await e.ok('agent_list', { limit: 10 });
    expect(page1.agents.length).toBe(10);
    expect(page1.nextCursor).toMatch(/^[1-9][0-9]*$/);
    const page2 = await e.ok('agent_list', { limit: 100, cursor: page1.nextCursor });
    expect(page2.agents.map((a: any) => a.agentId)).not.toContain(page1.agents[0].agentId);
    const succeeded = await e.ok('agent_list', { status: 'SUCCEEDED', limit: 100 });
    for (const id of ids) expect(succeeded.agents.map((a: any) => a.agentId)).toContain(id);
  }, 180_000);
});

describe('secrets and the owner view', () => {
  it('keeps the provider key and the repository token out of the agent sandbox, its log and its results', async () => {
    e.fake.scripts.set('peek', (c) => (c.step === 0 ? { calls: [{ name: 'exec_run', args: { command: 'env; cat .git/config' } }], delayMs: 1500 } : { text: `seen ${c.toolResults.join('').length} bytes` }));
    const id = idOf(await spawn({ profileId: 'coder-chat', prompt: '#agent=peek look', proxyOperations: ['exec_run'] }));
    await e.fake.firstRequest('peek');
    const procs = runtimeProcesses();
    expect(procs.length).toBeGreaterThan(0);
    for (const line of procs) {
      const pid = line.trim().split(/\s+/)[0]!;
      let environ = '';
      let mounts = '';
      try {
        environ = readFileSync(`/proc/${pid}/environ`, 'utf8');
        mounts = readFileSync(`/proc/${pid}/mountinfo`, 'utf8');
      } catch {
        continue;
      }
      for (const s of [line, environ, mounts]) {
        expect(s).not.toContain(PROVIDER_KEY);
        expect(s).not.toContain(e.host.token);
        expect(s).not.toContain('atlg_');
      }
      expect(mounts).not.toContain('/workspaces/');
      expect(mounts).not.toContain('master.key');
      expect(mounts).not.toContain(e.svc.dataDir);
    }
    const end = await e.waitEnd(id);
    expect(end.status).toBe('SUCCEEDED');
    const log = await e.logText(id);
    const all = JSON.stringify(end) + log + JSON.stringify(e.fake.requests.filter((q) => q.script === 'peek').map((q) => q.body));
    expect(all).not.toContain(PROVIDER_KEY);
    expect(all).not.toContain(e.host.token);
    expect(all).not.toContain('atlg_');
    for (const f of readdirSync(join(e.svc.dataDir, 'state', 'agents'))) {
      const t = readFileSync(join(e.svc.dataDir, 'state', 'agents', f), 'utf8');
      expect(t).not.toContain(PROVIDER_KEY);
      expect(t).not.toContain('atlg_');
    }
  }, 60_000);

  it('GET /api/v1/agents shows the tree, status, budgets and spend; POST /api/v1/agents/:id/cancel cancels', async () => {
    e.fake.scripts.set('rest', looping({ input: 100, output: 10 }, 400));
    const id = idOf(await spawn({ profileId: 'coder-chat', prompt: '#agent=rest go', proxyOperations: ['files_read'], repositoryContext: 'none' }));
    await e.waitFor(id, (s) => s.status === 'RUNNING');
    const list = await e.rest('GET', '/api/v1/agents?status=RUNNING');
    expect(list.status).toBe(200);
    const mine = list.body.agents.find((a: any) => a.agentId === id);
    expect(mine).toMatchObject({ status: 'RUNNING', workspaceId: e.ws, parentAgentId: null, rootAgentId: id });
    expect(mine.budgets.maxCostMicros.budget).toBe(10_000_000);
    expect(mine.spend.unit).toBe('micro-USD');
    expect((await httpNoCsrf(`/api/v1/agents/${id}/cancel`)).status).toBe(403);
    expect((await e.rest('POST', '/api/v1/agents/agent_bad/cancel', {})).status).toBe(400);
    expect((await e.rest('POST', `/api/v1/agents/${id}/cancel`, { reason: 'x'.repeat(2001) })).status).toBe(400);
    expect((await e.rest('POST', `/api/v1/agents/${id}/cancel`, { why: 'x' })).status).toBe(400);
    expect((await e.rest('GET', '/api/v1/agents?limit=0')).status).toBe(400);
    expect((await e.rest('GET', '/api/v1/agents?status=DONE')).status).toBe(400);
    const c = await e.rest('POST', `/api/v1/agents/${id}/cancel`, { reason: 'from the dashboard' });
    expect(c.status).toBe(200);
    expect(c.body).toMatchObject({ agentId: id, status: 'CANCELLED', cancelled: [id] });
    const audit = await e.rest('GET', '/api/v1/audit-log?actor=dashboard&action=agent_cancel');
    expect(JSON.stringify(audit.body)).toContain(id);
  }, 60_000);
});

async function httpNoCsrf(path: string) {
  const { httpRequest } = await import('./harness.js');
  return httpRequest(e.svc.url, 'POST', path, { cookie: e.cookie, 'content-type': 'application/json' }, '{}');
}

describe('bad input on every field', () => {
  it('refuses each field out of its rule, naming it', async () => {
    const base = { workspaceId: e.ws, prompt: 'p', idempotencyKey: 'bad-input-1', profileId: 'coder-chat', proxyOperations: ['files_read'] };
    const cases: Array<[string, Record<string, unknown>, string, string]> = [
      ['agent_spawn', { ...base, prompt: '' }, 'INVALID_ARGUMENT', 'prompt'],
      ['agent_spawn', { ...base, prompt: undefined }, 'INVALID_ARGUMENT', 'prompt'],
      ['agent_spawn', { ...base, idempotencyKey: 'short' }, 'INVALID_ARGUMENT', 'idempotencyKey'],
      ['agent_spawn', { ...base, profileId: 'bad profile!' }, 'INVALID_ARGUMENT', 'profileId'],
      ['agent_spawn', { ...base, profileId: 'nope' }, 'NOT_FOUND', 'profileId'],
      ['agent_spawn', { ...base, parentAgentId: 'ws_abcdefghijklmnopqrstuv' }, 'INVALID_ARGUMENT', 'parentAgentId'],
      ['agent_spawn', { ...base, parentAgentId: 'agent_abcdefghijklmnopqrstuv' }, 'NOT_FOUND', 'parentAgentId'],
      ['agent_spawn', { ...base, proxyOperations: 'files_read' }, 'INVALID_ARGUMENT', 'proxyOperations'],
      ['agent_spawn', { ...base, proxyOperations: ['no_such_tool'] }, 'INVALID_ARGUMENT', 'proxyOperations'],
      ['agent_spawn', { ...base, proxyOperations: ['workspace_close'] }, 'INVALID_ARGUMENT', 'proxyOperations'],
      ['agent_spawn', { ...base, proxyOperations: ['files_delete'] }, 'OWNER_APPROVAL_REQUIRED', 'proxyOperations'],
      ['agent_spawn', { ...base, ttlSeconds: 29 }, 'INVALID_ARGUMENT', 'ttlSeconds'],
      ['agent_spawn', { ...base, ttlSeconds: 86401 }, 'INVALID_ARGUMENT', 'ttlSeconds'],
      ['agent_spawn', { ...base, maxOutputBytes: 1023 }, 'INVALID_ARGUMENT', 'maxOutputBytes'],
      ['agent_spawn', { ...base, maxOutputBytes: 10485761 }, 'INVALID_ARGUMENT', 'maxOutputBytes'],
      ['agent_spawn', { ...base, maxInputTokens: 0 }, 'INVALID_ARGUMENT', 'maxInputTokens'],
      ['agent_spawn', { ...base, maxOutputTokens: 2000001 }, 'INVALID_ARGUMENT', 'maxOutputTokens'],
      ['agent_spawn', { ...base, maxCostMicros: -1 }, 'INVALID_ARGUMENT', 'maxCostMicros'],
      ['agent_spawn', { ...base, maxCostMicros: 1.5 }, 'INVALID_ARGUMENT', 'maxCostMicros'],
      ['agent_spawn', { ...base, repositoryContext: 'profile_z' }, 'INVALID_ARGUMENT', 'repositoryContext'],
      ['agent_spawn', { ...base, workspaceId: 'ws_nosuchworkspace000000000' }, 'NOT_FOUND', 'workspaceId'],
      ['agent_spawn', { ...base, extra: 1 }, 'INVALID_ARGUMENT', 'extra'],
      ['agent_status', { workspaceId: e.ws }, 'INVALID_ARGUMENT', 'agentId'],
      ['agent_status', { workspaceId: e.ws, agentId: 'agent_x' }, 'INVALID_ARGUMENT', 'agentId'],
      ['agent_status', { workspaceId: e.ws, idempotencyKey: 'no-such-key-123' }, 'NOT_FOUND', 'idempotencyKey'],
      ['agent_logs', { workspaceId: e.ws, agentId: 'agent_abcdefghijklmnopqrstuv' }, 'NOT_FOUND', 'agentId'],
      ['agent_logs', { workspaceId: e.ws, agentId: 'agent_abcdefghijklmnopqrstuv', cursor: 'abc' }, 'INVALID_ARGUMENT', 'cursor'],
      ['agent_logs', { workspaceId: e.ws, agentId: 'agent_abcdefghijklmnopqrstuv', cursor: '-1' }, 'INVALID_ARGUMENT', 'cursor'],
      ['agent_logs', { workspaceId: e.ws, agentId: 'agent_abcdefghijklmnopqrstuv', limitBytes: 1023 }, 'INVALID_ARGUMENT', 'limitBytes'],
      ['agent_logs', { workspaceId: e.ws, agentId: 'agent_abcdefghijklmnopqrstuv', limitBytes: 262145 }, 'INVALID_ARGUMENT', 'limitBytes'],
      ['agent_message', { workspaceId: e.ws, agentId: 'agent_abcdefghijklmnopqrstuv', idempotencyKey: 'msg-bad-1', mode: 'shout', message: 'x' }, 'INVALID_ARGUMENT', 'mode'],
      ['agent_message', { workspaceId: e.ws, agentId: 'agent_abcdefghijklmnopqrstuv', idempotencyKey: 'msg-bad-2', mode: 'steer', message: '' }, 'INVALID_ARGUMENT', 'message'],
      ['agent_message', { workspaceId: e.ws, agentId: 'agent_abcdefghijklmnopqrstuv', idempotencyKey: 'msg-bad-3', mode: 'steer', message: 'x' }, 'NOT_FOUND', 'agentId'],
      ['agent_cancel', { workspaceId: e.ws, agentId: 'agent_abcdefghijklmnopqrstuv', reason: 'x'.repeat(2001) }, 'INVALID_ARGUMENT', 'reason'],
      ['agent_cancel', { workspaceId: e.ws, agentId: 'agent_abcdefghijklmnopqrstuv' }, 'NOT_FOUND', 'agentId'],
      ['agent_list', { workspaceId: e.ws, cursor: '0' }, 'INVALID_ARGUMENT', 'cursor'],
      ['agent_list', { workspaceId: e.ws, cursor: 'x'.repeat(300) }, 'INVALID_ARGUMENT', 'cursor'],
      ['agent_list', { workspaceId: e.ws, limit: 0 }, 'INVALID_ARGUMENT', 'limit'],
      ['agent_list', { workspaceId: e.ws, limit: 101 }, 'INVALID_ARGUMENT', 'limit'],
      ['agent_list', { workspaceId: e.ws, status: 'DONE' }, 'INVALID_ARGUMENT', 'status'],
      ['agent_list', { workspaceId: e.ws, parentAgentId: 'agent_abcdefghijklmnopqrstuv' }, 'NOT_FOUND', 'parentAgentId'],
    ];
    for (const [name, args, code, field] of cases) {
      const r = await e.tool(name, args);
      expect(r.ok, `${name} ${JSON.stringify(args).slice(0, 200)}`).toBe(false);
      if (r.ok) continue;
      expect(r.error.code, `${name} ${field}: ${r.text}`).toBe(code);
      expect(JSON.stringify(r.error), `${name} ${field}`).toContain(field);
    }
    // A disabled profile is refused; a deeply nested / huge proxyOperations list too.
    const dis = await e.rest('POST', '/api/v1/agent-model-profiles', { profileId: 'off', displayName: 'off', credentialId: e.credentialId, model: 'm', apiMode: 'chat-completions', pricing: PRICING, limits: LIMITS, maxProxyOperations: ['files_read'], idempotencyKey: 'make-profile-off' });
    expect(dis.status, JSON.stringify(dis.body)).toBe(201);
    const off = await e.tool('agent_spawn', { ...base, profileId: 'off', idempotencyKey: 'bad-input-off' });
    expect(!off.ok && off.error.code).toBe('FAILED_PRECONDITION');
    const huge = await e.tool('agent_spawn', { ...base, idempotencyKey: 'bad-input-huge', proxyOperations: Array.from({ length: 201 }, () => 'files_read') });
    expect(!huge.ok && huge.error.code).toBe('INVALID_ARGUMENT');
    const nested = await e.tool('agent_spawn', { ...base, idempotencyKey: 'bad-input-nest', proxyOperations: [[[['files_read']]]] });
    expect(!nested.ok && nested.error.code).toBe('INVALID_ARGUMENT');
  }, 60_000);
});
