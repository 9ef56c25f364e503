/**
 * Files and code intelligence (spec section "Files and code intelligence"): the runner side of the
 * daemon's fs.* and search.* methods (src/sandbox/daemon/files/ and search/).
 *
 * Every path is resolved and confined inside the sandbox by the daemon; this service picks the
 * workspace's live sandbox, calls the daemon, and shapes results and cursors. Decisions (result
 * shapes, the encoding rule, cursors, limits, symbol index freshness, batch atomicity) are in
 * docs/files.md.
 */
import { createHash } from 'node:crypto';
import type { CursorCodec } from '../core/cursor.js';
import { ServiceError } from '../core/errors.js';
import { copyText } from '../core/raw-text.js';
import type { DaemonMethod, GrepReply, ParamsOf, ReplyOf } from '../sandbox/daemon/protocol.js';
import type { Executor } from '../sandbox/executor.js';
import type { WorkspaceService } from './workspaces/index.js';

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
function normalize(path: string): string {
  return path.split('/').filter((s) => s !== '' && s !== '.').join('/') || '.';
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

  async list(workspaceId: string, args: { path: string; cursor?: string; limit: number }, signal?: AbortSignal) {
    const key = this.pathKey(workspaceId, args.path);
    const params: Record<string, unknown> = { path: args.path, limit: args.limit };
    if (args.cursor) {
      const s = this.deps.cursors.decode<{ k?: string; a?: string; i?: number }>('files_list', args.cursor);
      if (s.k !== key) throw new ServiceError('INVALID_ARGUMENT', 'files_list: cursor was issued for another directory or workspace; list from the start without a cursor', { field: 'cursor' });
      if (typeof s.a === 'string') params.after = s.a;
      else params.index = s.i ?? 0;
    }
    const reply = await this.call('files_list', workspaceId, 'fs.list', params, signal);
    let nextCursor: string | null = null;
    if (reply.hasMore) {
      // After the last name returned (stable when entries come and go); by position when the name
      // is too long for a 256-character cursor.
      try {
        nextCursor = reply.last !== null ? this.deps.cursors.encode('files_list', { k: key, a: reply.last }) : null;
      } catch {
        nextCursor = null;
      }
      nextCursor ??= this.deps.cursors.encode('files_list', { k: key, i: reply.nextIndex });
    }
    return { path: reply.path, entries: reply.entries, count: reply.entries.length, total: reply.total, nextCursor };
  }

  async read(
    workspaceId: string,
    args: { path: string; offset: number; limit: number; cursor?: string; readAll?: boolean },
    signal?: AbortSignal,
  ) {
    const key = this.pathKey(workspaceId, args.path);
    let offset = args.offset;
    let expect: string | undefined;
    if (args.cursor) {
      const state = this.deps.cursors.decode<{ k?: string; o?: number; h?: string }>('files_read', args.cursor);
      if (state.k !== key) throw new ServiceError('INVALID_ARGUMENT', 'files_read: cursor was issued for another file or workspace; pass the same path the cursor came from', { field: 'cursor' });
      if (args.offset !== 0 && args.offset !== state.o) throw new ServiceError('INVALID_ARGUMENT', 'files_read: give offset or cursor, not both', { field: 'offset' });
      offset = state.o ?? 0;
      expect = state.h;
    }
    const limit = args.readAll ? READ_LIMIT : args.limit;
    const reply = await this.call('files_read', workspaceId, 'fs.read', { path: args.path, offset, limit, expectSha256Prefix: expect }, signal);
    const nextCursor = reply.eof ? null : this.deps.cursors.encode('files_read', { k: key, o: reply.nextOffset, h: reply.sha256.slice(0, 16) });
    const out: Record<string, unknown> = {
      path: reply.path,
      realPath: reply.realPath,
      size: reply.size,
      sha256: reply.sha256,
      mode: reply.mode,
      offset: reply.offset,
      length: reply.length,
      encoding: reply.encoding,
      content: '',
      eof: reply.eof,
      nextOffset: reply.eof ? null : reply.nextOffset,
      nextCursor,
    };
    // The content stays the daemon's bytes until read as a string (core/raw-text.ts); same key order.
    copyText(reply as unknown as Record<string, unknown>, 'content', out);
    if (args.readAll) out.complete = reply.eof;
    return out;
  }

  write(workspaceId: string, args: { path: string; content: string; expectedSha256?: string }, signal?: AbortSignal) {
    return this.call('files_write', workspaceId, 'fs.write', { path: args.path, ...wireContent(args.content), expectedSha256: args.expectedSha256 }, signal);
  }

  writeBatch(
    workspaceId: string,
    args: { files: Array<{ path: string; content: string; expectedSha256?: string }>; createParents: boolean; atomic: boolean },
    signal?: AbortSignal,
  ) {
    const files = args.files.map(({ content, ...rest }) => ({ ...rest, ...wireContent(content) }));
    return this.call('files_write_batch', workspaceId, 'fs.writeBatch', { files, createParents: args.createParents, atomic: args.atomic }, signal);
  }

  applyPatch(workspaceId: string, args: { path: string; oldText: string; newText: string; expectedSha256?: string }, signal?: AbortSignal) {
    return this.call('files_apply_patch', workspaceId, 'fs.patch', { path: args.path, oldText: args.oldText, newText: args.newText, expectedSha256: args.expectedSha256 }, signal);
  }

  delete(workspaceId: string, args: { path: string; recursive: boolean; expectedSha256?: string }, signal?: AbortSignal) {
    return this.call('files_delete', workspaceId, 'fs.delete', { path: args.path, recursive: args.recursive, expectedSha256: args.expectedSha256 }, signal);
  }

  move(workspaceId: string, args: { source: string; destination: string; overwrite: boolean }, signal?: AbortSignal) {
    return this.call('files_move', workspaceId, 'fs.move', { source: args.source, destination: args.destination, overwrite: args.overwrite }, signal);
  }

  mkdir(workspaceId: string, args: { path: string; recursive: boolean }, signal?: AbortSignal) {
    return this.call('files_mkdir', workspaceId, 'fs.mkdir', { path: args.path, recursive: args.recursive }, signal);
  }

  async grep(workspaceId: string, args: { pattern: string; path: string; glob?: string; maxResults: number }, signal?: AbortSignal) {
    const reply = await this.call(
      'grep_search',
      workspaceId,
      'search.grep',
      { pattern: args.pattern, path: args.path, glob: args.glob, maxResults: args.maxResults, timeoutMs: SEARCH_TIMEOUT_MS },
      signal,
      SEARCH_TIMEOUT_MS + 10_000,
    );
    return { pattern: args.pattern, ...searchResult(reply, 'matches') };
  }

  /** The first call in a workspace builds the symbol index; its progress is reported while it runs. */
  async symbols(
    workspaceId: string,
    args: { query: string; path: string; language?: string; maxResults: number },
    signal?: AbortSignal,
    progress?: (progress: number, total?: number, message?: string) => void,
  ) {
    const reply = await this.call(
      'symbols_search',
      workspaceId,
      'search.symbols',
      { query: args.query, path: args.path, language: args.language, maxResults: args.maxResults },
      signal,
      SYMBOLS_TIMEOUT_MS,
      (event, data) => {
        const d = data as { done?: number; total?: number };
        if (event === 'progress' && typeof d.done === 'number') progress?.(d.done, d.total, 'indexing symbols (files parsed)');
      },
    );
    return { query: args.query, ...reply };
  }

  async references(workspaceId: string, args: { symbol: string; path: string; glob?: string; maxResults: number }, signal?: AbortSignal) {
    const reply = await this.call(
      'symbols_references',
      workspaceId,
      'search.references',
      { symbol: args.symbol, path: args.path, glob: args.glob, maxResults: args.maxResults, timeoutMs: SEARCH_TIMEOUT_MS },
      signal,
      SEARCH_TIMEOUT_MS + 10_000,
    );
    return { symbol: args.symbol, ...searchResult(reply, 'references') };
  }
}

/** The common shape of a ripgrep-backed answer (grep_search, symbols_references); `key` names the result list. */
function searchResult(reply: GrepReply, key: 'matches' | 'references') {
  return {
    path: reply.path,
    [key]: reply.results,
    count: reply.count,
    truncated: reply.truncated,
    timedOut: reply.timedOut,
    ...(reply.skippedLongLines ? { skippedLongLines: reply.skippedLongLines } : {}),
    durationMs: reply.durationMs,
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

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type FileListResult = Awaited<ReturnType<FileService['list']>>;
export type FileReadResult = Awaited<ReturnType<FileService['read']>>;
export type FileWriteResult = Awaited<ReturnType<FileService['write']>>;
export type FileWriteBatchResult = Awaited<ReturnType<FileService['writeBatch']>>;
export type FileApplyPatchResult = Awaited<ReturnType<FileService['applyPatch']>>;
export type FileDeleteResult = Awaited<ReturnType<FileService['delete']>>;
export type FileMoveResult = Awaited<ReturnType<FileService['move']>>;
export type FileMkdirResult = Awaited<ReturnType<FileService['mkdir']>>;
export type FileGrepResult = Awaited<ReturnType<FileService['grep']>>;
export type FileSymbolsResult = Awaited<ReturnType<FileService['symbols']>>;
export type FileReferencesResult = Awaited<ReturnType<FileService['references']>>;
