/**
 * Commands, operations, shells, sessions, tasks and privileged approvals, through the MCP client on
 * a real workspace.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV1, connectV2, startService, type Service, httpRequest, dashboardLogin } from './harness.js';
import { HeadTailCapture } from '../../src/sandbox/daemon/output.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;
let ws: string;

async function ok(name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
type Exec = { exitCode: number | null; signal: string | null; stdout: string; stderr: string; timedOut: boolean; stdoutTruncated: boolean; durationMs: number };
const sh = async (command: string, extra: Record<string, unknown> = {}) => (await ok('exec_run', { workspaceId: ws, command, ...extra })) as unknown as Exec;

function rssKb(pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
}

let ownerSession: { cookie: string; csrf: string } | undefined;
/** The owner's dashboard session (the login link is single-use: log in once). */
const owner = async () => (ownerSession ??= await dashboardLogin(svc));
const rest = (method: string, path: string, headers: Record<string, string>, body?: string) => httpRequest(svc.url, method, path, headers, body);

beforeAll(async () => {
  host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/cmds', REPO_FILES)).url;
  svc = await startWorkspaceService(host, { args: ['--packages-enabled'] });
  c = await connectV2(svc);
  ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'cmds-open-1' })).workspaceId as string;
}, 120_000);

let restarted: Service | undefined;

afterAll(async () => {
  await restarted?.stop();
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('exec_run and bash', () => {
  it('reports exit codes, signals, separate streams and duration', async () => {
    const r = await sh('echo out; echo err >&2; exit 3');
    expect(r).toMatchObject({ exitCode: 3, signal: null, stdout: 'out\n', stderr: 'err\n', timedOut: false });
    const timed = await sh('sleep 0.3');
    expect(timed.durationMs).toBeGreaterThanOrEqual(300);
    expect(timed.durationMs).toBeLessThan(10_000);
    const k = await sh('kill -9 $$');
    expect(k.exitCode).toBeNull();
    expect(k.signal).toBe('SIGKILL');
    const b = (await ok('bash', { workspaceId: ws, command: 'echo from-bash; pwd' })) as unknown as Exec;
    expect(b.stdout).toBe('from-bash\n/workspace\n');
  });

  it('a timeout kills the whole tree, a setsid grandchild that ignores SIGTERM included, and says so', async () => {
    const r = await sh(`setsid sh -c 'trap "" TERM; sleep 301' & sh -c 'trap "" TERM; sleep 302' & sleep 303`, { timeoutMs: 1500 });
    expect(r.timedOut).toBe(true);
    const left = await sh('pgrep -f "sleep 30[123]" || echo none');
    expect(left.stdout.trim()).toBe('none');
  });

  it('caps an output flood (head and tail kept, middle marked) without the service growing', async () => {
    const before = rssKb(svc.proc.pid!);
    const r = await sh(`echo BEGIN; head -c 60000000 /dev/zero | tr '\\0' 'a'; echo; echo END`, { maxOutputBytes: 4096, timeoutMs: 60_000 });
    expect(r.stdoutTruncated).toBe(true);
    expect(r.stdout.startsWith('BEGIN')).toBe(true);
    expect(r.stdout.trimEnd().endsWith('END')).toBe(true);
    expect(r.stdout).toMatch(/\[\.\.\. \d+ bytes omitted \.\.\.\]/);
    expect(r.stdout.length).toBeLessThan(8192);
    expect(rssKb(svc.proc.pid!) - before).toBeLessThan(100 * 1024);
  }, 90_000);

  it('large output (a raw body frame on the daemon hop) reaches both official clients as the very text it always was', async () => {
    // Hostile ASCII (every character but NUL, quotes, backslashes, lines that look like the daemon's
    // own frames and JSON lines), then UTF-8 with invalid bytes: what the command printed, decoded as
    // UTF-8 with replacement, exactly as when the output crossed the daemon's socket inside JSON.
    const every = Array.from({ length: 0x7f }, (_, i) => String.fromCharCode(i + 1)).join('');
    const unit = `${every}\n#12\n{"id":1,"result":{"stdout":""},"body":{"field":"stdout","encoding":"base64"}}\n"\\"\\\\n\n`;
    const ascii = Buffer.from(unit.repeat(Math.ceil(300_000 / unit.length)));
    const mixed = Buffer.concat(Array.from({ length: 12_000 }, (_, i) => Buffer.concat([Buffer.from(`é漢😀 ${i} `), Buffer.from([[0xff], [0x80], [0xe6, 0xbc], [0xf0, 0x9f], [0xc0]][i % 5]!), Buffer.from('\n')])));
    const files: Array<[string, Buffer]> = [['out/ascii.bin', ascii], ['out/mixed.bin', mixed], ['out/edge-below.bin', ascii.subarray(0, 65535)], ['out/edge-at.bin', ascii.subarray(0, 65536)]];
    for (const [path, bytes] of files) {
      await ok('files_write', { workspaceId: ws, path: `${path}.b64`, content: bytes.toString('base64') });
      expect((await sh(`base64 -d ${path}.b64 > ${path}`)).exitCode).toBe(0);
    }
    const v1 = await connectV1(svc);
    try {
      for (const client of [c, v1, c] as unknown as Client[]) {
        for (const [path, bytes] of files) {
          for (const tool of ['exec_run', 'bash']) {
            const r = await client.callTool({ name: tool, arguments: { workspaceId: ws, command: `cat ${path}; echo done >&2`, maxOutputBytes: 1048576 } });
            const got = JSON.parse((r.content as Array<{ text: string }>)[0]!.text) as Exec & { stdoutBytes: number };
            expect(got).toMatchObject({ exitCode: 0, stderr: 'done\n', stdoutTruncated: false, stdoutBytes: bytes.length });
            expect(got.stdout === bytes.toString('utf8')).toBe(true);
          }
        }
        // Truncated: the head and the tail around the marker, cut on character boundaries, as the
        // daemon's capture makes it.
        const r = await client.callTool({ name: 'exec_run', arguments: { workspaceId: ws, command: 'cat out/mixed.bin out/ascii.bin out/mixed.bin', maxOutputBytes: 300_001 } });
        const got = JSON.parse((r.content as Array<{ text: string }>)[0]!.text) as Exec;
        const capture = new HeadTailCapture(300_001);
        capture.push(Buffer.concat([mixed, ascii, mixed]));
        expect(got.stdoutTruncated).toBe(true);
        expect(got.stdout === capture.text()).toBe(true);
      }
    } finally {
      await v1.close();
    }
  }, 90_000);

  it('the toolbox target runs without network, checkout, secrets or workspace', async () => {
    const r = (await ok('bash', { target: 'toolbox', command: 'id -u; ls /workspace 2>&1 || true; curl -s -m 3 https://registry.npmjs.org/ >/dev/null && echo NET || echo no-net; env | grep -c . ' })) as unknown as Exec;
    const lines = r.stdout.trim().split('\n');
    expect(lines[0]).not.toBe('0');
    expect(r.stdout).toMatch(/No such file or directory/);
    expect(r.stdout).toContain('no-net');
    const refused = await call(c, 'bash', { target: 'toolbox', command: 'true', async: true });
    expect(!refused.ok && refused.error.details.field).toBe('async');
  });
});

describe('operations', () => {
  it('async runs return a handle; wait returns as soon as it ends; status pages output by cursor', async () => {
    const op = await ok('exec_run', { workspaceId: ws, command: 'for i in $(seq 1 20000); do echo "line $i"; done; echo done >&2', async: true });
    expect(op.operationId).toMatch(/^op_/);
    const t0 = Date.now();
    const w = await ok('operation_wait', { operationId: op.operationId, timeoutMs: 60_000 });
    expect(Date.now() - t0).toBeLessThan(30_000);
    expect(w).toMatchObject({ state: 'succeeded', exitCode: 0, ended: true, waitTimedOut: false });
    let text = '';
    let cursor: unknown;
    let pages = 0;
    do {
      const s = await ok('operation_status', { operationId: op.operationId, ...(cursor ? { cursor } : {}) });
      text += s.output as string;
      cursor = s.nextCursor;
      pages++;
      if (!s.moreOutput) break;
    } while (pages < 100);
    expect(pages).toBeGreaterThan(1);
    expect(text).toContain('line 1\n');
    expect(text).toContain('line 20000\n');
    expect(text).toContain('done\n');
  }, 60_000);

  it('cancel kills the tree; wait honours its own timeout', async () => {
    const op = await ok('bash', { workspaceId: ws, command: 'echo started; sleep 300', async: true });
    const w = await ok('operation_wait', { operationId: op.operationId, timeoutMs: 300 });
    expect(w).toMatchObject({ state: 'running', waitTimedOut: true, ended: false });
    const cancelled = await ok('operation_cancel', { operationId: op.operationId });
    expect(cancelled.state).toBe('cancelled');
    expect((await ok('operation_cancel', { operationId: op.operationId })).alreadyEnded).toBe(true);
    expect((await sh('pgrep -x sleep || echo none')).stdout.trim()).toBe('none');
    const s = await ok('operation_status', { operationId: op.operationId });
    expect(s.output).toContain('started');
  });
});

describe('shells and sessions', () => {
  const read = async (tool: 'shell_io' | 'sessions_io', idField: string, id: string, input: string | undefined, until: RegExp, state: { cursor?: unknown }) => {
    let text = '';
    for (let i = 0; i < 40; i++) {
      const r = await ok(tool, { workspaceId: ws, [idField]: id, ...(i === 0 && input !== undefined ? { input } : {}), ...(state.cursor ? { cursor: state.cursor } : {}), waitMs: 500 });
      text += r.output as string;
      state.cursor = r.nextCursor;
      if (until.test(text)) return text;
    }
    throw new Error(`never saw ${until} in: ${text}`);
  };

  it('a shell runs an interactive program that asks and gets an answer, with job control', async () => {
    const sh1 = await ok('shell_open', { workspaceId: ws, idempotencyKey: 'shell-key-1' });
    const again = await ok('shell_open', { workspaceId: ws, idempotencyKey: 'shell-key-1' });
    expect(again.shellId).toBe(sh1.shellId);
    const id = sh1.shellId as string;
    const st: { cursor?: unknown } = {};
    await read('shell_io', 'shellId', id, 'tty; read -p "name? " n; echo "hello, $n"\n', /name\? /, st);
    expect(await read('shell_io', 'shellId', id, 'world\n', /hello, world/, st)).toMatch(/hello, world/);
    await read('shell_io', 'shellId', id, 'sleep 100 &\n', /\[1\] \d+/, st);
    expect(await read('shell_io', 'shellId', id, 'jobs\n', /Running\s+sleep 100 &/, st)).toBeTruthy();
    await read('shell_io', 'shellId', id, 'kill %1; sleep 0.2; jobs; echo JOBS-DONE\n', /JOBS-DONE/, st);
    expect((await ok('shell_close', { workspaceId: ws, shellId: id })).alreadyClosed).toBe(false);
    const closed = await call(c, 'shell_io', { workspaceId: ws, shellId: id, input: 'echo x\n' });
    expect(!closed.ok && closed.error.code).toBe('FAILED_PRECONDITION');
  }, 60_000);

  it('sessions are named: opening a name again reattaches, and they list by name', async () => {
    const s1 = await ok('sessions_open', { workspaceId: ws, name: 'dev-server', idempotencyKey: 'sess-open-1' });
    const s2 = await ok('sessions_open', { workspaceId: ws, name: 'dev-server', idempotencyKey: 'sess-open-2' });
    expect(s2.sessionId).toBe(s1.sessionId);
    expect(s2.reattached).toBe(true);
    const st: { cursor?: unknown } = {};
    await read('sessions_io', 'sessionId', s1.sessionId as string, 'export MARK=kept; echo ready\n', /ready/, st);
    // A new client (a reconnect) finds the session by name and its state is still there.
    const other = await connectV2(svc);
    const list = (await call(other, 'sessions_list', { workspaceId: ws })) as { ok: true; result: { sessions: Array<{ name: string; sessionId: string; state: string }> } };
    expect(list.result.sessions.find((x) => x.name === 'dev-server')).toMatchObject({ sessionId: s1.sessionId, state: 'open' });
    await other.close();
    expect(await read('sessions_io', 'sessionId', s1.sessionId as string, 'echo "mark=$MARK"\n', /mark=kept/, st)).toBeTruthy();
    await ok('sessions_close', { workspaceId: ws, sessionId: s1.sessionId });
    const s3 = await ok('sessions_open', { workspaceId: ws, name: 'dev-server', idempotencyKey: 'sess-open-3' });
    expect(s3.sessionId).not.toBe(s1.sessionId);
    await ok('sessions_close', { workspaceId: ws, sessionId: s3.sessionId });
  }, 60_000);

  it('output nobody reads stays bounded (the oldest is dropped and counted)', async () => {
    const s = await ok('shell_open', { workspaceId: ws, idempotencyKey: 'shell-flood-1' });
    const first = await ok('shell_io', { workspaceId: ws, shellId: s.shellId, input: 'head -c 3000000 /dev/zero | tr "\\0" "x"; echo FLOOD-END\n', waitMs: 0 });
    await new Promise((r) => setTimeout(r, 3000));
    // Reading on from the cursor taken before the flood: only the newest 1 MiB was kept.
    const r = await ok('shell_io', { workspaceId: ws, shellId: s.shellId, cursor: first.nextCursor, waitMs: 0 });
    expect(r.droppedBytes as number).toBeGreaterThan(1_000_000);
    await ok('shell_close', { workspaceId: ws, shellId: s.shellId });
  }, 30_000);
});

describe('tasks', () => {
  it('runs a dependency graph: a failure marks its dependants, the rest succeed in order', async () => {
    // t1 waits for a gate this test opens once it has seen t2 pending (a fixed sleep could end
    // before t2 is even created on a loaded machine).
    await sh('rm -f graph-gate');
    const T1 = 'for i in $(seq 1200); do [ -e graph-gate ] && break; sleep 0.05; done; echo one > one.txt; echo t1';
    const t1 = await ok('tasks_run', { workspaceId: ws, command: T1, idempotencyKey: 'task-graph-1' });
    const t2 = await ok('tasks_run', { workspaceId: ws, command: 'cat one.txt; echo t2', dependsOn: [t1.taskId], idempotencyKey: 'task-graph-2' });
    const t3 = await ok('tasks_run', { workspaceId: ws, command: 'echo failing; exit 7', idempotencyKey: 'task-graph-3' });
    const t4 = await ok('tasks_run', { workspaceId: ws, command: 'echo never', dependsOn: [t2.taskId, t3.taskId], idempotencyKey: 'task-graph-4' });
    expect(t2.state).toBe('pending');
    const replay = await ok('tasks_run', { workspaceId: ws, command: T1, idempotencyKey: 'task-graph-1' });
    expect(replay.taskId).toBe(t1.taskId);
    await sh('touch graph-gate');
    const final = async (id: unknown) => {
      for (let i = 0; i < 60; i++) {
        const s = await ok('tasks_status', { workspaceId: ws, taskId: id });
        if (!['pending', 'running'].includes(s.state as string)) return s;
        await new Promise((r) => setTimeout(r, 250));
      }
      throw new Error('task did not end');
    };
    expect(await final(t2.taskId)).toMatchObject({ state: 'succeeded', output: 'one\nt2\n' });
    expect(await final(t3.taskId)).toMatchObject({ state: 'failed', exitCode: 7 });
    const s4 = await final(t4.taskId);
    expect(s4.state).toBe('dependency_failed');
    expect(String(s4.reason)).toContain(String(t3.taskId));
    const g = await ok('tasks_graph', { workspaceId: ws });
    expect(g.edges).toEqual(expect.arrayContaining([expect.objectContaining({ from: t1.taskId, to: t2.taskId }), expect.objectContaining({ from: t3.taskId, to: t4.taskId })]));
    const page = await ok('tasks_list', { workspaceId: ws, limit: 2 });
    expect((page.tasks as unknown[]).length).toBe(2);
    const next = await ok('tasks_list', { workspaceId: ws, limit: 2, cursor: page.nextCursor });
    expect((next.tasks as Array<{ taskId: string }>)[0]!.taskId).toBe(t3.taskId);
    const unknown = await call(c, 'tasks_run', { workspaceId: ws, command: 'true', dependsOn: ['task_' + 'x'.repeat(24)], idempotencyKey: 'task-unknown-1' });
    expect(!unknown.ok && unknown.error.details.field).toBe('dependsOn');
  }, 60_000);

  it('cancel terminates a running task: its shell and the child it started are gone', async () => {
    await sh('rm -f task-sh.pid task-child.pid');
    const t = await ok('tasks_run', { workspaceId: ws, command: 'echo $$ > task-sh.pid; sleep 300 & echo $! > task-child.pid; echo working; wait', idempotencyKey: 'task-cancel-1' });
    for (let i = 0; i < 40 && !(await sh('cat task-child.pid 2>/dev/null')).stdout.trim(); i++) await new Promise((r) => setTimeout(r, 100));
    const alive = "for p in $(cat task-sh.pid) $(cat task-child.pid); do if [ -e /proc/$p ] && ! grep -q ') Z' /proc/$p/stat; then echo alive $p; fi; done";
    expect((await sh(alive)).stdout).toMatch(/alive \d+\nalive \d+\n/); // the probe sees them while they run
    const r = await ok('tasks_cancel', { workspaceId: ws, taskId: t.taskId });
    expect(r.state).toBe('cancelled');
    expect((await ok('tasks_status', { workspaceId: ws, taskId: t.taskId })).output).toContain('working');
    let left = '';
    for (let i = 0; i < 30; i++) {
      left = (await sh(alive)).stdout;
      if (left === '') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(left).toBe('');
  });

  it('a task whose cwd vanished before it could start ends failed, not interrupted', async () => {
    await sh('mkdir -p vanish');
    const t1 = await ok('tasks_run', { workspaceId: ws, command: 'sleep 0.5; rmdir vanish', idempotencyKey: 'task-vanish-1' });
    const t2 = await ok('tasks_run', { workspaceId: ws, command: 'echo never', cwd: 'vanish', dependsOn: [t1.taskId], idempotencyKey: 'task-vanish-2' });
    let s: Record<string, unknown> = {};
    for (let i = 0; i < 60; i++) {
      s = await ok('tasks_status', { workspaceId: ws, taskId: t2.taskId });
      if (!['pending', 'running'].includes(s.state as string)) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(s.state).toBe('failed');
    expect(String(s.reason)).toContain('cwd');
    expect(s.output).toBe('');
  });
});

describe('cwd is checked at the call on every path that starts a command', () => {
  const bad: Array<{ cwd: string; code: string }> = [
    { cwd: '../..', code: 'INVALID_ARGUMENT' },
    { cwd: '/etc', code: 'INVALID_ARGUMENT' },
    { cwd: 'a\u0000b', code: 'INVALID_ARGUMENT' },
    { cwd: 'no/such/dir', code: 'NOT_FOUND' },
    { cwd: 'README.md', code: 'INVALID_ARGUMENT' },
  ];
  it('async exec_run, async bash and tasks_run answer at once as the synchronous exec does, with details.field cwd', async () => {
    for (const { cwd } of bad) {
      const sync = await call(c, 'exec_run', { workspaceId: ws, command: 'true', cwd });
      expect(sync.ok, cwd).toBe(false);
      const syncCode = !sync.ok ? sync.error.code : '';
      const attempts = [
        await call(c, 'exec_run', { workspaceId: ws, command: 'echo ran > ran.txt', cwd, async: true }),
        await call(c, 'bash', { workspaceId: ws, command: 'echo ran > ran.txt', cwd, async: true }),
        await call(c, 'tasks_run', { workspaceId: ws, command: 'echo ran > ran.txt', cwd, idempotencyKey: `task-badcwd-${bad.findIndex((b) => b.cwd === cwd)}` }),
      ];
      for (const r of attempts) {
        expect(r.ok, cwd).toBe(false);
        if (!r.ok) {
          expect(r.error.code, cwd).toBe(syncCode);
          expect(r.error.details.field, cwd).toBe('cwd');
        }
      }
    }
    expect(bad.map((b) => b.code)).toContain('NOT_FOUND');
    const tasks = (await ok('tasks_list', { workspaceId: ws, limit: 500 })).tasks as Array<{ command: string }>;
    expect(tasks.filter((t) => t.command === 'echo ran > ran.txt')).toEqual([]); // nothing was recorded
  });

  it('sessions_list, tasks_list and tasks_graph answer an unknown workspace with NOT_FOUND', async () => {
    const unknown = 'ws_' + 'z'.repeat(24);
    for (const tool of ['sessions_list', 'tasks_list', 'tasks_graph']) {
      const r = await call(c, tool, { workspaceId: unknown });
      expect(r.ok, tool).toBe(false);
      if (!r.ok) expect(r.error, tool).toMatchObject({ code: 'NOT_FOUND', details: { field: 'workspaceId' } });
    }
  });
});

describe('privileged commands', () => {
  it('are refused without a grant, run with the owner’s single-use grant bound to workspace and command', async () => {
    const refused = await call(c, 'exec_run', { workspaceId: ws, command: 'id -u', privileged: true });
    expect(refused.ok).toBe(false);
    if (refused.ok) return;
    expect(refused.error.code).toBe('PERMISSION_DENIED');
    expect(refused.error.message).toContain('/api/v1/approvals/');
    const approvalId = refused.error.details.approvalRequestId as string;
    // The owner approves on the dashboard REST API.
    const { cookie, csrf } = await owner();
    const pending = JSON.parse((await rest('GET', '/api/v1/approvals?state=pending', { cookie })).body).approvals as Array<{ id: string; command: string }>;
    expect(pending.find((a) => a.id === approvalId)?.command).toBe('id -u');
    const approved = await rest('POST', `/api/v1/approvals/${approvalId}/approve`, { cookie, 'x-csrf-token': csrf });
    expect(approved.status).toBe(200);
    const grant = JSON.parse(approved.body).approvalGrantToken as string;
    const other = await call(c, 'exec_run', { workspaceId: ws, command: 'id -u; echo x', privileged: true, approvalGrantToken: grant });
    expect(!other.ok && other.error.message).toContain('another command');
    const r = (await ok('exec_run', { workspaceId: ws, command: 'id -u', privileged: true, approvalGrantToken: grant })) as unknown as Exec;
    // On failure, say what the privileged run itself reported (it failed once in CI with no output).
    expect(r.stdout.trim(), JSON.stringify({ exitCode: r.exitCode, signal: r.signal, timedOut: r.timedOut, stderr: r.stderr })).toBe('0');
    const reuse = await call(c, 'exec_run', { workspaceId: ws, command: 'id -u', privileged: true, approvalGrantToken: grant });
    expect(!reuse.ok && reuse.error.code).toBe('PERMISSION_DENIED');
    // Root inside its own namespace only: the host stays out of reach.
    expect((await sh('id -u')).stdout.trim()).not.toBe('0');
  });
});

describe('privileged commands: what the owner sees and what the run can reach', () => {
  /** Asks for a privileged run, has the owner approve it on the dashboard, runs it with the grant. */
  async function approveAndRun(command: string): Promise<{ shown: { command: string; commandSha256: string }; run: Exec }> {
    const refused = await call(c, 'exec_run', { workspaceId: ws, command, privileged: true });
    if (refused.ok) throw new Error('a privileged command ran without a grant');
    const approvalId = refused.error.details.approvalRequestId as string;
    const { cookie, csrf } = await owner();
    const listed = JSON.parse((await rest('GET', '/api/v1/approvals?state=pending&kind=privileged_command', { cookie })).body).approvals as Array<{ id: string; command: string; commandSha256: string }>;
    const shown = listed.find((a) => a.id === approvalId)!;
    const approved = await rest('POST', `/api/v1/approvals/${approvalId}/approve`, { cookie, 'x-csrf-token': csrf });
    expect(approved.status).toBe(200);
    const run = (await ok('exec_run', { workspaceId: ws, command, privileged: true, approvalGrantToken: JSON.parse(approved.body).approvalGrantToken })) as unknown as Exec;
    return { shown, run };
  }

  it('a command whose dangerous part lies past character 500 is shown whole, with its digest', async () => {
    const command = `: ${'harmless-looking-padding '.repeat(24)}; echo the-hidden-tail > hidden-tail.txt`;
    expect(command.length).toBeGreaterThan(600);
    expect(command.indexOf('the-hidden-tail')).toBeGreaterThan(500);
    const { shown, run } = await approveAndRun(command);
    expect(shown.command).toBe(command);
    expect(shown.commandSha256).toBe(createHash('sha256').update(command).digest('hex'));
    expect(run.exitCode, JSON.stringify({ signal: run.signal, timedOut: run.timedOut, stdout: run.stdout, stderr: run.stderr })).toBe(0);
    expect((await sh('cat hidden-tail.txt')).stdout).toBe('the-hidden-tail\n');
  });

  it('a privileged run reaches neither the host network nor host files', async () => {
    let connections = 0;
    const server = createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    const port = (server.address() as AddressInfo).port;
    const marker = mkdtempSync(join(tmpdir(), 'atelier-host-marker-'));
    writeFileSync(join(marker, 'secret.txt'), 'host-only\n');
    try {
      const { run } = await approveAndRun(
        [
          `if (exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null; then echo net-reached; else echo net-refused; fi`,
          `if [ -e ${marker}/secret.txt ] || cat ${marker}/secret.txt 2>/dev/null; then echo host-seen; else echo host-hidden; fi`,
          `if [ -e ${svc.dataDir} ]; then echo datadir-seen; else echo datadir-hidden; fi`,
          `if (exec 3<>/dev/tcp/1.1.1.1/53) 2>/dev/null; then echo internet-reached; else echo internet-refused; fi`,
          // Positive control: the same probe reaches a listener on the sandbox's own loopback.
          // (node takes a moment to listen on a loaded machine: the probe is tried for up to 20 s)
          `node -e "require('net').createServer((s) => s.end()).listen(${port + 1 > 65535 ? port - 1 : port + 1}, '127.0.0.1')" & inner=inner-refused; for i in $(seq 200); do if (exec 3<>/dev/tcp/127.0.0.1/${port + 1 > 65535 ? port - 1 : port + 1}) 2>/dev/null; then inner=inner-reached; break; fi; sleep 0.1; done; echo $inner; kill %1`,
          'id -u',
        ].join('; '),
      );
      expect(run.stdout).toBe('net-refused\nhost-hidden\ndatadir-hidden\ninternet-refused\ninner-reached\n0\n');
      expect(connections).toBe(0);
      // The same probe from the test process does reach the listener: the check can fail.
      await new Promise<void>((r, j) => connect(port, '127.0.0.1', () => r()).on('error', j));
      for (let i = 0; i < 200 && connections === 0; i++) await new Promise((r) => setTimeout(r, 50));
      expect(connections).toBe(1);
    } finally {
      server.close();
      rmSync(marker, { recursive: true, force: true });
    }
  });
});

describe('privileged commands: a grant does exactly what it says (issue #31)', () => {
  type View = { id: string; state: string; subject: string; command: string; commandSha256: string; subjectSha256: string; cwd?: string; details: Record<string, unknown>; display: Record<string, string>; flags: string[]; hiddenCharacters: Array<Record<string, unknown>> };
  /** Asks for a privileged run (refused, filing the request); returns the request as the owner's REST shows it. */
  async function ask(command: string, cwd?: string): Promise<View> {
    const refused = await call(c, 'exec_run', { workspaceId: ws, command, privileged: true, ...(cwd === undefined ? {} : { cwd }) });
    if (refused.ok) throw new Error('a privileged command ran without a grant');
    expect(refused.error.code, refused.text).toBe('PERMISSION_DENIED');
    const { cookie } = await owner();
    const got = await rest('GET', `/api/v1/approvals/${refused.error.details.approvalRequestId as string}`, { cookie });
    expect(got.status).toBe(200);
    return JSON.parse(got.body) as View;
  }
  async function approveGrant(id: string): Promise<string> {
    const { cookie, csrf } = await owner();
    const approved = await rest('POST', `/api/v1/approvals/${id}/approve`, { cookie, 'x-csrf-token': csrf });
    expect(approved.status).toBe(200);
    return JSON.parse(approved.body).approvalGrantToken as string;
  }

  it('binds the working directory: the approval shows it, another cwd is refused, the same directory spelled otherwise runs', async () => {
    await sh('mkdir -p priv-a priv-b');
    const shown = await ask('pwd; touch ran-here', 'priv-a');
    expect(shown.cwd).toBe('priv-a');
    expect(shown.display.cwd).toBe('priv-a');
    expect(shown.command).toBe('pwd; touch ran-here');
    expect(shown.commandSha256).toBe(createHash('sha256').update('pwd; touch ran-here').digest('hex'));
    expect(shown.subjectSha256).toBe(createHash('sha256').update(JSON.stringify({ command: 'pwd; touch ran-here', cwd: 'priv-a' })).digest('hex'));
    const grant = await approveGrant(shown.id);
    const elsewhere = await call(c, 'exec_run', { workspaceId: ws, command: 'pwd; touch ran-here', cwd: 'priv-b', privileged: true, approvalGrantToken: grant });
    expect(elsewhere.ok).toBe(false);
    if (!elsewhere.ok) {
      expect([elsewhere.error.code, elsewhere.error.details.field]).toEqual(['PERMISSION_DENIED', 'approvalGrantToken']);
      expect(elsewhere.error.message).toContain('working directory');
    }
    expect((await sh('ls priv-b')).stdout).toBe('');
    // A refused use spends nothing: the grant still runs the approved command where it was approved.
    const r = (await ok('exec_run', { workspaceId: ws, command: 'pwd; touch ran-here', cwd: './priv-a/', privileged: true, approvalGrantToken: grant })) as unknown as Exec & { cwd: string };
    expect(r.stdout, r.stderr).toBe('/workspace/priv-a\n');
    expect(r.cwd).toBe('priv-a');
    expect((await sh('ls priv-a')).stdout).toBe('ran-here\n');
  });

  it('privileged with async, or with a directory that cannot be used, is refused before the grant is spent; the same grant then runs', async () => {
    const noRequest = await call(c, 'exec_run', { workspaceId: ws, command: 'echo async-probe', privileged: true, async: true });
    expect(!noRequest.ok && [noRequest.error.code, noRequest.error.details.field]).toEqual(['INVALID_ARGUMENT', 'async']);
    const { cookie } = await owner();
    const pending = JSON.parse((await rest('GET', '/api/v1/approvals?state=pending&kind=privileged_command', { cookie })).body).approvals as View[];
    expect(pending.some((a) => a.command === 'echo async-probe')).toBe(false); // nothing was filed
    const shown = await ask('id -u');
    const grant = await approveGrant(shown.id);
    const asyncCall = await call(c, 'exec_run', { workspaceId: ws, command: 'id -u', privileged: true, async: true, approvalGrantToken: grant });
    expect(!asyncCall.ok && [asyncCall.error.code, asyncCall.error.details.field]).toEqual(['INVALID_ARGUMENT', 'async']);
    for (const cwd of ['no-such-dir', '../..', '/etc']) {
      const bad = await call(c, 'exec_run', { workspaceId: ws, command: 'id -u', cwd, privileged: true, approvalGrantToken: grant });
      expect(!bad.ok && bad.error.details.field, cwd).toBe('cwd');
    }
    expect(JSON.parse((await rest('GET', `/api/v1/approvals/${shown.id}`, { cookie })).body).state).toBe('approved');
    const r = (await ok('exec_run', { workspaceId: ws, command: 'id -u', privileged: true, approvalGrantToken: grant })) as unknown as Exec;
    expect(r.stdout.trim(), r.stderr).toBe('0');
    expect(JSON.parse((await rest('GET', `/api/v1/approvals/${shown.id}`, { cookie })).body).state).toBe('used');
  });

  it('hidden characters in a command (bidi, zero-width, C0, C1) are escaped and flagged in the REST payload; the raw subject stays the bound bytes', async () => {
    const command = 'echo "build \u202Edesrever\u202C ok"; cu\u200Brl x\u0085; printf "a\rb"; true\u2066\u2069';
    const shown = await ask(command);
    expect(shown.subject).toBe(command);
    expect(shown.commandSha256).toBe(createHash('sha256').update(command).digest('hex'));
    expect(shown.display.subject).toBe('echo "build \\u{202E}desrever\\u{202C} ok"; cu\\u{200B}rl x\\u{0085}; printf "a\\u{000D}b"; true\\u{2066}\\u{2069}');
    expect(shown.flags).toEqual(['hidden_characters']);
    expect(shown.hiddenCharacters).toEqual([
      { field: 'subject', codePoint: 'U+202E', kind: 'bidi', count: 1 },
      { field: 'subject', codePoint: 'U+202C', kind: 'bidi', count: 1 },
      { field: 'subject', codePoint: 'U+200B', kind: 'zero_width', count: 1 },
      { field: 'subject', codePoint: 'U+0085', kind: 'control', count: 1 },
      { field: 'subject', codePoint: 'U+000D', kind: 'control', count: 1 },
      { field: 'subject', codePoint: 'U+2066', kind: 'bidi', count: 1 },
      { field: 'subject', codePoint: 'U+2069', kind: 'bidi', count: 1 },
    ]);
    // Plain text is not flagged.
    const plain = await ask('echo plain');
    expect([plain.flags, plain.display.subject]).toEqual([[], 'echo plain']);
  });
});

describe('restart', () => {
  it('a running task is reported interrupted after a restart, its output so far readable', async () => {
    const t = await ok('tasks_run', { workspaceId: ws, command: 'echo before-restart; sleep 300', idempotencyKey: 'task-restart-1' });
    await new Promise((r) => setTimeout(r, 1000));
    const token = svc.token;
    await c.close();
    expect(await svc.stop()).toBe(0);
    const again = await startService({ dataDir: svc.dataDir, args: ['--packages-enabled'] });
    restarted = again;
    c = await connectV2({ ...again, token });
    const s = await ok('tasks_status', { workspaceId: ws, taskId: t.taskId });
    expect(s.state).toBe('interrupted');
    expect(s.output).toContain('before-restart');
  }, 60_000);

  it('the toolbox target is refused when packages are disabled', async () => {
    const plain = await startService();
    try {
      const c2 = await connectV2(plain);
      const r = await call(c2, 'bash', { target: 'toolbox', command: 'true' });
      expect(!r.ok && r.error.code).toBe('FAILED_PRECONDITION');
      if (!r.ok) expect(r.error.message).toContain('packages');
      await c2.close();
    } finally {
      await plain.dispose();
    }
  });
});

