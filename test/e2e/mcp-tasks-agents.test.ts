/**
 * agent_spawn as an MCP task (issue #32 item 2; docs/mcp-tasks.md), through the real service, the
 * real gateway and the scripted fake provider: the task carries exactly what agent_spawn answers
 * (the agent and its status), the agent goes on as every agent does, and the same idempotency key
 * answers the same task and, called directly, the same agent.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAgentEnv, type AgentEnv } from './agents-fixture.js';

const TASKS = 'io.modelcontextprotocol/tasks';

let e: AgentEnv;
beforeAll(async () => {
  e = await startAgentEnv();
  await e.makeProfile('tasker', 'chat-completions');
}, 180_000);
afterAll(async () => {
  await e?.dispose();
});

let n = 0;
/** One 2026-07-28 request that declares the Tasks extension (the v2 client cannot take a task result: see mcp-tasks.test.ts). */
async function rpc(method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
  const res = await fetch(e.svc.mcpUrl, {
    method: 'POST',
    headers: { authorization: `Bearer ${e.svc.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': method, 'mcp-name': String(params.name ?? params.taskId) },
    body: JSON.stringify({ jsonrpc: '2.0', id: ++n, method, params: { ...params, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS]: {} } } } } }),
  });
  const j = (await res.json()) as { result?: Record<string, unknown>; error?: unknown };
  if (!j.result) throw new Error(`${method}: ${JSON.stringify(j.error)}`);
  return j.result;
}

describe('agent_spawn as a task', () => {
  it('the task completes with the spawn\'s own answer; the agent runs to its end; the same key is the same task and the same agent', async () => {
    e.fake.scripts.set('as-task', () => ({ text: 'done as a task' }));
    const args = { workspaceId: e.ws, profileId: 'tasker', prompt: '#agent=as-task say done', proxyOperations: ['files_read'], idempotencyKey: 'spawn-as-task-1' };
    const created = await rpc('tools/call', { name: 'agent_spawn', arguments: args });
    expect(created).toMatchObject({ resultType: 'task', status: 'working' });
    const taskId = created.taskId as string;
    let t: Record<string, unknown> = {};
    for (let i = 0; i < 600; i++) {
      t = await rpc('tasks/get', { taskId });
      if (t.status !== 'working') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(t.status, JSON.stringify(t)).toBe('completed');
    const spawned = (t.result as { structuredContent: { agentId: string; status: string } }).structuredContent;
    expect(spawned.agentId).toMatch(/^agent_/);
    const end = await e.waitEnd(spawned.agentId);
    expect(end.status).toBe('SUCCEEDED');
    expect(end.summary).toBe('done as a task');
    // The same key and input: the same task; called directly: the same agent, replayed.
    expect((await rpc('tools/call', { name: 'agent_spawn', arguments: args })).taskId).toBe(taskId);
    const direct = await e.ok('agent_spawn', args);
    expect(direct).toMatchObject({ agentId: spawned.agentId, replayed: true });
  });
});
