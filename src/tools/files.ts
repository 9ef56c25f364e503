/** Spec section "Files and code intelligence" (11 tools). */
import { defineTool } from './define.js';
import { CUR, IDEM, INT, PATH, SHA, int, name, str, z } from './types.js';

const domain = 'Files and code intelligence';

/** One entry of files_write_batch: the same fields files_write takes for a single file. */
const BATCH_FILE = z
  .object({
    path: PATH.describe('Workspace-relative path of the file to create or replace'),
    content: z.string().max(1048576).describe('Full new content of the file (at most 1048576 characters)'),
    expectedSha256: SHA.optional().describe('Current SHA-256 of the file; the write is refused when the file no longer has it'),
  })
  .strict();

export const filesList = defineTool({
  name: 'files_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.list(ctx.workspace, a, ctx.signal),
  description:
    'List the entries of one directory in the workspace (names and types), a page at a time with cursors. ' +
    'Use it to browse the tree; to find files by content use grep_search, to find definitions use symbols_search.',
  input: {
    path: PATH.default('.').describe('Workspace-relative directory to list (default: the workspace root)'),
    cursor: CUR.optional(),
    limit: int(1, 500).default(100).describe('Page size (1-500)'),
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
    'Read a byte range of a workspace file: returns the content, the file size, its SHA-256 and a continuation cursor when more remains. ' +
    'Reads at most limit bytes (up to 1048576) per call; follow the cursor, or set readAll, for the rest. Pass the returned SHA-256 as expectedSha256 to guarded writes.',
  input: {
    path: PATH.describe('Workspace-relative path of the file'),
    offset: INT.default(0).describe('Byte offset to start reading at'),
    limit: int(1, 1048576).default(65536).describe('Maximum bytes to return in this call (1-1048576)'),
    cursor: CUR.optional().describe('Continuation cursor from a previous files_read of the same file; continues where that read stopped'),
    readAll: z.boolean().optional().describe('Read the whole file rather than one byte range'),
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
    'Atomically create or replace one workspace file with the given content (at most 1048576 characters). ' +
    'Give expectedSha256 (from files_read) to refuse the write if the file changed meanwhile. For a small edit inside a large file prefer files_apply_patch; for several files use files_write_batch.',
  input: {
    path: PATH.describe('Workspace-relative path of the file to create or replace'),
    content: z.string().max(1048576).describe('Full new content of the file'),
    expectedSha256: SHA.optional().describe('Current SHA-256 of the file; the write is refused when the file no longer has it'),
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
  description:
    'Create or replace several workspace files in one call (1-1000 files, each at most 1048576 characters, each optionally guarded by expectedSha256). ' +
    'With atomic true (default) either every file is written or none is; createParents creates missing directories. The same idempotencyKey with the same input replays the first result.',
  input: {
    files: z.array(BATCH_FILE).min(1).max(1000).describe('Files to write (1-1000 entries)'),
    createParents: z.boolean().default(true).describe('Create missing parent directories'),
    atomic: z.boolean().default(true).describe('All-or-nothing: when true, a failure on any file leaves every file unchanged'),
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
    'Edit a workspace file by replacing one exact occurrence of oldText with newText; refused when oldText occurs zero times or more than once (add surrounding lines to make it unique). ' +
    'Each text is at most 262144 characters. Use files_write to replace a whole file.',
  input: {
    path: PATH.describe('Workspace-relative path of the file to edit'),
    oldText: z.string().max(262144).describe('Exact text to replace; must occur exactly once in the file'),
    newText: z.string().max(262144).describe('Replacement text'),
    expectedSha256: SHA.optional().describe('Current SHA-256 of the file; the edit is refused when the file no longer has it'),
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
    'Delete a workspace file, or a directory with recursive true. Give expectedSha256 to delete a file only if it still has that content. Deleted files are recoverable only through git.',
  input: {
    path: PATH.describe('Workspace-relative path of the file or directory to delete'),
    recursive: z.boolean().default(false).describe('Required to delete a non-empty directory and everything under it'),
    expectedSha256: SHA.optional().describe('Current SHA-256 of the file; the delete is refused when the file no longer has it'),
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
    'Move or rename a file or directory inside the workspace. Refused when the destination exists unless overwrite is true. Both paths are workspace-relative; to copy instead, read the file and write it under the new path.',
  input: {
    source: PATH.describe('Workspace-relative path to move'),
    destination: PATH.describe('Workspace-relative new path'),
    overwrite: z.boolean().default(false).describe('Replace an existing destination'),
  },
});

export const filesMkdir = defineTool({
  name: 'files_mkdir',
  domain,
  badges: ['idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.mkdir(ctx.workspace, a, ctx.signal),
  description:
    'Create a directory in the workspace; with recursive true (default) missing parents are created too and an existing directory is not an error. ' +
    'files_write and files_write_batch create parents themselves, so this is needed only for empty directories.',
  input: {
    path: PATH.describe('Workspace-relative path of the directory to create'),
    recursive: z.boolean().default(true).describe('Create missing parent directories'),
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
    'Search file contents under a workspace path with a regular expression and return matching lines with file and line number, at most maxResults (1-500) matches. ' +
    'Narrow with glob; to find where a symbol is defined prefer symbols_search, to find its uses prefer symbols_references.',
  input: {
    pattern: str(1, 4096).describe('Regular expression to search for'),
    path: PATH.default('.').describe('Workspace-relative file or directory to search under (default: the workspace root)'),
    glob: z.string().max(512).optional().describe('Only search files whose path matches this glob, e.g. "**/*.ts"'),
    maxResults: int(1, 500).default(100).describe('Maximum matches to return (1-500)'),
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
    'Find indexed symbol definitions (functions, classes, types and similar) whose name contains query, case-insensitively, under a workspace path; optionally only in one language. ' +
    'Returns at most maxResults (1-500) definitions with file and line. Use symbols_references for the places a symbol is used.',
  input: {
    query: str(1, 256).describe('Case-insensitive substring of the symbol name'),
    path: PATH.default('.').describe('Workspace-relative file or directory to search under (default: the workspace root)'),
    language: name(1, 40, '+#').optional().describe('Only definitions in this language, e.g. typescript, python, c++, c# (1-40 characters of A-Z a-z 0-9 _ + # . -)'),
    maxResults: int(1, 500).default(100).describe('Maximum definitions to return (1-500)'),
  },
});

export const symbolsReferences = defineTool({
  name: 'symbols_references',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#4 files',
  workspace: 'optional',
  run: (a, ctx) => ctx.services.files.references(ctx.workspace, a, ctx.signal),
  description:
    'Find whole-word text occurrences of a symbol name under a workspace path (a textual search, not type-aware: same-named symbols all match). ' +
    'Returns at most maxResults (1-500) occurrences with file and line; narrow with glob.',
  input: {
    symbol: str(1, 256).describe('Symbol name, matched as a whole word'),
    path: PATH.default('.').describe('Workspace-relative file or directory to search under (default: the workspace root)'),
    glob: z.string().max(512).optional().describe('Only search files whose path matches this glob, e.g. "src/**/*.py"'),
    maxResults: int(1, 500).default(100).describe('Maximum occurrences to return (1-500)'),
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
