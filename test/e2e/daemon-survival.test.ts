/**
 * Issue #35 item 1, through the real service: when a workspace's daemon dies, the runner says why.
 *
 * - A daemon that dies (here SIGABRT, what a V8 "Reached heap limit" ends with) is reported in
 *   workspace_status's sandboxNote and in the runner's log: exit signal, the cgroup's OOM kills and
 *   the last lines of its stderr; after the restart the note keeps the cause.
 * The heap death itself (a terminal ring of a million 1-byte chunks) and the cap on input a
 * terminal has not taken are provoked deterministically in test/sandbox/pty-ring.test.ts; bench/soak
 * (smoke mode in bench-smoke.test.ts) is the soak.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, startService, type Service } from './harness.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import { releaseDataDir } from './cleanup.js';
import { assertNothingLeft } from './leftovers.js';

let host: GitHost;
let svc: Service;
let c: Client;
let ws: string;
const dataDir = mkdtempSync(join(tmpdir(), 'atelier-survival-'));

async function ok(name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

async function waitFor(what: () => Promise<boolean>, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await what()) return true;
    await new Promise((r) => setTimeout(r, 200));
  }
  return false;
}

beforeAll(async () => {
  host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/survival', REPO_FILES)).url;
  await configFor(host, dataDir);
  svc = await startService({ dataDir });
  c = await connectV2(svc);
  ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'survival-open' })).workspaceId as string;
}, 120_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
  releaseDataDir(dataDir);
  await assertNothingLeft(dataDir);
});

describe('a daemon that dies says why', () => {
  it('workspace_status (sandboxNote) and the runner log carry the exit signal, the OOM kills and the last stderr lines', async () => {
    const shell = (await ok('shell_open', { workspaceId: ws, idempotencyKey: 'survival-doomed-shell' })).shellId as string;
    // The daemon is the sandbox's node process (its pid namespace's pid 2): SIGABRT, as a V8 heap
    // limit ends it. The call loses its daemon with it.
    const killed = await call(c, 'exec_run', { workspaceId: ws, command: 'kill -ABRT $(ps -eo pid=,comm= | awk \'$2 == "node" { print $1; exit }\'); sleep 5' });
    expect(killed.ok).toBe(false);
    expect(await waitFor(async () => (await ok('workspace_status', { workspaceId: ws })).sandboxState === 'died', 15_000)).toBe(true);
    const dead = await ok('workspace_status', { workspaceId: ws });
    expect(dead).toMatchObject({ sandboxRunning: false, sandboxState: 'died' });
    expect(String(dead.sandboxNote)).toMatch(/ended with signal SIGABRT/);
    expect(String(dead.sandboxNote)).toMatch(/cgroup OOM kills \d+/);
    expect(String(dead.sandboxNote)).toMatch(/last stderr: .*atelier daemon 3 listening/);
    expect(String(dead.sandboxNote)).toMatch(/next call or workspace_recover/);

    // The next call restarts it; the note keeps the cause; the shell ended with the old daemon.
    expect((await ok('exec_run', { workspaceId: ws, command: 'echo back' })).stdout).toBe('back\n');
    const after = await ok('workspace_status', { workspaceId: ws });
    expect(after).toMatchObject({ sandboxRunning: true, sandboxState: 'running', sandboxRestarts: 1 });
    expect(String(after.sandboxNote)).toMatch(/the sandbox daemon died at \S+ \(ended with signal SIGABRT.*cgroup OOM kills \d+.*\) and was started again/);
    const io = await call(c, 'shell_io', { workspaceId: ws, shellId: shell, input: 'echo hi\n' });
    expect(io.ok).toBe(false);
    expect(io.text).toMatch(/ended with its sandbox/);

    // The runner's log: the warning with the same fields.
    const log = svc.stdout() + svc.stderr();
    const line = log.split('\n').find((l) => l.includes('workspace sandbox restarted') && l.includes(ws));
    expect(line, 'the runner log has the restart').toBeDefined();
    expect(line).toMatch(/"daemonExit":"signal SIGABRT/);
    expect(line).toMatch(/"oomKills":\d+/);
    expect(line).toMatch(/"daemonStderr":\[.*listening/);
  }, 120_000);
});
