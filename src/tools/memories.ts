/** Spec section "Repository extensions": the memory notes (5 tools). */
import { defineTool } from './define.js';
import { CUR, INT, MEMID, int, name, str, z } from './types.js';

const domain = 'Repository extensions';
const tracking = 'repository extensions' as const;

/** Memory note names: A-Za-z0-9._- , 1-120 ("Other records"). */
const MEMORY_NAME = name(1, 120).describe('Memory note name: 1-120 characters of A-Z a-z 0-9 . _ -');
const MEMORY_SCOPE = z.enum(['owner', 'repository', 'workspace']);
/** Tag shape is not shown in the spec: we take 1-64 characters, at most 50 tags. */
const TAG = str(1, 64);
const TAGS = z.array(TAG).max(50);
const RETENTION = int(60, 31536000);

export const memoriesList = defineTool({
  name: 'memories_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'List memory notes (owner, repository or workspace scope) with name, tags and generation, a page at a time, optionally filtered by scope and tags. ' +
    'Use memories_search to find notes by text and memories_read for content. For project journals and linked notes use the knowledge store instead.',
  input: {
    scope: MEMORY_SCOPE.optional().describe('Only notes of this scope (default: all scopes visible from the workspace)'),
    tags: TAGS.optional().describe('Tag filter (at most 50, each 1-64 characters)'),
    limit: int(1, 100).default(50).describe('Page size (1-100)'),
    cursor: CUR.optional(),
  },
  run: (a, ctx) => ctx.services.memories.list(ctx.owner, ctx.workspaceIfAny, a),
});

export const memoriesRead = defineTool({
  name: 'memories_read',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description: 'Read one memory note (content, tags, generation) by memoryId, or by name within a scope. Give exactly one of memoryId and name.',
  input: {
    scope: MEMORY_SCOPE.optional().describe('Scope to look the name up in'),
    name: MEMORY_NAME.optional(),
    memoryId: MEMID.optional(),
  },
  check: (args) => {
    if (args.memoryId === undefined && args.name === undefined) return { field: 'memoryId', message: 'give memoryId or name' };
    if (args.memoryId !== undefined && args.name !== undefined) return { field: 'name', message: 'give memoryId or name, not both' };
    return undefined;
  },
  run: (a, ctx) => ctx.services.memories.read(ctx.owner, ctx.workspaceIfAny, a),
});

export const memoriesWrite = defineTool({
  name: 'memories_write',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Create or replace a named memory note (content up to 262144 characters, tags, optional retention of 60-31536000 s) in the owner, repository or workspace scope. ' +
    'expectedGeneration is a compare-and-swap: 0 (the default) creates a new note; to replace one pass its current generation from memories_read.',
  input: {
    scope: MEMORY_SCOPE.default('workspace'),
    name: MEMORY_NAME,
    content: z.string().max(262144).describe('Note text (at most 262144 characters)'),
    tags: TAGS.default([]).describe('Tags (at most 50, each 1-64 characters)'),
    retentionSeconds: RETENTION.optional().describe('Seconds to keep the note (60-31536000)'),
    expectedGeneration: INT.default(0).describe('Compare-and-swap: 0 creates; otherwise the note\'s current generation'),
    idempotencyKey: str(1, 256).optional().describe('Free-form key (1-256 characters) to make a retried write safe'),
  },
  idempotency: 'key',
  run: (a, ctx) => ctx.services.memories.write(ctx.owner, ctx.workspaceIfAny, a),
});

export const memoriesSearch = defineTool({
  name: 'memories_search',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Find memory notes containing a literal text (1-512 characters, no regex), optionally filtered by scope and tags (tagMatch all or any), up to 50 per page. ' +
    'For ranked semantic search across journals and notes use knowledge_search.',
  input: {
    query: str(1, 512).describe('Literal text to look for'),
    scope: MEMORY_SCOPE.optional(),
    tags: TAGS.optional().describe('Tag filter (at most 50, each 1-64 characters)'),
    tagMatch: z.enum(['all', 'any']).default('all').describe('all: notes with every tag; any: notes with at least one'),
    limit: int(1, 50).default(20).describe('Page size (1-50)'),
    cursor: CUR.optional(),
  },
  run: (a, ctx) => ctx.services.memories.search(ctx.owner, ctx.workspaceIfAny, a),
});

export const memoriesDelete = defineTool({
  name: 'memories_delete',
  domain,
  badges: ['destructive'],
  tracking,
  workspace: 'optional',
  workspaceLazy: true,
  description:
    'Delete one memory note by memoryId, or by name within a scope (give exactly one of them). ' +
    'expectedGeneration (default 1) must match the note\'s current generation, so a note changed since you read it is not deleted.',
  input: {
    memoryId: MEMID.optional(),
    name: MEMORY_NAME.optional(),
    scope: MEMORY_SCOPE.optional().describe('Scope to look the name up in'),
    expectedGeneration: INT.default(1).describe('Current generation of the note'),
  },
  check: (args) => {
    if (args.memoryId === undefined && args.name === undefined) return { field: 'memoryId', message: 'give memoryId or name' };
    if (args.memoryId !== undefined && args.name !== undefined) return { field: 'name', message: 'give memoryId or name, not both' };
    return undefined;
  },
  run: (a, ctx) => ctx.services.memories.delete(ctx.owner, ctx.workspaceIfAny, a),
});

export const tools = [memoriesList, memoriesRead, memoriesWrite, memoriesSearch, memoriesDelete];
