/**
 * Issue #12 items 2 and 10, through the real service: a workspace survives the death of its
 * daemon (`kill -9 -1` from inside), status tells the truth, the next call or resume restarts it
 * with the checkout intact; a foreground command's leftovers (a backgrounded fork bomb) die with
 * it while an async operation keeps its background processes; after a `kill -9` of the runner,
 * nothing answers (not /healthz, not MCP) before restart recovery is done.
 */
import { createServer } from 'node:net';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, httpRequest, startService, type Service } from './harness.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import { releaseDataDir } from './cleanup.js';
import { assertNothingLeft } from './leftovers.js';

let host: GitHost;
let svc: Service;
let again: Service | undefined;
let c: Client;
let ws: string;
let port: number;
const dataDir = mkdtempSync(join(tmpdir(), 'atelier-wsr-'));

async function ok(name: string, args: Record<string, unknown>, client = c): Promise<Record<string, unknown>> {
  const r = await call(client, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
const sh = async (command: string, extra: Record<string, unknown> = {}) =>
  (await ok('exec_run', { workspaceId: ws, command, ...extra })) as { stdout: string; stderr: string; exitCode: number };

async function waitFor(what: () => Promise<boolean>, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await what()) return true;
    await new Promise((r) => setTimeout(r, 200));
  }
  return false;
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

beforeAll(async () => {
  host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/resilience', REPO_FILES)).url;
  await configFor(host, dataDir, { sandboxPidsMax: 96 });
  port = await freePort();
  svc = await startService({ dataDir, args: ['--port', String(port)] });
  c = await connectV2(svc);
  ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'resilience-open' })).workspaceId as string;
}, 120_000);

afterAll(async () => {
  await c?.close();
  await again?.dispose();
  await svc?.dispose();
  await host?.close();
  releaseDataDir(dataDir);
  await assertNothingLeft(dataDir);
});

describe('the daemon dies (kill -9 -1 from inside)', () => {
  it('status says so, and the next call restarts the sandbox with the checkout intact', async () => {
    await sh('echo kept > uncommitted.txt');
    const killed = await call(c, 'exec_run', { workspaceId: ws, command: 'kill -9 -1; sleep 5' });
    // The call itself loses its daemon: an error, never a success.
    expect(killed.ok).toBe(false);
    expect(await waitFor(async () => (await ok('workspace_status', { workspaceId: ws })).sandboxState === 'died', 10_000)).toBe(true);
    const st = await ok('workspace_status', { workspaceId: ws });
    expect(st).toMatchObject({ state: 'active', sandboxRunning: false, sandboxState: 'died' });
    expect(String(st.sandboxNote)).toMatch(/next call or workspace_recover/);

    const r = await sh('cat uncommitted.txt README.md');
    expect(r.stdout).toBe('kept\n# demo\n');
    expect(await ok('workspace_status', { workspaceId: ws })).toMatchObject({ sandboxRunning: true, sandboxState: 'running', sandboxRestarts: 1 });
  }, 60_000);

  it('workspace_recover resume restarts it too', async () => {
    await call(c, 'exec_run', { workspaceId: ws, command: 'kill -9 -1; sleep 5' });
    expect(await waitFor(async () => (await ok('workspace_status', { workspaceId: ws })).sandboxState === 'died', 10_000)).toBe(true);
    const resumed = await ok('workspace_recover', { workspaceId: ws, mode: 'resume' });
    expect(resumed).toMatchObject({ mode: 'resume', state: 'active', sandboxRestarted: true });
    expect(await ok('workspace_status', { workspaceId: ws })).toMatchObject({ sandboxRunning: true, sandboxState: 'running', sandboxRestarts: 2 });
    expect((await sh('cat uncommitted.txt')).stdout).toBe('kept\n');
    // A resume of a healthy workspace restarts nothing.
    expect(await ok('workspace_recover', { workspaceId: ws, mode: 'resume' })).toMatchObject({ sandboxRestarted: false });
  }, 60_000);
});

describe('a foreground command takes its leftovers with it', () => {
  it('a fork bomb backgrounded by exec_run dies when the command returns; the workspace keeps working', async () => {
    const r = await sh("(setsid bash -c 'f(){ f | f & }; f' >/dev/null 2>&1 &); sleep 2; echo started", { timeoutMs: 30_000 });
    expect(r.stdout).toBe('started\n');
    // The daemon's spare exec starters and their reapers (2 to 8 of them, refilled in rounds) are
    // its own; the rest is the daemon, this shell, ps, grep and wc: nothing of the bomb.
    const after = await sh('ps -e -o comm= | grep -v -x -e exec-starter -e spare-reaper | wc -l');
    expect(after.exitCode).toBe(0);
    expect(Number(after.stdout.trim())).toBeLessThan(10);
    expect((await sh('echo fine')).stdout).toBe('fine\n');
  }, 60_000);

  it('a timed-out command loses its background processes as well', async () => {
    const r = await sh('setsid sleep 600 >/dev/null 2>&1 & sleep 30', { timeoutMs: 500 });
    expect(r).toMatchObject({ timedOut: true });
    expect((await sh('pgrep -c -x sleep || true')).stdout.trim()).toBe('0');
  }, 30_000);

  it('an async operation keeps the background process it started (a tool made for that)', async () => {
    const op = await ok('exec_run', { workspaceId: ws, command: 'setsid sleep 600 >/dev/null 2>&1 & echo bg', async: true });
    const done = await ok('operation_wait', { operationId: op.operationId, timeoutMs: 30_000 });
    expect(done).toMatchObject({ state: 'succeeded', exitCode: 0 });
    // setsid execs sleep a moment after the operation's shell has forked it and ended.
    expect((await sh('for i in $(seq 200); do [ "$(pgrep -c -x sleep)" = 1 ] && break; sleep 0.05; done; pgrep -c -x sleep || true')).stdout.trim()).toBe('1');
    await sh('pkill -x sleep || true');
  }, 60_000);
});

describe('refusals from inside the sandbox (issue #12 item 5, daemon side)', () => {
  const err = async (name: string, args: Record<string, unknown>) => {
    const r = await call(c, name, args);
    if (r.ok) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(r.result)}`);
    return r.error as { code: string; message: string; details: Record<string, unknown> };
  };

  it('a lone surrogate in a file name is refused naming the field, never replaced', async () => {
    for (const bad of ['a\uD800.txt', 'b\uDC00.txt', 'dir\uDBFF/x.txt']) {
      const e = await err('files_write', { workspaceId: ws, path: bad, content: 'x' });
      expect(e.code).toBe('INVALID_ARGUMENT');
      expect(e.details.field).toBe('path');
    }
    expect((await sh("ls | grep -c $'\\xef\\xbf\\xbd' || true")).stdout.trim()).toBe('0');
    const e = await err('files_read', { workspaceId: ws, path: 'x\uD83D' });
    expect(e).toMatchObject({ code: 'INVALID_ARGUMENT', details: { field: 'path' } });
  });

  it('refusals raised by the daemon carry details.field', async () => {
    const e = await err('files_list', { workspaceId: ws, path: 'README.md' });
    expect(e.details.field).toBe('path');
    const e2 = await err('files_read', { workspaceId: ws, path: 'no/such/file' });
    expect(e2).toMatchObject({ code: 'NOT_FOUND', details: { field: 'path' } });
  });

  it('git_diff and git_add paths outside the workspace are PERMISSION_DENIED naming the field', async () => {
    await sh('ln -sfn /etc outside-link');
    for (const path of ['../x', '/etc/passwd', 'a/../../b']) {
      expect(await err('git_diff', { workspaceId: ws, path })).toMatchObject({ code: 'PERMISSION_DENIED', details: { field: 'path' } });
      expect(await err('git_add', { workspaceId: ws, paths: ['README.md', path] })).toMatchObject({ code: 'PERMISSION_DENIED', details: { field: 'paths' } });
    }
    expect(await err('git_add', { workspaceId: ws, paths: ['outside-link/passwd'] })).toMatchObject({ code: 'PERMISSION_DENIED', details: { field: 'paths' } });
    // git diff never reads through a symlink: beyond one it finds nothing to show.
    expect(await ok('git_diff', { workspaceId: ws, path: 'outside-link/passwd' })).toMatchObject({ empty: true });
    await sh('rm -f outside-link');
  });

  it('a path changing under a files tool answers NOT_FOUND or CONFLICT, never INTERNAL or descriptor paths', async () => {
    const op = await ok('exec_run', { workspaceId: ws, command: 'end=$((SECONDS+20)); while [ $SECONDS -lt $end ]; do mkdir -p churn/d/e; echo x > churn/d/e/f; rm -rf churn/d; ln -s nowhere churn/d; rm -f churn/d; done', async: true });
    const seen = new Set<string>();
    try {
      for (let i = 0; i < 150; i++) {
        for (const [name, args] of [
          ['files_read', { path: 'churn/d/e/f' }],
          ['files_list', { path: 'churn/d/e' }],
          ['files_write', { path: 'churn/d/e/g', content: 'y' }],
          ['files_delete', { path: 'churn/d/e/g' }],
          ['files_move', { from: 'churn/d/e/g', to: 'churn/d/e/h' }],
        ] as const) {
          const r = await call(c, name, { workspaceId: ws, ...args });
          if (r.ok) continue;
          seen.add(r.error.code);
          expect(r.error.message).not.toMatch(/\/proc\/(self|\d+)\/fd/);
          expect(['NOT_FOUND', 'CONFLICT', 'FAILED_PRECONDITION', 'PERMISSION_DENIED', 'INVALID_ARGUMENT'], `${name}: ${r.text}`).toContain(r.error.code);
        }
      }
    } finally {
      await ok('operation_cancel', { operationId: op.operationId }).catch(() => undefined);
    }
    expect(seen.has('INTERNAL')).toBe(false);
  }, 120_000);
});

describe('ready means ready (kill -9 of the runner)', () => {
  it('neither /healthz nor MCP answers before restart recovery is done; the first answers find the workspace working', async () => {
    await sh('echo before-restart > marker.txt');
    // Its daemon dies too, so recovery has real work to do (start a new sandbox) after the restart.
    await call(c, 'exec_run', { workspaceId: ws, command: 'kill -9 -1; sleep 5' });
    expect(await waitFor(async () => (await ok('workspace_status', { workspaceId: ws })).sandboxState === 'died', 10_000)).toBe(true);
    svc.proc.kill('SIGKILL');
    await new Promise<void>((r) => (svc.proc.exitCode !== null || svc.proc.signalCode !== null ? r() : svc.proc.once('exit', () => r())));
    const token = svc.token;
    // Poll /healthz from the moment the new runner starts; the first 200 must come from a recovered service.
    let firstHealthy = 0;
    let polling = true;
    const poller = (async () => {
      while (polling) {
        try {
          const h = await httpRequest(`http://127.0.0.1:${port}`, 'GET', '/healthz');
          if (h.status === 200) {
            firstHealthy = Date.now();
            return;
          }
        } catch {
          // not listening yet
        }
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const starting = startService({ dataDir, args: ['--port', String(port)] });
    await poller;
    polling = false;
    expect(firstHealthy).toBeGreaterThan(0);
    // Straight after the first healthy answer: the surviving workspace answers, nothing is "opening".
    const fresh = await connectV2({ ...svc, token });
    try {
      // Recovery already restarted the sandbox: status says so before any call could have.
      expect(await ok('workspace_status', { workspaceId: ws }, fresh)).toMatchObject({ state: 'active', sandboxRunning: true, sandboxState: 'running' });
      const r = await ok('exec_run', { workspaceId: ws, command: 'cat marker.txt' }, fresh);
      expect(r.stdout).toBe('before-restart\n');
      const list = (await ok('workspace_list', {}, fresh)).workspaces as Array<{ state: string }>;
      expect(list.every((w) => w.state !== 'opening')).toBe(true);
    } finally {
      await fresh.close();
    }
    again = await starting;
    c = await connectV2({ ...again, token });
  }, 120_000);
});
