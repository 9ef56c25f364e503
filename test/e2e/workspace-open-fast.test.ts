/**
 * Issue #21 item 2 (open in clone time), through the real service: a plain open takes the spare
 * workspace sandbox started ahead of time (its daemon up, its filesystem mounted) and clones into
 * it from the usual short-lived one-host sandbox; the checkout's commit and branch come from the
 * clone's own sandbox. Hostile: a repository that tries to run something at checkout (filter
 * driver, hooks, a submodule) runs nothing, nothing of the clone (a process, its egress bridge,
 * the credential socket, the token) is in the workspace afterwards, and the spare holds nothing of
 * one workspace for the next. Opens that need another sandbox (dependency-access) do not take the
 * spare. A fresh service keeps none until its first open. A spare left by a killed runner is
 * removed at the next start; a stopped service leaves none behind.
 */
import { existsSync, mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, startService, type Service } from './harness.js';
import { REPO_FILES, configFor, startGitHost } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import { releaseDataDir } from './cleanup.js';
import { assertNothingLeft, leftoversOf } from './leftovers.js';

let host: GitHost;
let svc: Service | undefined;
let c: Client;
let repoUrl: string;
let hostileUrl: string;
let hostileHead: string;
const dataDir = mkdtempSync(join(tmpdir(), 'atelier-wof-'));
const spareFile = join(dataDir, 'run', 'spare-workspace.json');

async function ok(name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
const sh = async (workspaceId: string, command: string) => (await ok('exec_run', { workspaceId, command })) as { stdout: string; stderr: string; exitCode: number };

async function waitFor<T>(what: () => T | undefined, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = what();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The id of the spare workspace sandbox once it is running (its daemon's socket is there). */
function spareId(): string | undefined {
  try {
    const id = (JSON.parse(readFileSync(spareFile, 'utf8')) as { id: string }).id;
    return mountedRoot(id) ? id : undefined;
  } catch {
    return undefined;
  }
}
const mountedRoot = (id: string) => readFileSync('/proc/mounts', 'utf8').includes(` ${join(dataDir, 'workspaces', id)} `);

/** Host pids whose cgroup path names `fragment` (every sandbox process is born in its sandbox's cgroups). */
function pidsInCgroup(fragment: string): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (readFileSync(`/proc/${p}/cgroup`, 'utf8').includes(fragment)) out.push(Number(p));
    } catch {
      // gone
    }
  }
  return out;
}

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/fast', REPO_FILES, { commits: 2 })).url;
  // Tries, at checkout, a filter driver, a post-checkout hook and a submodule (none may run or be fetched).
  const hostile = await host.createRepo('approved/hostile', {
    '.gitattributes': '* filter=evil\n',
    '.gitmodules': `[submodule "sub"]\n\tpath = sub\n\turl = ${host.url}/approved/fast.git\n`,
    'hooks/post-checkout': '#!/bin/sh\ntouch /workspace/PWNED; (sleep 600 &) ; sleep 600 &\n',
    'evil.sh': '#!/bin/sh\ntouch /workspace/PWNED-filter; setsid sleep 600 & cat\n',
    'README.md': 'hostile\n',
  });
  hostileUrl = hostile.url;
  hostileHead = hostile.headOid;
  await configFor(host, dataDir);
  svc = await startService({ dataDir });
  c = await connectV2(svc);
}, 120_000);

describe('a fresh service', () => {
  it('keeps no idle sandbox until its first open, which starts its sandbox during the clone; then a spare waits', async () => {
    await new Promise((r) => setTimeout(r, 1500));
    expect(existsSync(spareFile)).toBe(false);
    expect(readFileSync('/proc/mounts', 'utf8')).not.toContain(` ${join(dataDir, 'workspaces')}/`);
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'fast-first' });
    expect(w).toMatchObject({ state: 'active', branch: 'main' });
    const spare = await waitFor(spareId);
    expect(spare).not.toBe(w.workspaceId);
    await ok('workspace_close', { workspaceId: w.workspaceId });
  }, 90_000);
});

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
  releaseDataDir(dataDir);
  await assertNothingLeft(dataDir);
});

describe('a plain open takes the spare sandbox', () => {
  it('opens into the sandbox started ahead of time, with the commit and branch read by the clone', async () => {
    const spare = await waitFor(spareId);
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'fast-open-1' });
    expect(w.workspaceId).toBe(spare);
    expect(w).toMatchObject({ state: 'active', branch: 'main' });
    const head = (await sh(spare, 'git rev-parse HEAD; git branch --show-current')).stdout.trim().split('\n');
    expect(w.headOid).toBe(head[0]);
    expect(head[1]).toBe('main');
    expect((await ok('workspace_status', { workspaceId: spare })).headOid).toBe(head[0]);
    // The next spare is another sandbox with another id, started after this open.
    const next = await waitFor(() => {
      const id = spareId();
      return id && id !== spare ? id : undefined;
    });
    expect(next).not.toBe(spare);
    await ok('workspace_close', { workspaceId: spare });
    expect(mountedRoot(spare)).toBe(false);
  }, 90_000);

  it('a commit as ref: detached, branch null, headOid that commit', async () => {
    await waitFor(spareId);
    const w = await ok('workspace_open', { repositoryUrl: hostileUrl, ref: hostileHead, idempotencyKey: 'fast-sha' });
    expect(w).toMatchObject({ headOid: hostileHead, branch: null });
    await ok('workspace_close', { workspaceId: w.workspaceId });
  }, 90_000);

  it('a hostile repository runs nothing at checkout, and nothing of the clone is in the workspace afterwards', async () => {
    const spare = await waitFor(spareId);
    const submoduleFetches = () => host.requests.filter((q) => q.path.includes('/approved/fast.git')).length;
    const before = submoduleFetches();
    const w = await ok('workspace_open', { repositoryUrl: hostileUrl, idempotencyKey: 'fast-hostile' });
    const id = w.workspaceId as string;
    expect(id).toBe(spare);
    // Nothing ran: no marker files, the submodule was not fetched.
    const files = await sh(id, 'ls -A /workspace; ls -A /workspace/sub 2>/dev/null | wc -l');
    expect(files.stdout).not.toContain('PWNED');
    expect(files.stdout.trim().split('\n').pop()).toBe('0');
    expect(submoduleFetches()).toBe(before);
    // Inside: only the daemon, its spare exec starters (with their reaper) and this command; no git, no egress bridge,
    // no credential socket, no proxy socket, nothing listening for the clone's proxy.
    const ps = await sh(id, `for p in /proc/[0-9]*; do printf '%s ' "$(cat $p/comm 2>/dev/null)"; done; echo; ls -A /run/egress; ls -d /run/atelier-cred 2>&1; (exec 3<>/dev/tcp/127.0.0.1/3128) 2>&1 && echo PROXY-OPEN || echo proxy-closed`);
    const comms = ps.stdout.split('\n')[0]!.trim().split(/\s+/);
    expect(comms.filter((x) => !['bwrap', 'node', 'exec-starter', 'spare-reaper', 'bash', 'cat'].includes(x))).toEqual([]);
    expect(comms.filter((x) => x === 'node')).toHaveLength(1);
    expect(ps.stdout).not.toMatch(/\bgit\b|egress-run|sleep/);
    expect(ps.stdout).toContain('No such file or directory'); // /run/atelier-cred
    expect(ps.stdout).toContain('proxy-closed');
    expect(ps.stdout).not.toContain('PROXY-OPEN');
    // The token: not in any process's environment or command line, not in a file, not in git's config.
    // (The token is given in two halves joined by a shell builtin, so no command line here holds it.)
    const half = Math.floor(host.token.length / 2);
    const tok = await sh(
      id,
      `a='${host.token.slice(0, half)}'; b='${host.token.slice(half)}'; pat() { printf '%s%s\\n' "$a" "$b"; }; ` +
        `cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -cF -f <(pat); ` +
        `grep -rlaF -f <(pat) /workspace /home/user /tmp 2>/dev/null | wc -l; git config --list --show-origin | grep -ciE 'token|credential\\.helper=.+' || true`,
    );
    expect(tok.stdout.trim().split('\n')).toEqual(['0', '0', '0']);
    // On the host: the clone's short-lived sandbox is gone (no process in a g-<id> cgroup), and no
    // process other than the workspace's own sandbox runs a sleep the repository asked for.
    expect(pidsInCgroup(`/g-${id.slice(3, 15)}-`)).toEqual([]);
    const sleeps = pidsInCgroup(`/${id}`).filter((p) => {
      try {
        return readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'sleep';
      } catch {
        return false;
      }
    });
    expect(sleeps).toEqual([]);
    await ok('workspace_close', { workspaceId: id });
  }, 90_000);

  it('the spare holds nothing of an earlier workspace: a fresh home, /tmp and checkout, its own id', async () => {
    const first = await waitFor(spareId);
    const a = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'fast-open-a' })).workspaceId as string;
    expect(a).toBe(first);
    await sh(a, 'echo secret-a > /home/user/mark; echo secret-a > /tmp/mark; (setsid sleep 600 &)');
    const second = await waitFor(() => {
      const id = spareId();
      return id && id !== a ? id : undefined;
    });
    const b = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'fast-open-b' })).workspaceId as string;
    expect(b).toBe(second);
    const r = await sh(b, 'cat /home/user/mark /tmp/mark 2>&1; grep -lx sleep /proc/[0-9]*/comm 2>/dev/null | wc -l');
    expect(r.stdout).not.toContain('secret-a');
    expect(r.stdout.trim().split('\n').pop()).toBe('0');
    for (const id of [a, b]) await ok('workspace_close', { workspaceId: id });
  }, 90_000);

  it('a failed open (repository missing) removes the spare it took, and the next open gets a new one', async () => {
    const spare = await waitFor(spareId);
    const r = await call(c, 'workspace_open', { repositoryUrl: `${host.url}/approved/missing.git`, idempotencyKey: 'fast-missing' });
    expect(!r.ok && r.error.code).toBe('NOT_FOUND');
    expect(mountedRoot(spare)).toBe(false);
    expect(existsSync(join(dataDir, 'workspaces', spare))).toBe(false);
    expect(pidsInCgroup(`/${spare}`)).toEqual([]);
    const next = await waitFor(() => {
      const id = spareId();
      return id && id !== spare ? id : undefined;
    });
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'fast-after-missing' });
    expect(w.workspaceId).toBe(next);
    await ok('workspace_close', { workspaceId: next });
  }, 90_000);

  it('dependency-access does not take the spare (its sandbox has the proxy); the spare stays for the next plain open', async () => {
    const spare = await waitFor(spareId);
    const w = await ok('workspace_open', { repositoryUrl: repoUrl, networkProfile: 'dependency-access', idempotencyKey: 'fast-dep' });
    expect(w.workspaceId).not.toBe(spare);
    expect((await sh(w.workspaceId as string, 'echo $HTTPS_PROXY')).stdout.trim()).toBe('http://127.0.0.1:3128');
    expect(spareId()).toBe(spare);
    const plain = await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'fast-plain-after-dep' });
    expect(plain.workspaceId).toBe(spare);
    expect((await sh(spare, 'echo "[$HTTPS_PROXY]"')).stdout.trim()).toBe('[]');
    for (const id of [w.workspaceId, plain.workspaceId]) await ok('workspace_close', { workspaceId: id });
  }, 90_000);
});

describe('the spare across runner stops', () => {
  it('a spare left by a killed runner is removed at the next start; a stopped service leaves none', async () => {
    const left = await waitFor(spareId);
    const token = svc!.token; // printed at the first start only
    await svc!.stop('SIGKILL');
    // The killed runner's spare still runs and is mounted (sandboxes outlive their runner by design).
    expect(mountedRoot(left)).toBe(true);
    svc = await startService({ dataDir });
    await c.close();
    c = await connectV2({ ...svc, token });
    const fresh = await waitFor(() => {
      const id = spareId();
      return id && id !== left ? id : undefined;
    });
    expect(fresh).not.toBe(left);
    expect(mountedRoot(left)).toBe(false);
    expect(existsSync(join(dataDir, 'workspaces', left))).toBe(false);
    expect(existsSync(join(dataDir, 'disks', `${left}.img`))).toBe(false);
    expect(existsSync(join(dataDir, 'image-pool', 'disks', `${left}.img`))).toBe(false);
    expect(pidsInCgroup(`/${left}`)).toEqual([]);
    // A normal stop removes the spare: nothing of it is left mounted or running.
    await svc.stop('SIGTERM');
    expect(leftoversOf(dataDir)).toEqual([]);
    expect(existsSync(spareFile)).toBe(false);
    expect(pidsInCgroup(`/${fresh}`)).toEqual([]);
    svc = undefined;
  }, 120_000);
});
