/**
 * What the MCP surfaces beside tools share (issue #32 item 4): workspace files as resources
 * (src/mcp/resources.ts), skills through the skills extension (src/mcp/skills-ext.ts) and as
 * prompts (src/mcp/prompts.ts). They are not tools, but a caller reaches them exactly as it could
 * reach the tool that reads the same thing: a file resource as files_read, a skill listing as
 * skills_list, a skill's files or prompt as skills_read, through the same CallerGrant (toolsets,
 * read-only). Their failures are JSON-RPC errors (the MCP specification's rule for these methods)
 * that carry Atelier's error body (docs/errors.md) in `data.error`. Decisions: docs/clients.md,
 * "Resources, prompts and skills".
 */
import { ProtocolError, ProtocolErrorCode, type Server, type ServerContext } from '@modelcontextprotocol/server';
import type { App } from '../app.js';
import { ServiceError, errorEnvelope } from '../core/errors.js';
import type { Access } from '../core/toolsets.js';
import type { Skill } from '../services/extensions/index.js';
import type { ToolRegistry } from './registry.js';

/** Who sends a request: the principal and its access, as the auth gate set them (src/mcp/http.ts). */
export interface SurfaceCaller {
  principal: string;
  access: Access;
}

export interface SurfaceDeps {
  app: App;
  registry: ToolRegistry;
  caller: (ctx: ServerContext) => SurfaceCaller;
}

/** Entries per page of prompts/list, resources/list and skills/list. */
export const PAGE_SIZE = 100;

/** The `_meta` key prefix of Atelier's own fields on results (MCP `_meta` naming: a label, then a slash). */
export const META = 'atelier/';

/** The error codes that say the request named something wrong or not allowed (JSON-RPC -32602); the rest are -32603. */
const PARAMS_CODES = new Set(['INVALID_ARGUMENT', 'NOT_FOUND', 'PERMISSION_DENIED', 'FAILED_PRECONDITION', 'CONFLICT', 'NOT_SUPPORTED']);

/**
 * A failure as a JSON-RPC error: `-32602` (Invalid params, what resources/read answers for an
 * unknown resource on 2026-07-28) for what the request named, `-32603` for the service's own
 * faults; the message is "<code>: <message>" as in a tool's error text, and `data.error` is the
 * error body of docs/errors.md (field, rule).
 */
export function rpcError(app: App, err: unknown, uri?: string): ProtocolError {
  if (err instanceof ProtocolError) return err;
  const body = errorEnvelope(err, (b) => app.environments.redact(b)).body.error;
  if (!(err instanceof ServiceError)) app.log.error({ err }, 'mcp surface handler failed');
  const code = PARAMS_CODES.has(body.code) ? ProtocolErrorCode.InvalidParams : ProtocolErrorCode.InternalError;
  return new ProtocolError(code, `${body.code}: ${body.message}`, { ...(uri !== undefined ? { uri } : {}), error: body });
}

/**
 * Refuses (PERMISSION_DENIED, audited like a refused tool call) unless the caller could call
 * `tool` itself: the toolset and read-only rules of the tools, applied to a surface that reads
 * what the tool reads.
 */
export function requireTool(deps: SurfaceDeps, caller: SurfaceCaller, tool: string, method: string, target: string | null): void {
  const problem = deps.registry.grant({ access: caller.access, actor: 'mcp' }).problem(tool);
  if (!problem) return;
  const message = `${method}: this reads what ${tool} reads, and ${problem}`;
  try {
    deps.app.audit.recordAfterReply({ actor: 'mcp', principal: caller.principal, action: method, target, outcome: 'refused', reason: `PERMISSION_DENIED: ${message}` });
  } catch (e) {
    deps.app.log.error({ err: e }, 'audit write failed');
  }
  throw new ServiceError('PERMISSION_DENIED', message, { tool, rule: caller.access.readOnly && problem.includes('read-only') ? 'read-only access' : 'toolset not granted' });
}

/** Whether the caller could call `tool` (lists show only what the caller may read). */
export function mayUse(deps: SurfaceDeps, caller: SurfaceCaller, tool: string): boolean {
  return deps.registry.grant({ access: caller.access, actor: 'mcp' }).problem(tool) === null;
}

/**
 * The cache hint fields of a 2026-07-28 result (`CacheableResult`: ttlMs, cacheScope), which a
 * 2025-era result does not have. Every list and read here depends on the caller (its token's
 * access, its active workspace), so the scope is private; what the TTL may be is each caller's
 * decision (docs/clients.md, "Caching hints").
 */
export function cacheFields(server: Server, ttlMs: number): { ttlMs?: number; cacheScope?: 'private' } {
  const version = server.getNegotiatedProtocolVersion();
  return version !== undefined && version >= '2026-07-28' ? { ttlMs, cacheScope: 'private' } : {};
}

/**
 * The workspace a caller's lists follow: its active workspace; without one (a read-only token
 * cannot set it: workspace_set_active changes state), the owner's only workspace when exactly one
 * is open; else none.
 */
export function listedWorkspace(app: App, principal: string): string | null {
  const active = app.principals.activeWorkspace(principal);
  if (active) return active;
  const open = (app.workspaces.list(undefined, 2) as { workspaces: Array<{ workspaceId: string; state: string }> }).workspaces;
  return open.length === 1 && open[0]!.state === 'active' ? open[0]!.workspaceId : null;
}

/**
 * The skills a caller's lists show: the roster (one skill per name, docs/extensions.md) of the
 * workspace its lists follow (listedWorkspace); with none, or one that is closed, expired or not
 * running, the owner and built-in skills (as skill_suggest does).
 */
export async function activeRoster(app: App, principal: string, signal: AbortSignal): Promise<{ workspaceId: string | null; skills: Skill[] }> {
  const ws = listedWorkspace(app, principal);
  if (ws) {
    try {
      return { workspaceId: ws, skills: await app.extensions.skills.roster(ws, signal) };
    } catch (e) {
      if (!(e instanceof ServiceError) || !['NOT_FOUND', 'FAILED_PRECONDITION'].includes(e.code)) throw e;
      app.log.debug({ workspaceId: ws, err: e.message }, 'active workspace unavailable: listing owner and built-in skills');
    }
  }
  return { workspaceId: null, skills: await app.extensions.skills.roster(undefined, signal) };
}

/**
 * One page of `items`: a cursor names the offset and the workspace the list was made for, so a
 * cursor of another list (or a list made before the active workspace changed) is refused.
 */
export function page<T>(app: App, kind: string, items: T[], workspaceId: string | null, cursor: string | undefined): { items: T[]; nextCursor?: string } {
  let start = 0;
  if (cursor !== undefined) {
    const state = app.cursors.decode<{ o?: number; w?: string }>(kind, cursor);
    if ((state.w ?? '') !== (workspaceId ?? '')) throw new ServiceError('INVALID_ARGUMENT', 'cursor: issued for another workspace (the active workspace changed); list again without a cursor', { field: 'cursor', rule: 'cursor' });
    start = typeof state.o === 'number' && state.o >= 0 ? state.o : 0;
  }
  const end = start + PAGE_SIZE;
  return { items: items.slice(start, end), ...(end < items.length ? { nextCursor: app.cursors.encode(kind, { o: end, w: workspaceId ?? '' }) } : {}) };
}

/** The MIME type a file name suggests; text without a known type is text/plain, other bytes application/octet-stream. */
export function mimeTypeOf(path: string, text: boolean): string {
  return knownMimeType(path) ?? (text ? 'text/plain' : 'application/octet-stream');
}

/** The MIME type of a known file name extension, or undefined (before the bytes are seen). */
export function knownMimeType(path: string): string | undefined {
  const base = path.slice(path.lastIndexOf('/') + 1);
  const dot = base.lastIndexOf('.');
  const ext = dot > 0 ? base.slice(dot + 1).toLowerCase() : '';
  return Object.hasOwn(MIME, ext) ? MIME[ext] : undefined;
}

const MIME: Record<string, string> = {
  md: 'text/markdown',
  markdown: 'text/markdown',
  txt: 'text/plain',
  json: 'application/json',
  yaml: 'application/yaml',
  yml: 'application/yaml',
  toml: 'application/toml',
  xml: 'application/xml',
  html: 'text/html',
  css: 'text/css',
  csv: 'text/csv',
  js: 'text/javascript',
  mjs: 'text/javascript',
  cjs: 'text/javascript',
  ts: 'text/typescript',
  py: 'text/x-python',
  sh: 'application/x-sh',
  bash: 'application/x-sh',
  svg: 'image/svg+xml',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  pdf: 'application/pdf',
  zip: 'application/zip',
  gz: 'application/gzip',
  wasm: 'application/wasm',
};

/**
 * Decodes one percent-encoded URI path segment strictly: a malformed escape, an empty segment,
 * `.` or `..` (however spelled: `%2e%2e`), a `/` inside a segment (`%2F`) or a NUL is refused
 * naming the field, never normalized away.
 */
export function decodeSegment(raw: string, field: string): string {
  let s: string;
  try {
    s = decodeURIComponent(raw);
  } catch {
    throw new ServiceError('INVALID_ARGUMENT', `${field}: ${JSON.stringify(raw.slice(0, 100))} is not a valid percent-encoded path segment`, { field, rule: 'percent-encoding' });
  }
  if (s === '' || s === '.' || s === '..') throw new ServiceError('INVALID_ARGUMENT', `${field}: empty, "." and ".." path segments are not allowed`, { field, rule: 'no empty, . or .. segments' });
  if (s.includes('\0')) throw new ServiceError('INVALID_ARGUMENT', `${field}: NUL characters are not allowed`, { field, rule: 'no NUL' });
  if (s.includes('/')) throw new ServiceError('INVALID_ARGUMENT', `${field}: an encoded "/" (%2F) inside a path segment is not allowed`, { field, rule: 'no encoded slash' });
  return s;
}

/** One path segment of a URI Atelier makes: everything but A-Z a-z 0-9 - _ . ! ~ * ' ( ) percent-encoded. */
export function encodeSegment(s: string): string {
  return s === '.' || s === '..' ? s.replaceAll('.', '%2E') : encodeURIComponent(s);
}
