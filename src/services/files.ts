/**
 * Files and code intelligence (spec section "Files and code intelligence"): the runner side of the
 * daemon's fs.* and search.* methods (src/sandbox/daemon/files.ts and search.ts).
 *
 * Every path is resolved and confined inside the sandbox by the daemon; this service picks the
 * workspace's live sandbox, calls the daemon, and shapes results and cursors. Decisions (result
 * shapes, the encoding rule, cursors, limits, symbol index freshness, batch atomicity) are in
 * docs/files.md.
 */
import { createHash } from 'node:crypto';
import type { CursorCodec } from '../core/cursor.js';
import { ServiceError } from '../core/errors.js';
import type { DaemonMethod, GrepReply, ParamsOf, ReplyOf } from '../sandbox/daemon/protocol.js';
import type { Executor } from '../sandbox/executor.js';
import type { WorkspaceService } from './workspaces.js';

export interface FileServiceDeps {
  workspaces: WorkspaceService;
  executor: Executor;
  cursors: CursorCodec;
}

/** Bytes files_read returns at most in one call, readAll included (the spec's limit). */
export const READ_LIMIT = 1_048_576;
/** How long a file method may take in the daemon before the call fails with DEADLINE_EXCEEDED. */
const FS_TIMEOUT_MS = 120_000;
/** A search stops itself (partial result) after this long; the daemon call gets a little more. */
const SEARCH_TIMEOUT_MS = 110_000;
/** The first symbols_search of a large workspace builds the index; give it time. */
const SYMBOLS_TIMEOUT_MS = 280_000;

/** A workspace path as the daemon reads it: '.' segments and empty segments dropped. */
function normalize(p: string): string {
  return p.split('/').filter((s) => s !== '' && s !== '.').join('/') || '.';
}

export class FileService {
  constructor(private readonly deps: FileServiceDeps) {}

  /** Binds a cursor to one workspace and one path without carrying the path (cursors are short). */
  private pathKey(workspaceId: string, path: string): string {
    return createHash('sha256').update(`${workspaceId}\0${normalize(path)}`).digest().subarray(0, 9).toString('base64url');
  }

  private async call<M extends DaemonMethod>(
    tool: string,
    workspaceId: string,
    method: M,
    params: ParamsOf<M>,
    signal: AbortSignal | undefined,
    timeoutMs = FS_TIMEOUT_MS,
    onEvent?: (event: string, data: unknown) => void,
  ): Promise<ReplyOf<M>> {
    const h = await this.deps.workspaces.activeHandle(workspaceId);
    try {
      return await this.deps.executor.request(h, method, params, { signal, timeoutMs, onEvent });
    } catch (err) {
      if (err instanceof ServiceError) {
        const { daemonCode: _drop, ...details } = err.details;
        throw new ServiceError(err.code, err.message.startsWith(`${tool}:`) ? err.message : `${tool}: ${err.message}`, details, err.retryable);
      }
      throw err;
    }
  }

  async list(workspaceId: string, a: { path: string; cursor?: string; limit: number }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    const key = this.pathKey(workspaceId, a.path);
    const params: Record<string, unknown> = { path: a.path, limit: a.limit };
    if (a.cursor) {
      const s = this.deps.cursors.decode<{ k?: string; a?: string; i?: number }>('files_list', a.cursor);
      if (s.k !== key) throw new ServiceError('INVALID_ARGUMENT', 'files_list: cursor was issued for another directory or workspace; list from the start without a cursor', { field: 'cursor' });
      if (typeof s.a === 'string') params.after = s.a;
      else params.index = s.i ?? 0;
    }
    const r = await this.call('files_list', workspaceId, 'fs.list', params, signal);
    let nextCursor: string | null = null;
    if (r.hasMore) {
      // After the last name returned (stable when entries come and go); by position when the name
      // is too long for a 256-character cursor.
      try {
        nextCursor = r.last !== null ? this.deps.cursors.encode('files_list', { k: key, a: r.last }) : null;
      } catch {
        nextCursor = null;
      }
      nextCursor ??= this.deps.cursors.encode('files_list', { k: key, i: r.nextIndex });
    }
    return { path: r.path, entries: r.entries, count: r.entries.length, total: r.total, nextCursor };
  }

  async read(
    workspaceId: string,
    a: { path: string; offset: number; limit: number; cursor?: string; readAll?: boolean },
    signal?: AbortSignal,
  ): Promise<Record<string, unknown>> {
    const key = this.pathKey(workspaceId, a.path);
    let offset = a.offset;
    let expect: string | undefined;
    if (a.cursor) {
      const s = this.deps.cursors.decode<{ k?: string; o?: number; h?: string }>('files_read', a.cursor);
      if (s.k !== key) throw new ServiceError('INVALID_ARGUMENT', 'files_read: cursor was issued for another file or workspace; pass the same path the cursor came from', { field: 'cursor' });
      if (a.offset !== 0 && a.offset !== s.o) throw new ServiceError('INVALID_ARGUMENT', 'files_read: give offset or cursor, not both', { field: 'offset' });
      offset = s.o ?? 0;
      expect = s.h;
    }
    const limit = a.readAll ? READ_LIMIT : a.limit;
    const r = await this.call('files_read', workspaceId, 'fs.read', { path: a.path, offset, limit, expectSha256Prefix: expect }, signal);
    const nextCursor = r.eof ? null : this.deps.cursors.encode('files_read', { k: key, o: r.nextOffset, h: r.sha256.slice(0, 16) });
    const out: Record<string, unknown> = {
      path: r.path,
      realPath: r.realPath,
      size: r.size,
      sha256: r.sha256,
      mode: r.mode,
      offset: r.offset,
      length: r.length,
      encoding: r.encoding,
      content: r.content,
      eof: r.eof,
      nextOffset: r.eof ? null : r.nextOffset,
      nextCursor,
    };
    if (a.readAll) out.complete = r.eof;
    return out;
  }

  write(workspaceId: string, a: { path: string; content: string; expectedSha256?: string }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    return this.call('files_write', workspaceId, 'fs.write', { path: a.path, ...wireContent(a.content), expectedSha256: a.expectedSha256 }, signal);
  }

  writeBatch(
    workspaceId: string,
    a: { files: Array<{ path: string; content: string; expectedSha256?: string }>; createParents: boolean; atomic: boolean },
    signal?: AbortSignal,
  ): Promise<Record<string, unknown>> {
    const files = a.files.map(({ content, ...rest }) => ({ ...rest, ...wireContent(content) }));
    return this.call('files_write_batch', workspaceId, 'fs.writeBatch', { files, createParents: a.createParents, atomic: a.atomic }, signal);
  }

  applyPatch(workspaceId: string, a: { path: string; oldText: string; newText: string; expectedSha256?: string }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    return this.call('files_apply_patch', workspaceId, 'fs.patch', { path: a.path, oldText: a.oldText, newText: a.newText, expectedSha256: a.expectedSha256 }, signal);
  }

  delete(workspaceId: string, a: { path: string; recursive: boolean; expectedSha256?: string }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    return this.call('files_delete', workspaceId, 'fs.delete', { path: a.path, recursive: a.recursive, expectedSha256: a.expectedSha256 }, signal);
  }

  move(workspaceId: string, a: { source: string; destination: string; overwrite: boolean }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    return this.call('files_move', workspaceId, 'fs.move', { source: a.source, destination: a.destination, overwrite: a.overwrite }, signal);
  }

  mkdir(workspaceId: string, a: { path: string; recursive: boolean }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    return this.call('files_mkdir', workspaceId, 'fs.mkdir', { path: a.path, recursive: a.recursive }, signal);
  }

  async grep(workspaceId: string, a: { pattern: string; path: string; glob?: string; maxResults: number }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    const r = await this.call(
      'grep_search',
      workspaceId,
      'search.grep',
      { pattern: a.pattern, path: a.path, glob: a.glob, maxResults: a.maxResults, timeoutMs: SEARCH_TIMEOUT_MS },
      signal,
      SEARCH_TIMEOUT_MS + 10_000,
    );
    return { pattern: a.pattern, ...searchResult(r, 'matches') };
  }

  /** The first call in a workspace builds the symbol index; its progress is reported while it runs. */
  async symbols(
    workspaceId: string,
    a: { query: string; path: string; language?: string; maxResults: number },
    signal?: AbortSignal,
    progress?: (progress: number, total?: number, message?: string) => void,
  ): Promise<Record<string, unknown>> {
    const r = await this.call(
      'symbols_search',
      workspaceId,
      'search.symbols',
      { query: a.query, path: a.path, language: a.language, maxResults: a.maxResults },
      signal,
      SYMBOLS_TIMEOUT_MS,
      (event, data) => {
        const d = data as { done?: number; total?: number };
        if (event === 'progress' && typeof d.done === 'number') progress?.(d.done, d.total, 'indexing symbols (files parsed)');
      },
    );
    return { query: a.query, ...r };
  }

  async references(workspaceId: string, a: { symbol: string; path: string; glob?: string; maxResults: number }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    const r = await this.call(
      'symbols_references',
      workspaceId,
      'search.references',
      { symbol: a.symbol, path: a.path, glob: a.glob, maxResults: a.maxResults, timeoutMs: SEARCH_TIMEOUT_MS },
      signal,
      SEARCH_TIMEOUT_MS + 10_000,
    );
    return { symbol: a.symbol, ...searchResult(r, 'references') };
  }
}

/** The common shape of a ripgrep-backed answer (grep_search, symbols_references); `key` names the result list. */
function searchResult(r: GrepReply, key: 'matches' | 'references'): Record<string, unknown> {
  return {
    path: r.path,
    [key]: r.results,
    count: r.count,
    truncated: r.truncated,
    timedOut: r.timedOut,
    ...(r.skippedLongLines ? { skippedLongLines: r.skippedLongLines } : {}),
    durationMs: r.durationMs,
  };
}

/**
 * Content as it crosses the daemon protocol: as is, or base64 of its UTF-8 bytes when JSON would
 * escape enough of it (control characters, quotes, backslashes) to pass a third more than base64.
 * The largest valid batch then fits one protocol line (docs/files.md, "Limits").
 */
export function wireContent(content: string): { content: string } | { contentBase64: string } {
  if (content.length < 4096) return { content };
  let escaped = 0;
  for (let i = 0; i < content.length; i++) {
    const c = content.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c) escaped++;
  }
  return escaped * 5 > content.length / 3 ? { contentBase64: Buffer.from(content, 'utf8').toString('base64') } : { content };
}
