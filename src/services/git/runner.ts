/**
 * The steps every git operation of a workspace is made of (issue #43: GitService split along its
 * seams): git with argv or a short script in the workspace's sandbox as the workspace user, with
 * the runner's neutralising config; the per-workspace lock shared with the lifecycle; failures as
 * errors; HEAD, an operation in progress, conflicts and the identity of a commit. GitService
 * (local.ts) is one; network.ts and finalize.ts are handed it.
 */
import { inSpan } from '../../telemetry/tracing.js';
import { ServiceError } from '../../core/errors.js';
import type { CursorCodec } from '../../core/cursor.js';
import type { WorkspaceLocks } from '../../core/locks.js';
import type { AuditLog } from '../instance/index.js';
import type { ExecResult } from '../../sandbox/executor.js';
import type { WorkspaceService } from '../workspaces/index.js';
import type { RepositoryPolicy } from '../repos/index.js';
import type { HookRunner } from '../extensions/index.js';
import { gitConfigEnv, NEUTRALISE_REPO_DRIVERS } from './safety.js';
import { IN_PROGRESS, tail, type Identity } from './parsers.js';

export interface GitDeps {
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
export const MAX_OUT = 8 * 1024 * 1024;
export const FINALIZE_INDEX = 'atelier-finalize.index';

/** Beyond SAFE_GIT_CONFIG: signing and other program-running settings the runner turns off. */
export const EXTRA_SAFE: Array<[string, string]> = [
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
export const NET_EXTRA = [...EXTRA_SAFE.filter(([k]) => k !== 'credential.helper'), ['push.gpgSign', 'false']]
  .map(([k, v]) => `export "GIT_CONFIG_KEY_$GIT_CONFIG_COUNT=${k}" "GIT_CONFIG_VALUE_$GIT_CONFIG_COUNT=${v}"; GIT_CONFIG_COUNT=$((GIT_CONFIG_COUNT+1)); `)
  .join('');
export const RUNNER_ENV = { ...gitConfigEnv(EXTRA_SAFE), LC_ALL: 'C' };
/** See src/services/git/safety.ts. */
export const NEUTRALISE = NEUTRALISE_REPO_DRIVERS;

export class GitRunner {
  constructor(readonly deps: GitDeps) {}

  /**
   * Serialises the mutating git tools per workspace, and against its lifecycle (one lock, core/locks.ts);
   * afterwards the workspace record gets the live branch and HEAD.
   */
  locked<T>(id: string, fn: () => Promise<T>): Promise<T> {
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
  git(
    ws: string,
    args: string[],
    options: { env?: Record<string, string>; stdin?: string; cwd?: string; timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<ExecResult> {
    // Traced as "git <subcommand>" (the subcommand name only; never arguments, paths or content).
    const sub = args.find((x) => /^[a-z][a-z-]{1,30}$/.test(x)) ?? 'git';
    return inSpan(`git ${sub}`, { attributes: { 'vcs.operation': sub, 'atelier.workspace.id': ws } }, () => this.gitExec(ws, args, options));
  }

  private gitExec(ws: string, args: string[], options: Parameters<GitRunner['git']>[2] = {}): Promise<ExecResult> {
    return this.deps.workspaces.exec(
      ws,
      { argv: ['bash', '-c', `${NEUTRALISE}exec git "$@"`, 'git', ...args], env: { ...RUNNER_ENV, ...options.env }, stdin: options.stdin, cwd: options.cwd ?? '.', timeoutMs: options.timeoutMs ?? 120_000, maxOutputBytes: MAX_OUT },
      undefined,
      options.signal,
    );
  }

  /** A short script in the workspace sandbox; values arrive as environment variables. */
  sh(ws: string, script: string, env: Record<string, string> = {}, options: { stdin?: string; timeoutMs?: number; signal?: AbortSignal; op?: string } = {}): Promise<ExecResult> {
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

  fail(step: string, result: ExecResult, code: 'FAILED_PRECONDITION' | 'INVALID_ARGUMENT' | 'NOT_FOUND' = 'FAILED_PRECONDITION'): ServiceError {
    const msg = tail(`${result.stderr}\n${result.stdout}`) || `exit ${result.exitCode}`;
    if (result.timedOut) return new ServiceError('DEADLINE_EXCEEDED', `${step} timed out`, { step });
    return new ServiceError(code, `${step} failed: ${msg}`, { step, exitCode: result.exitCode });
  }

  async must(ws: string, step: string, args: string[], options: Parameters<GitRunner['git']>[2] = {}): Promise<string> {
    const r = await this.git(ws, args, options);
    if (r.exitCode !== 0) throw this.fail(step, r);
    return r.stdout;
  }

  async head(ws: string): Promise<{ oid: string | null; branch: string | null }> {
    const r = await this.sh(ws, 'git rev-parse -q --verify HEAD || echo; git symbolic-ref --short -q HEAD || echo');
    const [oid, branch] = r.stdout.split('\n');
    return { oid: oid?.trim() || null, branch: branch?.trim() || null };
  }

  async inProgress(ws: string): Promise<'merge' | 'rebase' | null> {
    const r = await this.sh(ws, IN_PROGRESS);
    const v = r.stdout.trim();
    return v === 'merge' || v === 'rebase' ? v : null;
  }

  async conflicts(ws: string): Promise<string[]> {
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
  async identityEnv(ws: string, authorName?: string, authorEmail?: string, required = true): Promise<{ env: Record<string, string>; author: Identity | null }> {
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
}
