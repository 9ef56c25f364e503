/**
 * Workspace files as MCP resources (issue #32 item 4), and the registration of every surface
 * beside the tools (resources, prompts, the skills extension) on the per-request Server.
 *
 * A file is `atelier://workspaces/{workspaceId}/files/{+path}`, read through the sandbox daemon by
 * the same FileService.read as files_read (the same confinement: no `..`, no symlink out of the
 * checkout, no special files), text as `text` and anything else as a base64 `blob` (the files_read
 * encoding rule). A read returns at most 1 MiB (files_read's limit); a larger file is read in
 * ranges named by the query `?offset=N&length=M`: a read without one returns the first range, and
 * the contents' `uri` then names exactly that range, with `_meta["atelier/file"]` giving the size
 * and the next range's URI. A directory (`…/files` is the root) is listed with the skills
 * extension's resources/directory/read, a page at a time as files_list lists it. resources/list
 * lists the roster's skills (their SKILL.md), not files:
 * a checkout holds far too many; files are found with files_list, grep_search and symbols_search,
 * whose results carry `resource_link` items to these URIs. Decisions: docs/files.md, "Files as MCP
 * resources", and docs/clients.md.
 */
import type { Server, ServerContext } from '@modelcontextprotocol/server';
import { DIRECTORY_MIME_TYPE, RESOURCES_DIRECTORY_READ_METHOD, SKILLS_EXTENSION_ID } from '@modelcontextprotocol/server/ext/skills';
import { z } from 'zod';
import { ServiceError } from '../core/errors.js';
import { READ_LIMIT } from '../services/files.js';
import { registerPrompts } from './prompts.js';
import { readSkillDirectory, readSkillResource, registerSkills, skillResources } from './skills-ext.js';
import { META, activeRoster, cacheFields, decodeSegment, encodeSegment, knownMimeType, mayUse, mimeTypeOf, page, requireTool, rpcError, type SurfaceDeps } from './surface.js';

export const FILE_URI_PREFIX = 'atelier://workspaces/';
export const FILE_URI_TEMPLATE = 'atelier://workspaces/{workspaceId}/files/{+path}';
/** The longest resource URI read (a path is at most 1024 characters, as files_read takes it, each at most 12 when percent-encoded). */
export const MAX_URI_LENGTH = 16_384;
/** The longest workspace path, as the files tools take it. */
const MAX_PATH_CHARS = 1024;
const WORKSPACE_ID = /^ws_[A-Za-z0-9_-]{20,80}$/;
/** resource_link items at most per tool result (the result itself lists everything). */
export const MAX_LINKS = 100;
/**
 * The TTL of resources/templates/list: the templates a caller sees depend only on its token's
 * access and this version of Atelier; an hour. Everything else is answered with 0 (see cacheFields).
 */
const TEMPLATES_TTL_MS = 3_600_000;

export interface FileUri {
  workspaceId: string;
  path: string;
  /** The URI without its query. */
  base: string;
  range?: { offset: number; length: number };
}

/** The URI of a workspace file (each path segment percent-encoded). */
export function fileUri(workspaceId: string, path: string): string {
  const segs = path.split('/').filter((s) => s !== '' && s !== '.');
  return `${FILE_URI_PREFIX}${workspaceId}/files/${segs.map(encodeSegment).join('/')}`;
}

/**
 * Parses a file URI strictly, from its text (never through a URL parser, which would resolve
 * `..` and `%2e%2e` segments away into another path): every rule broken is refused naming it.
 */
export function parseFileUri(uri: string, directory = false): FileUri {
  if (uri.length > MAX_URI_LENGTH) throw new ServiceError('INVALID_ARGUMENT', `uri: longer than ${MAX_URI_LENGTH} characters`, { field: 'uri', rule: `at most ${MAX_URI_LENGTH} characters` });
  if (!uri.startsWith(FILE_URI_PREFIX)) throw new ServiceError('INVALID_ARGUMENT', `uri: a workspace file is ${FILE_URI_TEMPLATE}`, { field: 'uri', rule: FILE_URI_TEMPLATE });
  if (uri.includes('#')) throw new ServiceError('INVALID_ARGUMENT', 'uri: a fragment (#) is not part of a file URI; percent-encode a "#" in a file name as %23', { field: 'uri', rule: 'no fragment' });
  const q = uri.indexOf('?');
  const base = q < 0 ? uri : uri.slice(0, q);
  const segs = base.slice(FILE_URI_PREFIX.length).split('/');
  const workspaceId = decodeSegment(segs[0] ?? '', 'uri');
  if (!WORKSPACE_ID.test(workspaceId)) throw new ServiceError('INVALID_ARGUMENT', 'uri: the workspace segment must be a workspace identifier (ws_ then 20-80 of A-Z a-z 0-9 _ -)', { field: 'uri', rule: 'workspace identifier' });
  if (segs[1] !== 'files' || (segs.length < 3 && !directory)) throw new ServiceError('INVALID_ARGUMENT', `uri: a workspace file is ${FILE_URI_TEMPLATE}`, { field: 'uri', rule: FILE_URI_TEMPLATE });
  // A directory: atelier://workspaces/<id>/files is the checkout's root.
  const path = segs.length < 3 ? '.' : segs.slice(2).map((s) => decodeSegment(s, 'uri')).join('/');
  if ([...path].length > MAX_PATH_CHARS) throw new ServiceError('INVALID_ARGUMENT', `uri: the path is longer than ${MAX_PATH_CHARS} characters`, { field: 'uri', rule: `path at most ${MAX_PATH_CHARS} characters` });
  const out: FileUri = { workspaceId, path, base };
  if (q >= 0 && directory) throw new ServiceError('INVALID_ARGUMENT', 'uri: a directory URI takes no query (pages go by cursor)', { field: 'uri', rule: 'no query' });
  if (q >= 0) out.range = parseRange(uri.slice(q + 1));
  return out;
}

function parseRange(query: string): { offset: number; length: number } {
  const bad = (why: string) => new ServiceError('INVALID_ARGUMENT', `uri: the query names a range as offset=<byte offset>&length=<1-${READ_LIMIT}>: ${why}`, { field: 'uri', rule: 'range query' });
  const seen: Record<string, number> = {};
  for (const part of query.split('&')) {
    const eq = part.indexOf('=');
    const key = eq < 0 ? part : part.slice(0, eq);
    const value = eq < 0 ? '' : part.slice(eq + 1);
    if (key !== 'offset' && key !== 'length') throw bad(`unknown parameter ${JSON.stringify(key.slice(0, 40))}`);
    if (key in seen) throw bad(`${key} given twice`);
    if (!/^\d{1,16}$/.test(value) || !Number.isSafeInteger(Number(value))) throw bad(`${key} must be a whole number`);
    seen[key] = Number(value);
  }
  const length = seen.length ?? READ_LIMIT;
  if (length < 1 || length > READ_LIMIT) throw bad(`length must be 1-${READ_LIMIT}`);
  return { offset: seen.offset ?? 0, length };
}

/** resources/read of a workspace file: through FileService.read (the daemon's confinement), at most READ_LIMIT bytes. */
async function readFile(deps: SurfaceDeps, uri: string, f: FileUri, signal: AbortSignal): Promise<Record<string, unknown>> {
  const offset = f.range?.offset ?? 0;
  const r = (await deps.app.files.read(f.workspaceId, { path: f.path, offset, limit: f.range?.length ?? READ_LIMIT }, signal)) as {
    size: number;
    sha256: string;
    offset: number;
    length: number;
    encoding: 'utf-8' | 'base64';
    content: string;
    eof: boolean;
    nextOffset: number | null;
  };
  const whole = r.offset === 0 && r.eof;
  // The contents' URI names exactly the bytes given: the URI read, or the range returned.
  const shown = whole && !f.range ? uri : `${f.base}?offset=${r.offset}&length=${r.length}`;
  const text = r.encoding === 'utf-8';
  const meta = {
    workspaceId: f.workspaceId,
    path: f.path,
    size: r.size,
    sha256: r.sha256,
    offset: r.offset,
    length: r.length,
    eof: r.eof,
    ...(r.eof ? {} : { nextUri: `${f.base}?offset=${r.nextOffset}&length=${READ_LIMIT}` }),
  };
  return {
    contents: [{ uri: shown, mimeType: mimeTypeOf(f.path, text), ...(text ? { text: r.content } : { blob: r.content }), _meta: { [`${META}file`]: meta } }],
  };
}

/**
 * resources/directory/read of a workspace directory: its entries as files_list lists them (the same
 * daemon call, cursor and page size bounds), files with their size, directories as
 * inode/directory, symlinks as plain resources (a read follows them only inside the checkout);
 * fifos, sockets and devices are left out (nothing can read them).
 */
async function readFileDirectory(deps: SurfaceDeps, f: FileUri, cursor: string | undefined, signal: AbortSignal): Promise<Record<string, unknown>> {
  const r = (await deps.app.files.list(f.workspaceId, { path: f.path, cursor, limit: DIRECTORY_PAGE }, signal)) as { entries: Array<{ name: string; path: string; type: string; size: number }>; nextCursor: string | null };
  const resources: Array<Record<string, unknown>> = [];
  for (const e of r.entries) {
    const uri = fileUri(f.workspaceId, e.path);
    if (e.type === 'directory') resources.push({ uri, name: e.name, mimeType: DIRECTORY_MIME_TYPE });
    else if (e.type === 'file') {
      const mimeType = knownMimeType(e.name);
      resources.push({ uri, name: e.name, ...(mimeType ? { mimeType } : {}), size: e.size });
    } else if (e.type === 'symlink') resources.push({ uri, name: e.name });
  }
  return { resources, ...(r.nextCursor ? { nextCursor: r.nextCursor } : {}) };
}

/** Entries per page of a workspace directory read. */
const DIRECTORY_PAGE = 200;

const DirectoryParams = z.looseObject({ uri: z.string(), cursor: z.string().optional() });

/**
 * resource_link items for a files_list, grep_search or symbols_search result (additive content;
 * structuredContent is unchanged): one per file listed or matched, in result order, at most MAX_LINKS.
 */
export function resourceLinks(tool: string, workspaceId: string | undefined, result: Record<string, unknown>): Array<Record<string, unknown>> {
  if (!workspaceId) return [];
  const links: Array<Record<string, unknown>> = [];
  const add = (path: unknown, extra: Record<string, unknown>) => {
    if (typeof path !== 'string' || path === '' || links.length >= MAX_LINKS) return;
    links.push({ type: 'resource_link', uri: fileUri(workspaceId, path), name: path.replace(/^\.\//, ''), ...extra });
  };
  if (tool === 'files_list') {
    for (const e of (result.entries as Array<{ path?: string; type?: string; size?: number }> | undefined) ?? []) {
      if (e.type !== 'file') continue;
      const mimeType = knownMimeType(e.path ?? '');
      add(e.path, { ...(mimeType ? { mimeType } : {}), ...(typeof e.size === 'number' ? { size: e.size } : {}) });
    }
    return links;
  }
  const counts = new Map<string, number>();
  const items = tool === 'grep_search' ? ((result.matches as Array<{ file?: string }> | undefined) ?? []) : tool === 'symbols_search' ? ((result.symbols as Array<{ file?: string }> | undefined) ?? []) : [];
  for (const m of items) if (typeof m.file === 'string') counts.set(m.file, (counts.get(m.file) ?? 0) + 1);
  const what = tool === 'grep_search' ? 'matching line' : 'symbol';
  for (const [file, n] of counts) add(file, { description: `${n} ${what}${n === 1 ? '' : 's'}` });
  return links;
}

/** The tools whose results carry resource_link items. */
export const LINKED_TOOLS = new Set(['files_list', 'grep_search', 'symbols_search']);

/**
 * Registers resources, prompts and the skills extension on a per-request Server (before it connects).
 * listChanged is false everywhere: the lists follow the active workspace and its checkout, which
 * commands change without Atelier seeing it, so a notification could not be promised (docs/clients.md).
 */
export function registerResourceSurfaces(server: Server, deps: SurfaceDeps): void {
  server.registerCapabilities({
    resources: { subscribe: false, listChanged: false },
    prompts: { listChanged: false },
    extensions: { [SKILLS_EXTENSION_ID]: { directoryRead: true } },
  });
  server.setRequestHandler('resources/templates/list', (_req, ctx: ServerContext) => {
    const caller = deps.caller(ctx);
    const resourceTemplates = mayUse(deps, caller, 'files_read')
      ? [
          {
            uriTemplate: FILE_URI_TEMPLATE,
            name: 'workspace-file',
            title: 'Workspace file',
            description:
              'A file of a workspace checkout, read through the sandbox like files_read (at most 1 MiB at once; a larger file in ranges: append ?offset=<byte>&length=<1-1048576>). Text comes as text, other bytes as a base64 blob.',
          },
        ]
      : [];
    return { resourceTemplates, ...cacheFields(server, TEMPLATES_TTL_MS) };
  });
  server.setRequestHandler('resources/list', async (req, ctx: ServerContext) => {
    const caller = deps.caller(ctx);
    try {
      if (!mayUse(deps, caller, 'skills_list')) return { resources: [], ...cacheFields(server, 0) };
      const roster = await activeRoster(deps.app, caller.principal, ctx.mcpReq.signal);
      const p = page(deps.app, 'resources_list', skillResources(roster.skills, roster.workspaceId), roster.workspaceId, req.params?.cursor);
      return { resources: p.items as never, ...(p.nextCursor ? { nextCursor: p.nextCursor } : {}), ...cacheFields(server, 0) };
    } catch (e) {
      throw rpcError(deps.app, e);
    }
  });
  server.setRequestHandler('resources/read', async (req, ctx: ServerContext) => {
    const caller = deps.caller(ctx);
    const uri = req.params.uri;
    try {
      if (uri.startsWith('skill://')) {
        requireTool(deps, caller, 'skills_read', 'resources/read', uri.slice(0, 300));
        return { ...(await readSkillResource(deps, uri, ctx.mcpReq.signal)), ...cacheFields(server, 0) } as never;
      }
      if (uri.startsWith('atelier:')) {
        requireTool(deps, caller, 'files_read', 'resources/read', uri.slice(0, 300));
        return { ...(await readFile(deps, uri, parseFileUri(uri), ctx.mcpReq.signal)), ...cacheFields(server, 0) } as never;
      }
      throw new ServiceError('NOT_FOUND', `uri: no such resource; Atelier serves workspace files as ${FILE_URI_TEMPLATE} and skills as skill:// URIs (skills/list, resources/list)`, { field: 'uri' });
    } catch (e) {
      throw rpcError(deps.app, e, uri.slice(0, 2000));
    }
  });
  // The skills extension's directory read, for a skill's directories and a workspace's alike.
  server.setRequestHandler(RESOURCES_DIRECTORY_READ_METHOD, { params: DirectoryParams }, async (params, ctx: ServerContext) => {
    const caller = deps.caller(ctx);
    const uri = params.uri;
    try {
      let page: Record<string, unknown>;
      if (uri.startsWith('skill://')) {
        requireTool(deps, caller, 'skills_list', RESOURCES_DIRECTORY_READ_METHOD, uri.slice(0, 300));
        page = await readSkillDirectory(deps, uri, params.cursor, ctx.mcpReq.signal);
      } else if (uri.startsWith('atelier:')) {
        requireTool(deps, caller, 'files_list', RESOURCES_DIRECTORY_READ_METHOD, uri.slice(0, 300));
        page = await readFileDirectory(deps, parseFileUri(uri, true), params.cursor, ctx.mcpReq.signal);
      } else throw new ServiceError('NOT_FOUND', `uri: no such directory; Atelier serves workspace directories as atelier://workspaces/{workspaceId}/files[/{+path}] and skill directories as skill:// URIs`, { field: 'uri' });
      return { ...page, ...cacheFields(server, 0) };
    } catch (e) {
      throw rpcError(deps.app, e, uri.slice(0, 2000));
    }
  });
  registerPrompts(server, deps);
  registerSkills(server, deps);
}
