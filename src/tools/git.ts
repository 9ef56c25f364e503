/** Spec section "Git and worktrees" (18 tools). */
import { defineTool } from './define.js';
import { CUR, EMAIL, IDEM, ISO_DATE_OR_DATETIME, OID, PATH, int, name, str, z } from './types.js';

const domain = 'Git and worktrees';
const tracking = '#6 git' as const;

const REF = str(1, 255);
const MESSAGE = str(1, 10000);
const AUTHOR_NAME = str(1, 200);
/** The spec allows only the origin remote. */
const ORIGIN = z.literal('origin').default('origin');
const PATHS_MAX = 1000;

export const gitStatus = defineTool({
  name: 'git_status',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.status(ctx.workspace),
  description: 'Branch, upstream ahead/behind, staged, unstaged and untracked files. Changes themselves: git_diff.',
  input: {},
});

export const gitDiff = defineTool({
  name: 'git_diff',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.diff(ctx.workspace, a),
  description: 'Unified diff, working tree vs index (staged: index vs HEAD), optionally one path; pages of limit characters.',
  input: {
    staged: z.boolean().default(false),
    path: PATH.optional(),
    cursor: CUR.optional(),
    limit: int(1, 500000).default(65536),
    readAll: z.boolean().optional(),
  },
});

export const gitLog = defineTool({
  name: 'git_log',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.log(ctx.workspace, a),
  description: 'Current branch\'s commits, newest first: oid, author, date, subject.',
  input: {
    limit: int(1, 500).default(20),
    cursor: CUR.optional(),
    readAll: z.boolean().optional(),
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
    'List local branches, create name at startPoint (default HEAD) without switching, or delete it. force: reset an existing / delete an unmerged one. Create and switch: git_checkout.',
  input: {
    action: z.enum(['list', 'create', 'delete']),
    name: REF.optional(),
    startPoint: REF.optional(),
    force: z.boolean().default(false),
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
    'Switch to a branch, tag or commit (create: a new branch at HEAD). Would overwrite uncommitted changes: FAILED_PRECONDITION.',
  input: {
    ref: REF,
    create: z.boolean().default(false),
  },
});

export const gitAdd = defineTool({
  name: 'git_add',
  domain,
  badges: ['idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.add(ctx.workspace, a),
  description: 'Stage paths, or all true: every change incl. deletions and untracked. All in one: workspace_finalize.',
  input: {
    all: z.boolean().default(false),
    paths: z.array(PATH).max(PATHS_MAX).default([]),
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
    'Commit staged changes locally, unsigned (all: stage tracked changes first); push: git_push. Author: workspace identity unless given. HEAD not at expectedHeadOid: CONFLICT.',
  input: {
    message: MESSAGE,
    authorName: AUTHOR_NAME.optional(),
    authorEmail: EMAIL.optional(),
    all: z.boolean().default(false),
    expectedHeadOid: OID.optional(),
    idempotencyKey: str(1, 256).optional(),
  },
});

export const gitIdentityStatus = defineTool({
  name: 'git_identity_status',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.identityStatus(ctx.workspace),
  description: 'The author name and email commits here use, and whether one is set. Change: git_identity_set.',
  input: {},
});

export const gitIdentitySet = defineTool({
  name: 'git_identity_set',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.identitySet(ctx.workspace, a.name, a.email),
  description: 'Set the author of later commits here (repository config). For one commit: git_commit authorName/authorEmail.',
  input: {
    name: AUTHOR_NAME,
    email: EMAIL,
  },
});

const PREFLIGHT = z
  .object({
    commands: z
      .array(
        z.object({
          name: name(1, 80),
          command: str(1, 32768),
          cwd: PATH.optional(),
          timeoutMs: int(100, 300000).default(60000),
        }),
      )
      .max(20),
  });

export const workspaceFinalize = defineTool({
  name: 'workspace_finalize',
  domain,
  badges: ['destructive', 'idempotent', 'openWorld'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.finalize(ctx.workspace, a, ctx.signal),
  idempotency: 'key',
  description:
    'Stage (all, or paths if all is false), run the preflight commands in order, commit, push to origin branch (default: current) unless push is false. A failing preflight commits and pushes nothing.',
  input: {
    paths: z.array(PATH).max(PATHS_MAX).optional(),
    all: z.boolean().default(true),
    commitMessage: MESSAGE,
    branch: REF.optional(),
    push: z.boolean().default(true),
    authorName: AUTHOR_NAME.optional(),
    authorEmail: EMAIL.optional(),
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
    'Fetch from origin; working tree unchanged. depth, shallowSince, unshallow (full history): at most one. Integrate: git_pull.',
  input: {
    remote: ORIGIN,
    refspec: str(1, 255).optional(),
    depth: int(1, 100000).optional(),
    unshallow: z.boolean().optional(),
    shallowSince: ISO_DATE_OR_DATETIME.optional(),
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
    'Pull branch (default: upstream) from origin into the current branch. ff-only: FAILED_PRECONDITION if diverged; merge: a merge commit; rebase: replay local commits.',
  input: {
    remote: ORIGIN,
    branch: REF.optional(),
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
    'Push to origin (default: current branch to its upstream); non-fast-forward: FAILED_PRECONDITION. Leases, not repohost_action: forceWithLease + expectedRemoteOid (compare-and-swap) or + expectedAbsent (create only); delete needs forceWithLease and expectedRemoteOid. Failed lease: CONFLICT.',
  input: {
    remote: ORIGIN,
    refspec: str(1, 512).optional().describe('e.g. HEAD:refs/heads/feature'),
    forceWithLease: z.boolean().default(false),
    expectedRemoteOid: OID.optional(),
    expectedAbsent: z.boolean().default(false),
    delete: z.boolean().default(false),
    idempotencyKey: str(1, 256).optional(),
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
    'Merge a branch, tag or commit into the current branch. fastForward only: fail unless it fast-forwards; never: always a merge commit. Conflicts are left to resolve.',
  input: {
    ref: REF,
    fastForward: z.enum(['allow', 'only', 'never']).default('allow'),
    message: MESSAGE.optional(),
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
    'Non-interactive rebase: start onto upstream; after resolving conflicts and git_add, continue; abort restores the branch.',
  input: {
    action: z.enum(['start', 'continue', 'abort']),
    upstream: REF.optional(),
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
  description: 'The repository\'s git worktrees: name, path, branch or commit, dirty state.',
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
    'Add a worktree of ref (createBranch: a new branch ref) beside the main checkout; returns its workspace-relative path.',
  input: {
    name: name(1, 80),
    ref: REF,
    createBranch: z.boolean().default(false),
  },
});

export const worktreesRemove = defineTool({
  name: 'worktrees_remove',
  domain,
  badges: ['destructive'],
  tracking,
  workspace: 'optional',
  run: (a, ctx) => ctx.services.git.worktreesRemove(ctx.workspace, a),
  description: 'Remove a worktree; uncommitted changes refuse it unless force is true (discards them).',
  input: {
    name: name(1, 80),
    force: z.boolean().default(false),
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
