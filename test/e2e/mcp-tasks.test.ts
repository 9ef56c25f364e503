/**
 * Long calls as MCP tasks (issue #32 item 2; docs/mcp-tasks.md), through the real service on a real
 * workspace: the 2026-07-28 Tasks extension (tools/call answered with a task, tasks/get,
 * tasks/update, tasks/cancel) and the 2025-11-25 tasks driven by the official v1 client's own task
 * API. The official v2 client (2.4.0) has no Tasks-extension support on tools/call (it refuses a
 * result of type "task"), so its task-augmented tools/call is sent as the 2026-07-28 wire has it
 * (Modern below) and tasks/get, tasks/cancel go through the v2 client's request() with a schema.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { call, connectV1, dashboardLogin, httpRequest, runCli, startService, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

const TASKS = 'io.modelcontextprotocol/tasks';
const ANY = z.looseObject({});

let host: GitHost;
let svc: Service;
let ws: string;
let v1: ClientV1;
let repoUrl: string;

/** A 2026-07-28 client as the wire has it: every request carries the envelope with the capabilities given. */
class Modern {
  private id = 0;
  constructor(
    private readonly s: () => Service,
    private readonly capabilities: Record<string, unknown>,
    private readonly token: () => string = () => s().token,
    private readonly headers: Record<string, string> = {},
  ) {}

  /** The JSON-RPC response (result or error) to one request. */
  async rpc(method: string, params: Record<string, unknown>): Promise<{ result?: Record<string, unknown>; error?: { code: number; message: string; data?: unknown } }> {
    const name = typeof params.name === 'string' ? params.name : typeof params.taskId === 'string' ? params.taskId : undefined;
    const body = {
      jsonrpc: '2.0',
      id: ++this.id,
      method,
      params: {
        ...params,
        _meta: {
          'io.modelcontextprotocol/protocolVersion': '2026-07-28',
          'io.modelcontextprotocol/clientInfo': { name: 'atelier-e2e-modern', version: '1.0.0' },
          'io.modelcontextprotocol/clientCapabilities': this.capabilities,
        },
      },
    };
    const res = await fetch(this.s().mcpUrl, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${this.token()}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2026-07-28',
        'mcp-method': method,
        ...(name !== undefined ? { 'mcp-name': name } : {}),
        ...this.headers,
      },
      body: JSON.stringify(body),
    });
    const text = await res.text();
    // A JSON-RPC error may come with an HTTP status of its own (the SDK answers -32021 with 400).
    if (res.status !== 200 && !(res.headers.get('content-type') ?? '').startsWith('application/json')) throw new Error(`${method}: HTTP ${res.status}: ${text}`);
    const json = (res.headers.get('content-type') ?? '').startsWith('text/event-stream')
      ? JSON.parse(text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).pop()!)
      : JSON.parse(text);
    return json;
  }

  async ok(method: string, params: Record<string, unknown>): Promise<Record<string, unknown>> {
    const r = await this.rpc(method, params);
    if (r.error) throw new Error(`${method}: ${JSON.stringify(r.error)}`);
    return r.result!;
  }

  /** Polls tasks/get until the task's status is one of `until` (bounded: the outcome decides, never the clock). */
  async waitFor(taskId: string, until: string[], tries = 600): Promise<Record<string, unknown>> {
    for (let i = 0; i < tries; i++) {
      const t = await this.ok('tasks/get', { taskId });
      if (until.includes(t.status as string)) return t;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`task ${taskId} never reached ${until.join('/')}`);
  }
}

const modern = new Modern(() => svc, { extensions: { [TASKS]: {} } });
const modernNoTasks = new Modern(() => svc, {});

async function ok(name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(v1, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

/** A new owner bearer token (another principal), with the flags given. */
async function token(...flags: string[]): Promise<string> {
  const r = await runCli(['token', 'create', '--name', 'tasks e2e', '--json', ...flags, '--data-dir', svc.dataDir]);
  if (r.code !== 0) throw new Error(r.stderr);
  return (JSON.parse(r.stdout) as { token: string }).token;
}

let ownerSession: { cookie: string; csrf: string } | undefined;
const owner = async () => (ownerSession ??= await dashboardLogin(svc));

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/tasks', REPO_FILES)).url;
  svc = await startWorkspaceService(host);
  v1 = await connectV1(svc);
  ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'tasks-open-1' })).workspaceId as string;
}, 180_000);

afterAll(async () => {
  await v1?.close();
  await svc?.dispose();
  await host?.close();
});

describe('clients that do not negotiate tasks see no change', () => {
  it('v1 and 2026-07-28 calls without the capability answer the plain result; only 2025-era tools/list names taskSupport', async () => {
    const plain = await ok('exec_run', { workspaceId: ws, command: 'echo plain' });
    expect(plain).toMatchObject({ exitCode: 0, stdout: 'plain\n' });
    // The official v2 client without the extension, on either era: the plain result.
    for (const versionNegotiation of [undefined, { mode: 'auto' as const }]) {
      const v2 = new Client({ name: 'tasks-e2e-v2-plain', version: '1.0.0' }, versionNegotiation ? { versionNegotiation } : {});
      await v2.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${svc.token}` } } }));
      const r = await call(v2, 'exec_run', { workspaceId: ws, command: 'echo v2-plain' });
      expect(r.ok && r.result).toMatchObject({ exitCode: 0, stdout: 'v2-plain\n' });
      await v2.close();
    }
    const m = await modernNoTasks.ok('tools/call', { name: 'exec_run', arguments: { workspaceId: ws, command: 'echo modern' } });
    expect(m.resultType).toBe('complete');
    expect(m.structuredContent).toMatchObject({ exitCode: 0, stdout: 'modern\n' });
    // The 2025 list says which tools may run as tasks; the 2026 wire has no such field.
    const tools = (await v1.listTools()).tools as Array<{ name: string; execution?: { taskSupport?: string } }>;
    expect(tools.find((t) => t.name === 'exec_run')!.execution).toEqual({ taskSupport: 'optional' });
    expect(tools.find((t) => t.name === 'files_read')!.execution).toBeUndefined();
    expect(tools.filter((t) => t.execution).map((t) => t.name).sort()).toEqual(
      ['agent_spawn', 'bash', 'deployments_run', 'exec_run', 'git_fetch', 'git_pull', 'git_push', 'hooks_run', 'packages_apply', 'skills_run', 'tasks_run', 'workspace_finalize', 'workspace_open'].sort(),
    );
    const listed = await modernNoTasks.ok('tools/list', {});
    expect((listed.tools as Array<Record<string, unknown>>).some((t) => 'execution' in t)).toBe(false);
    // The server says it serves both forms.
    expect(v1.getServerCapabilities()?.tasks).toMatchObject({ requests: { tools: { call: {} } } });
  });

  it('tasks/get without the extension in the request capabilities is -32021', async () => {
    const r = await modernNoTasks.rpc('tasks/get', { taskId: 'op_whatever' });
    expect(r.error?.code).toBe(-32021);
    expect(r.error?.data).toEqual({ requiredCapabilities: { extensions: { [TASKS]: {} } } });
  });
});

describe('2026-07-28: the Tasks extension', () => {
  it('exec_run of a long command: a task at once, polled while working (its output live in operation_status), cancelled, its process gone', async () => {
    const created = await modern.ok('tools/call', { name: 'exec_run', arguments: { workspaceId: ws, command: 'echo started-$((6*7)); exec sleep 120', timeoutMs: 300000 } });
    expect(created).toMatchObject({ resultType: 'task', status: 'working', ttlMs: 86400000, pollIntervalMs: 1000 });
    expect(created).not.toHaveProperty('content');
    const taskId = created.taskId as string;
    // Unguessable: the operation's own id, 24 random URL-safe characters.
    expect(taskId).toMatch(/^op_[A-Za-z0-9_-]{24}$/);
    expect(await modern.ok('tasks/get', { taskId })).toMatchObject({ resultType: 'complete', taskId, status: 'working' });
    // The task is an operation: its output comes as the command writes it.
    let live = '';
    for (let i = 0; i < 300 && !live.includes('started-42'); i++) {
      live = String((await ok('operation_status', { operationId: taskId })).output);
      if (!live.includes('started-42')) await new Promise((r) => setTimeout(r, 100));
    }
    expect(live).toContain('started-42');
    expect(await ok('operation_status', { operationId: taskId })).toMatchObject({ state: 'running', tool: 'exec_run' });
    expect(await modern.ok('tasks/cancel', { taskId })).toMatchObject({ resultType: 'complete' });
    const cancelled = await modern.waitFor(taskId, ['cancelled', 'completed', 'failed']);
    expect(cancelled.status).toBe('cancelled');
    expect(await ok('operation_status', { operationId: taskId })).toMatchObject({ state: 'cancelled' });
    expect((await ok('exec_run', { workspaceId: ws, command: 'pgrep -f "sleep 12[0]" || echo none' })).stdout).toBe('none\n');
  });

  it('a finished task carries exactly the call\'s result, audited as the call', async () => {
    const created = await modern.ok('tools/call', { name: 'exec_run', arguments: { workspaceId: ws, command: 'echo out; echo err >&2; exit 3' } });
    await modern.waitFor(created.taskId as string, ['completed', 'failed', 'cancelled']);
    // The official v2 client, negotiated to 2026-07-28 with the extension declared, reads it with tasks/get.
    const v2 = new Client({ name: 'tasks-e2e-v2', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' }, capabilities: { extensions: { [TASKS]: {} } } });
    await v2.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${svc.token}` } } }));
    const done = (await v2.request({ method: 'tasks/get', params: { taskId: created.taskId as string } }, ANY)) as Record<string, unknown>;
    await v2.close();
    expect(done.status).toBe('completed');
    const result = done.result as { structuredContent: Record<string, unknown>; content: Array<{ text: string }>; isError?: boolean };
    expect(result.structuredContent).toMatchObject({ workspaceId: ws, exitCode: 3, stdout: 'out\n', stderr: 'err\n', timedOut: false });
    expect(JSON.parse(result.content[0]!.text)).toEqual(result.structuredContent);
    const direct = await ok('exec_run', { workspaceId: ws, command: 'echo out; echo err >&2; exit 3' });
    expect(Object.keys(result.structuredContent).sort()).toEqual(Object.keys(direct).sort());
    // A tool error is a completed task whose result is the error (not a failed task).
    const refused = await modern.ok('tools/call', { name: 'exec_run', arguments: { workspaceId: 'ws_doesnotexist000000000000', command: 'true' } });
    const r2 = await modern.waitFor(refused.taskId as string, ['completed', 'failed']);
    expect(r2.status).toBe('completed');
    expect((r2.result as { isError: boolean }).isError).toBe(true);
    expect(((r2.result as { structuredContent: { error: { code: string } } }).structuredContent.error.code)).toBe('NOT_FOUND');
    const { cookie } = await owner();
    const audit = JSON.parse((await httpRequest(svc.url, 'GET', `/api/v1/audit-log?action=exec_run&target=${ws}&limit=10`, { cookie })).body).entries as Array<Record<string, unknown>>;
    expect(audit.filter((e) => e.outcome === 'ok').length).toBeGreaterThanOrEqual(2);
  });

  it('the same idempotency key and input answers the same task; other input is CONFLICT; a direct call replays its result', async () => {
    const args = { workspaceId: ws, command: 'echo keyed', idempotencyKey: 'task-key-1' };
    const a = await modern.ok('tools/call', { name: 'tasks_run', arguments: args });
    const b = await modern.ok('tools/call', { name: 'tasks_run', arguments: args });
    expect(b.resultType).toBe('task');
    expect(b.taskId).toBe(a.taskId);
    const done = await modern.waitFor(a.taskId as string, ['completed', 'failed']);
    const first = (done.result as { structuredContent: { taskId: string } }).structuredContent;
    expect(first.taskId).toMatch(/^task_/);
    const other = await modern.ok('tools/call', { name: 'tasks_run', arguments: { ...args, command: 'echo other' } });
    expect(other.resultType).toBe('complete');
    expect((other.structuredContent as { error: { code: string } }).error.code).toBe('CONFLICT');
    const replay = await ok('tasks_run', args);
    expect(replay).toMatchObject({ taskId: first.taskId, replayed: true });
  });

  it('a task belongs to its caller: another principal, or a grant that no longer covers the tool, finds nothing', async () => {
    const created = await modern.ok('tools/call', { name: 'exec_run', arguments: { workspaceId: ws, command: 'echo mine' } });
    const taskId = created.taskId as string;
    await modern.waitFor(taskId, ['completed']);
    const other = await token();
    const stranger = new Modern(() => svc, { extensions: { [TASKS]: {} } }, () => other);
    for (const method of ['tasks/get', 'tasks/cancel', 'tasks/update']) {
      const r = await stranger.rpc(method, { taskId });
      expect(r.error?.code, method).toBe(-32602);
      expect(r.error?.message).toMatch(/Task not found/);
    }
    // The operation is not the stranger's either.
    const v1Other = await connectV1(svc, other);
    const status = await call(v1Other, 'operation_status', { operationId: taskId });
    expect(!status.ok && status.error.code).toBe('NOT_FOUND');
    await v1Other.close();
    // The same token, narrowed on this connection to toolsets without exec_run: not found either.
    const narrowed = new Modern(() => svc, { extensions: { [TASKS]: {} } }, () => svc.token, { 'x-mcp-toolsets': 'files' });
    expect((await narrowed.rpc('tasks/get', { taskId })).error?.code).toBe(-32602);
    // A guessed id: not found.
    expect((await modern.rpc('tasks/get', { taskId: taskId.slice(0, -1) + (taskId.endsWith('A') ? 'B' : 'A') })).error?.code).toBe(-32602);
    // A read-only grant binds the task as it binds the call: no task, the call's own refusal; nothing ran.
    const ro = await token('--read-only');
    const reader = new Modern(() => svc, { extensions: { [TASKS]: {} } }, () => ro);
    const refused = await reader.ok('tools/call', { name: 'exec_run', arguments: { workspaceId: ws, command: 'touch ro-ran' } });
    expect(refused.resultType).toBe('complete');
    expect((refused.structuredContent as { error: { code: string; details: { rule: string } } }).error).toMatchObject({ code: 'PERMISSION_DENIED', details: { rule: 'read-only access' } });
    expect((await ok('exec_run', { workspaceId: ws, command: 'test -e ro-ran && echo ran || echo absent' })).stdout).toBe('absent\n');
  });
});

describe('2025-11-25: the experimental tasks, with the v1 client\'s own task API', () => {
  it('callToolStream runs exec_run as a task to its result; getTask, listTasks, cancelTask', async () => {
    const seen: string[] = [];
    let result: Record<string, unknown> | undefined;
    for await (const m of v1.experimental.tasks.callToolStream({ name: 'exec_run', arguments: { workspaceId: ws, command: 'sleep 0.3; echo v1-task' } }, CallToolResultSchema, { task: { ttl: 60000 } })) {
      seen.push(m.type);
      if (m.type === 'result') result = m.result as Record<string, unknown>;
      if (m.type === 'error') throw m.error;
    }
    expect(seen[0]).toBe('taskCreated');
    expect(seen).toContain('result');
    expect(result!.structuredContent).toMatchObject({ exitCode: 0, stdout: 'v1-task\n' });
    const listed = await v1.experimental.tasks.listTasks();
    expect(listed.tasks.length).toBeGreaterThan(0);
    // A long one, cancelled.
    const created = await v1.request({ method: 'tools/call', params: { name: 'exec_run', arguments: { workspaceId: ws, command: 'exec sleep 121', timeoutMs: 300000 }, task: { ttl: 60000 } } }, z.looseObject({ task: z.looseObject({ taskId: z.string(), status: z.string() }) }) as never) as unknown as { task: { taskId: string; status: string } };
    expect(created.task.status).toBe('working');
    expect((await v1.experimental.tasks.getTask(created.task.taskId)).status).toBe('working');
    const cancelled = await v1.experimental.tasks.cancelTask(created.task.taskId);
    expect(cancelled.status).toBe('cancelled');
    expect((await v1.experimental.tasks.getTask(created.task.taskId)).status).toBe('cancelled');
  });
});

describe('across a runner restart', () => {
  it('a finished task answers its result by id after the restart; one the restart interrupted fails, its output kept', async () => {
    const finished = await modern.ok('tools/call', { name: 'exec_run', arguments: { workspaceId: ws, command: 'echo before-restart' } });
    await modern.waitFor(finished.taskId as string, ['completed']);
    const running = await modern.ok('tools/call', { name: 'exec_run', arguments: { workspaceId: ws, command: 'echo partial-output; exec sleep 122', timeoutMs: 300000 } });
    for (let i = 0; i < 300 && !String((await ok('operation_status', { operationId: running.taskId })).output).includes('partial-output'); i++) await new Promise((r) => setTimeout(r, 100));
    await v1.close();
    const token = svc.token;
    await svc.stop();
    const dataDir = svc.dataDir;
    const before = svc;
    svc = await startService({ dataDir });
    svc.token = token;
    const dispose = before.dispose.bind(before);
    svc.dispose = async () => {
      await svc.stop();
      await dispose();
    };
    v1 = await connectV1(svc);
    const after = await modern.ok('tasks/get', { taskId: finished.taskId });
    expect(after.status).toBe('completed');
    expect((after.result as { structuredContent: { stdout: string } }).structuredContent.stdout).toBe('before-restart\n');
    const interrupted = await modern.ok('tasks/get', { taskId: running.taskId });
    expect(interrupted.status).toBe('failed');
    expect((interrupted.error as { message: string }).message).toMatch(/interrupted by a service (restart|shutdown)/);
    const op = await ok('operation_status', { operationId: running.taskId });
    expect(op).toMatchObject({ state: 'interrupted', tool: 'exec_run' });
    expect(op.output).toContain('partial-output');
    // The 2025-11-25 form answers the same task by id.
    const r = (await v1.experimental.tasks.getTaskResult(finished.taskId as string, CallToolResultSchema)) as { structuredContent: { stdout: string } };
    expect(r.structuredContent.stdout).toBe('before-restart\n');
  }, 120_000);
});

