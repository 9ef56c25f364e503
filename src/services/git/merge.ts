/**
 * The steps of a merge and a rebase, shared by git_merge and git_rebase (local.ts) and by git_pull
 * (network.ts), which merges or rebases what it fetched.
 */
import { ServiceError } from '../../core/errors.js';
import type { GitRunner } from './runner.js';
import { tail } from './parsers.js';

export async function doMerge(run: GitRunner, ws: string, ref: string, ff: 'allow' | 'only' | 'never', message: string | undefined, before: string | null) {
  const v = await run.git(ws, ['rev-parse', '-q', '--verify', `${ref}^{commit}`]);
  if (v.exitCode !== 0) throw new ServiceError('NOT_FOUND', `ref: ${ref} is not a branch, tag or commit here (fetch it first?)`, { field: 'ref' });
  const { env } = await run.identityEnv(ws, undefined, undefined, ff === 'never');
  const args = ['merge', '--no-edit', '--no-verify', '--no-gpg-sign', ff === 'only' ? '--ff-only' : ff === 'never' ? '--no-ff' : '--ff', ...(message ? ['-m', message] : []), v.stdout.trim()];
  const result = await run.git(ws, args, { env });
  const now = await run.head(ws);
  if (result.exitCode === 0) {
    const parents = (await run.git(ws, ['show', '-s', '--format=%P', 'HEAD'])).stdout.trim().split(' ').filter(Boolean);
    const outcome = now.oid === before ? 'up-to-date' : parents.length > 1 ? 'merged' : 'fast-forward';
    return { outcome, previousHeadOid: before, headOid: now.oid, conflicts: [] };
  }
  if ((await run.inProgress(ws)) === 'merge') {
    return {
      outcome: 'conflicts',
      previousHeadOid: before,
      headOid: now.oid,
      conflicts: await run.conflicts(ws),
      next: 'resolve the files, git_add them and git_commit to finish the merge; or run `git merge --abort` with exec_run to give up',
    };
  }
  if (/Not possible to fast-forward/i.test(result.stderr)) throw new ServiceError('FAILED_PRECONDITION', `cannot fast-forward to ${ref}: the histories diverged`, { step: 'merge', diverged: true });
  if (/Committer identity unknown|empty ident|Please tell me who you are|auto-detection is disabled/i.test(result.stderr))
    throw new ServiceError('FAILED_PRECONDITION', 'no git identity for the merge commit; set one with git_identity_set', { step: 'merge' });
  if (/would be overwritten/.test(result.stderr)) throw new ServiceError('FAILED_PRECONDITION', `merge refused: uncommitted changes would be overwritten: ${tail(result.stderr, 4)}`, { step: 'merge' });
  throw run.fail('merge', result);
}

export async function doRebase(run: GitRunner, ws: string, action: 'start' | 'continue' | 'abort', upstream: string | undefined, before: string | null) {
  if (action === 'abort') {
    const r = await run.git(ws, ['rebase', '--abort']);
    if (r.exitCode !== 0) throw run.fail('rebase abort', r);
    const now = await run.head(ws);
    return { outcome: 'aborted', headOid: now.oid, branch: now.branch, conflicts: [] };
  }
  let args: string[];
  if (action === 'start') {
    const v = await run.git(ws, ['rev-parse', '-q', '--verify', `${upstream}^{commit}`]);
    if (v.exitCode !== 0) throw new ServiceError('NOT_FOUND', `upstream: ${upstream} is not a branch, tag or commit here (fetch it first?)`, { field: 'upstream' });
    args = ['rebase', '--no-verify', '--no-gpg-sign', v.stdout.trim()];
  } else args = ['rebase', '--continue'];
  const { env } = await run.identityEnv(ws, undefined, undefined, false);
  const result = await run.git(ws, args, { env: { ...env, GIT_EDITOR: 'true', GIT_SEQUENCE_EDITOR: 'true' } });
  const now = await run.head(ws);
  if (result.exitCode === 0) {
    return { outcome: now.oid === before && action === 'start' ? 'up-to-date' : 'rebased', previousHeadOid: before, headOid: now.oid, branch: now.branch, conflicts: [] };
  }
  if ((await run.inProgress(ws)) === 'rebase') {
    const conflicts = await run.conflicts(ws);
    if (conflicts.length === 0 && /Committer identity unknown|empty ident|Please tell me who you are|auto-detection is disabled/i.test(result.stderr))
      throw new ServiceError('FAILED_PRECONDITION', 'no git identity for the rebased commits; set one with git_identity_set, then continue', { step: 'rebase' });
    if (conflicts.length === 0 && action === 'continue') throw run.fail('rebase continue', result);
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
  throw run.fail(`rebase ${action}`, result);
}

/** What the steps above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type GitMergeStepResult = Awaited<ReturnType<typeof doMerge>>;
export type GitRebaseStepResult = Awaited<ReturnType<typeof doRebase>>;
