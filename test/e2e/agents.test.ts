/**
 * Coding subagents (issue #14) through the real `atelier serve`, the official MCP client, the
 * real gateway and the scripted fake provider on loopback, in both API modes, streaming.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { startAgentEnv, runtimeProcesses, PROVIDER_KEY, type AgentEnv } from './agents-fixture.js';

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
      const r = await spawn({ profileId, prompt: `#agent=${name} make the parser trim fields`, repositoryContext: 'profile_a' });
      expect(r.ok, JSON.stringify(r)).toBe(true);
      const id = (r as any).result.agentId as string;
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
