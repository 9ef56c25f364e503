/**
 * Git and worktrees (issue #6) against the HTTPS git host on loopback, with authentication,
 * driven only through MCP: local operations, pushes with leases, fetch and pull through the
 * broker, merge and rebase conflicts, workspace_finalize as a transaction, worktrees, and a
 * malicious repository whose hooks and config never run.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2 } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';
import type { Service } from './harness.js';
import { gitEnvFor } from '../fixtures/githost.js';

const execFileP = promisify(execFile);

let host: GitHost;
let svc: Service;
let c: Client;
let repoUrl: string;
let ws: string;
let clientDir: string;

async function ok(name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

async function err(name: string, args: Record<string, unknown>): Promise<{ code: string; message: string; details: Record<string, unknown> }> {
  const r = await call(c, name, args);
  if (r.ok) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(r.result)}`);
  return r.error as never;
}

async function sh(command: string, workspaceId = ws): Promise<{ exitCode: number | null; stdout: string; stderr: string }> {
  return (await ok('exec_run', { workspaceId, command, timeoutMs: 60_000 })) as never;
}

/** git on the test host (another developer), authenticated against the fixture. */
async function hostGit(args: string[], cwd = clientDir): Promise<string> {
  const env: NodeJS.ProcessEnv = { ...process.env, ...gitEnvFor(host), HOME: clientDir, GIT_CONFIG_NOSYSTEM: '1', GIT_AUTHOR_NAME: 'Other', GIT_AUTHOR_EMAIL: 'other@example.invalid', GIT_COMMITTER_NAME: 'Other', GIT_COMMITTER_EMAIL: 'other@example.invalid' };
  for (const k of Object.keys(env)) if (k.startsWith('GIT_DIR') || k === 'GIT_INDEX_FILE' || k === 'GIT_WORK_TREE') delete env[k];
  const { stdout } = await execFileP('git', args, { cwd, env, encoding: 'utf8', timeout: 30_000 });
  return stdout;
}

async function remoteOid(branch: string, url = repoUrl): Promise<string | null> {
  const out = await hostGit(['ls-remote', url, `refs/heads/${branch}`]);
  return out.trim() ? out.split('\t')[0]! : null;
}

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/gitdemo', REPO_FILES, { commits: 3 })).url;
  svc = await startWorkspaceService(host);
  c = await connectV2(svc);
  ws = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'git-open-main', fetchDepth: 0 })).workspaceId as string;
  clientDir = mkdtempSync(join(tmpdir(), 'atelier-git-client-'));
}, 120_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
  if (clientDir) rmSync(clientDir, { recursive: true, force: true });
});

describe('local operations', () => {
  it('refuses a commit without any identity, then sets and reports one', async () => {
    expect(await ok('git_identity_status', { workspaceId: ws })).toMatchObject({ configured: false, name: null, email: null });
    await sh('echo one > one.txt && git add one.txt');
    const e = await err('git_commit', { workspaceId: ws, message: 'no identity' });
    expect(e.code).toBe('FAILED_PRECONDITION');
    expect(e.message).toMatch(/no git identity/);
    await ok('git_identity_set', { workspaceId: ws, name: 'Ada Agent', email: 'ada@example.invalid' });
    expect(await ok('git_identity_status', { workspaceId: ws })).toMatchObject({ configured: true, name: 'Ada Agent', email: 'ada@example.invalid' });
  });

  it('reports structured status, stages, and pages diffs with cursors', async () => {
    await sh("printf 'changed\\n' >> README.md && mkdir -p d && echo new > 'd/new file.txt'");
    const s = await ok('git_status', { workspaceId: ws });
    expect(s).toMatchObject({ branch: 'main', detached: false, upstream: 'origin/main', ahead: 0, behind: 0, clean: false, inProgress: null });
    expect(s.staged).toEqual(['one.txt']);
    expect(s.unstaged).toEqual(['README.md']);
    expect(s.untracked).toEqual(['d/new file.txt']);
    expect((s.entries as Array<Record<string, unknown>>).find((e) => e.path === 'README.md')).toMatchObject({ index: '.', worktree: 'M', kind: 'changed' });

    const whole = await ok('git_diff', { workspaceId: ws, readAll: true });
    expect(whole.files).toEqual(['README.md']);
    let text = '';
    let cursor: string | undefined;
    let pages = 0;
    do {
      const p = await ok('git_diff', { workspaceId: ws, limit: 40, ...(cursor ? { cursor } : {}) });
      text += p.diff as string;
      cursor = (p.nextCursor as string | null) ?? undefined;
      pages++;
    } while (cursor);
    expect(pages).toBeGreaterThan(1);
    expect(text).toBe(whole.diff);
    const byPath = await ok('git_diff', { workspaceId: ws, path: 'README.md', limit: 40 });
    expect(byPath.nextCursor).toEqual(expect.any(String));
    const other = await err('git_diff', { workspaceId: ws, path: 'src', limit: 40, cursor: byPath.nextCursor });
    expect(other.code).toBe('INVALID_ARGUMENT');

    const added = await ok('git_add', { workspaceId: ws, paths: ['README.md', 'd/new file.txt'] });
    expect(added.staged).toEqual(expect.arrayContaining(['README.md', 'd/new file.txt', 'one.txt']));
    const staged = await ok('git_diff', { workspaceId: ws, staged: true, readAll: true });
    expect(staged.files).toEqual(expect.arrayContaining(['README.md', 'd/new file.txt', 'one.txt']));
  });

  it('commits: a moved HEAD refuses and changes nothing; an idempotency key commits once', async () => {
    const head = (await ok('git_status', { workspaceId: ws })).headOid as string;
    const wrong = 'f'.repeat(40);
    const e = await err('git_commit', { workspaceId: ws, message: 'guarded', expectedHeadOid: wrong });
    expect(e.code).toBe('CONFLICT');
    expect(e.details.actualHeadOid).toBe(head);
    const after = await ok('git_status', { workspaceId: ws });
    expect(after.headOid).toBe(head);
    expect((after.staged as string[]).length).toBe(3);

    const args = { workspaceId: ws, message: 'Add files\n\nbody', expectedHeadOid: head, idempotencyKey: 'commit-1', authorName: 'Bob Author', authorEmail: 'bob@example.invalid' };
    const first = await ok('git_commit', args);
    expect(first).toMatchObject({ parentOids: [head], branch: 'main', subject: 'Add files', author: { name: 'Bob Author', email: 'bob@example.invalid' }, signed: false });
    const again = await ok('git_commit', args);
    expect(again.replayed).toBe(true);
    expect(again.commitOid).toBe(first.commitOid);
    const who = await sh('git log -1 --format="%an <%ae> / %cn <%ce>"');
    expect(who.stdout.trim()).toBe('Bob Author <bob@example.invalid> / Ada Agent <ada@example.invalid>');
    expect((await ok('git_status', { workspaceId: ws })).clean).toBe(true);
  });

  it('pages the log with cursors', async () => {
    const all = await ok('git_log', { workspaceId: ws, readAll: true });
    expect((all.commits as unknown[]).length).toBe(4);
    const p1 = await ok('git_log', { workspaceId: ws, limit: 3 });
    expect((p1.commits as Array<{ subject: string }>)[0]!.subject).toBe('Add files');
    const p2 = await ok('git_log', { workspaceId: ws, limit: 3, cursor: p1.nextCursor });
    expect(p2.nextCursor).toBeNull();
    expect([...(p1.commits as unknown[]), ...(p2.commits as unknown[])]).toEqual(all.commits);
  });

  it('creates, lists and deletes branches, and checks out', async () => {
    await ok('git_branch', { workspaceId: ws, action: 'create', name: 'topic' });
    const list = await ok('git_branch', { workspaceId: ws, action: 'list' });
    expect((list.branches as Array<Record<string, unknown>>).map((b) => b.name)).toEqual(['main', 'topic']);
    expect((list.branches as Array<Record<string, unknown>>).find((b) => b.name === 'main')).toMatchObject({ current: true, upstream: 'origin/main', ahead: 1 });
    const co = await ok('git_checkout', { workspaceId: ws, ref: 'topic' });
    expect(co).toMatchObject({ branch: 'topic', previousBranch: 'main' });
    expect((await err('git_checkout', { workspaceId: ws, ref: 'no-such-ref' })).code).toBe('NOT_FOUND');
    await ok('git_checkout', { workspaceId: ws, ref: 'main' });
    expect(await ok('git_branch', { workspaceId: ws, action: 'delete', name: 'topic' })).toMatchObject({ deleted: true });
    expect((await err('git_branch', { workspaceId: ws, action: 'delete', name: 'topic' })).code).toBe('NOT_FOUND');
  });
});

describe('pushes through the broker', () => {
  it('pushes the current branch; no token enters the workspace', async () => {
    const head = (await ok('git_status', { workspaceId: ws })).headOid;
    const r = await ok('git_push', { workspaceId: ws, idempotencyKey: 'push-main-1' });
    expect(r).toMatchObject({ ref: 'refs/heads/main', oid: head, outcome: 'fast-forward' });
    expect(await remoteOid('main')).toBe(head);
    expect(host.requests.some((q) => q.path.includes('git-receive-pack') && q.authorized)).toBe(true);
    expect((await ok('git_push', { workspaceId: ws, idempotencyKey: 'push-main-1' })).replayed).toBe(true);
    const leak = await sh(`grep -rlaF '${host.token}' /workspace/.git /workspace 2>/dev/null; env | grep -cF '${host.token}' || true`);
    expect(leak.stdout.trim()).toBe('0');
    expect((await ok('git_status', { workspaceId: ws })).ahead).toBe(0);
  });

  it('loses a race on expectedRemoteOid with the remote actual OID, and nothing is pushed', async () => {
    const before = (await remoteOid('main'))!;
    // Another developer pushes first.
    const other = join(clientDir, 'race');
    await hostGit(['clone', '-q', repoUrl, other]);
    await hostGit(['commit', '-q', '--allow-empty', '-m', 'theirs'], other);
    await hostGit(['push', '-q', 'origin', 'HEAD:main'], other);
    const theirs = (await remoteOid('main'))!;
    expect(theirs).not.toBe(before);

    await sh('echo mine > mine.txt');
    await ok('git_add', { workspaceId: ws, paths: ['mine.txt'] });
    await ok('git_commit', { workspaceId: ws, message: 'mine' });
    const e = await err('git_push', { workspaceId: ws, forceWithLease: true, expectedRemoteOid: before });
    expect(e.code).toBe('CONFLICT');
    expect(e.details.remoteOid).toBe(theirs);
    expect(e.message).toContain(theirs);
    expect(await remoteOid('main')).toBe(theirs);

    // Without a lease, a non-fast-forward is refused with the remote's OID too.
    const nf = await err('git_push', { workspaceId: ws });
    expect(nf.code).toBe('FAILED_PRECONDITION');
    expect(nf.details.remoteOid).toBe(theirs);
  });

  it('expectedAbsent refuses an existing branch and creates a new one', async () => {
    const e = await err('git_push', { workspaceId: ws, refspec: 'HEAD:refs/heads/main', forceWithLease: true, expectedAbsent: true });
    expect(e.code).toBe('CONFLICT');
    expect(e.details.remoteOid).toBe(await remoteOid('main'));
    const r = await ok('git_push', { workspaceId: ws, refspec: 'HEAD:feature-x', forceWithLease: true, expectedAbsent: true });
    expect(r).toMatchObject({ ref: 'refs/heads/feature-x', outcome: 'created' });
    const again = await err('git_push', { workspaceId: ws, refspec: 'HEAD:feature-x', forceWithLease: true, expectedAbsent: true });
    expect(again.code).toBe('CONFLICT');
  });

  it('deletes a branch only if it still points at expectedRemoteOid', async () => {
    const at = (await remoteOid('feature-x'))!;
    const wrong = await err('git_push', { workspaceId: ws, refspec: 'feature-x', delete: true, forceWithLease: true, expectedRemoteOid: '0'.repeat(39) + '1' });
    expect(wrong.code).toBe('CONFLICT');
    expect(wrong.details.remoteOid).toBe(at);
    expect(await remoteOid('feature-x')).toBe(at);
    const r = await ok('git_push', { workspaceId: ws, refspec: 'feature-x', delete: true, forceWithLease: true, expectedRemoteOid: at });
    expect(r).toMatchObject({ outcome: 'deleted', deleted: true });
    expect(await remoteOid('feature-x')).toBeNull();
  });
});

describe('fetch and pull', () => {
  it('fetches with depth, then unshallows', async () => {
    const w2 = (await ok('workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'git-open-shallow', fetchDepth: 1 })).workspaceId as string;
    const count = async () => Number((await sh('git rev-list --count origin/main', w2)).stdout.trim());
    expect(await count()).toBe(1);
    const f = await ok('git_fetch', { workspaceId: w2, depth: 2 });
    expect(f.shallow).toBe(true);
    expect(await count()).toBe(2);
    const u = await ok('git_fetch', { workspaceId: w2, unshallow: true });
    expect(u).toMatchObject({ shallow: false, wasShallow: true });
    expect(await count()).toBeGreaterThan(2);
    expect((await ok('git_log', { workspaceId: w2, readAll: true })).shallow).toBe(false);
    await ok('workspace_close', { workspaceId: w2 });
    await ok('workspace_set_active', { workspaceId: ws });
  }, 90_000);

  it('pull ff-only refuses a divergence; rebase integrates it; then the push succeeds', async () => {
    const e = await err('git_pull', { workspaceId: ws });
    expect(e.code).toBe('FAILED_PRECONDITION');
    expect(e.details).toMatchObject({ diverged: true, ahead: 1, behind: 1 });
    const r = await ok('git_pull', { workspaceId: ws, strategy: 'rebase' });
    expect(r).toMatchObject({ outcome: 'rebased', strategy: 'rebase' });
    const s = await ok('git_status', { workspaceId: ws });
    expect(s).toMatchObject({ ahead: 1, behind: 0 });
    const p = await ok('git_push', { workspaceId: ws, forceWithLease: true, expectedRemoteOid: (await remoteOid('main'))! });
    expect(await remoteOid('main')).toBe(p.oid);
  });

  it('pull ff-only fast-forwards when possible', async () => {
    const other = join(clientDir, 'race');
    await hostGit(['pull', '-q', '--ff-only', 'origin', 'main'], other);
    await hostGit(['commit', '-q', '--allow-empty', '-m', 'theirs again'], other);
    await hostGit(['push', '-q', 'origin', 'HEAD:main'], other);
    const r = await ok('git_pull', { workspaceId: ws });
    expect(r).toMatchObject({ outcome: 'fast-forward' });
    expect(r.headOid).toBe(await remoteOid('main'));
  });
});

describe('pull with merge', () => {
  it('merges a diverged upstream and records the live HEAD on the workspace', async () => {
    const other = join(clientDir, 'race');
    await hostGit(['pull', '-q', '--ff-only', 'origin', 'main'], other);
    await hostGit(['commit', '-q', '--allow-empty', '-m', 'theirs for merge'], other);
    await hostGit(['push', '-q', 'origin', 'HEAD:main'], other);
    await sh('echo local > local-merge.txt');
    await ok('git_add', { workspaceId: ws, paths: ['local-merge.txt'] });
    await ok('git_commit', { workspaceId: ws, message: 'local for merge' });
    const r = await ok('git_pull', { workspaceId: ws, strategy: 'merge' });
    expect(r).toMatchObject({ outcome: 'merged', strategy: 'merge', conflicts: [] });
    await ok('git_push', { workspaceId: ws });
    expect(await remoteOid('main')).toBe(r.headOid);
    expect(await ok('workspace_status', { workspaceId: ws })).toMatchObject({ branch: 'main', headOid: r.headOid });
  });
});

describe('merge and rebase', () => {
  it('merges with a conflict (then aborts), and rebases with a conflict then aborts', async () => {
    await ok('git_checkout', { workspaceId: ws, ref: 'side', create: true });
    await sh("printf 'side line\\n' > conflict.txt");
    await ok('workspace_finalize', { workspaceId: ws, commitMessage: 'side change', push: false });
    await ok('git_checkout', { workspaceId: ws, ref: 'main' });
    await sh("printf 'main line\\n' > conflict.txt");
    await ok('git_add', { workspaceId: ws, all: true });
    const mainHead = (await ok('git_commit', { workspaceId: ws, message: 'main change' })).commitOid;

    const m = await ok('git_merge', { workspaceId: ws, ref: 'side' });
    expect(m).toMatchObject({ outcome: 'conflicts', conflicts: ['conflict.txt'] });
    expect(await ok('git_status', { workspaceId: ws })).toMatchObject({ inProgress: 'merge', conflicted: ['conflict.txt'] });
    expect((await err('git_rebase', { workspaceId: ws, action: 'start', upstream: 'side' })).code).toBe('FAILED_PRECONDITION');
    await sh('git merge --abort');
    expect(await ok('git_status', { workspaceId: ws })).toMatchObject({ clean: true, inProgress: null, headOid: mainHead });

    const r = await ok('git_rebase', { workspaceId: ws, action: 'start', upstream: 'side' });
    expect(r).toMatchObject({ outcome: 'conflicts', conflicts: ['conflict.txt'] });
    expect((await ok('git_status', { workspaceId: ws })).inProgress).toBe('rebase');
    const a = await ok('git_rebase', { workspaceId: ws, action: 'abort' });
    expect(a).toMatchObject({ outcome: 'aborted', headOid: mainHead, branch: 'main' });
    expect(await ok('git_status', { workspaceId: ws })).toMatchObject({ clean: true, inProgress: null });

    // A clean merge with fastForward never makes a merge commit.
    await ok('git_checkout', { workspaceId: ws, ref: 'side2', create: true });
    await sh("printf 'x\\n' > side2.txt");
    await ok('workspace_finalize', { workspaceId: ws, commitMessage: 'side2', push: false });
    await ok('git_checkout', { workspaceId: ws, ref: 'main' });
    const merged = await ok('git_merge', { workspaceId: ws, ref: 'side2', fastForward: 'never', message: 'Merge side2' });
    expect(merged.outcome).toBe('merged');
    expect((await ok('git_log', { workspaceId: ws, limit: 1 })).commits).toMatchObject([{ subject: 'Merge side2' }]);
    await ok('git_push', { workspaceId: ws });
  });

  it('rebase continue finishes after resolving', async () => {
    const before = (await ok('git_status', { workspaceId: ws })).headOid;
    await sh("printf 'main again\\n' > conflict.txt");
    await ok('git_commit', { workspaceId: ws, message: 'main again', all: true });
    const r = await ok('git_rebase', { workspaceId: ws, action: 'start', upstream: 'side' });
    expect(r.outcome).toBe('conflicts');
    await sh("printf 'resolved\\n' > conflict.txt");
    await ok('git_add', { workspaceId: ws, paths: ['conflict.txt'] });
    let cont = await ok('git_rebase', { workspaceId: ws, action: 'continue' });
    for (let i = 0; i < 5 && cont.outcome === 'conflicts'; i++) {
      await sh(`printf 'resolved ${i}\\n' > conflict.txt`);
      await ok('git_add', { workspaceId: ws, paths: ['conflict.txt'] });
      cont = await ok('git_rebase', { workspaceId: ws, action: 'continue' });
    }
    expect(cont.outcome).toBe('rebased');
    expect((await sh('cat conflict.txt')).stdout).toMatch(/^resolved/);
    expect(before).not.toBe(cont.headOid);
    // Put main back to the pushed state for the following tests.
    await sh('git reset -q --hard origin/main');
  });
});

describe('workspace_finalize', () => {
  it('a failing preflight leaves nothing behind', async () => {
    await sh("echo fin > fin.txt && printf 'more\\n' >> README.md && git add README.md");
    const before = await ok('git_status', { workspaceId: ws });
    const remoteBefore = await remoteOid('main');
    const e = await err('workspace_finalize', {
      workspaceId: ws,
      commitMessage: 'should not exist',
      preflight: { commands: [{ name: 'ok', command: 'true' }, { name: 'tests', command: 'echo failing test >&2; exit 3', timeoutMs: 5000 }] },
      idempotencyKey: 'finalize-fail-1',
    });
    expect(e.code).toBe('FAILED_PRECONDITION');
    expect(e.details).toMatchObject({ step: 'preflight', workspaceUnchanged: true, preflight: { name: 'tests', exitCode: 3 } });
    expect(e.message).toContain('tests');
    const after = await ok('git_status', { workspaceId: ws });
    expect(after).toEqual(before);
    expect(await remoteOid('main')).toBe(remoteBefore);
    expect((await sh('ls .git/atelier-finalize.index 2>&1 || true')).stdout).toMatch(/No such file/);
  });

  it('a push rejected by the server leaves the workspace as before', async () => {
    const before = await ok('git_status', { workspaceId: ws });
    host.rejectPushes('approved/gitdemo', 'frozen for release');
    try {
      const e = await err('workspace_finalize', { workspaceId: ws, commitMessage: 'rejected', preflight: { commands: [{ name: 'ok', command: 'true' }] } });
      expect(e.details).toMatchObject({ step: 'push', workspaceUnchanged: true });
      expect(e.message).toContain('frozen for release');
    } finally {
      host.rejectPushes('approved/gitdemo', null);
    }
    expect(await ok('git_status', { workspaceId: ws })).toEqual(before);
  });

  it('stages, runs preflights, commits and pushes; the key replays', async () => {
    const args = {
      workspaceId: ws,
      commitMessage: 'Finalize work',
      preflight: { commands: [{ name: 'check', command: 'test -f fin.txt' }] },
      idempotencyKey: 'finalize-ok-1',
    };
    const r = await ok('workspace_finalize', args);
    expect(r).toMatchObject({ pushed: true, branch: 'main', steps: ['stage', 'preflight', 'commit', 'push'] });
    expect(r.files).toEqual(expect.arrayContaining(['README.md', 'fin.txt']));
    expect(await remoteOid('main')).toBe(r.commitOid);
    expect(await ok('git_status', { workspaceId: ws })).toMatchObject({ clean: true, headOid: r.commitOid, ahead: 0 });
    expect((await ok('workspace_finalize', args)).replayed).toBe(true);
    expect((await err('workspace_finalize', { workspaceId: ws, commitMessage: 'nothing' })).details.step).toBe('stage');
  });
});

describe('worktrees', () => {
  it('creates, lists and removes worktrees; a dirty one is refused without force', async () => {
    const a = await ok('worktrees_create', { workspaceId: ws, name: 'wt-a', ref: 'wt-branch', createBranch: true });
    expect(a).toMatchObject({ name: 'wt-a', path: '.worktrees/wt-a', branch: 'wt-branch' });
    const b = await ok('worktrees_create', { workspaceId: ws, name: 'wt-b', ref: 'side' });
    expect(b.branch).toBe('side');
    expect((await err('worktrees_create', { workspaceId: ws, name: 'wt-a', ref: 'main' })).code).toBe('CONFLICT');
    // Worktrees are addressed by path from the other tools; the main checkout ignores them.
    await sh('echo dirty > .worktrees/wt-a/dirty.txt');
    expect((await ok('git_status', { workspaceId: ws })).clean).toBe(true);
    const list = await ok('worktrees_list', { workspaceId: ws });
    const wts = list.worktrees as Array<Record<string, unknown>>;
    expect(wts.map((w) => w.name)).toEqual([null, 'wt-a', 'wt-b']);
    expect(wts.find((w) => w.name === 'wt-a')).toMatchObject({ dirty: true, branch: 'wt-branch' });
    expect(wts.find((w) => w.name === 'wt-b')).toMatchObject({ dirty: false });

    const refused = await err('worktrees_remove', { workspaceId: ws, name: 'wt-a' });
    expect(refused.code).toBe('FAILED_PRECONDITION');
    expect((await sh('test -f .worktrees/wt-a/dirty.txt && echo kept')).stdout.trim()).toBe('kept');
    expect(await ok('worktrees_remove', { workspaceId: ws, name: 'wt-a', force: true })).toMatchObject({ removed: true, discardedChanges: true });
    expect(await ok('worktrees_remove', { workspaceId: ws, name: 'wt-b' })).toMatchObject({ removed: true });
    expect(((await ok('worktrees_list', { workspaceId: ws })).worktrees as unknown[]).length).toBe(1);
    expect((await err('worktrees_remove', { workspaceId: ws, name: 'wt-b' })).code).toBe('NOT_FOUND');
  });
});

describe('a malicious repository', () => {
  it('runs none of its hooks, fsmonitor, sshCommand or filter drivers from any git tool', async () => {
    const marker = join(tmpdir(), `atelier-pwned-${process.pid}`);
    rmSync(marker, { force: true });
    // Each program leaves a mark wherever it runs: in the workspace sandbox (/workspace), on the host
    // (a path the sandbox cannot see), and, whatever sandbox or directory the runner used, in the
    // repository it ran for ($GIT_DIR, else .git under its working directory) and its working directory.
    const evil = (what: string) =>
      `#!/bin/sh\necho ${what} >> /workspace/PWNED; echo ${what} >> ${marker}; echo ${what} >> "\${GIT_DIR:-.git}/PWNED-gitdir"; echo ${what} >> ./PWNED-cwd\ncat\n`;
    const script = [
      'set -e',
      ...['pre-commit', 'post-commit', 'pre-push', 'post-checkout', 'reference-transaction', 'post-merge', 'pre-rebase', 'post-rewrite', 'commit-msg', 'prepare-commit-msg'].map(
        (h) => `printf '%s' '${evil(h)}' > .git/hooks/${h} && chmod +x .git/hooks/${h}`,
      ),
      `printf '%s' '${evil('prog')}' > /workspace/.git/evil.sh && chmod +x /workspace/.git/evil.sh`,
      'git config core.fsmonitor /workspace/.git/evil.sh',
      'git config core.sshCommand /workspace/.git/evil.sh',
      'git config filter.evil.clean /workspace/.git/evil.sh',
      'git config filter.evil.smudge /workspace/.git/evil.sh',
      'git config filter.evil.required true',
      'git config diff.evil.textconv /workspace/.git/evil.sh',
      'git config diff.external /workspace/.git/evil.sh',
      'git config core.pager /workspace/.git/evil.sh',
      'git config commit.gpgSign true',
      'git config gpg.program /workspace/.git/evil.sh',
      'git config core.hooksPath .git/hooks',
      // Pointing origin elsewhere does not redirect the runner's network operations.
      'git config --add remote.origin.url https://127.0.0.1:9/evil.git',
      'git config remote.origin.pushurl https://127.0.0.1:9/evil.git',
      "printf '* filter=evil diff=evil\\n' > .git/info/attributes",
    ].join('\n');
    await ok('git_identity_set', { workspaceId: ws, name: 'Ada Agent', email: 'ada@example.invalid' });
    const setup = await sh(script);
    expect(setup.exitCode).toBe(0);

    await sh('echo evil > evil.txt');
    await ok('git_status', { workspaceId: ws });
    await ok('git_add', { workspaceId: ws, all: true });
    await ok('git_diff', { workspaceId: ws, staged: true, readAll: true });
    const cm = await ok('git_commit', { workspaceId: ws, message: 'evil' });
    await ok('git_push', { workspaceId: ws });
    await ok('git_fetch', { workspaceId: ws });
    await ok('git_checkout', { workspaceId: ws, ref: 'evil-branch', create: true });
    await ok('git_checkout', { workspaceId: ws, ref: 'main' });
    await ok('git_pull', { workspaceId: ws });
    await ok('git_log', { workspaceId: ws, limit: 2 });
    await ok('worktrees_create', { workspaceId: ws, name: 'evil-wt', ref: 'evil-branch' });
    await ok('worktrees_remove', { workspaceId: ws, name: 'evil-wt', force: true });
    await sh('echo more >> evil.txt');
    await ok('workspace_finalize', { workspaceId: ws, commitMessage: 'evil finalize' });
    // The runner's other git paths (workspace_recover snapshots with git add -A) neutralise them too.
    await sh('echo again >> evil.txt');
    await ok('workspace_recover', { workspaceId: ws, mode: 'patch' });
    await ok('workspace_recover', { workspaceId: ws, mode: 'status' });

    expect((await sh('cat /workspace/PWNED 2>/dev/null || echo none')).stdout.trim()).toBe('none');
    expect((await sh("find /workspace -name 'PWNED*' | sort")).stdout).toBe('');
    expect(existsSync(marker)).toBe(false);
    expect((await sh('git config --get-all remote.origin.url')).stdout.trim()).toBe(repoUrl);
    // The filter did not run on the committed content either.
    expect((await sh(`git show ${cm.commitOid as string}:evil.txt`)).stdout).toBe('evil\n');
    // Control: the same repository's hooks do run when the workspace user runs git (inside the
    // sandbox), so the setup is effective; even then nothing reaches the host.
    await sh('git commit -q --allow-empty -m control || true');
    expect((await sh('cat /workspace/PWNED 2>/dev/null || echo none')).stdout).toContain('pre-commit');
    // Every mark but the host's is made by a program that does run, so the checks above can fail.
    expect((await sh('cat .git/PWNED-gitdir PWNED-cwd')).stdout).toMatch(/pre-commit[\s\S]*pre-commit/);
    expect(existsSync(marker)).toBe(false);
    await sh('git config --unset core.hooksPath; rm -f .git/info/attributes PWNED .git/PWNED-gitdir PWNED-cwd; git reset -q --hard origin/main');
  }, 120_000);
});
