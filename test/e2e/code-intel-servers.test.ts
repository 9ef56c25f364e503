/**
 * Code intelligence (issue #44): the life of a workspace's language servers through the real
 * service, with the operator's settings (codeIntelIdleSeconds 2, codeIntelDisabledServers python):
 * a server stops after the idle time and starts again on the next call; a disabled server, one
 * not installed and one that crashed too often each answer why they are not there, never an empty
 * success. The servers run under a host process of the daemon (src/sandbox/daemon/lsp/host.ts)
 * that ends with the last of them, and whose death from inside counts as its servers' crash.
 */
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, type Service } from './harness.js';
import { startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

let host: GitHost;
let svc: Service;
let c: Client;
let ws: string;

async function ok(name: string, args: Record<string, unknown>): Promise<R> {
  const r = await call(c, name, args, 120_000);
  if (!r.ok) throw new Error(`${name}: ${r.text}`);
  return r.result as R;
}

async function fails(name: string, args: Record<string, unknown>): Promise<R> {
  const r = await call(c, name, args, 120_000);
  if (r.ok) throw new Error(`${name} succeeded: ${JSON.stringify(r.result).slice(0, 500)}`);
  return r.error as unknown as R;
}

/** A server the operator adds in the config file: here typescript-language-server again, for .mts files only. */
const OPERATOR_SERVER = {
  name: 'ts-alt',
  command: '/usr/bin/node',
  args: ['/opt/atelier/node_modules/typescript-language-server/lib/cli.mjs', '--stdio'],
  extensions: { '.mts': 'typescript' },
  initializationOptions: { tsserver: { path: '/opt/atelier/node_modules/typescript-lsp-tsserver/lib/tsserver.js' }, disableAutomaticTypingAcquisition: true },
};

/** Polls `probe` until `done` holds or `ms` have passed (the daemon's own timers decide when; a count of polls would depend on how fast each answers). */
async function until(probe: () => Promise<R>, done: (r: R) => boolean, ms: number): Promise<R> {
  const end = Date.now() + ms;
  let r = await probe();
  while (!done(r) && Date.now() < end) {
    await new Promise((res) => setTimeout(res, 50));
    r = await probe();
  }
  return r;
}

/** The pids of the language-server hosts in the sandbox. */
async function hosts(): Promise<string[]> {
  const r = await ok('exec_run', { workspaceId: ws, command: 'pgrep -f "[d]aemon/lsp/host.js" || true' });
  return String(r.stdout).trim().split(/\s+/).filter(Boolean);
}

async function server(id: string): Promise<R> {
  return (await ok('code_servers', { workspaceId: ws })).servers.find((s: R) => s.server === id);
}

async function ts(): Promise<R> {
  return (await ok('code_servers', { workspaceId: ws })).servers.find((s: R) => s.server === 'typescript');
}

beforeAll(async () => {
  host = await startGitHost();
  const url = (await host.createRepo('approved/code-intel-servers', {
    'tsconfig.json': '{"compilerOptions":{"strict":true}}',
    'a.ts': 'export const answer = 42;\n',
    'b.py': 'x = 1\n',
    'c.go': 'package main\n',
    'm.mts': 'export const viaOperator = "custom";\n',
  })).url;
  svc = await startWorkspaceService(host, { config: { sandboxMemoryMb: 1024, sandboxPidsMax: 512, knowledgeEmbeddings: 'off', codeIntelIdleSeconds: 2, codeIntelDisabledServers: 'python', codeIntel: { servers: [OPERATOR_SERVER] } } });
  c = await connectV2(svc);
  ws = (await ok('workspace_open', { repositoryUrl: url, idempotencyKey: 'code-intel-servers' })).workspaceId as string;
}, 180_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('language server life', { timeout: 240_000 }, () => {
  it('stops after the idle time (its processes gone) and starts again on the next call', async () => {
    expect((await ok('code_hover', { workspaceId: ws, path: 'a.ts', symbol: 'answer' })).contents).toContain('const answer: 42');
    const running = await ts();
    expect(running.state).toBe('running');
    expect((await ok('code_servers', { workspaceId: ws })).idleSeconds).toBe(2);
    // Wait for the condition (the daemon's idle timer), bounded.
    const st = await until(ts, (r) => r.state !== 'running', 60_000);
    expect(st).toMatchObject({ state: 'stopped', lastExit: { expected: true, reason: 'stopped after 2 s idle' } });
    const left = await until(() => ok('exec_run', { workspaceId: ws, command: 'pgrep -fa "[t]ypescript-language-server|[t]sserver" || true' }), (r) => String(r.stdout).trim() === '', 30_000);
    expect(String(left.stdout).trim()).toBe('');
    expect((await ok('code_definition', { workspaceId: ws, path: 'a.ts', line: 1, column: 14 })).locations[0]).toMatchObject({ path: 'a.ts', range: { start: { line: 1, column: 14 } } });
    expect(await ts()).toMatchObject({ state: 'running', restarts: running.restarts + 1, crashesInWindow: 0 });
  });

  it("a server from the operator's config file serves its extensions (over the built-in one) and is listed", async () => {
    const h = await ok('code_hover', { workspaceId: ws, path: 'm.mts', symbol: 'viaOperator' });
    expect(h.server).toBe('custom:ts-alt');
    expect(h.contents).toContain('const viaOperator: "custom"');
    const st = (await ok('code_servers', { workspaceId: ws })).servers.find((s: R) => s.server === 'custom:ts-alt');
    expect(st).toMatchObject({ state: 'running', runsNoRepositoryCode: false });
  });

  it('a disabled server and one not installed say so, and point at symbols_search', async () => {
    const disabled = await fails('code_hover', { workspaceId: ws, path: 'b.py', line: 1, column: 1 });
    expect(disabled).toMatchObject({ code: 'FAILED_PRECONDITION', details: { server: 'python', reason: 'disabled', fallback: ['symbols_search', 'symbols_references'] } });
    expect(disabled.message).toMatch(/disabled by the operator.*symbols_search/);
    if (!existsSync('/usr/bin/gopls')) {
      const missing = await fails('code_definition', { workspaceId: ws, path: 'c.go', line: 1, column: 9 });
      expect(missing).toMatchObject({ code: 'FAILED_PRECONDITION', details: { server: 'gopls', reason: 'not_installed' } });
      expect(missing.message).toMatch(/not installed.*symbols_search/);
    }
  });

  it('the host process ends with the last server (idle), and code_servers still tells each server\'s history without starting one', async () => {
    await ok('code_hover', { workspaceId: ws, path: 'a.ts', symbol: 'answer' });
    expect((await hosts()).length).toBe(1);
    const before = await ts();
    const idle = await until(() => ok('code_servers', { workspaceId: ws }), (r) => !r.servers.some((s: R) => s.state === 'running' || s.state === 'starting'), 60_000);
    expect(idle.servers.some((s: R) => s.state === 'running')).toBe(false);
    // The host sees its last server go and the daemon ends it (bounded wait: its own timers decide).
    const gone = await until(async () => ({ pids: await hosts() }), (r) => r.pids.length === 0, 30_000);
    expect(gone.pids).toEqual([]);
    // Answered by the daemon from the history the host left: no host starts for it.
    const st = await ts();
    expect(st).toMatchObject({ state: 'stopped', restarts: before.restarts, lastExit: { expected: true, reason: 'stopped after 2 s idle' } });
    expect(st.pid).toBeUndefined();
    expect(await hosts()).toEqual([]);
    // The next call starts a host and the server again, counted as a restart.
    expect((await ok('code_hover', { workspaceId: ws, path: 'a.ts', symbol: 'answer' })).contents).toContain('const answer: 42');
    expect(await ts()).toMatchObject({ state: 'running', restarts: before.restarts + 1 });
    expect((await hosts()).length).toBe(1);
  });

  it('a server that crashed three times is not started again, and says how it ended', async () => {
    for (let crash = 1; crash <= 3; crash++) {
      await ok('code_hover', { workspaceId: ws, path: 'a.ts', symbol: 'answer' });
      const pid = (await ts()).pid;
      await ok('exec_run', { workspaceId: ws, command: `kill -9 ${pid}` });
      // The daemon sees the exit.
      const st = await until(ts, (r) => !(r.state === 'running' && r.pid === pid), 30_000);
      expect(st.crashesInWindow).toBe(crash);
    }
    const refused = await fails('code_hover', { workspaceId: ws, path: 'a.ts', symbol: 'answer' });
    expect(refused).toMatchObject({ code: 'FAILED_PRECONDITION', details: { server: 'typescript', reason: 'crashed', crashes: 3, lastExit: { expected: false, reason: expect.stringContaining('SIGKILL') } } });
    expect(refused.message).toMatch(/crashed 3 times.*symbols_search/);
    expect(await ts()).toMatchObject({ state: 'crashed', crashesInWindow: 3 });
  });

  it('a host killed from inside: its servers count as crashed with the reason, and the next call starts a new host', async () => {
    expect((await ok('code_hover', { workspaceId: ws, path: 'm.mts', symbol: 'viaOperator' })).server).toBe('custom:ts-alt');
    const before = await server('custom:ts-alt');
    expect(before.state).toBe('running');
    const [pid] = await hosts();
    expect(pid).toBeDefined();
    await ok('exec_run', { workspaceId: ws, command: `kill -9 ${pid}` });
    const st = await until(() => server('custom:ts-alt'), (r) => r.state !== 'running' && r.crashesInWindow === before.crashesInWindow + 1, 30_000);
    expect(st).toMatchObject({ crashesInWindow: before.crashesInWindow + 1, lastExit: { expected: false, reason: expect.stringContaining('language-server host killed by SIGKILL') } });
    // Its servers do not outlive it (they watch their parent and their stdin).
    const left = await until(() => ok('exec_run', { workspaceId: ws, command: 'pgrep -fa "[t]ypescript-language-server|[t]sserver" || true' }), (r) => String(r.stdout).trim() === '', 30_000);
    expect(String(left.stdout).trim()).toBe('');
    const again = await ok('code_hover', { workspaceId: ws, path: 'm.mts', symbol: 'viaOperator' });
    expect(again.contents).toContain('const viaOperator: "custom"');
    const [pid2] = await hosts();
    expect(pid2).toBeDefined();
    expect(pid2).not.toBe(pid);
    expect(await server('custom:ts-alt')).toMatchObject({ state: 'running', restarts: before.restarts + 1 });
  });
});
