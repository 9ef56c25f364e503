/**
 * Toolsets, read-only access and MCP logging (issue #16) against the real `atelier serve`, through
 * the official MCP client: a toolset-limited token sees and calls only those tools; a read-only
 * token is refused on a destructive tool even when it names it directly; X-MCP-Toolsets and
 * X-MCP-Readonly narrow a connection (never widen it); logging/setLevel and log notifications;
 * progress notifications during a clone.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { call, connectV2, httpRequest, runCli, type Service } from './harness.js';
import { ALL_TOOLS } from './spec.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let repoUrl: string;

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/access', REPO_FILES)).url;
  svc = await startWorkspaceService(host);
}, 120_000);
afterAll(async () => {
  await svc?.dispose();
  await host?.close();
});

async function token(...flags: string[]): Promise<{ token: string; id: string; toolsets: string[] | null; readOnly: boolean }> {
  const r = await runCli(['token', 'create', '--name', 'access e2e', '--json', ...flags, '--data-dir', svc.dataDir]);
  if (r.code !== 0) throw new Error(r.stderr);
  return JSON.parse(r.stdout);
}

async function connectWith(tok: string, headers: Record<string, string> = {}): Promise<Client> {
  const c = new Client({ name: 'access-e2e', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${tok}`, ...headers } } }));
  return c;
}

const names = async (c: Client) => (await c.listTools()).tools.map((t) => t.name).sort();

describe('toolsets', () => {
  it('a token limited to the "code" preset sees and calls only workspace, files, commands and git tools', async () => {
    const t = await token('--toolsets', 'code');
    expect(t.toolsets).toEqual(['commands', 'files', 'git', 'workspace']);
    const c = await connectWith(t.token);
    const seen = await names(c);
    expect(seen).toContain('workspace_open');
    expect(seen).toContain('files_read');
    expect(seen).toContain('exec_run');
    expect(seen).toContain('git_commit');
    expect(seen).not.toContain('agent_spawn');
    expect(seen).not.toContain('knowledge_create');
    expect(seen).not.toContain('model_profile_list');
    // Called by name anyway: refused on the server.
    const r = await call(c, 'model_profile_list', {});
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.code).toBe('PERMISSION_DENIED');
      expect(r.error.message).toMatch(/toolset models/);
    }
    const ok = await call(c, 'workspace_list', {});
    expect(ok.ok).toBe(true);
    await c.close();
    const listed = await runCli(['token', 'list', '--data-dir', svc.dataDir]);
    expect(listed.stdout).toContain('toolsets commands, files, git, workspace');
  });

  it('X-MCP-Toolsets narrows a full token per connection, and cannot widen a narrowed one', async () => {
    const c = await connectWith(svc.token, { 'X-MCP-Toolsets': 'git' });
    const seen = await names(c);
    expect(seen.every((n) => n.startsWith('git_') || n.startsWith('worktrees_') || n === 'workspace_finalize')).toBe(true);
    expect(seen.length).toBe(18);
    await c.close();
    const t = await token('--toolsets', 'files');
    const c2 = await connectWith(t.token, { 'X-MCP-Toolsets': 'files,agents' });
    const seen2 = await names(c2);
    expect(seen2).toContain('files_read');
    expect(seen2).not.toContain('agent_spawn');
    expect((await call(c2, 'agent_list', {})).ok).toBe(false);
    await c2.close();
  });

  it('the default is everything; unknown toolset names are refused with the list of names', async () => {
    const c = await connectV2(svc);
    expect((await c.listTools()).tools.length).toBe(ALL_TOOLS);
    await c.close();
    const bad = await runCli(['token', 'create', '--toolsets', 'code,nonsense', '--data-dir', svc.dataDir]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/unknown toolset "nonsense"; toolsets: workspace, files/);
    const huge = await runCli(['token', 'create', '--toolsets', Array(100).fill('git').join(','), '--data-dir', svc.dataDir]);
    expect(huge.code).toBe(2);
    const INIT = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });
    const h = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${svc.token}` };
    const r = await httpRequest(svc.url, 'POST', '/mcp', { ...h, 'x-mcp-toolsets': '../../etc' }, INIT);
    expect(r.status).toBe(400);
    expect(JSON.parse(r.body).error.details.field).toBe('X-MCP-Toolsets');
    const r2 = await httpRequest(svc.url, 'POST', '/mcp', { ...h, 'x-mcp-readonly': 'maybe' }, INIT);
    expect(r2.status).toBe(400);
  });
});

describe('read-only access', () => {
  let ws: string;

  beforeAll(async () => {
    const c = await connectV2(svc);
    const r = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'access-open-1' });
    if (!r.ok) throw new Error(r.text);
    ws = r.result.workspaceId as string;
    await c.close();
  }, 120_000);

  it('a read-only token lists only readOnly tools and is refused on a destructive tool named directly', async () => {
    const t = await token('--read-only');
    expect(t.readOnly).toBe(true);
    const c = await connectWith(t.token);
    const tools = (await c.listTools()).tools;
    expect(tools.length).toBeGreaterThan(20);
    expect(tools.every((x) => x.annotations?.readOnlyHint === true)).toBe(true);
    // Reading works.
    const read = await call(c, 'files_read', { workspaceId: ws, path: 'README.md' });
    expect(read.ok).toBe(true);
    // Destructive tools, named directly, are refused before they run.
    for (const [name, args] of [
      ['files_delete', { workspaceId: ws, path: 'README.md' }],
      ['workspace_close', { workspaceId: ws }],
      ['exec_run', { workspaceId: ws, command: 'rm -rf .' }],
      ['git_push', { workspaceId: ws }],
    ] as const) {
      const r = await call(c, name, args as Record<string, unknown>);
      expect(r.ok).toBe(false);
      if (!r.ok) {
        expect(r.error.code).toBe('PERMISSION_DENIED');
        expect(r.error.details.rule).toBe('read-only access');
      }
    }
    await c.close();
    // Nothing happened: the file and the workspace are still there.
    const full = await connectV2(svc);
    expect((await call(full, 'files_read', { workspaceId: ws, path: 'README.md' })).ok).toBe(true);
    const st = await call(full, 'workspace_status', { workspaceId: ws });
    expect(st.ok && st.result.state).toBe('active');
    await full.close();
  });

  it('operation_wait sends progress while it waits, where the client sent a progress token', async () => {
    const c = await connectV2(svc);
    const op = await call(c, 'exec_run', { workspaceId: ws, command: 'sleep 3; echo done', async: true });
    expect(op.ok, op.ok ? '' : op.text).toBe(true);
    const progress: Array<{ progress: number; total?: number; message?: string }> = [];
    const r = await c.callTool({ name: 'operation_wait', arguments: { operationId: (op as { result: Record<string, unknown> }).result.operationId, timeoutMs: 20_000 } }, { onprogress: (p) => void progress.push(p) });
    expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
    expect((r.structuredContent as { ended: boolean }).ended).toBe(true);
    expect(progress.length).toBeGreaterThanOrEqual(2);
    expect(progress[0]!.total).toBe(20_000);
    expect(progress[0]!.message).toMatch(/waiting for operation/);
    await c.close();
  }, 60_000);

  it('X-MCP-Readonly: true makes a full token read-only for that connection', async () => {
    const c = await connectWith(svc.token, { 'X-MCP-Readonly': 'true' });
    const r = await call(c, 'files_write', { workspaceId: ws, path: 'x.txt', content: 'x' });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error.code).toBe('PERMISSION_DENIED');
    await c.close();
  });
});

describe('MCP logging and progress', () => {
  it('declares logging, honours logging/setLevel, and sends clone progress and log messages when asked', async () => {
    const c = await connectV2(svc);
    expect(c.getServerCapabilities()?.logging).toBeDefined();
    const logs: Array<{ level: string; data: unknown }> = [];
    c.setNotificationHandler('notifications/message', (n) => void logs.push(n.params as { level: string; data: unknown }));
    await c.setLoggingLevel('info');
    const progress: Array<{ progress: number; total?: number; message?: string }> = [];
    const r = await c.callTool({ name: 'workspace_open', arguments: { repositoryUrl: repoUrl, idempotencyKey: 'access-log-1' } }, { onprogress: (p) => void progress.push(p) });
    expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
    expect(progress.length).toBeGreaterThanOrEqual(3);
    expect(progress.some((p) => /cloning/.test(p.message ?? ''))).toBe(true);
    expect(progress.at(-1)!.progress).toBe(progress.at(-1)!.total);
    expect(logs.some((l) => l.level === 'info' && /cloning/.test(JSON.stringify(l.data)))).toBe(true);
    // Task milestones.
    const t = await call(c, 'tasks_run', { workspaceId: (r.structuredContent as { workspaceId: string }).workspaceId, command: 'true', idempotencyKey: 'access-task-1' });
    expect(t.ok, t.ok ? '' : t.text).toBe(true);
    expect(logs.some((l) => /task task_\S+ (started|is )/.test(JSON.stringify(l.data)))).toBe(true);
    // A higher threshold silences info messages.
    await c.setLoggingLevel('error');
    logs.length = 0;
    const r2 = await c.callTool({ name: 'workspace_open', arguments: { repositoryUrl: repoUrl, idempotencyKey: 'access-log-2' } });
    expect(r2.isError, JSON.stringify(r2.content)).toBeFalsy();
    expect(logs.length).toBe(0);
    await c.close();
  }, 180_000);

  it('a client that never asked gets no log messages', async () => {
    const c = await connectWith((await token()).token);
    const logs: unknown[] = [];
    c.setNotificationHandler('notifications/message', (n) => void logs.push(n.params));
    const r = await c.callTool({ name: 'workspace_open', arguments: { repositoryUrl: repoUrl, idempotencyKey: 'access-log-3' } });
    expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
    expect(logs.length).toBe(0);
    await c.close();
  }, 180_000);
});
