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
  .regex(/^[^\u0000-\u001f\u007f]*$/)
  .describe('A label of your own for the checkpoint, at most 200 characters, no control characters');

export const checkpointCreate = defineTool({
  name: 'checkpoint_create',
  domain,
  badges: [],
  tracking,
  workspace: 'optional',
  idempotency: 'key',
  description:
    "Save the workspace's whole state (the checkout with uncommitted and untracked files and the git index, .git, home and tmp) as a checkpoint you own. " +
    'Commands keep running: the workspace is frozen only for the instant the copy needs (frozenMs in the result). ' +
    'Put it back with checkpoint_restore, or start a new workspace from it with workspace_fork. Retention 60-2592000 s (default 604800, 7 days); a quota of disk and count per owner (quota in the result). ' +
    'copyMode says how the copy was made: reflink (copy-on-write) or copy.',
  input: {
    idempotencyKey: IDEM,
    label: LABEL.optional(),
    retentionSeconds: int(60, 2592000).optional().describe('Seconds to keep the checkpoint (60-2592000; default 604800)'),
  },
  run: (a, ctx) => ctx.services.checkpoints.create(ctx.owner, ctx.workspace, a),
});

export const checkpointList = defineTool({
  name: 'checkpoint_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description: 'List your checkpoints, newest first, up to 100 per page with cursors; workspaceId narrows to one workspace (closed workspaces included). The result carries your quota use.',
  input: {
    workspaceId: WSID.optional().describe('Only the checkpoints of this workspace'),
    cursor: CUR.optional(),
    limit: int(1, 100).default(50).describe('Checkpoints per page (1-100, default 50)'),
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
    "Put a checkpoint back into the workspace it was taken of (give that workspaceId, or it is the active one): every process of the workspace is stopped first (shells, sessions and background commands end; processesStopped says whether any ran), then all its files are replaced by the checkpoint's, byte for byte, and its sandbox starts again. Work since the checkpoint is lost: checkpoint first if you may want it.",
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
  description: 'Delete a checkpoint and free its disk (freedBytes). Workspaces forked from it are independent copies and stay.',
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
    'Start a new workspace from a checkpoint (checkpointId) or from a live workspace (workspaceId, copied consistently now while its commands run): same repository, branch and files, with its own id, lease, limits and network profile, sharing nothing writable with its source. ' +
    'Your active workspace does not change. Typical use: fork once per subagent, then agent_spawn with the fork\'s workspaceId; their work comes back with workspace_recover (mode patch or export). copyMode says how the files were copied (reflink = copy-on-write, copy = a full copy).',
  input: {
    checkpointId: CKPTID.optional().describe('The checkpoint to start from (exactly one of checkpointId and workspaceId)'),
    workspaceId: WSID.optional().describe('The live workspace to copy now (exactly one of checkpointId and workspaceId)'),
    networkProfile: z.enum(['network-none', 'dependency-access']).optional().describe("The fork's network profile (default: its source's)"),
    idempotencyKey: IDEM,
  },
  check: (a) => ((a.checkpointId === undefined) === (a.workspaceId === undefined) ? { field: 'checkpointId', message: 'give exactly one of checkpointId and workspaceId' } : undefined),
  run: (a, ctx) => ctx.services.checkpoints.fork(ctx.owner, a),
});

export const tools = [checkpointCreate, checkpointList, checkpointRestore, checkpointDelete, workspaceFork];
