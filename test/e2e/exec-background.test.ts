/**
 * Issue #42 item 8, through the real service: exec_run ends what a command leaves running when it
 * returns (`cmd &`, `nohup`, `setsid`), says so in the result (backgroundEnded, backgroundNote
 * naming tasks_run), and the processes are really gone (checked from a second exec in the same
 * workspace, through /proc). A command that leaves nothing gets neither field. tasks_run keeps its
 * server running (the way the note points to).
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
const dataDir = mkdtempSync(join(tmpdir(), 'atelier-exec-bg-'));

async function ok(name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

/** Live processes in the workspace whose command line carries `mark` (read from /proc, zombies left out). */
async function alive(mark: string): Promise<string[]> {
  const r = await ok('exec_run', {
    workspaceId: ws,
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
