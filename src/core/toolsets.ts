/**
 * Toolsets: the tools grouped by the spec's domains under names a user would guess, plus presets
 * (e.g. "code" = workspace, files, commands, git). An access grant (a bearer token, an OAuth grant,
 * and per connection the X-MCP-Toolsets / X-MCP-Readonly headers) can only narrow what a caller
 * sees and calls; the default is everything. Read-only exposes only tools badged readOnly, and the
 * registry enforces it on every call (a read-only caller naming a destructive tool is refused).
 */
import { ServiceError } from './errors.js';

/** What access control reads of a tool definition (src/tools/define.ts): its name, domain and badges. */
export interface ToolFacts {
  name: string;
  domain: string;
  badges: readonly string[];
}

/** Toolset name → the spec domain (src/tools/define.ts `domain`) it covers. */
export const TOOLSETS: Record<string, string> = {
  workspace: 'Workspace lifecycle',
  files: 'Files and code intelligence',
  commands: 'Commands and shells',
  packages: 'Managed packages',
  sessions: 'Sessions and tasks',
  git: 'Git and worktrees',
  repohost: 'Repository-host operations',
  extensions: 'Repository extensions',
  knowledge: 'Knowledge store',
  artifacts: 'Retained artifacts',
  models: 'Models and spend tools',
  agents: 'Coding subagents',
  // Beyond the spec's 107 tools (issue #33): docs/checkpoints.md.
  checkpoints: 'Workspace checkpoints and forks (beyond the spec)',
  // Beyond the spec (issue #33).
  previews: 'Preview URLs (beyond the spec)',
  // Beyond the spec (issue #44): docs/code-intelligence.md.
  'code-intel': 'Code intelligence by language servers (beyond the spec)',
  // Beyond the spec (issue #45 item 2): the dynamic mode's discovery tools; docs/access.md "Dynamic toolsets".
  discovery: 'Tool discovery (beyond the spec)',
};

/** The toolset of the discovery tools: always granted (they show only what the caller's access allows). */
export const DISCOVERY_TOOLSET = 'discovery';

/** The toolsets a dynamic-mode session starts in (besides the discovery tools): docs/access.md "Dynamic toolsets". */
export const CORE_TOOLSETS: readonly string[] = ['workspace', 'files', 'commands', 'git'];

/**
 * The tools of the core toolsets a dynamic-mode session starts with: what an agent needs in its
 * first minutes (open and orient, read and edit, run, commit and push). The core toolsets' other
 * tools (shells, worktrees, merge and rebase, identity, lease renewal, …) are one toolsets_enable
 * away like every other toolset's. Issue #45's goal: the starting list at most 6,000 tokens.
 */
export const CORE_TOOLS: ReadonlySet<string> = new Set([
  'workspace_open', 'workspace_list', 'workspace_status', 'workspace_context', 'workspace_set_active', 'workspace_close',
  'files_list', 'files_read', 'files_write', 'files_write_batch', 'files_apply_patch', 'files_delete', 'files_move', 'grep_search', 'symbols_search',
  'exec_run', 'bash', 'operation_status', 'operation_wait',
  'git_status', 'git_diff', 'git_log', 'git_branch', 'git_checkout', 'git_add', 'git_commit', 'git_push', 'git_pull',
]);

/** One line per toolset: what toolsets_list shows and toolsets_enable's description names. */
export const TOOLSET_SUMMARIES: Record<string, string> = {
  workspace: 'open, list, renew and close workspaces; secrets names',
  files: 'read, write, patch, move files; grep and symbol search',
  commands: 'run commands, shells, background operations',
  packages: 'plan, apply and roll back managed packages',
  sessions: 'interactive sessions and task graphs in a workspace',
  git: 'status, diff, commit, branches, push, pull, worktrees',
  repohost: 'pull requests, issues, CI: the repository host\'s API',
  extensions: 'skills, hooks, memories, deployments',
  knowledge: 'knowledge notes: create, search, link, graph',
  artifacts: 'snapshots of files kept beyond a workspace',
  models: 'model profiles, connection checks, spend',
  agents: 'spawn and steer coding subagents',
  checkpoints: 'checkpoints, restores and forks of a workspace',
  previews: 'preview URLs to a workspace port',
  'code-intel': 'language-server definitions, references, diagnostics, rename',
  discovery: 'list and enable toolsets (dynamic mode)',
};

/** Other names a user would guess for the same toolsets. */
export const TOOLSET_ALIASES: Record<string, string> = {
  workspaces: 'workspace',
  file: 'files',
  exec: 'commands',
  shell: 'commands',
  tasks: 'sessions',
  github: 'repohost',
  skills: 'extensions',
  memories: 'extensions',
  spend: 'models',
  subagents: 'agents',
  checkpoint: 'checkpoints',
  forks: 'checkpoints',
  snapshots: 'checkpoints',
  preview: 'previews',
  lsp: 'code-intel',
  codeintel: 'code-intel',
  'language-servers': 'code-intel',
};

/** Presets: names for common selections (which fits which client's tool cap: docs/clients.md "Tool caps"). */
export const PRESETS: Record<string, string[]> = {
  all: Object.keys(TOOLSETS),
  code: ['workspace', 'files', 'commands', 'git'],
  // Fits a client that sends at most 40 tools (Cursor; docs/clients.md "Tool caps"): 29 tools.
  lean: ['workspace', 'files', 'commands'],
  dev: ['workspace', 'files', 'commands', 'git', 'packages', 'sessions', 'repohost', 'extensions'],
  research: ['workspace', 'files', 'knowledge', 'extensions'],
  delegate: ['workspace', 'agents', 'models'],
};

/** What a caller may see and call. `toolsets` null means every toolset. */
export interface Access {
  toolsets: string[] | null;
  readOnly: boolean;
}

export const FULL_ACCESS: Access = { toolsets: null, readOnly: false };

const MAX_NAMES = 40;

/**
 * Parses a comma (or space) separated list of toolset, alias and preset names into the sorted set
 * of toolsets. Empty input is null (everything). Unknown names are refused naming the field.
 */
export function parseToolsets(input: string | string[] | undefined | null, field = 'toolsets'): string[] | null {
  if (input === undefined || input === null) return null;
  const names = (Array.isArray(input) ? input : input.split(/[\s,]+/)).map((s) => s.trim().toLowerCase()).filter(Boolean);
  if (names.length === 0) return null;
  if (names.length > MAX_NAMES) throw new ServiceError('INVALID_ARGUMENT', `${field}: at most ${MAX_NAMES} names`, { field });
  const out = new Set<string>();
  for (const n of names) {
    if (n.length > 40) throw new ServiceError('INVALID_ARGUMENT', `${field}: name too long (at most 40 characters)`, { field, rule: 'at most 40 characters' });
    if (PRESETS[n]) {
      PRESETS[n]!.forEach((t) => out.add(t));
      continue;
    }
    const t = n in TOOLSETS ? n : TOOLSET_ALIASES[n];
    if (!t)
      throw new ServiceError(
        'INVALID_ARGUMENT',
        `${field}: unknown toolset ${JSON.stringify(n)}; toolsets: ${Object.keys(TOOLSETS).join(', ')}; presets: ${Object.keys(PRESETS).join(', ')}`,
        { field, rule: 'known toolset or preset' },
      );
    out.add(t);
  }
  // The discovery toolset is always granted, so naming every other toolset is everything too.
  if (Object.keys(TOOLSETS).every((t) => t === DISCOVERY_TOOLSET || out.has(t))) return null;
  return [...out].sort();
}

/** Parses an X-MCP-Dynamic-Toolsets-like boolean header: true/1/yes, false/0/no; absent (or empty) is undefined. */
export function parseBooleanHeader(v: string | string[] | undefined, field: string): boolean | undefined {
  if (v === undefined) return undefined;
  const s = (Array.isArray(v) ? v[0] ?? '' : v).trim().toLowerCase();
  if (s === '') return undefined;
  if (s === 'false' || s === '0' || s === 'no') return false;
  if (s === 'true' || s === '1' || s === 'yes') return true;
  throw new ServiceError('INVALID_ARGUMENT', `${field}: must be true or false`, { field, rule: 'true or false' });
}

/**
 * What a tool handler sees of the dynamic mode of its connection (src/mcp/dynamic-toolsets.ts):
 * absent outside MCP. `mode` is 'dynamic' (the list follows what is enabled), 'static' (asked for,
 * but list changes cannot reach this client: it gets the static list; `reason` says why) or 'off'.
 */
export interface ToolsetSession {
  readonly mode: 'dynamic' | 'static' | 'off';
  readonly reason?: string;
  /** The toolsets the caller's access allows (the discovery toolset aside), each with the tools of it the caller may call. */
  available(): Array<{ toolset: string; tools: string[] }>;
  /** The toolsets enabled beyond the core, sorted. */
  enabled(): string[];
  /** Enables toolsets (already checked against the caller's access) and sends the list change; returns the newly enabled ones. */
  enable(toolsets: string[]): Promise<{ added: string[]; notified: boolean }>;
}

/** Parses X-MCP-Readonly: true/1/yes or false/0/no (absent or empty: false). */
export function parseReadonlyHeader(v: string | string[] | undefined): boolean {
  return parseBooleanHeader(v, 'X-MCP-Readonly') ?? false;
}

/** Narrowing only: the intersection of two grants (null = everything). */
export function intersect(a: Access, b: Access): Access {
  let toolsets: string[] | null;
  if (a.toolsets === null) toolsets = b.toolsets;
  else if (b.toolsets === null) toolsets = a.toolsets;
  else toolsets = a.toolsets.filter((t) => b.toolsets!.includes(t));
  return { toolsets, readOnly: a.readOnly || b.readOnly };
}

export function toolsetOf(def: Pick<ToolFacts, 'domain'>): string | undefined {
  return Object.keys(TOOLSETS).find((k) => TOOLSETS[k] === def.domain);
}

/** Why `access` does not allow `def`, or null when it does. */
export function accessProblem(access: Access, def: ToolFacts): string | null {
  if (access.readOnly && !def.badges.includes('readOnly'))
    return `${def.name} changes state and this connection is read-only (token, OAuth grant or X-MCP-Readonly); use a token without --read-only`;
  if (access.toolsets !== null) {
    const ts = toolsetOf(def);
    if (ts === DISCOVERY_TOOLSET) return null;
    if (!ts || !access.toolsets.includes(ts))
      return `${def.name} is in toolset ${ts ?? '(none)'}, which this connection does not include (allowed: ${access.toolsets.join(', ') || 'none'})`;
  }
  return null;
}

export function describeAccess(a: Access): string {
  return `${a.toolsets === null ? 'all toolsets' : `toolsets ${a.toolsets.join(', ')}`}${a.readOnly ? ', read-only' : ''}`;
}

// ---- OAuth scopes ----
// "mcp" (or no scope) is everything; "toolset:NAME" (a toolset or preset) narrows to those toolsets;
// "readonly" makes the grant read-only. Only "mcp" is advertised in scopes_supported: MCP clients
// ask for every advertised scope by default, and the default must stay everything. The narrowing
// scopes are documented in docs/access.md.

export const SCOPE_READONLY = 'readonly';

export function scopesSupported(): string[] {
  return ['mcp'];
}

/** Every scope the authorization server understands (documentation, tests). */
export function scopesUnderstood(): string[] {
  return ['mcp', ...Object.keys(TOOLSETS).map((t) => `toolset:${t}`), ...Object.keys(PRESETS).map((p) => `toolset:${p}`), SCOPE_READONLY];
}

/** Scope string → access; unknown scopes are refused (invalid_scope). */
export function accessFromScope(scope: string | undefined): Access {
  const parts = (scope ?? '').split(' ').filter(Boolean);
  const names: string[] = [];
  let readOnly = false;
  for (const p of parts) {
    if (p === SCOPE_READONLY) readOnly = true;
    else if (p.startsWith('toolset:')) names.push(p.slice('toolset:'.length));
    else if (p === 'mcp' || p === 'all') continue;
    else throw new ServiceError('INVALID_ARGUMENT', `scope: unknown scope ${JSON.stringify(p)}`, { field: 'scope' });
  }
  return { toolsets: names.length ? parseToolsets(names, 'scope') : null, readOnly };
}

export function scopeFromAccess(a: Access): string {
  return [...(a.toolsets ?? []).map((t) => `toolset:${t}`), ...(a.readOnly ? [SCOPE_READONLY] : [])].join(' ');
}
