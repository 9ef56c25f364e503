/** Spec section "Retained artifacts" (5 tools): principal-owned file snapshots that outlive workspaces. */
import { defineTool } from './define.js';
import { ARTID, CUR, INT, PATH, SHA, int, z } from './types.js';

const domain = 'Retained artifacts';
const tracking = 'artifacts' as const;

/** Starts with a letter or digit, then up to 127 more of A-Za-z0-9._- */
const LOGICAL_NAME = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/);

export const artifactsSnapshot = defineTool({
  name: 'artifacts_snapshot',
  domain,
  badges: [],
  tracking,
  workspace: 'optional',
  description:
    'Keep one workspace file as an artifact you own beyond the workspace (retentionSeconds =2592000); a file over the size cap: FAILED_PRECONDITION.',
  input: {
    path: PATH,
    logicalName: LOGICAL_NAME,
    retentionSeconds: int(60, 2592000).optional(),
  },
  run: (a, ctx) => ctx.services.artifacts.snapshot(ctx.owner, ctx.workspace, a, ctx.signal, ctx.progress),
});

export const artifactsList = defineTool({
  name: 'artifacts_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description:
    'List your retained artifacts (no workspace needed).',
  input: {
    cursor: CUR.optional(),
    limit: int(1, 100).default(50),
  },
  run: (a, ctx) => ctx.services.artifacts.list(ctx.owner, a),
});

export const artifactsRead = defineTool({
  name: 'artifacts_read',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description:
    'Read an artifact as a base64 chunk from offset (bytes) with chunkSha256, sha256, eof, nextOffset. Into a workspace: artifacts_restore.',
  input: {
    artifactId: ARTID,
    offset: INT.default(0),
    limit: int(1, 1048576).default(65536),
  },
  run: (a, ctx) => ctx.services.artifacts.read(ctx.owner, a),
});

export const artifactsRestore = defineTool({
  name: 'artifacts_restore',
  domain,
  badges: ['destructive'],
  tracking,
  workspace: 'optional',
  description:
    'Write an artifact to a workspace file. An existing file is replaced only with overwrite (else CONFLICT); expectedSha256 guards it.',
  input: {
    artifactId: ARTID,
    path: PATH,
    overwrite: z.boolean().default(false),
    expectedSha256: SHA.optional(),
  },
  run: (a, ctx) => ctx.services.artifacts.restore(ctx.owner, ctx.workspace, a, ctx.signal, ctx.progress),
});

export const artifactsDelete = defineTool({
  name: 'artifacts_delete',
  domain,
  badges: ['destructive'],
  tracking,
  description:
    'Delete one of your retained artifacts permanently.',
  input: {
    artifactId: ARTID,
    expectedGeneration: INT.default(1),
  },
  run: (a, ctx) => ctx.services.artifacts.delete(ctx.owner, a),
});

export const tools = [artifactsSnapshot, artifactsList, artifactsRead, artifactsRestore, artifactsDelete];
