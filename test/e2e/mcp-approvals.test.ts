/**
 * Approvals inside the client (issue #32 item 3; docs/mcp-tasks.md), through the real service on a
 * real workspace. A privileged exec_run needs the owner's approval: a client that can open a URL for
 * its user gets the approval's own dashboard page (an input_required result on 2026-07-28, a URL-mode
 * elicitation on 2025-11-25, a task's input request), the test acts as the owner (in chromium on the
 * page the client opened, or on the dashboard REST), and the same call goes on and answers: no second
 * call, no grant token copied. Clients without the capability get today's refusal with the request id.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromium, type Browser } from 'playwright-core';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Client as ClientV1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as TransportV1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, ElicitRequestSchema, ElicitationCompleteNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { call, connectV1, dashboardLogin, httpRequest, runCli, type AnyClient, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

const TASKS = 'io.modelcontextprotocol/tasks';

let host: GitHost;
let svc: Service;
let ws: string;
let plain: ClientV1;
let browser: Browser;

let ownerSession: { cookie: string; csrf: string } | undefined;
const owner = async () => (ownerSession ??= await dashboardLogin(svc));
/** The owner decides a request on the dashboard REST. */
async function decide(id: string, approve: boolean): Promise<void> {
  const { cookie, csrf } = await owner();
  const r = await httpRequest(svc.url, 'POST', `/api/v1/approvals/${id}/${approve ? 'approve' : 'deny'}`, { cookie, 'x-csrf-token': csrf });
  if (r.status !== 200) throw new Error(`decide ${id}: ${r.status} ${r.body}`);
}
async function approval(id: string): Promise<Record<string, unknown>> {
  const { cookie } = await owner();
  return JSON.parse((await httpRequest(svc.url, 'GET', `/api/v1/approvals/${id}`, { cookie })).body);
}
const idOf = (url: string): string => /\/approvals\/(apr_[A-Za-z0-9_-]+)$/.exec(url)![1]!;

/** A 2026-07-28 client (the v2 client, negotiated) that declares URL elicitation; `onUrl` plays the user. */
async function modernClient(onUrl: (url: string, message: string) => Promise<'accept' | 'decline' | 'cancel'>): Promise<Client> {
  const c = new Client({ name: 'approvals-e2e-modern', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' }, capabilities: { elicitation: { url: {} } } });
  c.setRequestHandler('elicitation/create', async (req) => {
    const p = req.params as { mode?: string; url?: string; message: string };
    if (p.mode !== 'url') throw new Error(`not a URL elicitation: ${JSON.stringify(p)}`);
    return { action: await onUrl(p.url!, p.message) };
  });
  await c.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${svc.token}` } } }));
  return c;
}

/** A 2025-11-25 client (the v1 client) that declares URL elicitation in its initialize. */
async function legacyClient(onUrl: (url: string, id: string | number) => Promise<'accept' | 'decline' | 'cancel'>, completions: string[] = []): Promise<ClientV1> {
  const c = new ClientV1({ name: 'approvals-e2e-v1', version: '1.0.0' }, { capabilities: { elicitation: { url: {} } } });
  c.setRequestHandler(ElicitRequestSchema, async (req, extra) => {
    const p = req.params as { mode?: string; url?: string };
    if (p.mode !== 'url') throw new Error('not a URL elicitation');
    return { action: await onUrl(p.url!, extra.requestId) };
  });
  c.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => {
    completions.push(n.params.elicitationId);
  });
  await c.connect(new TransportV1(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${svc.token}` } } }));
  return c;
}

const privileged = (command: string) => ({ workspaceId: ws, command, privileged: true });

async function result(c: AnyClient, name: string, args: Record<string, unknown>) {
  return call(c, name, args);
}

beforeAll(async () => {
  host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/inclient', REPO_FILES)).url;
  svc = await startWorkspaceService(host);
  plain = await connectV1(svc);
  const opened = await call(plain, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'inclient-open-1' });
  if (!opened.ok) throw new Error(opened.text);
  ws = opened.result.workspaceId as string;
  await owner(); // the one-time login link, used once: the owner's session for the REST and the browser
  // playwright-core starts chromium with a fresh profile of its own (a new --user-data-dir each launch).
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}, 180_000);

afterAll(async () => {
  await plain?.close();
  await browser?.close();
  await svc?.dispose();
  await host?.close();
});

describe('clients without the capability: unchanged', () => {
  it('the v1 client and a 2026-07-28 client that declares no URL elicitation get PERMISSION_DENIED with the approval id', async () => {
    const r = await result(plain, 'exec_run', privileged('id -u; echo plain-v1'));
    expect(!r.ok && r.error).toMatchObject({ code: 'PERMISSION_DENIED', details: { field: 'approvalGrantToken', kind: 'privileged_command' } });
    expect(!r.ok && String(r.error.details.approvalRequestId)).toMatch(/^apr_/);
    const m = new Client({ name: 'no-elicitation', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    await m.connect(new StreamableHTTPClientTransport(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${svc.token}` } } }));
    const r2 = await result(m, 'exec_run', privileged('id -u; echo plain-v2'));
    expect(!r2.ok && r2.error.code).toBe('PERMISSION_DENIED');
    expect(!r2.ok && String(r2.error.details.approvalRequestId)).toMatch(/^apr_/);
    await m.close();
  });

  it('the deep link of a request is its page on the dashboard; anything else there is 404', async () => {
    const r = await httpRequest(svc.url, 'GET', '/approvals/apr_abcDEF123');
    expect(r.status).toBe(302);
    expect(r.headers.location).toBe('/#/approvals/apr_abcDEF123');
    expect((await httpRequest(svc.url, 'GET', '/approvals/..%2Fapi%2Fv1%2Fsession')).status).toBe(404);
    expect((await httpRequest(svc.url, 'GET', '/approvals/apr_x%0d%0aSet-Cookie:%20a=b')).status).toBe(404);
  });
});

describe('2026-07-28: input_required opens the approval, the same call goes on', () => {
  it('the owner approves in chromium on the page the client opened: the call answers the privileged run, its grant spent by the call', async () => {
    // The owner's browser, logged in to the dashboard (the session of the one-time link).
    const ctx = await browser.newContext();
    const [name, value] = (await owner()).cookie.split('=') as [string, string];
    await ctx.addCookies([{ name, value, url: svc.url }]);
    const page = await ctx.newPage();
    let opened = '';
    let message = '';
    const c = await modernClient(async (url, m) => {
      opened = url;
      message = m;
      // The user: opens the URL in the browser, reads the exact request, approves it.
      await page.goto(url);
      const item = page.locator(`[data-testid=linked-approval] li[data-approval="${idOf(url)}"]`);
      await item.waitFor();
      expect(await item.locator('[data-testid=subject]').textContent()).toBe('id -u; echo in-chromium');
      await item.locator('[data-testid=approve]').click();
      await page.locator(`[data-approval-grant="${idOf(url)}"]`).waitFor();
      return 'accept';
    });
    const r = await result(c, 'exec_run', privileged('id -u; echo in-chromium'));
    if (!r.ok) throw new Error(r.text);
    expect(r.result).toMatchObject({ privileged: true, exitCode: 0, stdout: '0\nin-chromium\n' });
    expect(opened).toMatch(new RegExp(`^${svc.url}/approvals/apr_[A-Za-z0-9_-]+$`));
    expect(message).toMatch(/exec_run needs the owner's approval of a privileged command/);
    const a = await approval(idOf(opened));
    expect(a.state).toBe('used');
    // Spent by the call: audited as the grant's use inside the call, and the call itself.
    const { cookie } = await owner();
    const audit = JSON.parse((await httpRequest(svc.url, 'GET', '/api/v1/audit-log?action=privileged_command_grant&limit=5', { cookie })).body).entries as Array<{ outcome: string; details: { approvalId?: string; inCall?: boolean } }>;
    expect(audit.find((e) => e.details?.approvalId === idOf(opened))).toMatchObject({ outcome: 'ok', details: { inCall: true } });
    await c.close();
    await ctx.close();
  });

  it('denied by the owner: the call answers PERMISSION_DENIED saying so; nothing ran', async () => {
    let id = '';
    const c = await modernClient(async (url) => {
      id = idOf(url);
      await decide(id, false);
      return 'accept';
    });
    const r = await result(c, 'exec_run', privileged('touch denied-ran; id -u'));
    expect(!r.ok && r.error).toMatchObject({ code: 'PERMISSION_DENIED', details: { approvalRequestId: id, approvalState: 'denied' } });
    expect(!r.ok && r.error.message).toMatch(/owner denied approval request/);
    expect((await call(plain, 'exec_run', { workspaceId: ws, command: 'test -e denied-ran && echo ran || echo absent' }) as { result: { stdout: string } }).result.stdout).toBe('absent\n');
    await c.close();
  });

  it('declined in the client: PERMISSION_DENIED, the request stays pending for the owner', async () => {
    let id = '';
    const c = await modernClient(async (url) => {
      id = idOf(url);
      return 'decline';
    });
    const r = await result(c, 'exec_run', privileged('id -u; echo declined'));
    expect(!r.ok && r.error).toMatchObject({ code: 'PERMISSION_DENIED', details: { approvalRequestId: id, clientAnswer: 'decline' } });
    expect((await approval(id)).state).toBe('pending');
    await c.close();
  });

  it('a requestState that was tampered with, or minted for another principal, is refused before anything runs', async () => {
    // The first leg, as the wire has it: input_required with the approval's URL and a requestState.
    const other = await token();
    const post = async (tok: string, params: Record<string, unknown>) => {
      const res = await fetch(svc.mcpUrl, {
        method: 'POST',
        headers: { authorization: `Bearer ${tok}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'exec_run' },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: {
            name: 'exec_run',
            arguments: privileged('id -u; echo forged'),
            ...params,
            _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': { elicitation: { url: {} } } },
          },
        }),
      });
      return (await res.json()) as { result?: Record<string, unknown>; error?: { code: number; message: string } };
    };
    const first = await post(svc.token, {});
    expect(first.result?.resultType).toBe('input_required');
    const state = first.result!.requestState as string;
    const key = Object.keys(first.result!.inputRequests as object)[0]!;
    const id = key.replace(/^approval-/, '');
    await decide(id, true);
    const tampered = state.slice(0, -2) + (state.endsWith('AA') ? 'BB' : 'AA');
    expect((await post(svc.token, { inputResponses: { [key]: { action: 'accept' } }, requestState: tampered })).error?.code).toBe(-32602);
    expect((await post(other, { inputResponses: { [key]: { action: 'accept' } }, requestState: state })).error?.code).toBe(-32602);
    // The grant is still unspent; the rightful retry spends it and runs.
    expect((await approval(id)).state).toBe('approved');
    const retry = await post(svc.token, { inputResponses: { [key]: { action: 'accept' } }, requestState: state });
    expect(retry.result).toMatchObject({ resultType: 'complete', structuredContent: { exitCode: 0, stdout: '0\nforged\n' } });
    expect((await approval(id)).state).toBe('used');
  });
});

describe('2025-11-25: URL-mode elicitation on the call\'s own stream', () => {
  it('the owner approves on the REST while the v1 client waits: the call answers, then elicitation/complete', async () => {
    const completions: string[] = [];
    let id = '';
    const c = await legacyClient(async (url) => {
      id = idOf(url);
      await decide(id, true);
      return 'accept';
    }, completions);
    const r = await result(c, 'exec_run', privileged('id -u; echo legacy'));
    if (!r.ok) throw new Error(r.text);
    expect(r.result).toMatchObject({ privileged: true, exitCode: 0, stdout: '0\nlegacy\n' });
    expect((await approval(id)).state).toBe('used');
    for (let i = 0; i < 100 && completions.length === 0; i++) await new Promise((res) => setTimeout(res, 50));
    expect(completions.length).toBe(1);
    await c.close();
  });

  it('a 2025-11-25 task: it turns input_required, the client\'s tasks/result stream asks it to open the approval, the task completes', async () => {
    let id = '';
    let related: unknown;
    const c = new ClientV1({ name: 'approvals-e2e-v1-task', version: '1.0.0' }, { capabilities: { elicitation: { url: {} } } });
    c.setRequestHandler(ElicitRequestSchema, async (req) => {
      const p = req.params as { mode?: string; url?: string; _meta?: Record<string, unknown> };
      if (p.mode !== 'url') throw new Error('not a URL elicitation');
      id = idOf(p.url!);
      related = p._meta?.['io.modelcontextprotocol/related-task'];
      await decide(id, true);
      return { action: 'accept' };
    });
    await c.connect(new TransportV1(new URL(svc.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${svc.token}` } } }));
    const statuses: string[] = [];
    let taskId = '';
    let final: { structuredContent?: Record<string, unknown> } | undefined;
    for await (const m of c.experimental.tasks.callToolStream({ name: 'exec_run', arguments: privileged('id -u; echo legacy-task') }, CallToolResultSchema, { task: { ttl: 60000 } })) {
      if (m.type === 'taskCreated') taskId = m.task.taskId;
      if (m.type === 'taskStatus') statuses.push(m.task.status);
      if (m.type === 'result') final = m.result as typeof final;
      if (m.type === 'error') throw m.error;
    }
    expect(statuses).toContain('input_required');
    expect(related).toEqual({ taskId });
    expect(final?.structuredContent).toMatchObject({ privileged: true, exitCode: 0, stdout: '0\nlegacy-task\n' });
    expect((await approval(id)).state).toBe('used');
    await c.close();
  });

  it('a session is its principal\'s: another token presenting it gets the plain refusal, no elicitation, and cannot end it', async () => {
    const init = await httpRequest(svc.url, 'POST', '/mcp', { authorization: `Bearer ${svc.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: { elicitation: { url: {} } }, clientInfo: { name: 'raw', version: '1' } } }));
    const session = String(init.headers['mcp-session-id']);
    expect(session).toMatch(/^mcps_[A-Za-z0-9_-]{32}$/);
    // A client that declares no URL elicitation gets a session too (it only remembers what the
    // client declared); DELETE ends it, once, and only for its own principal.
    const plainInit = await httpRequest(svc.url, 'POST', '/mcp', { authorization: `Bearer ${svc.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } }));
    const plainSession = String(plainInit.headers['mcp-session-id']);
    expect(plainSession).toMatch(/^mcps_[A-Za-z0-9_-]{32}$/);
    expect(plainSession).not.toBe(session);
    const stranger = await token();
    expect((await httpRequest(svc.url, 'DELETE', '/mcp', { authorization: `Bearer ${stranger}`, 'mcp-session-id': plainSession })).status).toBe(405);
    expect((await httpRequest(svc.url, 'DELETE', '/mcp', { authorization: `Bearer ${svc.token}`, 'mcp-session-id': plainSession })).status).toBe(200);
    // Ended: every request bearing it answers 404 (the client starts a new session); another principal's is merely unknown.
    expect((await httpRequest(svc.url, 'DELETE', '/mcp', { authorization: `Bearer ${svc.token}`, 'mcp-session-id': plainSession })).status).toBe(404);
    const list = JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/list', params: {} });
    const json = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': plainSession };
    expect((await httpRequest(svc.url, 'POST', '/mcp', { authorization: `Bearer ${svc.token}`, ...json }, list)).status).toBe(404);
    expect((await httpRequest(svc.url, 'POST', '/mcp', { authorization: `Bearer ${stranger}`, ...json }, list)).status).toBe(200);
    const other = await token();
    const r = await httpRequest(
      svc.url,
      'POST',
      '/mcp',
      { authorization: `Bearer ${other}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': session },
      JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'exec_run', arguments: privileged('id -u; echo borrowed-session') } }),
    );
    expect(r.body).not.toContain('elicitation/create');
    const answer = JSON.parse(r.body.startsWith('{') ? r.body : r.body.split('\n').filter((l) => l.startsWith('data: ')).pop()!.slice(6));
    expect(answer.result.structuredContent.error).toMatchObject({ code: 'PERMISSION_DENIED', details: { field: 'approvalGrantToken' } });
  });

  it('an answer posted by another principal for the same elicitation is not taken: the client\'s own answer decides', async () => {
    const other = await token();
    let id = '';
    const c = await legacyClient(async (url, requestId) => {
      id = idOf(url);
      // Another token answers "accept" for this elicitation first: not its request, so not taken.
      const forged = await httpRequest(svc.url, 'POST', '/mcp', { authorization: `Bearer ${other}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25' }, JSON.stringify({ jsonrpc: '2.0', id: requestId, result: { action: 'accept' } }));
      expect(forged.status).not.toBe(500);
      await decide(id, true);
      return 'decline';
    });
    const r = await result(c, 'exec_run', privileged('id -u; echo forged-answer'));
    expect(!r.ok && r.error).toMatchObject({ code: 'PERMISSION_DENIED', details: { approvalRequestId: id, clientAnswer: 'decline' } });
    expect((await approval(id)).state).toBe('approved'); // approved by the owner, but not spent by this call
    await c.close();
  });
});

describe('a task waits for the approval as input_required', () => {
  it('2026-07-28: privileged exec_run as a task: input_required with the URL, approved, answered with tasks/update, completed', async () => {
    const caps = { extensions: { [TASKS]: {} }, elicitation: { url: {} } };
    let n = 0;
    const rpc = async (method: string, params: Record<string, unknown>) => {
      const res = await fetch(svc.mcpUrl, {
        method: 'POST',
        headers: { authorization: `Bearer ${svc.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2026-07-28', 'mcp-method': method, 'mcp-name': String(params.name ?? params.taskId) },
        body: JSON.stringify({ jsonrpc: '2.0', id: ++n, method, params: { ...params, _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '1' }, 'io.modelcontextprotocol/clientCapabilities': caps } } }),
      });
      const j = (await res.json()) as { result?: Record<string, unknown>; error?: unknown };
      if (!j.result) throw new Error(`${method}: ${JSON.stringify(j.error)}`);
      return j.result;
    };
    const created = await rpc('tools/call', { name: 'exec_run', arguments: privileged('id -u; echo as-task') });
    expect(created.resultType).toBe('task');
    const taskId = created.taskId as string;
    let t: Record<string, unknown> = {};
    for (let i = 0; i < 300; i++) {
      t = await rpc('tasks/get', { taskId });
      if (t.status !== 'working') break;
      await new Promise((res) => setTimeout(res, 100));
    }
    expect(t.status).toBe('input_required');
    const [key, request] = Object.entries(t.inputRequests as Record<string, { method: string; params: { mode: string; url: string } }>)[0]!;
    expect(request).toMatchObject({ method: 'elicitation/create', params: { mode: 'url' } });
    const id = idOf(request.params.url);
    await decide(id, true);
    expect(await rpc('tasks/update', { taskId, inputResponses: { [key]: { action: 'accept' } } })).toMatchObject({ resultType: 'complete' });
    for (let i = 0; i < 300; i++) {
      t = await rpc('tasks/get', { taskId });
      if (t.status === 'completed' || t.status === 'failed') break;
      await new Promise((res) => setTimeout(res, 100));
    }
    expect(t.status).toBe('completed');
    expect((t.result as { structuredContent: Record<string, unknown> }).structuredContent).toMatchObject({ privileged: true, exitCode: 0, stdout: '0\nas-task\n' });
    expect((await approval(id)).state).toBe('used');
  });
});

/** A new owner bearer token (another principal). */
describe('every kind of approval: a workspace skill\'s script', () => {
  const SCRIPT = '#!/usr/bin/env bash\necho "in-call-skill args=$*"\n';
  beforeAll(async () => {
    for (const [path, content] of [
      ['.atelier/skills/in-call/SKILL.md', '---\nname: in-call\ndescription: A skill written in the workspace, whose script needs the owner.\n---\nRun scripts/hello.sh.\n'],
      ['.atelier/skills/in-call/scripts/hello.sh', SCRIPT],
    ] as const) {
      const w = await call(plain, 'files_write', { workspaceId: ws, path, content });
      if (!w.ok) throw new Error(w.text);
    }
  });

  it('2026-07-28: input_required opens the skill_script request; approved, the same skills_run answers the script\'s run', async () => {
    let id = '';
    let message = '';
    const c = await modernClient(async (url, m) => {
      id = idOf(url);
      message = m;
      await decide(id, true);
      return 'accept';
    });
    const r = await result(c, 'skills_run', { workspaceId: ws, name: 'in-call', script: 'hello.sh', args: ['modern'] });
    if (!r.ok) throw new Error(r.text);
    expect(r.result).toMatchObject({ exitCode: 0, stdout: 'in-call-skill args=modern\n', skill: { source: 'workspace' }, approvalId: id });
    expect(message).toMatch(/skills_run needs the owner's approval of a skill script/);
    const a = await approval(id);
    expect(a).toMatchObject({ kind: 'skill_script', state: 'used' });
    expect(a.subject).toContain('in-call-skill args=');
    await c.close();
  });

  it('2025-11-25: a URL elicitation opens it; a changed script is a new request, never the approved one', async () => {
    const ids: string[] = [];
    const c = await legacyClient(async (url) => {
      const id = idOf(url);
      ids.push(id);
      if (ids.length === 1) {
        // While the client shows the page, the script changes: the approval binds the old content.
        const w = await call(plain, 'files_write', { workspaceId: ws, path: '.atelier/skills/in-call/scripts/hello.sh', content: '#!/usr/bin/env bash\necho "changed args=$*"\n' });
        if (!w.ok) throw new Error(w.text);
      }
      await decide(id, true);
      return 'accept';
    });
    const r = await result(c, 'skills_run', { workspaceId: ws, name: 'in-call', script: 'hello.sh', args: ['legacy'] });
    if (!r.ok) throw new Error(r.text);
    // The first grant was for the old text: not spent on the new one; the call opened a second request for it.
    expect(ids.length).toBe(2);
    expect(r.result).toMatchObject({ exitCode: 0, stdout: 'changed args=legacy\n', approvalId: ids[1] });
    expect((await approval(ids[0]!)).state).toBe('approved');
    expect((await approval(ids[1]!)).state).toBe('used');
    await c.close();
  });
});

async function token(): Promise<string> {
  const r = await runCli(['token', 'create', '--name', 'approvals e2e', '--json', '--data-dir', svc.dataDir]);
  if (r.code !== 0) throw new Error(r.stderr);
  return (JSON.parse(r.stdout) as { token: string }).token;
}
