/**
 * Code intelligence by meaning (issue #44): beyond the spec's 107 tools, in a domain and toolset of
 * their own (`code-intel`, alias `lsp`). Answered by the file's language server running inside the
 * workspace (src/services/code-intel/, src/sandbox/daemon/lsp/); see docs/code-intelligence.md.
 */
import { defineTool } from './define.js';
import { CUR, PATH, SHA, int, str, z } from './types.js';

export const CODE_INTEL_DOMAIN = 'Code intelligence by language servers (beyond the spec)';
const domain = CODE_INTEL_DOMAIN;
const tracking = '#44 code intelligence' as const;

const position = {
  path: PATH,
  line: int(1, 10_000_000).optional().describe('1-based'),
  column: int(1, 10_000_000).optional().describe('1-based, code points'),
  symbol: str(1, 256).optional().describe('Instead of column: a name in the file (on line if given)'),
};

const positionRule = (a: { line?: number; column?: number; symbol?: string }): { field: string; message: string } | undefined => {
  if (a.column !== undefined && a.symbol !== undefined) return { field: 'symbol', message: 'give either line and column, or symbol (with an optional line), not both' };
  if (a.column !== undefined && a.line === undefined) return { field: 'line', message: 'column needs line (both 1-based)' };
  if (a.column === undefined && a.symbol === undefined) return { field: 'symbol', message: 'give line and column (1-based), or symbol (a name in the file)' };
  return undefined;
};

const fallback = 'No server for the file: FAILED_PRECONDITION; use symbols_search/symbols_references.';

export const codeDefinition = defineTool({
  name: 'code_definition',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  description:
    'Where the name at a position is defined, per the language server. Locations: path, 1-based range, line text; outsideWorkspace for e.g. a standard library. ' +
    fallback,
  input: {
    ...position,
    kind: z.enum(['definition', 'declaration', 'typeDefinition', 'implementation']).default('definition'),
  },
  check: positionRule,
  run: (a, ctx) => ctx.services.codeIntel.definition(ctx.workspace, a, ctx.caller, ctx.signal),
});

export const codeReferences = defineTool({
  name: 'code_references',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  description:
    'Real references to the name at a position, per the language server (no comments or same-spelled text), with line text, paged by nextCursor. ' + fallback,
  input: {
    ...position,
    includeDeclaration: z.boolean().default(true),
    maxResults: int(1, 500).default(100),
    cursor: CUR.optional(),
  },
  check: positionRule,
  run: (a, ctx) => ctx.services.codeIntel.references(ctx.workspace, a, ctx.caller, ctx.signal),
});

export const codeHover = defineTool({
  name: 'code_hover',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  description: 'Type and docs (markdown) of the name at a position: the language server\'s hover. ' + fallback,
  input: position,
  check: positionRule,
  run: (a, ctx) => ctx.services.codeIntel.hover(ctx.workspace, a, ctx.caller, ctx.signal),
});

export const codeSymbols = defineTool({
  name: 'code_symbols',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  description:
    'path: the file\'s outline (nested, with depth and container). Or query: workspace symbols by the servers\' fuzzy name match ("" = all offered). ' + fallback,
  input: {
    path: PATH.optional(),
    query: z.string().max(256).optional(),
    server: z.enum(['typescript', 'python', 'clangd', 'gopls', 'bash']).optional().describe('With query: only this one'),
    maxResults: int(1, 1000).default(200),
  },
  check: (a) => (a.path === undefined && a.query === undefined ? { field: 'query', message: 'give path (a file\'s outline) or query (workspace symbols)' } : a.path !== undefined && a.query !== undefined ? { field: 'query', message: 'give path or query, not both' } : undefined),
  run: (a, ctx) => ctx.services.codeIntel.symbols(ctx.workspace, a, ctx.caller, ctx.signal),
});

export const codeDiagnostics = defineTool({
  name: 'code_diagnostics',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  description:
    'Compiler/checker diagnostics from the language servers for path, or the workspace (up to 100 files per server), tracking edits by commands too. waitMs waits for analysis; pending lists files not done (complete: false). ' + fallback,
  input: {
    path: PATH.optional(),
    minSeverity: z.enum(['error', 'warning', 'information', 'hint']).default('hint'),
    waitMs: int(0, 10_000).default(2000),
    maxResults: int(1, 2000).default(500),
  },
  run: (a, ctx) => ctx.services.codeIntel.diagnostics(ctx.workspace, a, ctx.caller, ctx.signal),
});

export const codeRename = defineTool({
  name: 'code_rename',
  domain,
  badges: [],
  tracking,
  workspace: 'optional',
  description:
    'Rename the symbol at a position, per the language server. apply false: preview, files [{path, sha256, diff}]. ' +
    'apply true with expectedSha256 (each previewed path to its sha256): writes all files or none.',
  input: {
    ...position,
    newName: str(1, 256),
    apply: z.boolean().default(false),
    expectedSha256: z.record(PATH, SHA).optional(),
  },
  check: (a) => positionRule(a) ?? (a.apply && !a.expectedSha256 ? { field: 'expectedSha256', message: 'required with apply: true (the sha256 of each file the preview listed)' } : undefined),
  run: (a, ctx) => ctx.services.codeIntel.rename(ctx.workspace, a, ctx.caller, ctx.signal),
});

export const codeServers = defineTool({
  name: 'code_servers',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  description:
    'The workspace\'s language servers: state, pid, memoryBytes (with children), open documents, restarts, last exit reason, runsNoRepositoryCode, idle stop time.',
  input: {},
  run: (_a, ctx) => ctx.services.codeIntel.status(ctx.workspace, ctx.caller, ctx.signal),
});

export const tools = [codeDefinition, codeReferences, codeHover, codeSymbols, codeDiagnostics, codeRename, codeServers];
