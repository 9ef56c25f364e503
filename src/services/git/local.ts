/**
 * Git and worktrees (issue #6): the spec's git_* tools, workspace_finalize and worktrees_*.
 *
 * Local operations run git as the workspace user inside the workspace's own sandbox, with the
 * runner's neutralising config (gitConfigEnv: no hooks, no fsmonitor, no external diff, no
 * system or global config). Network operations (fetch, the fetch of pull, push) run through
 * WorkspaceService.ephemeralGit (src/services/git/ephemeral.ts): a short-lived sandbox that
 * reaches only the repository host, with the broker's credential. Values never get spliced into shell scripts: they travel as
 * environment variables or argv. Decisions and result shapes: docs/git.md.
 */
import { SpanKind, inSpan, setAttrs } from '../../telemetry/tracing.js';
import { posix } from 'node:path';
import { createHash } from 'node:crypto';
import { ServiceError } from '../../core/errors.js';
import type { CursorCodec } from '../../core/cursor.js';
import type { WorkspaceLocks } from '../../core/locks.js';
import type { AuditLog } from '../instance/index.js';
import type { ExecResult } from '../../sandbox/executor.js';
import type { WorkspaceService } from '../workspaces/index.js';
import { gitConfigEnv, NEUTRALISE_REPO_DRIVERS } from './safety.js';
import { gitFailure } from './ephemeral.js';
import { parseRepoUrl, type RepositoryPolicy } from '../repos/index.js';
import type { HookRunner } from '../extensions/index.js';

interface Deps {
  workspaces: WorkspaceService;
  cursors: CursorCodec;
  repos: RepositoryPolicy;
  audit: AuditLog;
  /** Repository hooks activated by manifest digest (issue #19); absent = none fire. */
  hooks?: HookRunner;
  /** The per-workspace lock shared with the workspace lifecycle (core/locks.ts). */
  locks: WorkspaceLocks;
}

/** Where worktrees live, relative to the workspace root (/workspace). */
export const WORKTREE_DIR = '.worktrees';
const MAX_OUT = 8 * 1024 * 1024;
const FINALIZE_INDEX = 'atelier-finalize.index';

/** Beyond SAFE_GIT_CONFIG: signing and other program-running settings the runner turns off. */
const EXTRA_SAFE: Array<[string, string]> = [
  ['commit.gpgSign', 'false'],
  ['tag.gpgSign', 'false'],
  ['gpg.program', '/bin/false'],
  ['gpg.ssh.program', '/bin/false'],
  ['core.alternateRefsCommand', ''],
  ['sequence.editor', '/bin/true'],
  ['credential.helper', ''],
  ['push.gpgSign', 'false'],
  // Commits get the workspace identity or none: never one guessed from the sandbox's user and host.
  ['user.useConfigOnly', 'true'],
];
/** The same settings (except the credential helper, which is the broker's there) appended in the network sandbox. */
const NET_EXTRA = [...EXTRA_SAFE.filter(([k]) => k !== 'credential.helper'), ['push.gpgSign', 'false']]
  .map(([k, v]) => `export "GIT_CONFIG_KEY_$GIT_CONFIG_COUNT=${k}" "GIT_CONFIG_VALUE_$GIT_CONFIG_COUNT=${v}"; GIT_CONFIG_COUNT=$((GIT_CONFIG_COUNT+1)); `)
  .join('');
const RUNNER_ENV = { ...gitConfigEnv(EXTRA_SAFE), LC_ALL: 'C' };
/** See src/services/git/safety.ts. */
const NEUTRALISE = NEUTRALISE_REPO_DRIVERS;

export interface StatusEntry {
  path: string;
  origPath?: string;
  /** Index (staged) state letter, "." when unchanged; "?" for untracked. */
  index: string;
  /** Working-tree (unstaged) state letter, "." when unchanged; "?" for untracked. */
  worktree: string;
  kind: 'changed' | 'renamed' | 'unmerged' | 'untracked';
}

export interface Identity {
  name: string;
  email: string;
}

function badRef(field: string, value: string): ServiceError | null {
  if (value.startsWith('-') || /[\0\n\r]/.test(value)) return new ServiceError('INVALID_ARGUMENT', `${field}: must not start with "-" or contain control characters`, { field });
  return null;
}

function tail(text: string, lines = 8): string {
  return text.trim().split('\n').slice(-lines).join('\n');
}

/** Parses `git status --porcelain=v2 --branch -z`. */
export function parseStatusV2(out: string): {
  headOid: string | null;
  branch: string | null;
  upstream: string | null;
  ahead: number | null;
  behind: number | null;
  entries: StatusEntry[];
} {
  const recs = out.split('\0');
  let headOid: string | null = null;
  let branch: string | null = null;
  let upstream: string | null = null;
  let ahead: number | null = null;
  let behind: number | null = null;
  const entries: StatusEntry[] = [];
  for (let i = 0; i < recs.length; i++) {
    const rec = recs[i]!;
    if (!rec) continue;
    if (rec.startsWith('# branch.oid ')) {
      const v = rec.slice(13);
      headOid = v === '(initial)' ? null : v;
    } else if (rec.startsWith('# branch.head ')) {
      const v = rec.slice(14);
      branch = v === '(detached)' ? null : v;
    } else if (rec.startsWith('# branch.upstream ')) upstream = rec.slice(18);
    else if (rec.startsWith('# branch.ab ')) {
      const m = /^\+(\d+) -(\d+)$/.exec(rec.slice(12));
      if (m) {
        ahead = Number(m[1]);
        behind = Number(m[2]);
      }
    } else if (rec.startsWith('1 ')) {
      const f = rec.split(' ');
      entries.push({ path: f.slice(8).join(' '), index: f[1]![0]!, worktree: f[1]![1]!, kind: 'changed' });
    } else if (rec.startsWith('2 ')) {
      const f = rec.split(' ');
      entries.push({ path: f.slice(9).join(' '), origPath: recs[++i] ?? '', index: f[1]![0]!, worktree: f[1]![1]!, kind: 'renamed' });
    } else if (rec.startsWith('u ')) {
      const f = rec.split(' ');
      entries.push({ path: f.slice(10).join(' '), index: f[1]![0]!, worktree: f[1]![1]!, kind: 'unmerged' });
    } else if (rec.startsWith('? ')) {
      entries.push({ path: rec.slice(2), index: '?', worktree: '?', kind: 'untracked' });
    }
  }
  return { headOid, branch, upstream, ahead, behind, entries };
}

/** Parses `git push --porcelain` lines: flag, from:to, summary. */
export function parsePushPorcelain(out: string): Array<{ flag: string; from: string; to: string; summary: string }> {
  const refs: Array<{ flag: string; from: string; to: string; summary: string }> = [];
  for (const line of out.split('\n')) {
    const m = /^([ +\-*!=])\t([^\t]*):([^\t]*)\t(.*)$/.exec(line);
    if (m) refs.push({ flag: m[1]!, from: m[2]!, to: m[3]!, summary: m[4]! });
  }
  return refs;
}

const PUSH_FLAG: Record<string, string> = { ' ': 'fast-forward', '+': 'forced', '-': 'deleted', '*': 'created', '!': 'rejected', '=': 'up-to-date' };

/** Shell snippet printing the operation in progress, if any. */
const IN_PROGRESS = `if [ -e "$(git rev-parse --git-path MERGE_HEAD)" ]; then echo merge; elif [ -d "$(git rev-parse --git-path rebase-merge)" ] || [ -d "$(git rev-parse --git-path rebase-apply)" ]; then echo rebase; else echo none; fi`;

export class GitService {
  constructor(private readonly deps: Deps) {}

  // ---------- helpers ----------

  /**
   * Serialises the mutating git tools per workspace, and against its lifecycle (one lock, core/locks.ts);
   * afterwards the workspace record gets the live branch and HEAD.
   */
  private locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
    return this.deps.locks.workspace(id, 'git', async () => {
      try {
        return await fn();
      } finally {
        await this.head(id)
          .then((h) => this.deps.workspaces.noteHead(id, h.branch, h.oid))
          .catch(() => undefined);
      }
    });
  }

  /** git with argv in the workspace sandbox, as the workspace user, hooks and program-running config neutralised. */
  private git(
    ws: string,
    args: string[],
    options: { env?: Record<string, string>; stdin?: string; cwd?: string; timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<ExecResult> {
    // Traced as "git <subcommand>" (the subcommand name only; never arguments, paths or content).
    const sub = args.find((x) => /^[a-z][a-z-]{1,30}$/.test(x)) ?? 'git';
    return inSpan(`git ${sub}`, { attributes: { 'vcs.operation': sub, 'atelier.workspace.id': ws } }, () => this.gitExec(ws, args, options));
  }

  private gitExec(ws: string, args: string[], options: Parameters<GitService['git']>[2] = {}): Promise<ExecResult> {
    return this.deps.workspaces.exec(
      ws,
      { argv: ['bash', '-c', `${NEUTRALISE}exec git "$@"`, 'git', ...args], env: { ...RUNNER_ENV, ...options.env }, stdin: options.stdin, cwd: options.cwd ?? '.', timeoutMs: options.timeoutMs ?? 120_000, maxOutputBytes: MAX_OUT },
      undefined,
      options.signal,
    );
  }

  /** A short script in the workspace sandbox; values arrive as environment variables. */
  private sh(ws: string, script: string, env: Record<string, string> = {}, options: { stdin?: string; timeoutMs?: number; signal?: AbortSignal; op?: string } = {}): Promise<ExecResult> {
    // Traced as "git <op>" ("git script" unnamed): the name only, never the script, its values or input.
    const op = options.op ?? 'script';
    return inSpan(`git ${op}`, { attributes: { 'vcs.operation': op, 'atelier.workspace.id': ws } }, () => this.shExec(ws, script, env, options));
  }

  private shExec(ws: string, script: string, env: Record<string, string>, options: { stdin?: string; timeoutMs?: number; signal?: AbortSignal }): Promise<ExecResult> {
    return this.deps.workspaces.exec(
      ws,
      { command: NEUTRALISE + script, env: { ...RUNNER_ENV, ...env }, stdin: options.stdin, timeoutMs: options.timeoutMs ?? 120_000, maxOutputBytes: MAX_OUT },
      undefined,
      options.signal,
    );
  }

  private fail(step: string, result: ExecResult, code: 'FAILED_PRECONDITION' | 'INVALID_ARGUMENT' | 'NOT_FOUND' = 'FAILED_PRECONDITION'): ServiceError {
    const msg = tail(`${result.stderr}\n${result.stdout}`) || `exit ${result.exitCode}`;
    if (result.timedOut) return new ServiceError('DEADLINE_EXCEEDED', `${step} timed out`, { step });
    return new ServiceError(code, `${step} failed: ${msg}`, { step, exitCode: result.exitCode });
  }

  private async must(ws: string, step: string, args: string[], options: Parameters<GitService['git']>[2] = {}): Promise<string> {
    const r = await this.git(ws, args, options);
    if (r.exitCode !== 0) throw this.fail(step, r);
    return r.stdout;
  }

  private async head(ws: string): Promise<{ oid: string | null; branch: string | null }> {
    const r = await this.sh(ws, 'git rev-parse -q --verify HEAD || echo; git symbolic-ref --short -q HEAD || echo');
    const [oid, branch] = r.stdout.split('\n');
    return { oid: oid?.trim() || null, branch: branch?.trim() || null };
  }

  private async inProgress(ws: string): Promise<'merge' | 'rebase' | null> {
    const r = await this.sh(ws, IN_PROGRESS);
    const v = r.stdout.trim();
    return v === 'merge' || v === 'rebase' ? v : null;
  }

  private async conflicts(ws: string): Promise<string[]> {
    const r = await this.git(ws, ['diff', '--name-only', '--diff-filter=U', '-z']);
    return r.stdout.split('\0').filter(Boolean);
  }

  /** The workspace's configured identity (repository-local config only: global and system config are off). */
  async configuredIdentity(ws: string): Promise<{ name: string | null; email: string | null }> {
    const r = await this.sh(ws, 'git config --get user.name; echo ---; git config --get user.email');
    const [name, email] = r.stdout.split('---').map((x) => x.trim());
    return { name: name || null, email: email || null };
  }

  /** Author and committer env for a commit; a clear error when no identity is known. */
  private async identityEnv(ws: string, authorName?: string, authorEmail?: string, required = true): Promise<{ env: Record<string, string>; author: Identity | null }> {
    const conf = await this.configuredIdentity(ws);
    const name = authorName ?? conf.name;
    const email = authorEmail ?? conf.email;
    if (!name || !email) {
      if (!required) return { env: {}, author: null };
      throw new ServiceError(
        'FAILED_PRECONDITION',
        `no git identity: ${!name ? 'author name' : 'author email'} unknown; set one with git_identity_set or pass authorName and authorEmail`,
        { field: !name ? 'authorName' : 'authorEmail', missing: !name ? 'name' : 'email' },
      );
    }
    const cName = conf.name ?? name;
    const cEmail = conf.email ?? email;
    return {
      env: { GIT_AUTHOR_NAME: name, GIT_AUTHOR_EMAIL: email, GIT_COMMITTER_NAME: cName, GIT_COMMITTER_EMAIL: cEmail },
      author: { name, email },
    };
  }

  // ---------- read-only ----------

  async status(ws: string): Promise<Record<string, unknown>> {
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

  async diff(ws: string, diffArgs: { staged: boolean; path?: string; cursor?: string; limit: number; readAll?: boolean }): Promise<Record<string, unknown>> {
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

  async log(ws: string, args: { limit: number; cursor?: string; readAll?: boolean }): Promise<Record<string, unknown>> {
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

  async branch(ws: string, args: { action: 'list' | 'create' | 'delete'; name?: string; startPoint?: string; force: boolean }): Promise<Record<string, unknown>> {
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

  async checkout(ws: string, args: { ref: string; create: boolean }): Promise<Record<string, unknown>> {
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

  async add(ws: string, args: { all: boolean; paths: string[] }): Promise<Record<string, unknown>> {
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

  async identityStatus(ws: string): Promise<Record<string, unknown>> {
    const c = await this.configuredIdentity(ws);
    return { workspaceId: ws, configured: !!(c.name && c.email), name: c.name, email: c.email, scope: 'repository' };
  }

  async identitySet(ws: string, name: string, email: string): Promise<Record<string, unknown>> {
    return this.locked(ws, async () => {
      await this.must(ws, 'identity set', ['config', '--local', 'user.name', name]);
      await this.must(ws, 'identity set', ['config', '--local', 'user.email', email]);
      return { workspaceId: ws, configured: true, name, email, scope: 'repository' };
    });
  }

  async commit(ws: string, args: { message: string; authorName?: string; authorEmail?: string; all: boolean; expectedHeadOid?: string }): Promise<Record<string, unknown>> {
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

  // ---------- network ----------

  private repoOf(ws: string) {
    const w = this.deps.workspaces.get(ws);
    this.deps.repos.approve(w.repositoryUrl);
    return { w, repo: parseRepoUrl(w.repositoryUrl) };
  }

  /** Runs a script in the short-lived network sandbox that reaches only the repository host. */
  private async net(ws: string, script: string, env: Record<string, string>, signal?: AbortSignal): Promise<ExecResult> {
    await this.deps.workspaces.activeHandle(ws); // refuses expired/closed workspaces clearly; refreshes the lease
    const { repo } = this.repoOf(ws);
    // origin is pinned to the approved URL whatever the workspace wrote into its config; ephemeralGit
    // itself prefixes the repository-driver neutralisation (src/services/git/safety.ts).
    const pin =
      'if ! git config --get remote.origin.url >/dev/null; then git remote add origin "$ATELIER_REPO" || exit 90; ' +
      'elif [ "$(git config --get-all remote.origin.url)" != "$ATELIER_REPO" ]; then git config --replace-all remote.origin.url "$ATELIER_REPO" || exit 90; fi; ' +
      'git config --unset-all remote.origin.pushurl 2>/dev/null; ';
    let host: string | undefined;
    try {
      host = new URL(repo.url).hostname;
    } catch {
      host = undefined;
    }
    // The network half of fetch, pull and push (its own sandbox, reaching only the repository host).
    return inSpan('git network', { kind: SpanKind.CLIENT, attributes: { 'atelier.workspace.id': ws, 'server.address': host } }, async (span) => {
      const r = await this.deps.workspaces.ephemeralGit({ id: ws }, NET_EXTRA + pin + script, { repo, env: { LC_ALL: 'C', ...env, ATELIER_REPO: repo.url }, timeoutMs: 600_000, signal });
      setAttrs(span, { 'atelier.exit_code': r.exitCode ?? -1, 'atelier.timed_out': r.timedOut === true });
      return r;
    });
  }

  private static readonly REFS = `git for-each-ref --format='%(objectname) %(refname)' refs/remotes/origin refs/tags`;

  async fetch(ws: string, args: { refspec?: string; depth?: number; unshallow?: boolean; shallowSince?: string }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    if (args.refspec) {
      const e = badRef('refspec', args.refspec);
      if (e) throw e;
    }
    return this.locked(ws, async () => {
      const isShallow = (await this.git(ws, ['rev-parse', '--is-shallow-repository'])).stdout.trim() === 'true';
      if (args.unshallow && !isShallow) throw new ServiceError('FAILED_PRECONDITION', 'unshallow: the repository already has its complete history', { field: 'unshallow' });
      const opts = [args.depth !== undefined ? '--depth="$DEPTH"' : '', args.unshallow ? '--unshallow' : '', args.shallowSince ? '--shallow-since="$SINCE"' : ''].join(' ');
      const script =
        `${GitService.REFS}; echo @@FETCH; git fetch -q --no-write-fetch-head --prune origin ${opts} ${args.refspec ? '"$REFSPEC"' : ''} || exit $?; echo @@AFTER; ${GitService.REFS}; ` +
        `echo "@@SHALLOW $(git rev-parse --is-shallow-repository)"`;
      const result = await this.net(ws, script, { DEPTH: String(args.depth ?? ''), SINCE: args.shallowSince ?? '', REFSPEC: args.refspec ?? '' }, signal);
      if (result.exitCode !== 0) throw gitFailure('fetch', result);
      const [beforeText, rest] = result.stdout.split('@@FETCH');
      const afterText = (rest ?? '').split('@@AFTER')[1] ?? '';
      const toMap = (t: string) => new Map(t.split('\n').filter((l) => /^[0-9a-f]{40,64} /.test(l)).map((l) => [l.slice(l.indexOf(' ') + 1), l.slice(0, l.indexOf(' '))] as const));
      const before = toMap(beforeText ?? '');
      const after = toMap(afterText.split('@@SHALLOW')[0] ?? '');
      const updated: Array<Record<string, unknown>> = [];
      for (const [ref, oid] of after) if (before.get(ref) !== oid) updated.push({ ref, oldOid: before.get(ref) ?? null, newOid: oid });
      for (const [ref, oid] of before) if (!after.has(ref)) updated.push({ ref, oldOid: oid, newOid: null, pruned: true });
      const shallow = /@@SHALLOW true/.test(result.stdout);
      return { workspaceId: ws, remote: 'origin', refspec: args.refspec ?? null, updatedRefs: updated, shallow, wasShallow: isShallow };
    });
  }

  async pull(ws: string, args: { branch?: string; strategy: 'ff-only' | 'merge' | 'rebase' }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    if (args.branch) {
      const e = badRef('branch', args.branch);
      if (e) throw e;
    }
    return this.locked(ws, async () => {
      const head = await this.head(ws);
      if (!head.branch) throw new ServiceError('FAILED_PRECONDITION', 'HEAD is detached: check out a branch before pulling', { step: 'pull' });
      const progress = await this.inProgress(ws);
      if (progress) throw new ServiceError('FAILED_PRECONDITION', `a ${progress} is in progress: finish or abort it first`, { inProgress: progress });
      let branch = args.branch;
      if (!branch) {
        const up = await this.git(ws, ['rev-parse', '--abbrev-ref', '--symbolic-full-name', '@{upstream}']);
        branch = up.exitCode === 0 && up.stdout.trim().startsWith('origin/') ? up.stdout.trim().slice(7) : head.branch;
      }
      const check = await this.git(ws, ['check-ref-format', '--branch', branch]);
      if (check.exitCode !== 0) throw new ServiceError('INVALID_ARGUMENT', `branch: ${branch} is not a valid branch name`, { field: 'branch' });
      const f = await this.net(ws, 'git fetch -q --no-write-fetch-head origin "+refs/heads/$B:refs/remotes/origin/$B"', { B: branch }, signal);
      if (f.exitCode !== 0) throw gitFailure('pull fetch', f);
      const upstream = `refs/remotes/origin/${branch}`;
      const counts = await this.git(ws, ['rev-list', '--left-right', '--count', `HEAD...${upstream}`]);
      const [ahead, behind] = counts.stdout.trim().split(/\s+/).map(Number);
      if (args.strategy === 'ff-only') {
        const result = await this.git(ws, ['merge', '--ff-only', '-q', upstream]);
        if (result.exitCode !== 0) {
          if (/Not possible to fast-forward|fatal: Not possible|diverg/i.test(result.stderr))
            throw new ServiceError('FAILED_PRECONDITION', `cannot fast-forward ${head.branch} to origin/${branch}: the branches diverged (${ahead} local, ${behind} remote commits); pull with strategy merge or rebase`, {
              step: 'pull',
              diverged: true,
              ahead,
              behind,
            });
          throw this.fail('pull', result);
        }
        const now = await this.head(ws);
        return { workspaceId: ws, remote: 'origin', branch, strategy: args.strategy, outcome: now.oid === head.oid ? 'up-to-date' : 'fast-forward', previousHeadOid: head.oid, headOid: now.oid, ahead, behind };
      }
      const res = args.strategy === 'merge' ? await this.doMerge(ws, upstream, 'allow', undefined, head.oid) : await this.doRebase(ws, 'start', upstream, head.oid);
      return { workspaceId: ws, remote: 'origin', branch, strategy: args.strategy, ...res };
    });
  }

  /** Parses a push refspec into source and the full destination ref. */
  private async pushTarget(ws: string, args: { refspec?: string; delete: boolean }): Promise<{ src: string; dst: string }> {
    let spec = args.refspec;
    if (spec) {
      const e = badRef('refspec', spec);
      if (e) throw e;
      if (spec.startsWith('+')) throw new ServiceError('INVALID_ARGUMENT', 'refspec: "+" (force) refspecs are refused; use forceWithLease with expectedRemoteOid or expectedAbsent', { field: 'refspec' });
    }
    if (!spec) {
      const h = await this.head(ws);
      if (!h.branch) throw new ServiceError('INVALID_ARGUMENT', 'refspec: HEAD is detached; give a refspec such as "HEAD:refs/heads/name"', { field: 'refspec' });
      spec = args.delete ? h.branch : `HEAD:refs/heads/${h.branch}`;
    }
    const colon = spec.indexOf(':');
    let src = colon >= 0 ? spec.slice(0, colon) : spec;
    let dst = colon >= 0 ? spec.slice(colon + 1) : spec;
    if (args.delete) {
      dst = colon >= 0 ? dst : spec;
      src = '';
    }
    if (!dst) throw new ServiceError('INVALID_ARGUMENT', 'refspec: no destination ref', { field: 'refspec' });
    if (!dst.startsWith('refs/')) dst = `refs/heads/${dst}`;
    const check = await this.git(ws, ['check-ref-format', dst]);
    if (check.exitCode !== 0) throw new ServiceError('INVALID_ARGUMENT', `refspec: ${dst} is not a valid ref name`, { field: 'refspec' });
    return { src, dst };
  }

  async push(
    ws: string,
    args: { refspec?: string; forceWithLease: boolean; expectedRemoteOid?: string; expectedAbsent: boolean; delete: boolean },
    signal?: AbortSignal,
  ): Promise<Record<string, unknown>> {
    return this.locked(ws, () => this.pushLocked(ws, args, signal));
  }

  private async pushLocked(
    ws: string,
    args: { refspec?: string; forceWithLease: boolean; expectedRemoteOid?: string; expectedAbsent: boolean; delete: boolean },
    signal?: AbortSignal,
  ): Promise<Record<string, unknown>> {
    const { src, dst } = await this.pushTarget(ws, args);
    let srcOid: string | null = null;
    if (!args.delete) {
      const r = await this.git(ws, ['rev-parse', '-q', '--verify', `${src}^{commit}`]);
      if (r.exitCode !== 0) throw new ServiceError('NOT_FOUND', `refspec: ${src} is not a commit here`, { field: 'refspec' });
      srcOid = r.stdout.trim();
    }
    const lease = args.expectedAbsent ? `--force-with-lease=${dst}:` : args.expectedRemoteOid ? `--force-with-lease=${dst}:${args.expectedRemoteOid}` : args.forceWithLease ? `--force-with-lease=${dst}` : '';
    // srcOid (not the name) is pushed: what was checked is what is sent.
    const script =
      `git push --porcelain ${lease ? '"$LEASE"' : ''} origin "$SPEC"; rc=$?; ` +
      `if [ $rc -ne 0 ]; then echo "@@REMOTE"; git ls-remote origin "$DST" || true; fi; exit $rc`;
    const spec = args.delete ? `:${dst}` : `${srcOid}:${dst}`;
    const result = await this.net(ws, script, { LEASE: lease, SPEC: spec, DST: dst }, signal);
    const refs = parsePushPorcelain(result.stdout.split('@@REMOTE')[0]!);
    const mine = refs.find((x) => x.to === dst);
    if (result.exitCode === 0 && mine?.flag === '=' && (args.expectedAbsent || (args.expectedRemoteOid && args.expectedRemoteOid !== srcOid))) {
      // Nothing to update, so git did not check the lease: the remote already holds srcOid.
      const msg = args.expectedAbsent
        ? `expectedAbsent: ${dst} already exists on origin at ${srcOid}; nothing was pushed`
        : `lease lost: ${dst} on origin is at ${srcOid}, not ${args.expectedRemoteOid}; nothing was pushed`;
      throw new ServiceError('CONFLICT', msg, { step: 'push', ref: dst, remoteOid: srcOid, expectedRemoteOid: args.expectedRemoteOid ?? null, expectedAbsent: args.expectedAbsent });
    }
    if (result.exitCode !== 0) {
      const remoteLine = (result.stdout.split('@@REMOTE')[1] ?? '').split('\n').find((l) => l.endsWith(`\t${dst}`));
      const remoteOid = remoteLine ? remoteLine.split('\t')[0]! : null;
      const summary = mine?.summary ?? '';
      if (/stale info/.test(summary) || /stale info/.test(result.stderr)) {
        const msg = args.expectedAbsent
          ? `expectedAbsent: ${dst} already exists on origin at ${remoteOid}; nothing was pushed`
          : `lease lost: ${dst} on origin is at ${remoteOid ?? '(absent)'}, not ${args.expectedRemoteOid ?? 'the remote-tracking value'}; nothing was pushed`;
        throw new ServiceError('CONFLICT', msg, { step: 'push', ref: dst, remoteOid, expectedRemoteOid: args.expectedRemoteOid ?? null, expectedAbsent: args.expectedAbsent });
      }
      if (/non-fast-forward|fetch first|rejected/.test(summary) && !/pre-receive|hook declined/.test(summary + result.stderr))
        throw new ServiceError('FAILED_PRECONDITION', `push rejected (${summary || 'non-fast-forward'}): origin's ${dst} is at ${remoteOid}; fetch and integrate, or use forceWithLease with expectedRemoteOid`, {
          step: 'push',
          ref: dst,
          remoteOid,
        });
      if (mine?.flag === '!' || /remote rejected|hook declined|pre-receive/.test(result.stderr + summary)) {
        const remoteMsg = result.stderr.split('\n').filter((l) => l.startsWith('remote:')).map((l) => l.slice(7).trim()).filter(Boolean).join('\n');
        throw new ServiceError('FAILED_PRECONDITION', `push rejected by the server: ${remoteMsg || summary || tail(result.stderr, 3)}`, { step: 'push', ref: dst, remoteOid, remoteMessage: remoteMsg || null });
      }
      throw gitFailure('push', result);
    }
    return {
      workspaceId: ws,
      remote: 'origin',
      ref: dst,
      oid: srcOid,
      outcome: mine ? (PUSH_FLAG[mine.flag] ?? mine.summary) : 'up-to-date',
      deleted: args.delete,
      lease: args.expectedAbsent ? 'expectedAbsent' : args.expectedRemoteOid ? 'expectedRemoteOid' : args.forceWithLease ? 'remote-tracking' : null,
    };
  }

  // ---------- merge and rebase ----------

  async merge(ws: string, args: { ref: string; fastForward: 'allow' | 'only' | 'never'; message?: string }): Promise<Record<string, unknown>> {
    const e = badRef('ref', args.ref);
    if (e) throw e;
    return this.locked(ws, async () => {
      const progress = await this.inProgress(ws);
      if (progress) throw new ServiceError('FAILED_PRECONDITION', `a ${progress} is in progress: finish or abort it first`, { inProgress: progress });
      const h = await this.head(ws);
      return { workspaceId: ws, ref: args.ref, ...(await this.doMerge(ws, args.ref, args.fastForward, args.message, h.oid)) };
    });
  }

  private async doMerge(ws: string, ref: string, ff: 'allow' | 'only' | 'never', message: string | undefined, before: string | null): Promise<Record<string, unknown>> {
    const v = await this.git(ws, ['rev-parse', '-q', '--verify', `${ref}^{commit}`]);
    if (v.exitCode !== 0) throw new ServiceError('NOT_FOUND', `ref: ${ref} is not a branch, tag or commit here (fetch it first?)`, { field: 'ref' });
    const { env } = await this.identityEnv(ws, undefined, undefined, ff === 'never');
    const args = ['merge', '--no-edit', '--no-verify', '--no-gpg-sign', ff === 'only' ? '--ff-only' : ff === 'never' ? '--no-ff' : '--ff', ...(message ? ['-m', message] : []), v.stdout.trim()];
    const result = await this.git(ws, args, { env });
    const now = await this.head(ws);
    if (result.exitCode === 0) {
      const parents = (await this.git(ws, ['show', '-s', '--format=%P', 'HEAD'])).stdout.trim().split(' ').filter(Boolean);
      const outcome = now.oid === before ? 'up-to-date' : parents.length > 1 ? 'merged' : 'fast-forward';
      return { outcome, previousHeadOid: before, headOid: now.oid, conflicts: [] };
    }
    if ((await this.inProgress(ws)) === 'merge') {
      return {
        outcome: 'conflicts',
        previousHeadOid: before,
        headOid: now.oid,
        conflicts: await this.conflicts(ws),
        next: 'resolve the files, git_add them and git_commit to finish the merge; or run `git merge --abort` with exec_run to give up',
      };
    }
    if (/Not possible to fast-forward/i.test(result.stderr)) throw new ServiceError('FAILED_PRECONDITION', `cannot fast-forward to ${ref}: the histories diverged`, { step: 'merge', diverged: true });
    if (/Committer identity unknown|empty ident|Please tell me who you are|auto-detection is disabled/i.test(result.stderr))
      throw new ServiceError('FAILED_PRECONDITION', 'no git identity for the merge commit; set one with git_identity_set', { step: 'merge' });
    if (/would be overwritten/.test(result.stderr)) throw new ServiceError('FAILED_PRECONDITION', `merge refused: uncommitted changes would be overwritten: ${tail(result.stderr, 4)}`, { step: 'merge' });
    throw this.fail('merge', result);
  }

  async rebase(ws: string, args: { action: 'start' | 'continue' | 'abort'; upstream?: string }): Promise<Record<string, unknown>> {
    if (args.upstream) {
      const e = badRef('upstream', args.upstream);
      if (e) throw e;
    }
    return this.locked(ws, async () => {
      const head = await this.head(ws);
      const progress = await this.inProgress(ws);
      if (args.action === 'start' && progress) throw new ServiceError('FAILED_PRECONDITION', `a ${progress} is in progress: finish or abort it first`, { inProgress: progress });
      if (args.action !== 'start' && progress !== 'rebase') throw new ServiceError('FAILED_PRECONDITION', `no rebase in progress to ${args.action}`, { step: 'rebase' });
      return { workspaceId: ws, action: args.action, ...(await this.doRebase(ws, args.action, args.upstream, head.oid)) };
    });
  }

  private async doRebase(ws: string, action: 'start' | 'continue' | 'abort', upstream: string | undefined, before: string | null): Promise<Record<string, unknown>> {
    if (action === 'abort') {
      const r = await this.git(ws, ['rebase', '--abort']);
      if (r.exitCode !== 0) throw this.fail('rebase abort', r);
      const now = await this.head(ws);
      return { outcome: 'aborted', headOid: now.oid, branch: now.branch, conflicts: [] };
    }
    let args: string[];
    if (action === 'start') {
      const v = await this.git(ws, ['rev-parse', '-q', '--verify', `${upstream}^{commit}`]);
      if (v.exitCode !== 0) throw new ServiceError('NOT_FOUND', `upstream: ${upstream} is not a branch, tag or commit here (fetch it first?)`, { field: 'upstream' });
      args = ['rebase', '--no-verify', '--no-gpg-sign', v.stdout.trim()];
    } else args = ['rebase', '--continue'];
    const { env } = await this.identityEnv(ws, undefined, undefined, false);
    const result = await this.git(ws, args, { env: { ...env, GIT_EDITOR: 'true', GIT_SEQUENCE_EDITOR: 'true' } });
    const now = await this.head(ws);
    if (result.exitCode === 0) {
      return { outcome: now.oid === before && action === 'start' ? 'up-to-date' : 'rebased', previousHeadOid: before, headOid: now.oid, branch: now.branch, conflicts: [] };
    }
    if ((await this.inProgress(ws)) === 'rebase') {
      const conflicts = await this.conflicts(ws);
      if (conflicts.length === 0 && /Committer identity unknown|empty ident|Please tell me who you are|auto-detection is disabled/i.test(result.stderr))
        throw new ServiceError('FAILED_PRECONDITION', 'no git identity for the rebased commits; set one with git_identity_set, then continue', { step: 'rebase' });
      if (conflicts.length === 0 && action === 'continue') throw this.fail('rebase continue', result);
      return {
        outcome: 'conflicts',
        previousHeadOid: before,
        headOid: now.oid,
        conflicts,
        next: 'resolve the files, git_add them and git_rebase continue; or git_rebase abort to restore the branch',
      };
    }
    if (/Committer identity unknown|empty ident|Please tell me who you are|auto-detection is disabled/i.test(result.stderr))
      throw new ServiceError('FAILED_PRECONDITION', 'no git identity for the rebased commits; set one with git_identity_set', { step: 'rebase' });
    throw this.fail(`rebase ${action}`, result);
  }

  // ---------- finalize ----------

  /**
   * Stage (into a temporary index), preflight, commit (commit-tree, HEAD not moved yet), push the
   * commit object, and only then move HEAD (compare-and-swap on the old HEAD) and adopt the index.
   * Any failure before that leaves HEAD, the index and the remote as they were.
   */
  async finalize(
    ws: string,
    args: {
      paths?: string[];
      all: boolean;
      commitMessage: string;
      branch?: string;
      push: boolean;
      authorName?: string;
      authorEmail?: string;
      preflight?: { commands: Array<{ name: string; command: string; cwd?: string; timeoutMs: number }> };
    },
    signal?: AbortSignal,
  ): Promise<Record<string, unknown>> {
    if (args.branch) {
      const e = badRef('branch', args.branch);
      if (e) throw e;
    }
    if (!args.all && (!args.paths || args.paths.length === 0)) throw new ServiceError('INVALID_ARGUMENT', 'paths: give paths or all: true', { field: 'paths' });
    return this.locked(ws, async () => {
      const failed = (step: string, message: string, details: Record<string, unknown> = {}, code: 'FAILED_PRECONDITION' | 'CONFLICT' | 'NOT_FOUND' = 'FAILED_PRECONDITION') =>
        new ServiceError(code, `workspace_finalize failed at ${step}: ${message}; the workspace is as it was before the call`, { step, workspaceUnchanged: true, ...details });
      const progress = await this.inProgress(ws);
      if (progress) throw failed('check', `a ${progress} is in progress`, { inProgress: progress });
      const head = await this.head(ws);
      if (!head.oid) throw failed('check', 'the repository has no commit yet');
      const branch = args.branch ?? head.branch;
      if (args.push && !branch) throw failed('check', 'HEAD is detached: give branch');
      const { env, author } = await this.identityEnv(ws, args.authorName, args.authorEmail);
      // 1. stage into a temporary index and write the commit object (HEAD and the real index untouched).
      const idx = (await this.must(ws, 'git-path', ['rev-parse', '--git-path', FINALIZE_INDEX])).trim();
      const stageScript =
        `set -e; real="$(git rev-parse --git-path index)"; export GIT_INDEX_FILE="$IDX"; if [ -e "$real" ]; then cp "$real" "$GIT_INDEX_FILE"; else rm -f "$GIT_INDEX_FILE"; fi; ` +
        `${args.all ? 'git add -A -- .' : 'git add -A -- "$@"'}; tree=$(git write-tree); ` +
        `if [ "$tree" = "$(git rev-parse 'HEAD^{tree}')" ]; then echo @@NOTHING; exit 5; fi; ` +
        `git commit-tree "$tree" -p HEAD -F -`;
      const cleanup = () => this.git(ws, ['rev-parse', '--git-path', FINALIZE_INDEX]).then((p) => this.sh(ws, 'rm -f "$IDX"', { IDX: p.stdout.trim() })).catch(() => undefined);
      const staged = await this.deps.workspaces.exec(
        ws,
        { argv: ['bash', '-c', NEUTRALISE + stageScript, 'finalize', ...(args.all ? [] : args.paths!)], env: { ...RUNNER_ENV, ...env, IDX: idx }, stdin: args.commitMessage, timeoutMs: 120_000, maxOutputBytes: MAX_OUT },
        undefined,
        signal,
      );
      if (staged.exitCode !== 0) {
        await cleanup();
        if (staged.exitCode === 5) throw failed('stage', 'nothing to commit');
        throw failed('stage', tail(staged.stderr, 4) || `exit ${staged.exitCode}`, { exitCode: staged.exitCode });
      }
      const commitOid = staged.stdout.trim().split('\n').pop()!;
      // 2. preflights, in order, in the workspace.
      const preflights: Array<Record<string, unknown>> = [];
      for (const record of args.preflight?.commands ?? []) {
        const result = await this.deps.workspaces.exec(ws, { command: record.command, cwd: record.cwd ?? '.', timeoutMs: record.timeoutMs, maxOutputBytes: 65536 }, undefined, signal);
        const rec = { name: record.name, exitCode: result.exitCode, timedOut: result.timedOut, durationMs: result.durationMs, stdoutTail: tail(result.stdout, 20), stderrTail: tail(result.stderr, 20) };
        preflights.push(rec);
        if (result.exitCode !== 0) {
          await cleanup();
          throw failed('preflight', `preflight ${record.name} ${result.timedOut ? 'timed out' : `exited with ${result.exitCode ?? result.signal}`}`, { preflight: rec, preflights });
        }
      }
      // Repository hooks (issue #19): a failing activated pre_commit hook stops here, before anything is pushed.
      const preCommit = await this.deps.hooks?.fire(ws, 'pre_commit', signal);
      if (preCommit?.failed) {
        await cleanup();
        throw failed('pre_commit', `${preCommit.message}; nothing was pushed`, { hooks: [preCommit], preflights });
      }
      // 3. push the commit object itself.
      let pushed: Record<string, unknown> | null = null;
      if (args.push) {
        try {
          pushed = await this.pushLocked(ws, { refspec: `${commitOid}:refs/heads/${branch}`, forceWithLease: false, expectedAbsent: false, delete: false }, signal);
        } catch (e) {
          await cleanup();
          const se = e instanceof ServiceError ? e : new ServiceError('INTERNAL', String(e));
          throw failed('push', se.message, { cause: { code: se.code, ...se.details }, preflights });
        }
      }
      // 4. move HEAD (only if it has not moved meanwhile) and adopt the staged index.
      const done = await this.sh(
        ws,
        'set -e; git update-ref -m "workspace_finalize" HEAD "$NEW" "$OLD"; mv -f "$IDX" "$(git rev-parse --git-path index)"',
        { NEW: commitOid, OLD: head.oid, IDX: idx },
      );
      if (done.exitCode !== 0) {
        await cleanup();
        throw new ServiceError('CONFLICT', `workspace_finalize: HEAD moved during the call; commit ${commitOid} was ${pushed ? 'pushed' : 'made'} but HEAD was left alone`, {
          step: 'commit',
          commitOid,
          pushed: !!pushed,
        });
      }
      const files = await this.git(ws, ['diff-tree', '--no-commit-id', '--name-only', '-r', '-z', commitOid]);
      const postCommit = await this.deps.hooks?.fire(ws, 'post_commit', signal);
      return {
        ...(preCommit || postCommit ? { hooks: [preCommit, postCommit].filter(Boolean) } : {}),
        workspaceId: ws,
        commitOid,
        parentOid: head.oid,
        branch: head.branch,
        author,
        files: files.stdout.split('\0').filter(Boolean),
        preflights,
        pushed: !!pushed,
        push: pushed,
        steps: ['stage', 'preflight', 'commit', ...(args.push ? ['push'] : [])],
      };
    });
  }

  // ---------- worktrees ----------

  async worktreesList(ws: string): Promise<Record<string, unknown>> {
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

  async worktreesCreate(ws: string, args: { name: string; ref: string; createBranch: boolean }): Promise<Record<string, unknown>> {
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

  async worktreesRemove(ws: string, args: { name: string; force: boolean }): Promise<Record<string, unknown>> {
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

/**
 * Lexical confinement of a workspace-relative path given to git (git_diff path, git_add paths):
 * absolute paths and `..` that climb out of the workspace are PERMISSION_DENIED naming the field,
 * before git runs; a NUL or a lone UTF-16 surrogate is INVALID_ARGUMENT. (Symlinks that lead out
 * are git's to refuse; outsideRefusal maps that answer.)
 */
export function confineToWorkspace(field: string, path: string): void {
  const base = field.replace(/\[\d+\]$/, '');
  if (path.includes('\0')) throw new ServiceError('INVALID_ARGUMENT', `${field}: contains a NUL character`, { field: base, path: path });
  if (/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/.test(path))
    throw new ServiceError('INVALID_ARGUMENT', `${field}: ${JSON.stringify(path)} contains a lone UTF-16 surrogate, which no file name can hold`, { field: base, rule: 'well-formed Unicode' });
  if (path.startsWith('/')) throw new ServiceError('PERMISSION_DENIED', `${field}: ${path} is an absolute path and leaves the workspace; paths are relative to the workspace root`, { field: base, path: path });
  const norm = posix.normalize(path);
  if (norm === '..' || norm.startsWith('../')) throw new ServiceError('PERMISSION_DENIED', `${field}: ${path} leaves the workspace`, { field: base, path: path });
}

/** git's own "outside the repository" answers as PERMISSION_DENIED naming the field. */
function outsideRefusal(field: string, stderr: string): ServiceError | null {
  const m = /fatal: (.*?(?:is outside repository|beyond a symbolic link|outside the repository).*)$/m.exec(stderr);
  return m ? new ServiceError('PERMISSION_DENIED', `${field}: ${m[1]!.replace(/ at '[^']*'$/, '')}: the path leaves the workspace`, { field }) : null;
}
