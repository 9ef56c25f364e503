/**
 * Git and worktrees (issue #6): the spec's git_* tools, workspace_finalize and worktrees_*.
 * GitService answers them all; its parts are modules of this folder: runner.ts (the steps every
 * operation is made of: git in the sandbox, the lock, errors, identity), network.ts (fetch, pull,
 * push), finalize.ts (workspace_finalize), merge.ts (the merge and rebase steps pull shares),
 * parsers.ts (git's output parsed, refs and paths checked). Here: the read-only and local tools,
 * merge, rebase and worktrees.
 *
 * Local operations run git as the workspace user inside the workspace's own sandbox, with the
 * runner's neutralising config (gitConfigEnv: no hooks, no fsmonitor, no external diff, no
 * system or global config). Network operations (fetch, the fetch of pull, push) run through
 * WorkspaceService.ephemeralGit (src/services/git/ephemeral.ts): a short-lived sandbox that
 * reaches only the repository host, with the broker's credential. Values never get spliced into shell scripts: they travel as
 * environment variables or argv. Decisions and result shapes: docs/git.md.
 */
import { createHash } from 'node:crypto';
import { ServiceError } from '../../core/errors.js';
import { GitRunner, WORKTREE_DIR, type GitDeps } from './runner.js';
import { GitNetwork } from './network.js';
import { GitFinalize } from './finalize.js';
import { doMerge, doRebase } from './merge.js';
import { badRef, confineToWorkspace, outsideRefusal, parsePushPorcelain, parseStatusV2, tail, type Identity, type StatusEntry } from './parsers.js';

export { WORKTREE_DIR, confineToWorkspace, parsePushPorcelain, parseStatusV2, type GitDeps, type Identity, type StatusEntry };

export class GitService extends GitRunner {
  private readonly network = new GitNetwork(this);
  private readonly finalizer = new GitFinalize(this, this.network);

  // ---------- read-only ----------

  async status(ws: string) {
    const result = await this.git(ws, ['status', '--porcelain=v2', '--branch', '-z', '--untracked-files=all']);
    if (result.exitCode !== 0) throw this.fail('status', result);
    const state = parseStatusV2(result.stdout);
    const progress = await this.inProgress(ws);
    const staged = state.entries.filter((e) => e.kind !== 'untracked' && e.kind !== 'unmerged' && e.index !== '.').map((e) => e.path);
    const unstaged = state.entries.filter((e) => e.kind !== 'untracked' && e.kind !== 'unmerged' && e.worktree !== '.').map((e) => e.path);
    const untracked = state.entries.filter((e) => e.kind === 'untracked').map((e) => e.path);
    const conflicted = state.entries.filter((e) => e.kind === 'unmerged').map((e) => e.path);
    return {
      workspaceId: ws,
      branch: state.branch,
      detached: state.branch === null,
      headOid: state.headOid,
      upstream: state.upstream,
      ahead: state.ahead,
      behind: state.behind,
      clean: state.entries.length === 0,
      inProgress: progress,
      entries: state.entries,
      staged,
      unstaged,
      untracked,
      conflicted,
      truncated: result.stdoutTruncated,
    };
  }

  async diff(ws: string, diffArgs: { staged: boolean; path?: string; cursor?: string; limit: number; readAll?: boolean }) {
    if (diffArgs.path !== undefined) confineToWorkspace('path', diffArgs.path);
    const args = ['diff', '--no-color', '--no-ext-diff', '--no-textconv', ...(diffArgs.staged ? ['--cached'] : []), '--'];
    if (diffArgs.path) args.push(diffArgs.path);
    const result = await this.git(ws, args);
    if (result.exitCode !== 0) throw outsideRefusal('path', result.stderr) ?? this.fail('diff', result);
    const full = result.stdout;
    const hash = createHash('sha256').update(full).digest('hex').slice(0, 16);
    // Cursors stay short: the path is bound by a hash, not carried.
    const pathKey = diffArgs.path ? createHash('sha256').update(diffArgs.path).digest('hex').slice(0, 12) : '';
    let offset = 0;
    if (diffArgs.cursor) {
      const c = this.deps.cursors.decode<{ o: number; h: string; w: string; s: boolean; p: string }>('git_diff', diffArgs.cursor);
      if (c.w !== ws || c.s !== diffArgs.staged || c.p !== pathKey) throw new ServiceError('INVALID_ARGUMENT', 'cursor: made for another workspace, path or staged setting', { field: 'cursor' });
      if (c.h !== hash) throw new ServiceError('CONFLICT', 'cursor: the diff changed since this cursor was made; start again without a cursor', { field: 'cursor' });
      offset = c.o;
    }
    const end = diffArgs.readAll ? full.length : Math.min(full.length, offset + diffArgs.limit);
    const text = full.slice(offset, end);
    const files = [...full.matchAll(/^diff --git a\/(.*) b\/(.*)$/gm)].map((m) => m[2]!);
    return {
      workspaceId: ws,
      staged: diffArgs.staged,
      path: diffArgs.path ?? null,
      diff: text,
      offset,
      totalChars: full.length,
      files,
      empty: full.length === 0,
      truncated: result.stdoutTruncated,
      nextCursor: end < full.length ? this.deps.cursors.encode('git_diff', { o: end, h: hash, w: ws, s: diffArgs.staged, p: pathKey }) : null,
    };
  }

  async log(ws: string, args: { limit: number; cursor?: string; readAll?: boolean }) {
    let start: string;
    let skip = 0;
    if (args.cursor) {
      const c = this.deps.cursors.decode<{ h: string; o: number; w: string }>('git_log', args.cursor);
      if (c.w !== ws) throw new ServiceError('INVALID_ARGUMENT', 'cursor: made for another workspace', { field: 'cursor' });
      start = c.h;
      skip = c.o;
    } else {
      const h = await this.head(ws);
      if (!h.oid) return { workspaceId: ws, commits: [], nextCursor: null, shallow: false };
      start = h.oid;
    }
    const n = args.readAll ? [] : [`--max-count=${args.limit + 1}`];
    const r = await this.git(ws, ['log', '-z', '--format=%H%x1f%P%x1f%an%x1f%ae%x1f%aI%x1f%cn%x1f%ce%x1f%cI%x1f%s', `--skip=${skip}`, ...n, start, '--']);
    if (r.exitCode !== 0) throw this.fail('log', r);
    const all = r.stdout.split('\0').filter(Boolean).map((rec) => {
      const [oid, parents, an, ae, ad, cn, ce, cd, subject] = rec.replace(/^\n/, '').split('\x1f');
      return {
        oid,
        parentOids: parents ? parents.split(' ') : [],
        author: { name: an, email: ae, date: ad },
        committer: { name: cn, email: ce, date: cd },
        subject,
      };
    });
    const page = args.readAll ? all : all.slice(0, args.limit);
    const more = !args.readAll && all.length > args.limit;
    const shallow = (await this.git(ws, ['rev-parse', '--is-shallow-repository'])).stdout.trim() === 'true';
    return {
      workspaceId: ws,
      headOid: start,
      commits: page,
      shallow,
      nextCursor: more ? this.deps.cursors.encode('git_log', { h: start, o: skip + args.limit, w: ws }) : null,
    };
  }

  async branches(ws: string): Promise<Array<Record<string, unknown>>> {
    const r = await this.git(ws, ['for-each-ref', '--format=%(refname:short)%00%(objectname)%00%(HEAD)%00%(upstream:short)%00%(upstream:track)', 'refs/heads']);
    if (r.exitCode !== 0) throw this.fail('branch list', r);
    return r.stdout
      .split('\n')
      .filter(Boolean)
      .map((line) => {
        const [name, oid, head, upstream, track] = line.split('\0');
        const ahead = /ahead (\d+)/.exec(track ?? '');
        const behind = /behind (\d+)/.exec(track ?? '');
        return { name, oid, current: head === '*', upstream: upstream || null, ahead: ahead ? Number(ahead[1]) : 0, behind: behind ? Number(behind[1]) : 0, upstreamGone: track === '[gone]' };
      });
  }

  async branch(ws: string, args: { action: 'list' | 'create' | 'delete'; name?: string; startPoint?: string; force: boolean }) {
    if (args.action === 'list') return { workspaceId: ws, action: 'list', branches: await this.branches(ws) };
    const name = args.name!;
    const e = badRef('name', name) ?? (args.startPoint ? badRef('startPoint', args.startPoint) : null);
    if (e) throw e;
    return this.locked(ws, async () => {
      const check = await this.git(ws, ['check-ref-format', '--branch', name]);
      if (check.exitCode !== 0) throw new ServiceError('INVALID_ARGUMENT', `name: ${name} is not a valid branch name`, { field: 'name' });
      if (args.action === 'create') {
        const r = await this.git(ws, ['branch', ...(args.force ? ['--force'] : []), '--', name, ...(args.startPoint ? [args.startPoint] : [])]);
        if (r.exitCode !== 0) {
          if (/already exists/.test(r.stderr)) throw new ServiceError('CONFLICT', `branch ${name} already exists; pass force true to reset it`, { field: 'name' });
          throw this.fail('branch create', r, /not a valid object name|not a commit/.test(r.stderr) ? 'NOT_FOUND' : 'FAILED_PRECONDITION');
        }
        const oid = (await this.must(ws, 'rev-parse', ['rev-parse', `refs/heads/${name}`])).trim();
        return { workspaceId: ws, action: 'create', name, oid, created: true };
      }
      const before = await this.git(ws, ['rev-parse', '-q', '--verify', `refs/heads/${name}`]);
      if (before.exitCode !== 0) throw new ServiceError('NOT_FOUND', `branch ${name} does not exist`, { field: 'name' });
      const r = await this.git(ws, ['branch', args.force ? '-D' : '-d', '--', name]);
      if (r.exitCode !== 0) {
        if (/not fully merged/.test(r.stderr)) throw new ServiceError('FAILED_PRECONDITION', `branch ${name} is not fully merged; pass force true to delete it anyway`, { field: 'force' });
        throw this.fail('branch delete', r);
      }
      return { workspaceId: ws, action: 'delete', name, deleted: true, oid: before.stdout.trim() };
    });
  }

  async checkout(ws: string, args: { ref: string; create: boolean }) {
    const e = badRef('ref', args.ref);
    if (e) throw e;
    return this.locked(ws, async () => {
      const prev = await this.head(ws);
      if (args.create) {
        const check = await this.git(ws, ['check-ref-format', '--branch', args.ref]);
        if (check.exitCode !== 0) throw new ServiceError('INVALID_ARGUMENT', `ref: ${args.ref} is not a valid branch name`, { field: 'ref' });
      }
      const result = await this.git(ws, ['checkout', '-q', ...(args.create ? ['-b', args.ref] : [args.ref]), '--']);
      if (result.exitCode !== 0) {
        if (/already exists/.test(result.stderr)) throw new ServiceError('CONFLICT', `branch ${args.ref} already exists; check it out without create`, { field: 'ref' });
        if (/did not match any|invalid reference|not a commit/.test(result.stderr)) throw new ServiceError('NOT_FOUND', `ref: ${args.ref} is not a branch, tag or commit here (fetch it first?)`, { field: 'ref' });
        if (/would be overwritten/.test(result.stderr))
          throw new ServiceError('FAILED_PRECONDITION', `checkout refused: uncommitted changes would be overwritten: ${tail(result.stderr, 6)}`, { step: 'checkout' });
        throw this.fail('checkout', result);
      }
      const now = await this.head(ws);
      // Repository hooks (issue #19): activated post_checkout hooks run; their result is reported, never undone.
      const hooks = await this.deps.hooks?.fire(ws, 'post_checkout');
      return { workspaceId: ws, ref: args.ref, created: args.create, branch: now.branch, detached: now.branch === null, headOid: now.oid, previousHeadOid: prev.oid, previousBranch: prev.branch, ...(hooks ? { hooks: [hooks] } : {}) };
    });
  }

  async add(ws: string, args: { all: boolean; paths: string[] }) {
    if (!args.all) args.paths.forEach((p, i) => confineToWorkspace(`paths[${i}]`, p));
    return this.locked(ws, async () => {
      const result = await this.git(ws, args.all ? ['add', '-A', '--', '.'] : ['add', '-A', '--', ...args.paths]);
      if (result.exitCode !== 0) {
        const outside = outsideRefusal('paths', result.stderr);
        if (outside) throw outside;
        if (/did not match any files/.test(result.stderr)) throw new ServiceError('NOT_FOUND', `paths: ${tail(result.stderr, 2)}`, { field: 'paths' });
        throw this.fail('add', result);
      }
      const s = await this.status(ws);
      return { workspaceId: ws, staged: s.staged, unstaged: s.unstaged, untracked: s.untracked, conflicted: s.conflicted };
    });
  }

  // ---------- commits and identity ----------

  async identityStatus(ws: string) {
    const c = await this.configuredIdentity(ws);
    return { workspaceId: ws, configured: !!(c.name && c.email), name: c.name, email: c.email, scope: 'repository' };
  }

  async identitySet(ws: string, name: string, email: string) {
    return this.locked(ws, async () => {
      await this.must(ws, 'identity set', ['config', '--local', 'user.name', name]);
      await this.must(ws, 'identity set', ['config', '--local', 'user.email', email]);
      return { workspaceId: ws, configured: true, name, email, scope: 'repository' };
    });
  }

  async commit(ws: string, args: { message: string; authorName?: string; authorEmail?: string; all: boolean; expectedHeadOid?: string }) {
    return this.locked(ws, async () => {
      const { env, author } = await this.identityEnv(ws, args.authorName, args.authorEmail);
      // Repository hooks (issue #19): a failing activated pre_commit hook stops the commit.
      const preCommit = await this.deps.hooks?.fire(ws, 'pre_commit');
      if (preCommit?.failed)
        throw new ServiceError('FAILED_PRECONDITION', `nothing was committed: ${preCommit.message}`, { step: 'pre_commit', hooks: [preCommit] });
      // Check HEAD and commit in one script so nothing runs in between.
      const script =
        `cur=$(git rev-parse -q --verify HEAD || echo none); ` +
        `if [ -n "$EXP" ] && [ "$cur" != "$EXP" ]; then echo "@@HEADMOVED $cur"; exit 3; fi; ` +
        `${args.all ? 'git add -u || exit 4; ' : ''}` +
        `if [ "$cur" != none ] && git diff --cached --quiet && [ ! -e "$(git rev-parse --git-path MERGE_HEAD)" ]; then echo "@@NOTHING"; exit 5; fi; ` +
        `git commit -q --no-verify --no-gpg-sign --cleanup=strip -F - || exit 6; git rev-parse HEAD`;
      const result = await this.sh(ws, script, { ...env, EXP: args.expectedHeadOid ?? '' }, { stdin: args.message, op: 'commit' });
      if (result.exitCode === 3) {
        const actual = /@@HEADMOVED (\S+)/.exec(result.stdout)?.[1];
        throw new ServiceError('CONFLICT', `expectedHeadOid: HEAD is ${actual === 'none' ? 'unborn' : actual}, not ${args.expectedHeadOid}; nothing was committed`, {
          field: 'expectedHeadOid',
          expectedHeadOid: args.expectedHeadOid,
          actualHeadOid: actual === 'none' ? null : actual,
        });
      }
      if (result.exitCode === 5) throw new ServiceError('FAILED_PRECONDITION', 'nothing to commit: stage changes with git_add (or pass all true)', { step: 'commit' });
      if (result.exitCode !== 0) throw this.fail('commit', result);
      const oid = result.stdout.trim().split('\n').pop()!;
      const info = await this.git(ws, ['show', '-s', '--format=%P%x1f%s', oid]);
      const [parents, subject] = info.stdout.trim().split('\x1f');
      const stat = await this.git(ws, ['diff-tree', '--no-commit-id', '--name-only', '-r', '-z', '--root', oid]);
      const head = await this.head(ws);
      const postCommit = await this.deps.hooks?.fire(ws, 'post_commit');
      return {
        ...(preCommit || postCommit ? { hooks: [preCommit, postCommit].filter(Boolean) } : {}),
        workspaceId: ws,
        commitOid: oid,
        parentOids: parents ? parents.split(' ') : [],
        branch: head.branch,
        subject,
        author,
        signed: false,
        files: stat.stdout.split('\0').filter(Boolean),
      };
    });
  }

  // ---------- network (network.ts) and finalize (finalize.ts) ----------

  fetch(...args: Parameters<GitNetwork['fetch']>): ReturnType<GitNetwork['fetch']> {
    return this.network.fetch(...args);
  }

  pull(...args: Parameters<GitNetwork['pull']>): ReturnType<GitNetwork['pull']> {
    return this.network.pull(...args);
  }

  push(...args: Parameters<GitNetwork['push']>): ReturnType<GitNetwork['push']> {
    return this.network.push(...args);
  }

  finalize(...args: Parameters<GitFinalize['finalize']>): ReturnType<GitFinalize['finalize']> {
    return this.finalizer.finalize(...args);
  }

  // ---------- merge and rebase ----------

  async merge(ws: string, args: { ref: string; fastForward: 'allow' | 'only' | 'never'; message?: string }) {
    const e = badRef('ref', args.ref);
    if (e) throw e;
    return this.locked(ws, async () => {
      const progress = await this.inProgress(ws);
      if (progress) throw new ServiceError('FAILED_PRECONDITION', `a ${progress} is in progress: finish or abort it first`, { inProgress: progress });
      const h = await this.head(ws);
      return { workspaceId: ws, ref: args.ref, ...(await doMerge(this, ws, args.ref, args.fastForward, args.message, h.oid)) };
    });
  }


  async rebase(ws: string, args: { action: 'start' | 'continue' | 'abort'; upstream?: string }) {
    if (args.upstream) {
      const e = badRef('upstream', args.upstream);
      if (e) throw e;
    }
    return this.locked(ws, async () => {
      const head = await this.head(ws);
      const progress = await this.inProgress(ws);
      if (args.action === 'start' && progress) throw new ServiceError('FAILED_PRECONDITION', `a ${progress} is in progress: finish or abort it first`, { inProgress: progress });
      if (args.action !== 'start' && progress !== 'rebase') throw new ServiceError('FAILED_PRECONDITION', `no rebase in progress to ${args.action}`, { step: 'rebase' });
      return { workspaceId: ws, action: args.action, ...(await doRebase(this, ws, args.action, args.upstream, head.oid)) };
    });
  }

  // ---------- worktrees ----------

  async worktreesList(ws: string) {
    const r = await this.git(ws, ['worktree', 'list', '--porcelain']);
    if (r.exitCode !== 0) throw this.fail('worktree list', r);
    const out: Array<Record<string, unknown>> = [];
    for (const block of r.stdout.split('\n\n')) {
      const lines = block.split('\n').filter(Boolean);
      if (!lines.length) continue;
      const path = lines.find((l) => l.startsWith('worktree '))?.slice(9) ?? '';
      const head = lines.find((l) => l.startsWith('HEAD '))?.slice(5) ?? null;
      const br = lines.find((l) => l.startsWith('branch '))?.slice(7) ?? null;
      const rel = path === '/workspace' ? '.' : path.startsWith('/workspace/') ? path.slice(11) : path;
      const name = rel === '.' ? null : rel.startsWith(`${WORKTREE_DIR}/`) ? rel.slice(WORKTREE_DIR.length + 1) : rel;
      let dirty: boolean | null = null;
      if (!lines.includes('prunable') && !lines.some((l) => l.startsWith('prunable'))) {
        const s = await this.git(ws, ['status', '--porcelain', '--untracked-files=normal'], { cwd: rel });
        dirty = s.exitCode === 0 ? s.stdout.trim() !== '' : null;
      }
      out.push({
        name,
        main: rel === '.',
        path: rel,
        headOid: head,
        branch: br ? br.replace(/^refs\/heads\//, '') : null,
        detached: lines.includes('detached'),
        dirty,
        locked: lines.some((l) => l.startsWith('locked')),
      });
    }
    return { workspaceId: ws, worktrees: out };
  }

  async worktreesCreate(ws: string, args: { name: string; ref: string; createBranch: boolean }) {
    const e = badRef('ref', args.ref);
    if (e) throw e;
    if (args.name === '.' || args.name === '..') throw new ServiceError('INVALID_ARGUMENT', 'name: "." and ".." are not worktree names', { field: 'name' });
    return this.locked(ws, async () => {
      if (args.createBranch) {
        const check = await this.git(ws, ['check-ref-format', '--branch', args.ref]);
        if (check.exitCode !== 0) throw new ServiceError('INVALID_ARGUMENT', `ref: ${args.ref} is not a valid branch name`, { field: 'ref' });
      }
      const rel = `${WORKTREE_DIR}/${args.name}`;
      const script =
        `ex="$(git rev-parse --git-path info/exclude)"; mkdir -p "$(dirname "$ex")" ${WORKTREE_DIR}; grep -qxF '/${WORKTREE_DIR}/' "$ex" 2>/dev/null || echo '/${WORKTREE_DIR}/' >> "$ex"; ` +
        `if [ -e "$P" ]; then echo "@@EXISTS"; exit 3; fi; ` +
        (args.createBranch ? 'git worktree add -q -b "$REF" "$P"' : 'git worktree add -q "$P" "$REF"');
      const result = await this.sh(ws, script, { P: rel, REF: args.ref });
      if (result.exitCode === 3) throw new ServiceError('CONFLICT', `worktree ${args.name} already exists (${rel})`, { field: 'name' });
      if (result.exitCode !== 0) {
        if (/already exists/.test(result.stderr)) throw new ServiceError('CONFLICT', `ref: branch ${args.ref} already exists; create the worktree without createBranch`, { field: 'ref' });
        if (/invalid reference|not a commit|did not match/.test(result.stderr)) throw new ServiceError('NOT_FOUND', `ref: ${args.ref} is not a branch, tag or commit here`, { field: 'ref' });
        if (/already checked out|is already used by worktree/.test(result.stderr)) throw new ServiceError('CONFLICT', `ref: ${args.ref} is already checked out in another worktree`, { field: 'ref' });
        throw this.fail('worktree add', result);
      }
      const info = await this.sh(ws, 'cd "$P" && git rev-parse HEAD && (git symbolic-ref --short -q HEAD || echo)', { P: rel });
      const [oid, branch] = info.stdout.split('\n');
      return { workspaceId: ws, name: args.name, path: rel, absolutePath: `/workspace/${rel}`, headOid: oid?.trim() || null, branch: branch?.trim() || null, createdBranch: args.createBranch };
    });
  }

  async worktreesRemove(ws: string, args: { name: string; force: boolean }) {
    return this.locked(ws, async () => {
      const list = (await this.worktreesList(ws)).worktrees as Array<Record<string, unknown>>;
      const wt = list.find((w) => !w.main && w.name === args.name);
      if (!wt) throw new ServiceError('NOT_FOUND', `no worktree named ${args.name}; worktrees_list shows them`, { field: 'name' });
      if (wt.dirty && !args.force)
        throw new ServiceError('FAILED_PRECONDITION', `worktree ${args.name} has uncommitted changes; commit them, or pass force true to discard them`, { field: 'force', dirty: true });
      const result = await this.git(ws, ['worktree', 'remove', ...(args.force ? ['--force', '--force'] : []), String(wt.path)]);
      if (result.exitCode !== 0) {
        if (/contains modified or untracked files|is dirty/.test(result.stderr))
          throw new ServiceError('FAILED_PRECONDITION', `worktree ${args.name} has uncommitted changes; pass force true to discard them`, { field: 'force', dirty: true });
        throw this.fail('worktree remove', result);
      }
      await this.git(ws, ['worktree', 'prune']);
      return { workspaceId: ws, name: args.name, removed: true, discardedChanges: args.force && wt.dirty === true, branch: wt.branch };
    });
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type GitStatusResult = Awaited<ReturnType<GitService['status']>>;
export type GitDiffResult = Awaited<ReturnType<GitService['diff']>>;
export type GitLogResult = Awaited<ReturnType<GitService['log']>>;
export type GitBranchResult = Awaited<ReturnType<GitService['branch']>>;
export type GitCheckoutResult = Awaited<ReturnType<GitService['checkout']>>;
export type GitAddResult = Awaited<ReturnType<GitService['add']>>;
export type GitIdentityStatusResult = Awaited<ReturnType<GitService['identityStatus']>>;
export type GitIdentitySetResult = Awaited<ReturnType<GitService['identitySet']>>;
export type GitCommitResult = Awaited<ReturnType<GitService['commit']>>;
export type GitMergeResult = Awaited<ReturnType<GitService['merge']>>;
export type GitRebaseResult = Awaited<ReturnType<GitService['rebase']>>;
export type GitWorktreesListResult = Awaited<ReturnType<GitService['worktreesList']>>;
export type GitWorktreesCreateResult = Awaited<ReturnType<GitService['worktreesCreate']>>;
export type GitWorktreesRemoveResult = Awaited<ReturnType<GitService['worktreesRemove']>>;
