/**
 * Beyond the spec's 107 tools (issue #33 items 1 and 2): workspace checkpoints and forks, toolset
 * "checkpoints". A checkpoint is the workspace's whole filesystem (checkout with uncommitted and
 * untracked files, .git, home, tmp), taken with its processes frozen; docs/checkpoints.md.
 */
import { defineTool } from './define.js';
import { CKPTID, CUR, IDEM, WSID, int, z } from './types.js';

const domain = 'Workspace checkpoints and forks (beyond the spec)';
const tracking = '#33 checkpoints and forks' as const;

const LABEL = z
  .string()
  .max(200)
  .regex(/^[^\u0000-\u001f\u007f]*$/);

export const checkpointCreate = defineTool({
  name: 'checkpoint_create',
  domain,
  badges: [],
  tracking,
  workspace: 'optional',
  idempotency: 'key',
  description:
    "Checkpoint the workspace's whole state: checkout (uncommitted, untracked, index), .git, home, tmp. " +
    'Commands keep running; frozen for frozenMs only. Use with checkpoint_restore or workspace_fork. Per-owner disk and count quota (quota in the result); copyMode reflink or copy.',
  input: {
    idempotencyKey: IDEM,
    label: LABEL.optional(),
    retentionSeconds: int(60, 2592000).optional().describe('Default 604800 (7 days)'),
  },
  run: (a, ctx) => ctx.services.checkpoints.create(ctx.owner, ctx.workspace, a),
});

export const checkpointList = defineTool({
  name: 'checkpoint_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description: 'Your checkpoints, newest first, and your quota use; workspaceId (closed ones too) narrows.',
  input: {
    workspaceId: WSID.optional(),
    cursor: CUR.optional(),
    limit: int(1, 100).default(50),
  },
  run: (a, ctx) => ctx.services.checkpoints.list(ctx.owner, a),
});

export const checkpointRestore = defineTool({
  name: 'checkpoint_restore',
  domain,
  badges: ['destructive'],
  tracking,
  workspace: 'optional',
  idempotency: 'key',
  description:
    "Put a checkpoint back into the workspace it was taken of: all its processes stop (shells, sessions, background commands; processesStopped), every file is replaced byte for byte, the sandbox restarts. Work since is lost.",
  input: {
    checkpointId: CKPTID,
    idempotencyKey: IDEM,
  },
  run: (a, ctx) => ctx.services.checkpoints.restore(ctx.owner, ctx.workspace, a),
});

export const checkpointDelete = defineTool({
  name: 'checkpoint_delete',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  description: 'Delete a checkpoint, freeing its disk (freedBytes). Workspaces forked from it stay.',
  input: {
    checkpointId: CKPTID,
  },
  run: (a, ctx) => ctx.services.checkpoints.delete(ctx.owner, a),
});

export const workspaceFork = defineTool({
  name: 'workspace_fork',
  domain,
  badges: [],
  tracking,
  idempotency: 'key',
  description:
    'New workspace from exactly one of checkpointId or workspaceId (a live one, copied consistently while it runs): same repository, branch, files; nothing writable shared. ' +
    'The active workspace stays. Typical: a fork per subagent (agent_spawn with its workspaceId), work back via workspace_recover. copyMode reflink or copy.',
  input: {
    checkpointId: CKPTID.optional(),
    workspaceId: WSID.optional(),
    networkProfile: z.enum(['network-none', 'dependency-access']).optional().describe("Default: the source's"),
    idempotencyKey: IDEM,
  },
  check: (a) => ((a.checkpointId === undefined) === (a.workspaceId === undefined) ? { field: 'checkpointId', message: 'give exactly one of checkpointId and workspaceId' } : undefined),
  run: (a, ctx) => ctx.services.checkpoints.fork(ctx.owner, a),
});

export const tools = [checkpointCreate, checkpointList, checkpointRestore, checkpointDelete, workspaceFork];
