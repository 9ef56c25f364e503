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
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/)
  .describe('Name for the artifact: a letter or digit, then up to 127 more of A-Z a-z 0-9 . _ -');

export const artifactsSnapshot = defineTool({
  name: 'artifacts_snapshot',
  domain,
  badges: [],
  tracking,
  workspace: 'optional',
  description:
    'Preserve one workspace file as an artifact you own, so it survives the workspace being closed or expiring (retention 60-2592000 s, i.e. up to 30 days). ' +
    'Get it back later with artifacts_read (base64 chunks) or artifacts_restore (into a workspace).',
  input: {
    path: PATH.describe('Workspace-relative path of the file to preserve'),
    logicalName: LOGICAL_NAME,
    retentionSeconds: int(60, 2592000).optional().describe('Seconds to keep the artifact (60-2592000)'),
  },
  run: (a, ctx) => ctx.services.artifacts.snapshot(ctx.owner, ctx.workspace, a, ctx.signal, ctx.progress),
});

export const artifactsList = defineTool({
  name: 'artifacts_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description: 'List your retained artifacts, up to 100 per page with cursors. Works without a workspace; read one with artifacts_read.',
  input: {
    cursor: CUR.optional(),
    limit: int(1, 100).default(50).describe('Page size (1-100)'),
  },
  run: (a, ctx) => ctx.services.artifacts.list(ctx.owner, a),
});

export const artifactsRead = defineTool({
  name: 'artifacts_read',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  description:
    'Read an artifact as a base64 chunk of up to 1048576 bytes from offset, with hash and end-of-file markers to verify the whole content; continue with a larger offset. Use artifacts_restore to put it back into a workspace file instead.',
  input: {
    artifactId: ARTID,
    offset: INT.default(0).describe('Byte offset to start reading at'),
    limit: int(1, 1048576).default(65536).describe('Bytes to read (1-1048576)'),
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
    'Write an artifact back into a workspace file at path. An existing file is replaced only with overwrite true; expectedSha256 additionally requires the existing file to still have that hash.',
  input: {
    artifactId: ARTID,
    path: PATH.describe('Workspace-relative path to write the artifact to'),
    overwrite: z.boolean().default(false).describe('Replace a file that already exists at path'),
    expectedSha256: SHA.optional().describe('SHA-256 the existing file at path must have (guards overwrite)'),
  },
  run: (a, ctx) => ctx.services.artifacts.restore(ctx.owner, ctx.workspace, a, ctx.signal, ctx.progress),
});

export const artifactsDelete = defineTool({
  name: 'artifacts_delete',
  domain,
  badges: ['destructive'],
  tracking,
  description: 'Delete a retained artifact permanently. expectedGeneration (default 1) must match its current generation, so a replaced artifact is not deleted by mistake.',
  input: {
    artifactId: ARTID,
    expectedGeneration: INT.default(1).describe('Current generation of the artifact'),
  },
  run: (a, ctx) => ctx.services.artifacts.delete(ctx.owner, a),
});

export const tools = [artifactsSnapshot, artifactsList, artifactsRead, artifactsRestore, artifactsDelete];
