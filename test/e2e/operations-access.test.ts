/**
 * Issue #42 item 6 through the real service: operation_status, operation_wait and operation_cancel
 * obey the caller's access exactly as tasks/get does (one rule, services/commands/access.ts).
 * Narrowed connections (X-MCP-Toolsets, X-MCP-Readonly) and narrowed tokens (atelier token create
 * --read-only / --toolsets) are told an operation outside their grant does not exist, whether it
 * runs or has ended; the owner's unnarrowed connection still reaches it, and what was hidden was
 * neither read nor cancelled.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { z } from 'zod';
import { call, connectV1, runCli, type Service } from './harness.js';
import { startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let owner: ClientV1;
let ws: string;
const clients: ClientV1[] = [];

async function connect(token: string, headers: Record<string, string> = {}): Promise<ClientV1> {
  const c = new ClientV1({ name: 'ops-access-e2e', version: '1.0.0' });
  await c.connect(new TransportV1(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${token}`, ...headers } } }));
  clients.push(c);
  return c;
}

async function token(...flags: string[]): Promise<string> {
  const r = await runCli(['token', 'create', '--name', 'ops access e2e', '--json', ...flags, '--data-dir', svc.dataDir]);
  if (r.code !== 0) throw new Error(r.stderr);
  return (JSON.parse(r.stdout) as { token: string }).token;
}

async function ok(c: ClientV1, name: string, args: Record<string, unknown>): Promise<Record<string, any>> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

/** Each of the three operation tools, as `c` sees the operation: the error code of each (or 'ok'). */
async function seen(c: ClientV1, operationId: string, tools = ['operation_status', 'operation_wait', 'operation_cancel']): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const t of tools) {
    const r = await call(c, t, t === 'operation_wait' ? { operationId, timeoutMs: 1000 } : { operationId });
    out[t] = r.ok ? 'ok' : r.error.code;
  }
  return out;
}

beforeAll(async () => {
  host = await startGitHost();
  const repo = await host.createRepo('approved/ops-access', { 'README.md': '# ops\n' });
  svc = await startWorkspaceService(host);
  owner = await connectV1(svc);
  ws = (await ok(owner, 'workspace_open', { repositoryUrl: repo.url, idempotencyKey: `ops-access-${Date.now()}` })).workspaceId as string;
}, 180_000);

afterAll(async () => {
  for (const c of [...clients, owner]) await c?.close().catch(() => undefined);
  await svc?.dispose();
  await host?.close();
});

describe('operations obey the access of the caller as tasks do', () => {
  it('a read-only connection or token finds no exec_run operation; the owner still reaches it, still running', async () => {
    const op = await ok(owner, 'exec_run', { workspaceId: ws, command: 'sleep 120; echo late', timeoutMs: 300_000, async: true });
    const operationId = op.operationId as string;
    expect(op.state).toBe('running');
    // X-MCP-Readonly on the owner's own token, and a token made --read-only: operation_status and
    // operation_wait (read-only tools) are told there is no such operation; operation_cancel is
    // refused by the grant before it looks (not a read-only tool).
    const roHeader = await connect(svc.token, { 'x-mcp-readonly': 'true' });
    const roToken = await connect(await token('--read-only'));
    for (const c of [roHeader, roToken]) {
      const s = await seen(c, operationId);
      expect(s).toEqual({ operation_status: 'NOT_FOUND', operation_wait: 'NOT_FOUND', operation_cancel: 'PERMISSION_DENIED' });
      const r = await call(c, 'operation_status', { operationId });
      expect(!r.ok && r.error.message).toBe(`operationId: no operation ${operationId}`);
    }
    // The same answer as an id that never existed: existence does not leak.
    const ghost = await call(roHeader, 'operation_status', { operationId: operationId.slice(0, -1) + (operationId.endsWith('A') ? 'B' : 'A') });
    expect(!ghost.ok && ghost.error.code).toBe('NOT_FOUND');
    // A connection whose grant covers exec_run reaches it (narrowed to the commands toolset).
    const commands = await connect(svc.token, { 'x-mcp-toolsets': 'commands' });
    expect((await ok(commands, 'operation_status', { operationId })).state).toBe('running');
    // Nothing was cancelled: the owner finds it running, then cancels it.
    expect((await ok(owner, 'operation_status', { operationId })).state).toBe('running');
    const cancelled = await ok(owner, 'operation_cancel', { operationId });
    expect(cancelled).toMatchObject({ operationId, alreadyEnded: false });
  });

  it('an operation of a tool outside the connection\'s toolsets (a git_fetch task) does not exist for it: status, wait and cancel alike', async () => {
    // The owner runs git_fetch as an MCP task (2025-11-25): its operation is the task.
    const created = (await owner.request(
      { method: 'tools/call', params: { name: 'git_fetch', arguments: { workspaceId: ws }, task: { ttl: 60_000 } } },
      z.looseObject({ task: z.looseObject({ taskId: z.string() }) }) as never,
    )) as unknown as { task: { taskId: string } };
    const operationId = created.task.taskId;
    const done = await ok(owner, 'operation_wait', { operationId, timeoutMs: 120_000 });
    expect(done.ended).toBe(true);
    expect(done.tool).toBe('git_fetch');
    // The same principal (the owner's token), narrowed on this connection to `commands`: the three
    // operation tools are granted, git_fetch is not, so the operation is not there; tasks/get says the same.
    const narrowed = await connect(svc.token, { 'x-mcp-toolsets': 'commands' });
    expect(await seen(narrowed, operationId)).toEqual({ operation_status: 'NOT_FOUND', operation_wait: 'NOT_FOUND', operation_cancel: 'NOT_FOUND' });
    const task = await narrowed.request({ method: 'tasks/get', params: { taskId: operationId } }, z.looseObject({}) as never).then(
      () => 'found',
      (e: { code?: number }) => e.code,
    );
    expect(task).toBe(-32602);
    // With git in its toolsets the same connection form reaches it, as tasks/get does.
    const withGit = await connect(svc.token, { 'x-mcp-toolsets': 'commands,git' });
    expect(await seen(withGit, operationId)).toEqual({ operation_status: 'ok', operation_wait: 'ok', operation_cancel: 'ok' });
    expect((await ok(withGit, 'operation_cancel', { operationId })).alreadyEnded).toBe(true);
  });

  it('a token narrowed to the commands toolset reaches the owner\'s async exec_run, and a read-only one does not', async () => {
    const op = await ok(owner, 'exec_run', { workspaceId: ws, command: 'echo ended', async: true });
    const operationId = op.operationId as string;
    await ok(owner, 'operation_wait', { operationId, timeoutMs: 60_000 });
    const cmd = await connect(await token('--toolsets', 'commands'));
    expect((await ok(cmd, 'operation_status', { operationId })).output).toContain('ended');
    const ro = await connect(await token('--toolsets', 'commands', '--read-only'));
    expect(await seen(ro, operationId, ['operation_status', 'operation_wait'])).toEqual({ operation_status: 'NOT_FOUND', operation_wait: 'NOT_FOUND' });
  });
});
