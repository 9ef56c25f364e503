/**
 * Code intelligence (issue #44, beyond the spec): the runner side of the daemon's code.* methods
 * (src/sandbox/daemon/lsp/). Language servers run inside the workspace's sandbox; this service
 * picks the workspace's live sandbox, sends the operator's settings with every call, pages
 * references with a cursor, turns a rename's edit set into a preview (a SHA-256 and a unified diff
 * per file) and applies it through the daemon's atomic fs.writeBatch, compared file by file with
 * the hashes the preview gave. Decisions are in docs/code-intelligence.md.
 *
 * This folder's one door: the tools and the app import this file only.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CursorCodec } from '../../core/cursor.js';
import { ServiceError } from '../../core/errors.js';
import type { CodeCustomServer, CodeServerId, CodeServerStatus, CodeSettings, DaemonMethod, ParamsOf, ReplyOf } from '../../sandbox/daemon/protocol.js';
import type { Executor } from '../../sandbox/executor.js';
import type { WorkspaceService } from '../workspaces/index.js';
import { unifiedDiff } from './diff.js';

export interface CodeIntelDeps {
  workspaces: WorkspaceService;
  executor: Executor;
  cursors: CursorCodec;
  /** Operator settings (codeIntelIdleSeconds, codeIntelDisabledServers). */
  idleSeconds: number;
  disabledServers: string;
  /** The config file (its "codeIntel" section holds the operator's servers; checked at start-up by core/config.ts). */
  configFile: string | null;
}

/** The operator's servers from the config file's "codeIntel.servers" (already validated when the config was read). */
function customServers(configFile: string | null): CodeCustomServer[] {
  if (!configFile) return [];
  try {
    const file = JSON.parse(readFileSync(configFile, 'utf8')) as { codeIntel?: { servers?: CodeCustomServer[] } };
    return Array.isArray(file.codeIntel?.servers) ? file.codeIntel.servers : [];
  } catch {
    return [];
  }
}

/** A daemon call may include a server's start and a project's first analysis. */
const CODE_TIMEOUT_MS = 90_000;

export interface CodePosition {
  path: string;
  line?: number;
  column?: number;
  symbol?: string;
}

/** Who calls: a caller that could not run exec_run gets only servers that run no repository code. */
export interface CodeCaller {
  mayRunCommands: boolean;
}

/** Workspace×server pairs whose restart count is remembered (the oldest forgotten beyond). */
const MAX_TRACKED = 10_000;

export class CodeIntelService {
  private readonly settings: CodeSettings;
  /** Requests by `server\0outcome` (outcome: ok or the error code) and restarts by server, for /metrics. */
  private readonly requests = new Map<string, number>();
  private readonly restarts = new Map<string, number>();
  private readonly restartsSeen = new Map<string, number>();

  constructor(private readonly deps: CodeIntelDeps) {
    this.settings = {
      idleMs: deps.idleSeconds * 1000,
      disabled: deps.disabledServers.split(',').map((s) => s.trim()).filter(Boolean),
      custom: customServers(deps.configFile),
    };
  }

  private async call<M extends DaemonMethod>(tool: string, workspaceId: string, method: M, params: ParamsOf<M>, caller: CodeCaller, signal?: AbortSignal): Promise<ReplyOf<M>> {
    const h = await this.deps.workspaces.activeHandle(workspaceId);
    try {
      const full = { ...(params as object), settings: this.settings, restricted: !caller.mayRunCommands } as ParamsOf<M>;
      const reply = await this.deps.executor.request(h, method, full, { signal, timeoutMs: CODE_TIMEOUT_MS });
      this.observe(workspaceId, reply, 'ok');
      return reply;
    } catch (err) {
      if (err instanceof ServiceError) {
        this.count(typeof err.details.server === 'string' ? err.details.server : 'none', err.code);
        const { daemonCode: _drop, ...details } = err.details;
        // A daemon from before this feature knows no code.* method.
        if (err.code === 'NOT_IMPLEMENTED') {
          throw new ServiceError('FAILED_PRECONDITION', `${tool}: this workspace's sandbox daemon predates code intelligence (the service was upgraded while it ran); it serves code_* once its sandbox starts again (close and reopen the workspace)`, { ...details, reason: 'daemon_too_old' });
        }
        throw new ServiceError(err.code, err.message.startsWith(`${tool}:`) ? err.message : `${tool}: ${err.message}`, details, err.retryable);
      }
      throw err;
    }
  }

  private count(server: string, outcome: string): void {
    const k = `${server}\0${outcome}`;
    this.requests.set(k, (this.requests.get(k) ?? 0) + 1);
  }

  /** Counts a reply by its server(s), and the restarts a server made since this workspace's last reply from it. */
  private observe(workspaceId: string, reply: unknown, outcome: string): void {
    const r = reply as { server?: unknown; servers?: unknown; restarts?: unknown };
    const seen: Array<{ server: string; restarts?: number }> = [];
    if (typeof r.server === 'string') seen.push({ server: r.server, ...(typeof r.restarts === 'number' ? { restarts: r.restarts } : {}) });
    if (Array.isArray(r.servers)) {
      for (const s of r.servers) {
        if (typeof s === 'string') seen.push({ server: s });
        else if (s && typeof s === 'object' && typeof (s as { server?: unknown }).server === 'string') seen.push({ server: (s as { server: string }).server, restarts: (s as { restarts: number }).restarts });
      }
    }
    for (const s of seen) {
      if (!Array.isArray(r.servers) || typeof r.servers[0] === 'string') this.count(s.server, outcome);
      if (typeof s.restarts !== 'number') continue;
      const k = `${workspaceId}\0${s.server}`;
      const before = this.restartsSeen.get(k) ?? 0;
      if (s.restarts > before) this.restarts.set(s.server, (this.restarts.get(s.server) ?? 0) + s.restarts - before);
      this.restartsSeen.delete(k);
      this.restartsSeen.set(k, s.restarts);
      if (this.restartsSeen.size > MAX_TRACKED) this.restartsSeen.delete(this.restartsSeen.keys().next().value!);
    }
  }

  /** Counters for /metrics: requests by server and outcome, restarts by server (as seen in the daemons' replies). */
  metrics(): { requests: Array<{ labels: { server: string; outcome: string }; value: number }>; restarts: Array<{ labels: { server: string }; value: number }> } {
    return {
      requests: [...this.requests].map(([k, value]) => {
        const [server, outcome] = k.split('\0') as [string, string];
        return { labels: { server, outcome }, value };
      }),
      restarts: [...this.restarts].map(([server, value]) => ({ labels: { server }, value })),
    };
  }

  private static position(args: CodePosition): CodePosition {
    return { path: args.path, ...(args.line !== undefined ? { line: args.line } : {}), ...(args.column !== undefined ? { column: args.column } : {}), ...(args.symbol !== undefined ? { symbol: args.symbol } : {}) };
  }

  async definition(ws: string, args: CodePosition & { kind?: 'definition' | 'declaration' | 'typeDefinition' | 'implementation' }, caller: CodeCaller, signal?: AbortSignal) {
    const r = await this.call('code_definition', ws, 'code.definition', { ...CodeIntelService.position(args), kind: args.kind ?? 'definition' }, caller, signal);
    return { ...r, count: r.locations.length };
  }

  async references(ws: string, args: CodePosition & { includeDeclaration: boolean; maxResults: number; cursor?: string }, caller: CodeCaller, signal?: AbortSignal) {
    const key = createHash('sha256').update(JSON.stringify([ws, CodeIntelService.position(args), args.includeDeclaration])).digest().subarray(0, 9).toString('base64url');
    let offset = 0;
    if (args.cursor) {
      const s = this.deps.cursors.decode<{ k?: string; o?: number }>('code_references', args.cursor);
      if (s.k !== key) throw new ServiceError('INVALID_ARGUMENT', 'code_references: cursor was issued for another position, includeDeclaration or workspace; ask again without a cursor', { field: 'cursor' });
      offset = typeof s.o === 'number' ? s.o : 0;
    }
    const r = await this.call('code_references', ws, 'code.references', { ...CodeIntelService.position(args), includeDeclaration: args.includeDeclaration, offset, limit: args.maxResults }, caller, signal);
    const next = offset + r.locations.length;
    return { ...r, count: r.locations.length, offset, nextCursor: next < r.total && r.locations.length > 0 ? this.deps.cursors.encode('code_references', { k: key, o: next }) : null };
  }

  async hover(ws: string, args: CodePosition, caller: CodeCaller, signal?: AbortSignal) {
    return this.call('code_hover', ws, 'code.hover', CodeIntelService.position(args), caller, signal);
  }

  async symbols(ws: string, args: { path?: string; query?: string; server?: CodeServerId; maxResults: number }, caller: CodeCaller, signal?: AbortSignal) {
    const r = await this.call('code_symbols', ws, 'code.symbols', { ...args }, caller, signal);
    return { mode: args.path !== undefined ? 'outline' : 'workspace', ...r, count: r.symbols.length };
  }

  async diagnostics(ws: string, args: { path?: string; minSeverity: 'error' | 'warning' | 'information' | 'hint'; waitMs: number; maxResults: number }, caller: CodeCaller, signal?: AbortSignal) {
    const r = await this.call('code_diagnostics', ws, 'code.diagnostics', { ...args }, caller, signal);
    return { scope: args.path !== undefined ? 'file' : 'workspace', ...r, count: r.diagnostics.length };
  }

  async status(ws: string, caller: CodeCaller, signal?: AbortSignal) {
    const r = await this.call('code_servers', ws, 'code.status', {}, caller, signal);
    return { ...r, idleSeconds: this.deps.idleSeconds, callerMayUse: r.servers.filter((s) => caller.mayRunCommands || s.runsNoRepositoryCode).map((s) => s.server) };
  }

  /**
   * The operator's view (the dashboard's language servers): the status of a workspace's servers
   * from its running sandbox only. Nothing starts (no sandbox, no server), the idle lease does not
   * move, and the answer is bounded by timeoutMs; a workspace without a running sandbox is
   * `{ sandbox: 'stopped' }`.
   */
  async operatorStatus(ws: string, timeoutMs: number): Promise<{ sandbox: 'running'; servers: CodeServerStatus[] } | { sandbox: 'stopped' }> {
    const h = this.deps.workspaces.liveHandle(ws);
    if (!h) return { sandbox: 'stopped' };
    const signal = AbortSignal.timeout(timeoutMs);
    const r = await this.deps.executor.request(h, 'code.status', { settings: this.settings, restricted: false }, { signal, timeoutMs });
    return { sandbox: 'running', servers: r.servers };
  }

  /**
   * apply false: the files the rename would change, each with its current SHA-256 and a unified
   * diff. apply true: the same edit set computed again, every file's hash compared with
   * expectedSha256 (a file missing from it, changed since, or no longer part of the rename is a
   * CONFLICT naming it), then written with one atomic fs.writeBatch (each file compared with its
   * hash again under the daemon's write lock): all files or none.
   */
  async rename(ws: string, args: CodePosition & { newName: string; apply: boolean; expectedSha256?: Record<string, string> }, caller: CodeCaller, signal?: AbortSignal) {
    if (args.expectedSha256 && Object.keys(args.expectedSha256).length > 500) throw new ServiceError('INVALID_ARGUMENT', 'expectedSha256: at most 500 paths (a rename changes at most 500 files)', { field: 'expectedSha256', limit: 500 });
    const r = await this.call('code_rename', ws, 'code.rename', { ...CodeIntelService.position(args), newName: args.newName }, caller, signal);
    const { files, ...resolved } = r;
    const preview = files.map((f) => ({ path: f.path, sha256: f.sha256, edits: f.edits, diff: unifiedDiff(f.path, f.before, f.after) }));
    if (!args.apply) return { ...resolved, newName: args.newName, applied: false, files: preview, count: preview.length };
    const expected = args.expectedSha256;
    if (!expected) throw new ServiceError('INVALID_ARGUMENT', 'expectedSha256: required with apply: true (the sha256 of each file code_rename with apply: false listed)', { field: 'expectedSha256' });
    for (const f of files) {
      if (!Object.hasOwn(expected, f.path)) throw new ServiceError('CONFLICT', `code_rename: ${f.path} would change but is not in expectedSha256 (the tree changed since the preview); preview again`, { field: 'expectedSha256', path: f.path, currentSha256: f.sha256 });
      if (expected[f.path] !== f.sha256) throw new ServiceError('CONFLICT', `code_rename: ${f.path} changed since the preview (sha256 ${f.sha256}, expected ${expected[f.path]}); nothing was written`, { field: 'expectedSha256', path: f.path, currentSha256: f.sha256, expectedSha256: expected[f.path] });
    }
    for (const p of Object.keys(expected)) {
      if (!files.some((f) => f.path === p)) throw new ServiceError('CONFLICT', `code_rename: ${p} is in expectedSha256 but the rename no longer changes it (the tree changed since the preview); preview again`, { field: 'expectedSha256', path: p });
    }
    if (files.length === 0) return { ...resolved, newName: args.newName, applied: true, files: [], count: 0 };
    let written;
    try {
      written = await this.call('code_rename', ws, 'fs.writeBatch', { files: files.map((f) => ({ path: f.path, content: f.after, expectedSha256: f.sha256 })), atomic: true }, caller, signal);
    } catch (err) {
      if (err instanceof ServiceError && err.code === 'CONFLICT') {
        const failures = (err.details.failures as Array<{ path?: string }> | undefined) ?? [];
        const path = failures[0]?.path;
        throw new ServiceError('CONFLICT', `code_rename: ${path ?? 'a file'} changed while the rename was written; nothing was written (the batch is atomic)`, { ...err.details, field: 'expectedSha256', ...(path ? { path } : {}) });
      }
      throw err;
    }
    const after = new Map(written.files.map((w) => [w.path, 'sha256' in w ? w.sha256 : undefined]));
    return { ...resolved, newName: args.newName, applied: true, files: preview.map((p) => ({ ...p, previousSha256: p.sha256, sha256: after.get(p.path) ?? p.sha256 })), count: preview.length };
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type CodeIntelDefinitionResult = Awaited<ReturnType<CodeIntelService['definition']>>;
export type CodeIntelReferencesResult = Awaited<ReturnType<CodeIntelService['references']>>;
export type CodeIntelHoverResult = Awaited<ReturnType<CodeIntelService['hover']>>;
export type CodeIntelSymbolsResult = Awaited<ReturnType<CodeIntelService['symbols']>>;
export type CodeIntelDiagnosticsResult = Awaited<ReturnType<CodeIntelService['diagnostics']>>;
export type CodeIntelStatusResult = Awaited<ReturnType<CodeIntelService['status']>>;
export type CodeIntelRenameResult = Awaited<ReturnType<CodeIntelService['rename']>>;
