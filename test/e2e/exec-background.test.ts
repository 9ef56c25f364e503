/**
 * Issue #42 item 8, through the real service: exec_run ends what a command leaves running when it
 * returns (`cmd &`, `nohup`, `setsid`), says so in the result (backgroundEnded, backgroundNote
 * naming tasks_run), and the processes are really gone (checked from a second exec in the same
 * workspace, through /proc). A command that leaves nothing gets neither field. tasks_run keeps its
 * server running (the way the note points to). Under the Kubernetes executor (the fixture API
 * server) the daemon ends the command's process group: `cmd &` and `nohup` are ended and counted,
 * a `setsid` child has left the group and is not (docs/commands.md).
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, startService, unmountUnder, type Service } from './harness.js';
import { rmSync } from 'node:fs';
import type { KubeApiServer } from '../fixtures/kube-apiserver/index.js';
import { startKubeTarget } from './kube-fixture.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import { releaseDataDir } from './cleanup.js';
import { assertNothingLeft } from './leftovers.js';

let host: GitHost;
let svc: Service;
let c: Client;
let ws: string;
const dataDir = mkdtempSync(join(tmpdir(), 'atelier-exec-bg-'));

type Ok = (name: string, args: Record<string, unknown>) => Promise<Record<string, unknown>>;

/** A tool call on `client()` that must succeed. */
const succeeding =
  (client: () => Client): Ok =>
  async (name, args) => {
    const r = await call(client(), name, args);
    if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
    return r.result;
  };
const ok = succeeding(() => c);

/** Live processes in the workspace whose command line carries `mark` (read from /proc, zombies left out). */
async function alive(mark: string, workspaceId = ws, run: Ok = ok): Promise<string[]> {
  const r = await run('exec_run', {
    workspaceId,
    command: `for d in /proc/[0-9]*; do s=$(cut -d' ' -f3 "$d/stat" 2>/dev/null); [ -n "$s" ] && [ "$s" != Z ] && tr '\\0' ' ' < "$d/cmdline" 2>/dev/null | grep -q -- '${mark}' && echo "\${d#/proc/} $(tr '\\0' ' ' < "$d/cmdline")"; done; true`,
  });
  // The scanning shell's own command line names the mark too: only `sleep` processes count.
  return String(r.stdout).split('\n').filter((l) => / sleep /.test(` ${l.split(' ').slice(1).join(' ')} `));
}

beforeAll(async () => {
  host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/background', REPO_FILES)).url;
  await configFor(host, dataDir);
  svc = await startService({ dataDir });
  c = await connectV2(svc);
  ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'background-open' })).workspaceId as string;
}, 120_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
  releaseDataDir(dataDir);
  await assertNothingLeft(dataDir);
});

describe('exec_run ends what a command leaves running, and says so', () => {
  const cases: Array<[string, string, number]> = [
    ['cmd &', 'sleep 301 & echo started', 1],
    ['nohup cmd &', 'nohup sleep 302 > /dev/null 2>&1 & echo started', 1],
    ['setsid cmd &', 'setsid sleep 303 < /dev/null > /dev/null 2>&1 & echo started', 1],
    ['two of them, one holding stdout', 'sleep 304 & (sleep 304 > /dev/null 2>&1 &); echo started', 2],
  ];
  for (const [label, command, count] of cases) {
    it(`${label}: the result counts it, names tasks_run, and it is gone`, async () => {
      const mark = command.match(/sleep (\d+)/)![1]!;
      const r = await ok('exec_run', { workspaceId: ws, command });
      expect(r.exitCode).toBe(0);
      expect(r.stdout).toBe('started\n');
      expect(r.backgroundEnded).toBe(count);
      expect(String(r.backgroundNote)).toMatch(count === 1 ? /^1 process the command left running .* was ended when it returned/ : new RegExp(`^${count} processes .* were ended`));
      expect(String(r.backgroundNote)).toMatch(/tasks_run/);
      expect(await alive(`sleep ${mark}`)).toEqual([]);
    });
  }

  it('a command that leaves nothing running gets neither field', async () => {
    const r = await ok('exec_run', { workspaceId: ws, command: 'sleep 0.1; echo done' });
    expect(r.stdout).toBe('done\n');
    expect(r).not.toHaveProperty('backgroundEnded');
    expect(r).not.toHaveProperty('backgroundNote');
    // A background process that ended before the command returned is nothing left either.
    const waited = await ok('exec_run', { workspaceId: ws, command: 'sleep 0.1 & wait; echo waited' });
    expect(waited.stdout).toBe('waited\n');
    expect(waited).not.toHaveProperty('backgroundEnded');
  });

  it('bash (target workspace) says the same', async () => {
    const r = await ok('bash', { workspaceId: ws, command: 'sleep 305 & echo started' });
    expect(r.backgroundEnded).toBe(1);
    expect(String(r.backgroundNote)).toMatch(/tasks_run/);
    expect(await alive('sleep 305')).toEqual([]);
  });

  it('tasks_run keeps a server running', async () => {
    const t = await ok('tasks_run', { workspaceId: ws, command: 'sleep 306', idempotencyKey: 'background-task' });
    expect(t.taskId).toBeTruthy();
    const end = Date.now() + 30_000;
    let seen: string[] = [];
    while (Date.now() < end && (seen = await alive('sleep 306')).length === 0) await new Promise((r) => setTimeout(r, 200));
    expect(seen.length).toBe(1);
    await ok('tasks_cancel', { workspaceId: ws, taskId: t.taskId });
  });
});

describe.skipIf(process.getuid?.() !== 0)('under the Kubernetes executor, the daemon ends the process group', () => {
  let kubeHost: GitHost;
  let api: KubeApiServer | undefined;
  let kube: Service;
  let kc: Client;
  let kws = '';
  const kubeDir = mkdtempSync(join(tmpdir(), 'atelier-exec-bg-kube-'));
  const kok = succeeding(() => kc);

  beforeAll(async () => {
    kubeHost = await startGitHost();
    const target = await startKubeTarget();
    api = target.api;
    await configFor(kubeHost, kubeDir, { sandboxDiskMb: 0 });
    kube = await startService({ dataDir: kubeDir, args: target.args });
    kc = await connectV2(kube);
    const repoUrl = (await kubeHost.createRepo('approved/background-kube', REPO_FILES)).url;
    kws = (await kok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'background-kube-open' })).workspaceId as string;
  }, 180_000);

  afterAll(async () => {
    if (kws && kc) await call(kc, 'workspace_close', { workspaceId: kws }).catch(() => undefined);
    await kc?.close();
    await kube?.stop('SIGTERM').catch(() => undefined);
    await api?.close();
    await kubeHost?.close();
    unmountUnder(kubeDir);
    rmSync(kubeDir, { recursive: true, force: true });
  });

  it('cmd & and nohup are ended and counted; a setsid child is not reached', async () => {
    const r = await kok('exec_run', { workspaceId: kws, command: 'sleep 341 & nohup sleep 342 > /dev/null 2>&1 & echo started' });
    expect(r.stdout).toBe('started\n');
    expect(r.backgroundEnded).toBe(2);
    expect(String(r.backgroundNote)).toMatch(/^2 processes .*tasks_run/);
    expect(await alive('sleep 34[12]', kws, kok)).toEqual([]);
    // setsid: the command returns once the child has its own session (it wrote its pid after setsid).
    const s = await kok('exec_run', { workspaceId: kws, command: "setsid sh -c 'echo $$ > /tmp/s.pid; exec sleep 343' < /dev/null > /dev/null 2>&1 & until [ -s /tmp/s.pid ]; do sleep 0.01; done; echo started" });
    expect(s).not.toHaveProperty('backgroundEnded');
    expect(await alive('sleep 343', kws, kok)).toHaveLength(1);
    await kok('exec_run', { workspaceId: kws, command: 'kill -9 $(cat /tmp/s.pid)' });
  }, 120_000);
});
