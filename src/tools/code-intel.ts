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
  path: PATH.describe('Workspace-relative file (TypeScript/JavaScript, Python, C/C++, Go)'),
  line: int(1, 10_000_000).optional().describe('1-based line, as an editor shows it; with column, or with symbol to choose among several'),
  column: int(1, 10_000_000).optional().describe('1-based column counting Unicode code points (a tab or an emoji is one column); needs line'),
  symbol: str(1, 256).optional().describe('A name in the file instead of line and column: its declaration there, else its first whole-word occurrence (on line when given)'),
};

const positionRule = (a: { line?: number; column?: number; symbol?: string }): { field: string; message: string } | undefined => {
  if (a.column !== undefined && a.symbol !== undefined) return { field: 'symbol', message: 'give either line and column, or symbol (with an optional line), not both' };
  if (a.column !== undefined && a.line === undefined) return { field: 'line', message: 'column needs line (both 1-based)' };
  if (a.column === undefined && a.symbol === undefined) return { field: 'symbol', message: 'give line and column (1-based), or symbol (a name in the file)' };
  return undefined;
};

const fallback = 'When no language server can serve the file the call fails with FAILED_PRECONDITION saying which server would and why it is not there (not installed, disabled, crashed); symbols_search and symbols_references still answer.';

export const codeDefinition = defineTool({
  name: 'code_definition',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking,
  workspace: 'optional',
  description:
    'Where the name at a position is defined, answered by the language server (not a text match). Give path with line and column, or path with symbol. ' +
    'kind asks for the declaration, type definition or implementation instead. Each location has path, a 1-based range and the line\'s text; one outside the workspace (a standard library, Atelier\'s bundled TypeScript lib) is marked outsideWorkspace. ' +
    fallback,
  input: {
    ...position,
    kind: z.enum(['definition', 'declaration', 'typeDefinition', 'implementation']).default('definition').describe('What to find (default definition)'),
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
    'Every place that really refers to the name at a position (not same-spelled text: comments and other symbols are left out), answered by the language server, a page of maxResults at a time with nextCursor. ' +
    'Locations come ordered by path, line and column, each with the line\'s text. ' + fallback,
  input: {
    ...position,
    includeDeclaration: z.boolean().default(true).describe('Include the declaration itself (default true)'),
    maxResults: int(1, 500).default(100).describe('Locations per page (1-500)'),
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
  description: 'The type and documentation of the name at a position, as the language server shows it on hover (markdown). ' + fallback,
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
    'With path: the file\'s outline (classes, functions, methods, variables, nested with depth and container). With query: the workspace\'s symbols whose name matches, from the language servers (the running ones, or those whose files the checkout has; server picks one). ' +
    'Give path or query. ' + fallback,
  input: {
    path: PATH.optional().describe('A file: its outline'),
    query: z.string().max(256).optional().describe('Workspace symbols matching this (the server\'s fuzzy match; "" lists what the server offers)'),
    server: z.enum(['typescript', 'python', 'clangd', 'gopls', 'bash']).optional().describe('With query: ask this server only'),
    maxResults: int(1, 1000).default(200).describe('Symbols returned at most (1-1000)'),
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
    'What the compiler or checker says is wrong, from the language servers: for one file (path), or for the workspace (no path: up to 100 files per server are opened). ' +
    'Diagnostics follow edits made through Atelier\'s tools and by commands (git checkout, sed -i). waitMs (0-10000) waits for a server still analysing; pending lists files not analysed yet (complete: false). minSeverity filters. ' + fallback,
  input: {
    path: PATH.optional().describe('One file; omit for the workspace'),
    minSeverity: z.enum(['error', 'warning', 'information', 'hint']).default('hint').describe('Least severe level returned (default hint: everything)'),
    waitMs: int(0, 10_000).default(2000).describe('How long to wait for analysis, ms (0-10000)'),
    maxResults: int(1, 2000).default(500).describe('Diagnostics returned at most (1-2000)'),
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
    'Rename the symbol at a position everywhere the language server finds it, and nothing else. apply: false (the default) changes nothing and returns files: one { path, sha256, diff } per file it would change (its current SHA-256 and a unified diff). ' +
    'apply: true with expectedSha256 (each of those paths to the sha256 the preview gave) writes every file atomically or none, refused with CONFLICT naming the file when one changed since.',
  input: {
    ...position,
    newName: str(1, 256).describe('The new name'),
    apply: z.boolean().default(false).describe('Write the edits (default false: preview only)'),
    expectedSha256: z.record(PATH, SHA).optional().describe('With apply: true, each path of the preview to its sha256'),
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
    'The workspace\'s language servers: each one\'s state (running, stopped, crashed, disabled, not_installed), pid, resident memory of a running one (memoryBytes: its processes and their children), open documents, restarts and the reason of its last exit, whether it runs no repository code, and the idle time after which a running one stops.',
  input: {},
  run: (_a, ctx) => ctx.services.codeIntel.status(ctx.workspace, ctx.caller, ctx.signal),
});

export const tools = [codeDefinition, codeReferences, codeHover, codeSymbols, codeDiagnostics, codeRename, codeServers];
