/** Spec section "Git and worktrees" (18 tools). */
import { defineTool } from './define.js';
import { CUR, EMAIL, IDEM, ISO_DATE_OR_DATETIME, OID, PATH, int, name, str, z } from './types.js';

const domain = 'Git and worktrees';
const tracking = '#6 git' as const;

const REF = str(1, 255);
const MESSAGE = str(1, 10000);
const AUTHOR_NAME = str(1, 200);
/** The spec allows only the origin remote. */
const ORIGIN = z.literal('origin').default('origin').describe('Remote to use; only "origin" is allowed');
const PATHS_MAX = 1000;

export const gitStatus = defineTool({
  name: 'git_status',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.status(ctx.workspace),
  description:
    'Working-tree status of the workspace repository: current branch, upstream ahead/behind, staged, unstaged and untracked files. ' +
    'Use it before git_add or git_commit; use git_diff to see the changes themselves.',
  input: {},
});

export const gitDiff = defineTool({
  name: 'git_diff',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.diff(ctx.workspace, a),
  description:
    'Unified diff of the working tree against the index (or, with staged true, of the index against HEAD), optionally limited to one path. ' +
    'Output is paged in chunks of limit characters with a continuation cursor; readAll returns the whole diff in one reply.',
  input: {
    staged: z.boolean().default(false).describe('true: diff the staged changes (index against HEAD) instead of the unstaged ones'),
    path: PATH.optional().describe('Limit the diff to this workspace-relative file or directory'),
    cursor: CUR.optional(),
    limit: int(1, 500000).default(65536).describe('Maximum size of one page of diff output (1-500000)'),
    readAll: z.boolean().optional().describe('true: return the whole diff at once instead of one page'),
  },
});

export const gitLog = defineTool({
  name: 'git_log',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.log(ctx.workspace, a),
  description:
    'Commit history of the current branch, newest first (object id, author, date, subject), a page of limit commits at a time with a cursor; readAll returns the whole history.',
  input: {
    limit: int(1, 500).default(20).describe('Commits per page (1-500)'),
    cursor: CUR.optional(),
    readAll: z.boolean().optional().describe('true: return every commit instead of one page'),
  },
});

export const gitBranch = defineTool({
  name: 'git_branch',
  domain,
  badges: ['destructive'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.branch(ctx.workspace, a),
  description:
    'List local branches, create a branch (from startPoint, default HEAD) without switching to it, or delete a branch (force deletes an unmerged one). ' +
    'To create and switch in one step use git_checkout with create true.',
  input: {
    action: z.enum(['list', 'create', 'delete']),
    name: REF.optional().describe('Branch name (required for create and delete)'),
    startPoint: REF.optional().describe('Commit, branch or tag the new branch starts at (create; default HEAD)'),
    force: z.boolean().default(false).describe('create: reset an existing branch; delete: delete even if not merged'),
  },
  check: (a) =>
    (a.action === 'create' || a.action === 'delete') && !a.name
      ? { field: 'name', message: `required when action is ${a.action}` }
      : undefined,
});

export const gitCheckout = defineTool({
  name: 'git_checkout',
  domain,
  badges: ['destructive'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.checkout(ctx.workspace, a),
  description:
    'Switch the working tree to a branch, tag or commit; with create true, create the branch ref at HEAD and switch to it. Uncommitted changes that conflict make it fail rather than be lost.',
  input: {
    ref: REF.describe('Branch, tag or commit to check out (the new branch name when create is true)'),
    create: z.boolean().default(false).describe('true: create branch ref and switch to it'),
  },
});

export const gitAdd = defineTool({
  name: 'git_add',
  domain,
  badges: ['idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.add(ctx.workspace, a),
  description:
    `Stage changes for the next commit: the listed paths (up to ${PATHS_MAX}), or every change including deletions and untracked files with all true. ` +
    'Give paths or all: true. workspace_finalize stages, commits and pushes in one call.',
  input: {
    all: z.boolean().default(false).describe('true: stage every change in the working tree'),
    paths: z.array(PATH).max(PATHS_MAX).default([]).describe(`Workspace-relative paths to stage (at most ${PATHS_MAX})`),
  },
  check: (a) => (!a.all && a.paths.length === 0 ? { field: 'paths', message: 'give paths or all: true' } : undefined),
});

export const gitCommit = defineTool({
  name: 'git_commit',
  domain,
  badges: [],
  tracking,
  workspace: 'optional',
  idempotency: 'key',
  run: (a, ctx) => ctx.services.git.commit(ctx.workspace, a),
  description:
    'Create an unsigned local commit of the staged changes (all true first stages every tracked change). Does not push: use git_push, or workspace_finalize for stage-commit-push in one step. ' +
    'expectedHeadOid refuses the commit if HEAD has moved; the author defaults to the workspace git identity (git_identity_status).',
  input: {
    message: MESSAGE.describe('Commit message (1-10000 characters)'),
    authorName: AUTHOR_NAME.optional().describe('Author name for this commit only (default: the workspace git identity)'),
    authorEmail: EMAIL.optional().describe('Author email for this commit only (default: the workspace git identity)'),
    all: z.boolean().default(false).describe('true: stage all modified and deleted tracked files before committing'),
    expectedHeadOid: OID.optional().describe('Commit only if HEAD is exactly this object id (compare-and-swap)'),
    idempotencyKey: str(1, 256).optional().describe('Free-form key (1-256 characters); a retry with the same key does not create a second commit'),
  },
});

export const gitIdentityStatus = defineTool({
  name: 'git_identity_status',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.identityStatus(ctx.workspace),
  description: 'The git author identity (name and email) commits in this workspace use, and whether one is configured. Change it with git_identity_set.',
  input: {},
});

export const gitIdentitySet = defineTool({
  name: 'git_identity_set',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.identitySet(ctx.workspace, a.name, a.email),
  description: 'Set the git author name and email used for later commits in this workspace (repository-local configuration). For a single commit, pass authorName and authorEmail to git_commit instead.',
  input: {
    name: AUTHOR_NAME.describe('Author name (1-200 characters)'),
    email: EMAIL.describe('Author email address'),
  },
});

const PREFLIGHT = z
  .object({
    commands: z
      .array(
        z.object({
          name: name(1, 80).describe('Short label for the check (1-80 characters of A-Za-z0-9._-)'),
          command: str(1, 32768).describe('Shell command to run; a non-zero exit aborts the finalize'),
          cwd: PATH.optional().describe('Workspace-relative working directory (default: the repository root)'),
          timeoutMs: int(100, 300000).default(60000).describe('Timeout in milliseconds (100-300000)'),
        }),
      )
      .max(20)
      .describe('Commands run in order after staging and before committing (at most 20)'),
  })
  .describe('Preflight checks (tests, linters) that must all pass before the commit is made');

export const workspaceFinalize = defineTool({
  name: 'workspace_finalize',
  domain,
  badges: ['destructive', 'idempotent', 'openWorld'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.finalize(ctx.workspace, a, ctx.signal),
  idempotency: 'key',
  description:
    'Finish a piece of work in one transaction: stage (all changes by default, or the listed paths), run the preflight commands, commit with commitMessage, and push to origin (to branch, default the current one) unless push is false. ' +
    'If a preflight fails, nothing is committed or pushed. The same idempotencyKey replays the first result.',
  input: {
    paths: z.array(PATH).max(PATHS_MAX).optional().describe(`Workspace-relative paths to stage (at most ${PATHS_MAX}); used when all is false`),
    all: z.boolean().default(true).describe('true: stage every change in the working tree'),
    commitMessage: MESSAGE.describe('Commit message (1-10000 characters)'),
    branch: REF.optional().describe('Branch to push to (default: the current branch)'),
    push: z.boolean().default(true).describe('false: commit locally without pushing'),
    authorName: AUTHOR_NAME.optional().describe('Author name for this commit (default: the workspace git identity)'),
    authorEmail: EMAIL.optional().describe('Author email for this commit (default: the workspace git identity)'),
    preflight: PREFLIGHT.optional(),
    idempotencyKey: IDEM.optional(),
  },
});

export const gitFetch = defineTool({
  name: 'git_fetch',
  domain,
  badges: ['openWorld'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.fetch(ctx.workspace, a, ctx.signal),
  description:
    'Fetch from origin through the credential broker without changing the working tree: optionally one refspec, deepen a shallow clone to depth commits, fetch history since a date, or unshallow to the full history. ' +
    'Give at most one of depth, shallowSince and unshallow. Use git_pull to also integrate the fetched branch.',
  input: {
    remote: ORIGIN,
    refspec: str(1, 255).optional().describe('Refspec to fetch (default: the remote\'s configured refspecs)'),
    depth: int(1, 100000).optional().describe('Limit (or deepen) history to this many commits from each tip'),
    unshallow: z.boolean().optional().describe('true: fetch the complete history of a shallow clone'),
    shallowSince: ISO_DATE_OR_DATETIME.optional().describe('Fetch history since this ISO date or datetime'),
  },
  check: (args) => {
    const given = [args.depth !== undefined && 'depth', args.shallowSince !== undefined && 'shallowSince', args.unshallow === true && 'unshallow'].filter(
      (x): x is string => typeof x === 'string',
    );
    return given.length > 1 ? { field: given[1], message: `give at most one of depth, shallowSince and unshallow (got ${given.join(', ')})` } : undefined;
  },
});

export const gitPull = defineTool({
  name: 'git_pull',
  domain,
  badges: ['destructive', 'openWorld'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.pull(ctx.workspace, a, ctx.signal),
  description:
    'Fetch a branch from origin (default: the current branch\'s upstream) and integrate it into the current branch: ff-only (default) fails instead of creating a merge, merge creates a merge commit, rebase replays local commits on top.',
  input: {
    remote: ORIGIN,
    branch: REF.optional().describe('Remote branch to pull (default: the upstream of the current branch)'),
    strategy: z.enum(['ff-only', 'merge', 'rebase']).default('ff-only'),
  },
});

export const gitPush = defineTool({
  name: 'git_push',
  domain,
  badges: ['destructive', 'openWorld'],
  tracking,
  workspace: 'optional',
  idempotency: 'key',
  run: (a, ctx) => ctx.services.git.push(ctx.workspace, a, ctx.signal),
  description:
    'Push to origin through the credential broker (default: the current branch to its upstream). For safe ref changes use leases: forceWithLease with expectedRemoteOid (compare-and-swap), ' +
    'forceWithLease with expectedAbsent (create only if the branch does not exist), or delete with forceWithLease and expectedRemoteOid (delete only if it still points there). ' +
    'Use these leases rather than repohost_action for ref creation, compare-and-swap and deletion.',
  input: {
    remote: ORIGIN,
    refspec: str(1, 512).optional().describe('Refspec to push, e.g. "HEAD:refs/heads/feature" (default: the current branch)'),
    forceWithLease: z.boolean().default(false).describe('true: allow a non-fast-forward update guarded by a lease (expectedRemoteOid or expectedAbsent)'),
    expectedRemoteOid: OID.optional().describe('Update (or delete) the remote branch only if it currently points at this object id'),
    expectedAbsent: z.boolean().default(false).describe('With forceWithLease: create the remote branch only if it does not exist yet'),
    delete: z.boolean().default(false).describe('Delete the remote branch named by refspec; needs forceWithLease and expectedRemoteOid'),
    idempotencyKey: str(1, 256).optional().describe('Free-form key (1-256 characters); a retry with the same key does not push twice'),
  },
  check: (args) => {
    if (args.expectedAbsent && !args.forceWithLease) return { field: 'expectedAbsent', message: 'only valid with forceWithLease: true' };
    if (args.expectedAbsent && args.expectedRemoteOid !== undefined)
      return { field: 'expectedAbsent', message: 'give expectedAbsent or expectedRemoteOid, not both' };
    if (args.delete && !args.forceWithLease) return { field: 'delete', message: 'requires forceWithLease: true' };
    if (args.delete && args.expectedRemoteOid === undefined) return { field: 'expectedRemoteOid', message: 'required when delete is true' };
    return undefined;
  },
});

export const gitMerge = defineTool({
  name: 'git_merge',
  domain,
  badges: ['destructive'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.merge(ctx.workspace, a),
  description:
    'Merge a branch, tag or commit into the current branch. fastForward: allow (default) fast-forwards when possible, only fails unless a fast-forward is possible, never always creates a merge commit (with message). Conflicts are reported and left for you to resolve.',
  input: {
    ref: REF.describe('Branch, tag or commit to merge'),
    fastForward: z.enum(['allow', 'only', 'never']).default('allow'),
    message: MESSAGE.optional().describe('Merge commit message (1-10000 characters)'),
  },
});

export const gitRebase = defineTool({
  name: 'git_rebase',
  domain,
  badges: ['destructive'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.rebase(ctx.workspace, a),
  description:
    'Rebase the current branch onto upstream (action start), then after resolving conflicts and staging with git_add continue it (continue), or give up and restore the branch (abort). Non-interactive.',
  input: {
    action: z.enum(['start', 'continue', 'abort']),
    upstream: REF.optional().describe('Branch or commit to rebase onto (required for start)'),
  },
  check: (a) => (a.action === 'start' && !a.upstream ? { field: 'upstream', message: 'required when action is start' } : undefined),
});

export const worktreesList = defineTool({
  name: 'worktrees_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.worktreesList(ctx.workspace),
  description: 'List the git worktrees of the workspace repository (name, path, checked-out branch or commit, dirty state).',
  input: {},
});

export const worktreesCreate = defineTool({
  name: 'worktrees_create',
  domain,
  badges: [],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.worktreesCreate(ctx.workspace, a),
  description:
    'Create an additional git worktree named name that checks out ref, so you can work on a second branch without disturbing the main checkout; createBranch true creates a new branch named ref.',
  input: {
    name: name(1, 80).describe('Worktree name (1-80 characters of A-Za-z0-9._-)'),
    ref: REF.describe('Branch, tag or commit to check out (the new branch name when createBranch is true)'),
    createBranch: z.boolean().default(false).describe('true: create a new branch named ref for the worktree'),
  },
});

export const worktreesRemove = defineTool({
  name: 'worktrees_remove',
  domain,
  badges: ['destructive'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.worktreesRemove(ctx.workspace, a),
  description: 'Remove a worktree created by worktrees_create. Refuses when the worktree has uncommitted changes unless force is true, which discards them.',
  input: {
    name: name(1, 80).describe('Worktree name as given to worktrees_create'),
    force: z.boolean().default(false).describe('true: remove even with uncommitted changes, discarding them'),
  },
});

export const tools = [
  gitStatus,
  gitDiff,
  gitLog,
  gitBranch,
  gitCheckout,
  gitAdd,
  gitCommit,
  gitIdentityStatus,
  gitIdentitySet,
  workspaceFinalize,
  gitFetch,
  gitPull,
  gitPush,
  gitMerge,
  gitRebase,
  worktreesList,
  worktreesCreate,
  worktreesRemove,
];
