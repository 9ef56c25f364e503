/** Spec section "Files and code intelligence" (11 tools). */
import { defineTool } from './define.js';
import { CUR, IDEM, INT, PATH, SHA, int, name, str, z } from './types.js';

const domain = 'Files and code intelligence';

/** One entry of files_write_batch: the same fields files_write takes for a single file. */
const BATCH_FILE = z
  .object({
    path: PATH,
    content: z.string().max(1048576),
    expectedSha256: SHA.optional(),
  })
  .strict();

export const filesList = defineTool({
  name: 'files_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.list(ctx.workspace, a, ctx.signal),
  description: 'One directory\'s entries (name, type). By content: grep_search; definitions: symbols_search.',
  input: {
    path: PATH.default('.'),
    cursor: CUR.optional(),
    limit: int(1, 500).default(100),
  },
});

export const filesRead = defineTool({
  name: 'files_read',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.read(ctx.workspace, a, ctx.signal),
  description:
    'Read limit bytes from offset: content, size, sha256, nextCursor (same path) while more remains. readAll: up to 1048576 bytes; complete tells.',
  input: {
    path: PATH,
    offset: INT.default(0),
    limit: int(1, 1048576).default(65536),
    cursor: CUR.optional(),
    readAll: z.boolean().optional(),
  },
});

export const filesWrite = defineTool({
  name: 'files_write',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.write(ctx.workspace, a, ctx.signal),
  description:
    'Create or atomically replace a file (parents created). Small edits: files_apply_patch; many files: files_write_batch.',
  input: {
    path: PATH,
    content: z.string().max(1048576),
    expectedSha256: SHA.optional(),
  },
});

export const filesWriteBatch = defineTool({
  name: 'files_write_batch',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.writeBatch(ctx.workspace, a, ctx.signal),
  idempotency: 'key',
  description: 'Create or replace several files in one call; atomic: all are written or none.',
  input: {
    files: z.array(BATCH_FILE).min(1).max(1000),
    createParents: z.boolean().default(true),
    atomic: z.boolean().default(true),
    idempotencyKey: IDEM.optional(),
  },
});

export const filesApplyPatch = defineTool({
  name: 'files_apply_patch',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.applyPatch(ctx.workspace, a, ctx.signal),
  description:
    'Replace the single exact occurrence of oldText with newText; 0 or 2+ occurrences: FAILED_PRECONDITION (add context lines).',
  input: {
    path: PATH,
    oldText: z.string().max(262144),
    newText: z.string().max(262144),
    expectedSha256: SHA.optional(),
  },
});

export const filesDelete = defineTool({
  name: 'files_delete',
  domain,
  badges: ['destructive'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.delete(ctx.workspace, a, ctx.signal),
  description:
    'Delete a file, or a directory (non-empty needs recursive true). Recoverable only through git.',
  input: {
    path: PATH,
    recursive: z.boolean().default(false),
    expectedSha256: SHA.optional(),
  },
});

export const filesMove = defineTool({
  name: 'files_move',
  domain,
  badges: ['destructive'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.move(ctx.workspace, a, ctx.signal),
  description:
    'Move or rename a file or directory; an existing destination is a CONFLICT unless overwrite is true.',
  input: {
    source: PATH,
    destination: PATH,
    overwrite: z.boolean().default(false),
  },
});

export const filesMkdir = defineTool({
  name: 'files_mkdir',
  domain,
  badges: ['idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.mkdir(ctx.workspace, a, ctx.signal),
  description: 'Create a directory (recursive: parents too, existing is fine). Writes create parents themselves.',
  input: {
    path: PATH,
    recursive: z.boolean().default(true),
  },
});

export const grepSearch = defineTool({
  name: 'grep_search',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.grep(ctx.workspace, a, ctx.signal),
  description:
    'Regex search under path: file, line, text; truncated past maxResults. glob e.g. "**/*.ts". Definitions: symbols_search.',
  input: {
    pattern: str(1, 4096),
    path: PATH.default('.'),
    glob: z.string().max(512).optional(),
    maxResults: int(1, 500).default(100),
  },
});

export const symbolsSearch = defineTool({
  name: 'symbols_search',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.symbols(ctx.workspace, a, ctx.signal, ctx.progress),
  description:
    'Definitions (functions, classes, types...) whose name contains query, case-insensitive: file, line. The first call builds the index.',
  input: {
    query: str(1, 256),
    path: PATH.default('.'),
    language: name(1, 40, '+#').optional().describe('e.g. typescript, python'),
    maxResults: int(1, 500).default(100),
  },
});

export const symbolsReferences = defineTool({
  name: 'symbols_references',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.references(ctx.workspace, a, ctx.signal),
  description: 'Whole-word textual occurrences of symbol (not type-aware): file, line. Narrow with glob.',
  input: {
    symbol: str(1, 256),
    path: PATH.default('.'),
    glob: z.string().max(512).optional(),
    maxResults: int(1, 500).default(100),
  },
});

export const tools = [
  filesList,
  filesRead,
  filesWrite,
  filesWriteBatch,
  filesApplyPatch,
  filesDelete,
  filesMove,
  filesMkdir,
  grepSearch,
  symbolsSearch,
  symbolsReferences,
];
