/**
 * workspace_finalize: stage, preflight, commit and push as one step that leaves the workspace as
 * it was when any part fails (docs/git.md).
 */
import { ServiceError } from '../../core/errors.js';
import { FINALIZE_INDEX, MAX_OUT, NEUTRALISE, RUNNER_ENV, type GitRunner } from './runner.js';
import type { GitNetwork } from './network.js';
import { badRef, tail } from './parsers.js';

export class GitFinalize {
  constructor(
    private readonly run: GitRunner,
    private readonly network: GitNetwork,
  ) {}

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
  ) {
    if (args.branch) {
      const e = badRef('branch', args.branch);
      if (e) throw e;
    }
    if (!args.all && (!args.paths || args.paths.length === 0)) throw new ServiceError('INVALID_ARGUMENT', 'paths: give paths or all: true', { field: 'paths' });
    return this.run.locked(ws, async () => {
      const failed = (step: string, message: string, details: Record<string, unknown> = {}, code: 'FAILED_PRECONDITION' | 'CONFLICT' | 'NOT_FOUND' = 'FAILED_PRECONDITION') =>
        new ServiceError(code, `workspace_finalize failed at ${step}: ${message}; the workspace is as it was before the call`, { step, workspaceUnchanged: true, ...details });
      const progress = await this.run.inProgress(ws);
      if (progress) throw failed('check', `a ${progress} is in progress`, { inProgress: progress });
      const head = await this.run.head(ws);
      if (!head.oid) throw failed('check', 'the repository has no commit yet');
      const branch = args.branch ?? head.branch;
      if (args.push && !branch) throw failed('check', 'HEAD is detached: give branch');
      const { env, author } = await this.run.identityEnv(ws, args.authorName, args.authorEmail);
      // 1. stage into a temporary index and write the commit object (HEAD and the real index untouched).
      const idx = (await this.run.must(ws, 'git-path', ['rev-parse', '--git-path', FINALIZE_INDEX])).trim();
      const stageScript =
        `set -e; real="$(git rev-parse --git-path index)"; export GIT_INDEX_FILE="$IDX"; if [ -e "$real" ]; then cp "$real" "$GIT_INDEX_FILE"; else rm -f "$GIT_INDEX_FILE"; fi; ` +
        `${args.all ? 'git add -A -- .' : 'git add -A -- "$@"'}; tree=$(git write-tree); ` +
        `if [ "$tree" = "$(git rev-parse 'HEAD^{tree}')" ]; then echo @@NOTHING; exit 5; fi; ` +
        `git commit-tree "$tree" -p HEAD -F -`;
      const cleanup = () => this.run.git(ws, ['rev-parse', '--git-path', FINALIZE_INDEX]).then((p) => this.run.sh(ws, 'rm -f "$IDX"', { IDX: p.stdout.trim() })).catch(() => undefined);
      const staged = await this.run.deps.workspaces.exec(
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
        const result = await this.run.deps.workspaces.exec(ws, { command: record.command, cwd: record.cwd ?? '.', timeoutMs: record.timeoutMs, maxOutputBytes: 65536 }, undefined, signal);
        const rec = { name: record.name, exitCode: result.exitCode, timedOut: result.timedOut, durationMs: result.durationMs, stdoutTail: tail(result.stdout, 20), stderrTail: tail(result.stderr, 20) };
        preflights.push(rec);
        if (result.exitCode !== 0) {
          await cleanup();
          throw failed('preflight', `preflight ${record.name} ${result.timedOut ? 'timed out' : `exited with ${result.exitCode ?? result.signal}`}`, { preflight: rec, preflights });
        }
      }
      // Repository hooks (issue #19): a failing activated pre_commit hook stops here, before anything is pushed.
      const preCommit = await this.run.deps.hooks?.fire(ws, 'pre_commit', signal);
      if (preCommit?.failed) {
        await cleanup();
        throw failed('pre_commit', `${preCommit.message}; nothing was pushed`, { hooks: [preCommit], preflights });
      }
      // 3. push the commit object itself.
      let pushed: Record<string, unknown> | null = null;
      if (args.push) {
        try {
          pushed = await this.network.pushLocked(ws, { refspec: `${commitOid}:refs/heads/${branch}`, forceWithLease: false, expectedAbsent: false, delete: false }, signal);
        } catch (e) {
          await cleanup();
          const se = e instanceof ServiceError ? e : new ServiceError('INTERNAL', String(e));
          throw failed('push', se.message, { cause: { code: se.code, ...se.details }, preflights });
        }
      }
      // 4. move HEAD (only if it has not moved meanwhile) and adopt the staged index.
      const done = await this.run.sh(
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
      const files = await this.run.git(ws, ['diff-tree', '--no-commit-id', '--name-only', '-r', '-z', commitOid]);
      const postCommit = await this.run.deps.hooks?.fire(ws, 'post_commit', signal);
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
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type GitFinalizeFinalizeResult = Awaited<ReturnType<GitFinalize['finalize']>>;
