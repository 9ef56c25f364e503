/** Spec section "Repository extensions": the memory notes (5 tools). */
import { defineTool } from './define.js';
import { CUR, INT, MEMID, int, name, str, z } from './types.js';

const domain = 'Repository extensions';
const tracking = 'repository extensions' as const;

/** Memory note names: A-Za-z0-9._- , 1-120 ("Other records"). */
const MEMORY_NAME = name(1, 120);
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
    'List memory notes (name, tags, generation); find by text with memories_search.',
  input: {
    scope: MEMORY_SCOPE.optional(),
    tags: TAGS.optional(),
    limit: int(1, 100).default(50),
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
  description:
    'Read a memory note by memoryId or by name (exactly one); a name without scope: the narrowest scope holding it.',
  input: {
    scope: MEMORY_SCOPE.optional(),
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
    'Create or replace a named note. Scopes: owner (all workspaces), repository (its workspaces), workspace. expectedGeneration 0 creates (existing name: CONFLICT).',
  input: {
    scope: MEMORY_SCOPE.default('workspace'),
    name: MEMORY_NAME,
    content: z.string().max(262144),
    tags: TAGS.default([]),
    retentionSeconds: RETENTION.optional(),
    expectedGeneration: INT.default(0),
    idempotencyKey: str(1, 256).optional(),
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
    'Find notes whose name, tags or content contain query (literal, case-insensitive). Semantic search: knowledge_search.',
  input: {
    query: str(1, 512),
    scope: MEMORY_SCOPE.optional(),
    tags: TAGS.optional(),
    tagMatch: z.enum(['all', 'any']).default('all'),
    limit: int(1, 50).default(20),
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
    'Delete a memory note for good, by memoryId or by name (exactly one).',
  input: {
    memoryId: MEMID.optional(),
    name: MEMORY_NAME.optional(),
    scope: MEMORY_SCOPE.optional(),
    expectedGeneration: INT.default(1),
  },
  check: (args) => {
    if (args.memoryId === undefined && args.name === undefined) return { field: 'memoryId', message: 'give memoryId or name' };
    if (args.memoryId !== undefined && args.name !== undefined) return { field: 'name', message: 'give memoryId or name, not both' };
    return undefined;
  },
  run: (a, ctx) => ctx.services.memories.delete(ctx.owner, ctx.workspaceIfAny, a),
});

export const tools = [memoriesList, memoriesRead, memoriesWrite, memoriesSearch, memoriesDelete];
