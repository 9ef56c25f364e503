/**
 * Commands beyond one synchronous exec: async operations, background tasks with dependencies,
 * interactive terminals (shells and named sessions) and privileged runs (their grants come from
 * services/approvals). Owns tables: operations, tasks, terminals. Output of operations and tasks is kept on
 * disk (<dataDir>/state/output/<id>.log, merged stdout and stderr in the order written) up to a
 * configured cap, never in memory. State names: docs/commands.md.
 */
import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { mkdir, open, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { DB } from '../../store/db.js';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import type { AuditLog } from '../instance/index.js';
import type { CursorCodec } from '../../core/cursor.js';
import type { EphemeralBind, Executor, ExecResult } from '../../sandbox/executor.js';
import type { WorkspaceService } from '../workspaces/index.js';
import { mayReachOperation, type OperationViewer } from './access.js';
import { ServiceError } from '../../core/errors.js';
import { newId, randomToken } from '../../core/ids.js';
import { isoIn, nowIso } from '../../core/clock.js';
import { safeEqual, sha256Hex } from '../../core/crypto.js';

export type RunState = 'pending' | 'running' | 'succeeded' | 'failed' | 'timed_out' | 'cancelled' | 'dependency_failed' | 'interrupted';
const ENDED: RunState[] = ['succeeded', 'failed', 'timed_out', 'cancelled', 'dependency_failed', 'interrupted'];
const OUTPUT_PAGE = 65536;
/** Calls older than this are looked at for removal (each by its own time to live, which is at least this). */
const CALL_TTL_SCAN_MS = 60 * 60 * 1000;

interface Deps {
  db: DB;
  config: Config;
  log: Logger;
  audit: AuditLog;
  cursors: CursorCodec;
  executor: Executor;
  workspaces: WorkspaceService;
  /** Managed packages: the owner-bound releases the toolbox mounts. */
  packages?: { mountsFor(workspaceId: null): Promise<{ mounts: EphemeralBind[]; env: Record<string, string> }> };
}

interface Running {
  abort: AbortController;
  done: Promise<void>;
}

/** How a tool call run as an MCP task ended: the call's result, or the protocol error it failed with. */
export type CallOutcome = { result: Record<string, unknown>; isError: boolean } | { error: { code: number; message: string; data?: unknown } };

/** A tool call run as an MCP task, as its operation records it (docs/mcp-tasks.md). */
export interface CallRecord {
  id: string;
  tool: string;
  workspaceId: string | null;
  principal: string;
  /** The grant it was started under (JSON of the caller's access, operations and agent). */
  binding: string;
  state: RunState;
  reason: string | null;
  result: Record<string, unknown> | null;
  error: { code: number; message: string; data?: unknown } | null;
  /** What the call waits for from the client (an approval to open), while it waits. */
  input: Record<string, unknown> | null;
  statusMessage: string | null;
  createdAt: string;
  updatedAt: string;
  endedAt: string | null;
  ttlMs: number;
}

/** What a call run as a task is handed: its signal, and where its live output and status go. */
export interface CallHandle {
  id: string;
  signal: AbortSignal;
  /** Appends to the operation's output log (operation_status reads it), within the output cap. */
  output(chunk: Buffer): void;
  /** A short line on where the call is (kept in memory while it runs; the last one is recorded). */
  status(message: string): void;
  /** The input the call waits for (null when it no longer waits); recorded at once. */
  input(request: Record<string, unknown> | null): void;
}

/**
 * A run's output log. Its bytes are the workspace's: a write that fails (ENOSPC, EIO) must not end
 * the runner (an 'error' with no listener would), so it ends the log and says so through onError.
 */
function outputLog(file: string, onError: () => void): WriteStream {
  const out = createWriteStream(file, { flags: 'a', mode: 0o600 });
  out.on('error', onError);
  return out;
}

/** Ends a log (when there is one) and waits until it is closed, written or failed. */
function closeLog(out: WriteStream | undefined): Promise<void> {
  if (!out || out.closed) return Promise.resolve();
  return new Promise<void>((resolve) => {
    out.once('close', () => resolve());
    out.end();
  });
}

function stateOf(result: ExecResult): { state: RunState; reason: string | null } {
  if (result.cancelled) return { state: 'cancelled', reason: 'cancelled' };
  if (result.timedOut) return { state: 'timed_out', reason: 'the time limit passed; the whole process tree was killed' };
  if (result.exitCode === 0) return { state: 'succeeded', reason: null };
  return { state: 'failed', reason: result.signal ? `ended by ${result.signal}` : `exit code ${result.exitCode}` };
}

export class CommandService {
  private readonly running = new Map<string, Running>();
  private readonly outDir: string;
  private stopping = false;

  constructor(private readonly deps: Deps) {
    this.outDir = join(deps.config.dataDir, 'state', 'output');
  }

  private get outputCap(): number {
    return this.deps.config.outputMaxMb * 1024 * 1024;
  }

  // ---------- shared: running a command with output on disk ----------

  /** Starts a command through the workspace daemon, streaming its output to the record's log. */
  private launch(table: 'operations' | 'tasks', id: string, workspaceId: string, command: string, cwd: string, timeoutMs: number): void {
    const abort = new AbortController();
    const file = join(this.outDir, `${id}.log`);
    let bytes = 0;
    let truncated = false;
    let out: WriteStream | undefined;
    const cap = this.outputCap;
    const write = (chunk: Buffer) => {
      bytes += chunk.length;
      if (!out) return;
      const room = cap - (bytes - chunk.length);
      if (room <= 0) {
        truncated = true;
        return;
      }
      out.write(room >= chunk.length ? chunk : chunk.subarray(0, room));
      if (room < chunk.length) truncated = true;
    };
    const done = (async () => {
      await mkdir(this.outDir, { recursive: true, mode: 0o700 });
      out = outputLog(file, () => {
        // The log could not be written (the disk is full): the output so far is kept, the rest is not.
        truncated = true;
        out = undefined;
      });
      let final: { state: RunState; reason: string | null; exitCode: number | null; signal: string | null };
      try {
        // Async operations and tasks are background work: what they leave running is theirs to keep.
        const r = await this.deps.workspaces.exec(workspaceId, { command, cwd, timeoutMs, maxOutputBytes: 4096, keepBackground: true }, (_s, c) => write(c), abort.signal);
        const s = stateOf(r);
        final = { ...s, exitCode: r.exitCode, signal: r.signal };
      } catch (caught) {
        // 'interrupted' is kept for runs a restart or a lost sandbox cut short; a command that could
        // not start (its cwd vanished, the workspace stopped) or failed otherwise ends 'failed'.
        const err = caught as ServiceError;
        const interrupted = err.code === 'UNAVAILABLE';
        final = { state: abort.signal.aborted ? 'cancelled' : interrupted ? 'interrupted' : 'failed', reason: err.message ?? String(caught), exitCode: null, signal: null };
      }
      if (this.stopping && final.state === 'cancelled') final = { ...final, state: 'interrupted', reason: 'interrupted by a service shutdown; output so far is kept' };
      await closeLog(out);
      this.deps.db
        .prepare(`UPDATE ${table} SET state = ?, reason = ?, exit_code = ?, signal = ?, output_bytes = ?, output_truncated = ?, ended_at = ? WHERE id = ?`)
        .run(final.state, final.reason, final.exitCode, final.signal, bytes, truncated ? 1 : 0, nowIso(), id);
      this.running.delete(id);
      if (table === 'tasks') this.schedule(workspaceId);
    })().catch((e) => this.deps.log.error({ err: e, id }, 'run bookkeeping failed'));
    this.running.set(id, { abort, done });
  }

  /** A page of a record's output log from a cursor. */
  private async readOutput(kind: string, id: string, cursor: string | undefined): Promise<{ output: string; cursor: string | null; more: boolean }> {
    const from = cursor ? this.deps.cursors.decode<{ o: number; i: string }>(kind, cursor) : { o: 0, i: id };
    if (from.i !== id) throw new ServiceError('INVALID_ARGUMENT', 'cursor: belongs to another record', { field: 'cursor' });
    const file = join(this.outDir, `${id}.log`);
    let size = 0;
    try {
      size = (await stat(file)).size;
    } catch {
      return { output: '', cursor: this.deps.cursors.encode(kind, { o: from.o, i: id }), more: false };
    }
    const fh = await open(file, 'r');
    try {
      const len = Math.max(0, Math.min(OUTPUT_PAGE, size - from.o));
      const buf = Buffer.alloc(len);
      if (len > 0) await fh.read(buf, 0, len, from.o);
      // Do not split a UTF-8 character across pages.
      let end = len;
      for (let i = Math.max(0, len - 4); i < len; i++) {
        const b = buf[i]!;
        const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
        if (need > 1 && i + need > len) {
          end = i;
          break;
        }
      }
      const next = from.o + end;
      return { output: buf.subarray(0, end).toString('utf8'), cursor: this.deps.cursors.encode(kind, { o: next, i: id }), more: next < size };
    } finally {
      await fh.close();
    }
  }

  // ---------- operations ----------

  /**
   * Checks a cwd at the call the way a synchronous exec does (the daemon resolves it under the
   * workspace: outside, NUL, missing or not a directory is refused), so an async run or a task is
   * refused at once with details.field = 'cwd' instead of failing later.
   */
  private async checkCwd(workspaceId: string, cwd: string, signal?: AbortSignal): Promise<void> {
    try {
      await this.deps.workspaces.exec(workspaceId, { command: 'true', cwd, timeoutMs: 15_000, maxOutputBytes: 2 }, undefined, signal);
    } catch (err) {
      if (err instanceof ServiceError && /\bcwd\b/.test(err.message) && !('field' in (err.details ?? {}))) {
        throw new ServiceError(err.code, err.message.startsWith('cwd') ? err.message : `cwd: ${err.message}`, { ...err.details, field: 'cwd' });
      }
      throw err;
    }
  }

  async startOperation(workspaceId: string, tool: string, command: string, cwd: string, timeoutMs: number, signal?: AbortSignal): Promise<Record<string, unknown>> {
    this.deps.workspaces.get(workspaceId); // exists
    await this.checkCwd(workspaceId, cwd, signal);
    const id = newId('operation');
    this.deps.db
      .prepare('INSERT INTO operations (id, workspace_id, tool, command, cwd, timeout_ms, state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
      .run(id, workspaceId, tool, command, cwd, timeoutMs, 'running', nowIso());
    this.launch('operations', id, workspaceId, command, cwd, timeoutMs);
    return { operationId: id, state: 'running', workspaceId, async: true };
  }

  /**
   * An operation by id, as `viewer` may reach it: the rule tasks/get applies too
   * (access.ts: a task's own principal only, and a tool within the caller's grant now);
   * for anyone else it does not exist. No viewer: the runner's own read.
   */
  private opRow(id: string, viewer?: OperationViewer): Record<string, unknown> {
    const r = this.deps.db.prepare('SELECT * FROM operations WHERE id = ?').get(id) as Record<string, unknown> | undefined;
    if (!r || (viewer !== undefined && !mayReachOperation({ principal: typeof r.principal === 'string' ? r.principal : null, tool: String(r.tool) }, viewer)))
      throw new ServiceError('NOT_FOUND', `operationId: no operation ${id}`, { field: 'operationId' });
    return r;
  }

  private describeRun(row: Record<string, unknown>, idField: string): Record<string, unknown> {
    const ended = row.ended_at ? Date.parse(row.ended_at as string) : Date.now();
    const started = Date.parse((row.started_at ?? row.created_at) as string);
    return {
      [idField]: row.id,
      workspaceId: row.workspace_id,
      command: row.command,
      cwd: row.cwd,
      state: row.state,
      reason: row.reason ?? null,
      exitCode: row.exit_code ?? null,
      signal: row.signal ?? null,
      timedOut: row.state === 'timed_out',
      durationMs: row.state === 'pending' ? 0 : Math.max(0, ended - started),
      outputBytes: row.output_bytes ?? 0,
      outputTruncated: row.output_truncated === 1,
      createdAt: row.created_at,
      endedAt: row.ended_at ?? null,
    };
  }

  async operationStatus(id: string, cursor: string | undefined, viewer?: OperationViewer): Promise<Record<string, unknown>> {
    const r = this.opRow(id, viewer);
    const out = await this.readOutput('op_output', id, cursor);
    return { ...this.describeRun(this.opRow(id), 'operationId'), output: out.output, nextCursor: out.cursor, moreOutput: out.more, outputNote: 'stdout and stderr merged in the order written', tool: r.tool };
  }

  async operationWait(id: string, timeoutMs: number, signal: AbortSignal, progress?: (p: number, t?: number, m?: string) => void, viewer?: OperationViewer): Promise<Record<string, unknown>> {
    this.opRow(id, viewer);
    const run = this.running.get(id);
    let waitedOut = false;
    if (run) {
      // Progress (issue #16): a tick a second while waiting, where the client sent a progress token.
      const started = Date.now();
      const tick = progress ? setInterval(() => progress(Date.now() - started, timeoutMs, `waiting for operation ${id}: ${Math.round((Date.now() - started) / 1000)} s`), 1000) : undefined;
      void run.done.finally(() => clearInterval(tick));
      signal.addEventListener('abort', () => clearInterval(tick));
      await Promise.race([
        run.done,
        new Promise<void>((resolve) => {
          const timeout = setTimeout(() => {
            waitedOut = true;
            clearInterval(tick);
            resolve();
          }, timeoutMs);
          signal.addEventListener('abort', () => (clearTimeout(timeout), resolve()));
        }),
      ]);
    }
    const status = await this.operationStatus(id, undefined, viewer);
    return { ...status, ended: ENDED.includes(status.state as RunState), waitTimedOut: waitedOut };
  }

  async operationCancel(id: string, viewer?: OperationViewer): Promise<Record<string, unknown>> {
    const r = this.opRow(id, viewer);
    const run = this.running.get(id);
    if (!run) return { operationId: id, state: r.state, alreadyEnded: true };
    run.abort.abort();
    await run.done;
    return { operationId: id, state: this.opRow(id).state, alreadyEnded: false };
  }

  // ---------- tasks ----------

  private taskRow(workspaceId: string, id: string, field = 'taskId'): Record<string, unknown> {
    const r = this.deps.db.prepare('SELECT * FROM tasks WHERE id = ?').get(id) as Record<string, unknown> | undefined;
    if (!r || r.workspace_id !== workspaceId) throw new ServiceError('NOT_FOUND', `${field}: no task ${id} in workspace ${workspaceId}`, { field });
    return r;
  }

  async runTask(workspaceId: string, args: { command: string; cwd: string; timeoutMs: number; dependsOn: string[] }, signal?: AbortSignal): Promise<Record<string, unknown>> {
    this.deps.workspaces.get(workspaceId);
    const deps = [...new Set(args.dependsOn)];
    for (const dep of deps) this.taskRow(workspaceId, dep, 'dependsOn'); // unknown ids refused
    await this.checkCwd(workspaceId, args.cwd, signal);
    // A new task can depend only on tasks that already exist, so no cycle can ever form.
    const id = newId('task');
    this.deps.db
      .prepare('INSERT INTO tasks (id, workspace_id, command, cwd, timeout_ms, depends_on, state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
      .run(id, workspaceId, args.command, args.cwd, args.timeoutMs, JSON.stringify(deps), 'pending', nowIso());
    this.schedule(workspaceId);
    return this.describeTask(this.taskRow(workspaceId, id));
  }

  /** Starts pending tasks whose dependencies all succeeded; fails those with a failed dependency. */
  private schedule(workspaceId: string): void {
    const pending = this.deps.db.prepare("SELECT * FROM tasks WHERE workspace_id = ? AND state = 'pending' ORDER BY created_at").all(workspaceId) as Array<Record<string, unknown>>;
    let changed = true;
    while (changed) {
      changed = false;
      for (const record of pending) {
        if (record.state !== 'pending') continue;
        const deps = JSON.parse(record.depends_on as string) as string[];
        const states = deps.map((d) => (this.deps.db.prepare('SELECT state FROM tasks WHERE id = ?').pluck().get(d) as RunState));
        const bad = deps.find((_, i) => ['failed', 'timed_out', 'cancelled', 'dependency_failed', 'interrupted'].includes(states[i]!));
        if (bad) {
          const reason = `dependency ${bad} ended ${this.deps.db.prepare('SELECT state FROM tasks WHERE id = ?').pluck().get(bad)}; this task did not run`;
          this.deps.db.prepare("UPDATE tasks SET state = 'dependency_failed', reason = ?, ended_at = ? WHERE id = ?").run(reason, nowIso(), record.id);
          record.state = 'dependency_failed';
          changed = true;
        } else if (states.every((s) => s === 'succeeded')) {
          this.deps.db.prepare("UPDATE tasks SET state = 'running', started_at = ? WHERE id = ?").run(nowIso(), record.id);
          record.state = 'running';
          this.launch('tasks', record.id as string, workspaceId, record.command as string, record.cwd as string, record.timeout_ms as number);
        }
      }
    }
  }

  private describeTask(row: Record<string, unknown>): Record<string, unknown> {
    return { ...this.describeRun(row, 'taskId'), dependsOn: JSON.parse(row.depends_on as string), startedAt: row.started_at ?? null };
  }

  async taskStatus(workspaceId: string, id: string, cursor: string | undefined): Promise<Record<string, unknown>> {
    this.taskRow(workspaceId, id);
    const out = await this.readOutput('task_output', id, cursor);
    return { ...this.describeTask(this.taskRow(workspaceId, id)), output: out.output, nextCursor: out.cursor, moreOutput: out.more, outputNote: 'stdout and stderr merged in the order written' };
  }

  async taskCancel(workspaceId: string, id: string): Promise<Record<string, unknown>> {
    const row = this.taskRow(workspaceId, id);
    if (row.state === 'pending') {
      this.deps.db.prepare("UPDATE tasks SET state = 'cancelled', reason = 'cancelled before it started', ended_at = ? WHERE id = ?").run(nowIso(), id);
      this.schedule(workspaceId);
      return { taskId: id, state: 'cancelled', alreadyEnded: false };
    }
    const run = this.running.get(id);
    if (!run) return { taskId: id, state: row.state, alreadyEnded: true };
    run.abort.abort();
    await run.done;
    return { taskId: id, state: this.taskRow(workspaceId, id).state, alreadyEnded: false, note: 'completed effects are not rolled back' };
  }

  listTasks(workspaceId: string, cursor: string | undefined, limit: number): Record<string, unknown> {
    this.deps.workspaces.get(workspaceId); // an unknown workspace is NOT_FOUND, as for every other tool
    const after = cursor ? this.deps.cursors.decode<{ c: string; i: string }>('tasks_list', cursor) : null;
    const rows = this.deps.db
      .prepare(`SELECT * FROM tasks WHERE workspace_id = ? ${after ? 'AND (created_at > ? OR (created_at = ? AND id > ?))' : ''} ORDER BY created_at, id LIMIT ?`)
      .all(workspaceId, ...(after ? [after.c, after.c, after.i] : []), limit + 1) as Array<Record<string, unknown>>;
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    return {
      tasks: page.map((r) => this.describeTask(r)),
      nextCursor: rows.length > limit && last ? this.deps.cursors.encode('tasks_list', { c: last.created_at, i: last.id }) : null,
    };
  }

  graph(workspaceId: string): Record<string, unknown> {
    this.deps.workspaces.get(workspaceId);
    const rows = this.deps.db.prepare('SELECT id, command, state, depends_on FROM tasks WHERE workspace_id = ? ORDER BY created_at, id').all(workspaceId) as Array<Record<string, string>>;
    return {
      workspaceId,
      nodes: rows.map((r) => ({ taskId: r.id, state: r.state, command: r.command!.length > 200 ? r.command!.slice(0, 200) + '…' : r.command })),
      edges: rows.flatMap((r) => (JSON.parse(r.depends_on!) as string[]).map((dep) => ({ from: dep, to: r.id, meaning: `${r.id} runs after ${dep} succeeds` }))),
    };
  }

  // ---------- tool calls run as MCP tasks ----------

  private readonly callStatus = new Map<string, string>();

  /**
   * Starts a tool call as an operation of its own (an MCP task, docs/mcp-tasks.md): the row exists
   * before this returns (a tasks/get for the id resolves at once), `run` goes on in the background
   * with the operation's signal, and its outcome is recorded on the row. After a restart a call
   * that was running is interrupted like every operation (startup), with its output kept.
   */
  startCall(opts: { tool: string; workspaceId: string | null; command: string; principal: string; binding: string; ttlMs: number; run: (h: CallHandle) => Promise<CallOutcome> }): CallRecord {
    this.pruneCalls();
    const id = newId('operation');
    const now = nowIso();
    this.deps.db
      .prepare(
        "INSERT INTO operations (id, workspace_id, tool, command, cwd, timeout_ms, state, created_at, principal, binding_json, updated_at, ttl_ms) VALUES (?, ?, ?, ?, '.', 0, 'running', ?, ?, ?, ?, ?)",
      )
      .run(id, opts.workspaceId ?? '', opts.tool, opts.command, now, opts.principal, opts.binding, now, opts.ttlMs);
    const abort = new AbortController();
    const file = join(this.outDir, `${id}.log`);
    const cap = this.outputCap;
    let bytes = 0;
    let truncated = false;
    let out: WriteStream | undefined;
    let logFailed = false;
    const handle: CallHandle = {
      id,
      signal: abort.signal,
      output: (chunk) => {
        bytes += chunk.length;
        const room = cap - (bytes - chunk.length);
        if (room < chunk.length) truncated = true;
        if (room <= 0) return;
        if (logFailed) return;
        if (!out) {
          try {
            mkdirSync(this.outDir, { recursive: true, mode: 0o700 });
          } catch {
            logFailed = truncated = true;
            return;
          }
          out = outputLog(file, () => {
            logFailed = truncated = true;
          });
        }
        out.write(room >= chunk.length ? chunk : chunk.subarray(0, room));
      },
      status: (message) => {
        this.callStatus.set(id, message.slice(0, 500));
      },
      input: (request) => {
        this.deps.db.prepare('UPDATE operations SET input_json = ?, updated_at = ? WHERE id = ?').run(request === null ? null : JSON.stringify(request), nowIso(), id);
      },
    };
    const done = (async () => {
      let outcome: CallOutcome;
      try {
        outcome = await opts.run(handle);
      } catch (e) {
        outcome = { error: { code: -32603, message: (e as Error)?.message ?? String(e) } };
      }
      await closeLog(out);
      const cancelled = abort.signal.aborted;
      const state: RunState = this.stopping && cancelled ? 'interrupted' : cancelled ? 'cancelled' : 'error' in outcome || outcome.isError ? 'failed' : 'succeeded';
      const reason = state === 'interrupted' ? 'interrupted by a service shutdown; output so far is kept' : state === 'cancelled' ? 'cancelled by the client' : 'error' in outcome ? outcome.error.message : null;
      const end = nowIso();
      this.deps.db
        .prepare('UPDATE operations SET state = ?, reason = ?, result_json = ?, error_json = ?, input_json = NULL, status_message = ?, output_bytes = ?, output_truncated = ?, ended_at = ?, updated_at = ? WHERE id = ?')
        .run(
          state,
          reason,
          'result' in outcome && !cancelled ? JSON.stringify(outcome.result) : null,
          'error' in outcome && !cancelled ? JSON.stringify(outcome.error) : null,
          this.callStatus.get(id) ?? null,
          bytes,
          truncated ? 1 : 0,
          end,
          end,
          id,
        );
      this.callStatus.delete(id);
      this.running.delete(id);
    })().catch((e) => this.deps.log.error({ err: e, id }, 'call bookkeeping failed'));
    this.running.set(id, { abort, done });
    return this.call(id)!;
  }

  /** A call run as an MCP task, or null when there is none by that id (or it is an exec operation). */
  call(id: string): CallRecord | null {
    const r = this.deps.db.prepare('SELECT * FROM operations WHERE id = ? AND principal IS NOT NULL').get(id) as Record<string, unknown> | undefined;
    if (!r) return null;
    const json = <T>(v: unknown): T | null => (typeof v === 'string' ? (JSON.parse(v) as T) : null);
    return {
      id: r.id as string,
      tool: r.tool as string,
      workspaceId: (r.workspace_id as string) || null,
      principal: r.principal as string,
      binding: r.binding_json as string,
      state: r.state as RunState,
      reason: (r.reason as string | null) ?? null,
      result: json(r.result_json),
      error: json(r.error_json),
      input: json(r.input_json),
      statusMessage: this.callStatus.get(id) ?? (r.status_message as string | null) ?? null,
      createdAt: r.created_at as string,
      updatedAt: (r.updated_at as string | null) ?? (r.created_at as string),
      endedAt: (r.ended_at as string | null) ?? null,
      ttlMs: (r.ttl_ms as number | null) ?? 0,
    };
  }

  /** The calls one principal started, oldest first, from a cursor (for the 2025-11-25 tasks/list). */
  listCalls(principal: string, cursor: string | undefined, limit: number): { calls: CallRecord[]; nextCursor: string | null } {
    const after = cursor ? this.deps.cursors.decode<{ c: string; i: string }>('mcp_tasks', cursor) : null;
    const ids = this.deps.db
      .prepare(`SELECT id FROM operations WHERE principal = ? ${after ? 'AND (created_at > ? OR (created_at = ? AND id > ?))' : ''} ORDER BY created_at, id LIMIT ?`)
      .pluck()
      .all(principal, ...(after ? [after.c, after.c, after.i] : []), limit + 1) as string[];
    const calls = ids.slice(0, limit).map((id) => this.call(id)!);
    const last = calls[calls.length - 1];
    return { calls, nextCursor: ids.length > limit && last ? this.deps.cursors.encode('mcp_tasks', { c: last.createdAt, i: last.id }) : null };
  }

  /** Resolves once the call has ended (at once when it is not running in this process). */
  async callEnded(id: string, signal?: AbortSignal): Promise<void> {
    const run = this.running.get(id);
    if (!run) return;
    await Promise.race([run.done, new Promise<void>((resolve) => (signal?.aborted ? resolve() : signal?.addEventListener('abort', () => resolve(), { once: true })))]);
  }

  /** Asks a running call to stop (its signal aborts); false when it is not running. */
  cancelCall(id: string): boolean {
    const run = this.running.get(id);
    if (!run) return false;
    run.abort.abort();
    return true;
  }

  /** Calls whose time to live has passed since they were created, and that have ended, are removed with their output. */
  private pruneCalls(): void {
    const due = this.deps.db
      .prepare("SELECT id, created_at, ttl_ms FROM operations WHERE principal IS NOT NULL AND ended_at IS NOT NULL AND ttl_ms > 0 AND created_at < ?")
      .all(new Date(Date.now() - CALL_TTL_SCAN_MS).toISOString()) as Array<{ id: string; created_at: string; ttl_ms: number }>;
    for (const r of due) {
      if (Date.parse(r.created_at) + r.ttl_ms > Date.now()) continue;
      this.deps.db.prepare('DELETE FROM operations WHERE id = ?').run(r.id);
      void rm(join(this.outDir, `${r.id}.log`), { force: true });
    }
  }

  // ---------- terminals: shells and sessions ----------

  private termRow(workspaceId: string, id: string, kind: 'shell' | 'session'): Record<string, unknown> {
    const r = this.deps.db.prepare('SELECT * FROM terminals WHERE id = ?').get(id) as Record<string, unknown> | undefined;
    const field = kind === 'shell' ? 'shellId' : 'sessionId';
    if (!r || r.workspace_id !== workspaceId || r.kind !== kind) throw new ServiceError('NOT_FOUND', `${field}: no ${kind} ${id} in workspace ${workspaceId}`, { field });
    return r;
  }

  private describeTerm(row: Record<string, unknown>): Record<string, unknown> {
    const idField = row.kind === 'shell' ? 'shellId' : 'sessionId';
    return { [idField]: row.id, workspaceId: row.workspace_id, ...(row.kind === 'session' ? { name: row.name } : {}), cwd: row.cwd, state: row.state, reason: row.reason ?? null, createdAt: row.created_at, closedAt: row.closed_at ?? null };
  }

  async openTerminal(workspaceId: string, kind: 'shell' | 'session', cwd: string, name?: string): Promise<Record<string, unknown>> {
    if (kind === 'session' && name) {
      const existing = this.deps.db.prepare("SELECT * FROM terminals WHERE workspace_id = ? AND kind = 'session' AND name = ? AND state = 'open'").get(workspaceId, name) as Record<string, unknown> | undefined;
      if (existing) return { ...this.describeTerm(existing), reattached: true };
    }
    const h = await this.deps.workspaces.activeHandle(workspaceId);
    const pty = await this.deps.executor.request(h, 'pty.open', { cwd }, { timeoutMs: 15_000 });
    const id = newId(kind === 'shell' ? 'shell' : 'session');
    this.deps.db
      .prepare("INSERT INTO terminals (id, workspace_id, kind, name, cwd, state, pty_id, created_at) VALUES (?, ?, ?, ?, ?, 'open', ?, ?)")
      .run(id, workspaceId, kind, name ?? null, cwd, pty.ptyId, nowIso());
    return { ...this.describeTerm(this.termRow(workspaceId, id, kind)), reattached: false };
  }

  async terminalIo(workspaceId: string, kind: 'shell' | 'session', id: string, input: string | undefined, cursor: string | undefined, waitMs: number, signal: AbortSignal): Promise<Record<string, unknown>> {
    const row = this.termRow(workspaceId, id, kind);
    if (row.state !== 'open') throw new ServiceError('FAILED_PRECONDITION', `${kind} ${id} is ${row.state}${row.reason ? ` (${row.reason})` : ''}; open a new one`, { state: row.state });
    const from = cursor ? this.deps.cursors.decode<{ o: number; i: string }>('term_output', cursor) : null;
    if (from && from.i !== id) throw new ServiceError('INVALID_ARGUMENT', 'cursor: belongs to another terminal', { field: 'cursor' });
    const h = await this.deps.workspaces.activeHandle(workspaceId);
    let res: { output: string; cursor: number; droppedBytes: number; exited: boolean; exitCode: number | null; more: boolean };
    try {
      res = await this.deps.executor.request(h, 'pty.io', { ptyId: row.pty_id as string, input, cursor: from?.o, waitMs }, { signal, timeoutMs: waitMs + 15_000 });
    } catch (err) {
      if (err instanceof ServiceError && err.code === 'NOT_FOUND') {
        this.endTerminal(id, 'interrupted', 'the terminal ended with its sandbox (the workspace expired, was resumed or the service restarted)');
        throw new ServiceError('FAILED_PRECONDITION', `${kind} ${id} ended with its sandbox; open a new one`, { state: 'interrupted' });
      }
      throw err;
    }
    if (res.exited) this.endTerminal(id, 'ended', `the shell exited${res.exitCode !== null ? ` with code ${res.exitCode}` : ''}`);
    return {
      [kind === 'shell' ? 'shellId' : 'sessionId']: id,
      output: res.output,
      nextCursor: this.deps.cursors.encode('term_output', { o: res.cursor, i: id }),
      moreOutput: res.more,
      droppedBytes: res.droppedBytes,
      exited: res.exited,
      exitCode: res.exitCode,
    };
  }

  private endTerminal(id: string, state: 'ended' | 'closed' | 'interrupted', reason: string): void {
    this.deps.db.prepare("UPDATE terminals SET state = ?, reason = ?, closed_at = coalesce(closed_at, ?) WHERE id = ? AND state = 'open'").run(state, reason, nowIso(), id);
  }

  async closeTerminal(workspaceId: string, kind: 'shell' | 'session', id: string): Promise<Record<string, unknown>> {
    const row = this.termRow(workspaceId, id, kind);
    if (row.state !== 'open') return { ...this.describeTerm(row), alreadyClosed: true };
    try {
      const h = await this.deps.workspaces.activeHandle(workspaceId);
      await this.deps.executor.request(h, 'pty.close', { ptyId: row.pty_id as string }, { timeoutMs: 10_000 });
    } catch (e) {
      this.deps.log.debug({ err: e, id }, 'terminal close: sandbox gone');
    }
    this.endTerminal(id, 'closed', 'closed by the client');
    return { ...this.describeTerm(this.termRow(workspaceId, id, kind)), alreadyClosed: false };
  }

  listSessions(workspaceId: string, cursor: string | undefined, limit: number): Record<string, unknown> {
    this.deps.workspaces.get(workspaceId);
    const after = cursor ? this.deps.cursors.decode<{ c: string; i: string }>('sessions_list', cursor) : null;
    const rows = this.deps.db
      .prepare(`SELECT * FROM terminals WHERE workspace_id = ? AND kind = 'session' ${after ? 'AND (created_at > ? OR (created_at = ? AND id > ?))' : ''} ORDER BY created_at, id LIMIT ?`)
      .all(workspaceId, ...(after ? [after.c, after.c, after.i] : []), limit + 1) as Array<Record<string, unknown>>;
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    return { sessions: page.map((r) => this.describeTerm(r)), nextCursor: rows.length > limit && last ? this.deps.cursors.encode('sessions_list', { c: last.created_at, i: last.id }) : null };
  }

  /**
   * The working directory of a privileged run as its grant binds it and the owner sees it: relative
   * to the workspace, `.` and empty segments dropped (`./src/` is `src`, `.` is `.`). Refused before
   * any approval is asked for or spent: absolute, `..` anywhere, a NUL, or (checked through the
   * workspace daemon, as the workspace user, like every exec) missing or not a directory.
   */
  async privilegedCwd(workspaceId: string, cwd: string, signal?: AbortSignal): Promise<string> {
    if (cwd.includes('\0')) throw new ServiceError('INVALID_ARGUMENT', 'cwd: NUL characters are not allowed in a path', { field: 'cwd' });
    const parts = cwd.split('/').filter((p) => p !== '' && p !== '.');
    if (cwd.startsWith('/') || parts.includes('..')) throw new ServiceError('PERMISSION_DENIED', `cwd: ${JSON.stringify(cwd)} leaves the workspace (privileged runs take a workspace-relative directory without ..)`, { field: 'cwd' });
    const rel = parts.join('/') || '.';
    await this.deps.workspaces.activeHandle(workspaceId);
    await this.checkCwd(workspaceId, rel, signal);
    return rel;
  }

  /**
   * Runs an approved privileged command: uid 0 in its own user namespace, workspace bound, no
   * network. `cwd` is what privilegedCwd returned (the directory the grant binds).
   */
  async runPrivileged(workspaceId: string, command: string, cwd: string, timeoutMs: number, maxOutputBytes: number, signal: AbortSignal): Promise<ExecResult> {
    await this.deps.workspaces.activeHandle(workspaceId);
    const root = this.deps.workspaces.rootDir(workspaceId);
    const parts = cwd.split('/').filter((p) => p !== '' && p !== '.');
    if (cwd.startsWith('/') || parts.includes('..')) throw new ServiceError('PERMISSION_DENIED', `cwd: ${cwd} leaves the workspace`, { field: 'cwd' });
    return this.deps.executor.runEphemeral({
      binds: [
        { source: join(root, 'repo'), target: '/workspace' },
        { source: join(root, 'home'), target: '/home/user' },
      ],
      limits: this.deps.workspaces.sandboxLimits,
      network: 'none',
      command,
      cwd: parts.length ? `/workspace/${parts.join('/')}` : '/workspace',
      timeoutMs,
      maxOutputBytes,
      signal,
      privileged: true,
    });
  }

  /** The bash toolbox target: a disposable sandbox with no network, checkout, secrets or workspace. */
  async runToolbox(command: string, timeoutMs: number, maxOutputBytes: number, signal: AbortSignal): Promise<ExecResult> {
    if (!this.deps.config.packagesEnabled)
      throw new ServiceError('FAILED_PRECONDITION', 'target: the toolbox exists only when the operator enables managed packages (--packages-enabled / ATELIER_PACKAGES_ENABLED); use target workspace', { field: 'target' });
    // The owner-bound managed-package releases, read-only, their binaries on PATH.
    const pkgs = (await this.deps.packages?.mountsFor(null)) ?? { mounts: [], env: {} };
    return this.deps.executor.runEphemeral({
      binds: pkgs.mounts,
      limits: this.deps.workspaces.sandboxLimits,
      network: 'none',
      command,
      env: pkgs.env,
      cwd: '/tmp',
      timeoutMs,
      maxOutputBytes,
      signal,
    });
  }

  // ---------- restart and cleanup ----------

  /** After a restart: what was running is interrupted (its output so far stays readable). */
  startup(): void {
    const why = 'interrupted by a service restart; output so far is kept';
    const now = nowIso();
    this.deps.db.prepare("UPDATE operations SET state = 'interrupted', reason = ?, ended_at = ?, updated_at = ? WHERE state = 'running'").run(why, now, now);
    this.deps.db.prepare("UPDATE tasks SET state = 'interrupted', reason = ?, ended_at = ? WHERE state = 'running'").run(why, nowIso());
    this.deps.db.prepare("UPDATE terminals SET state = 'interrupted', reason = ?, closed_at = ? WHERE state = 'open'").run('the terminal ended with the service restart', nowIso());
    this.deps.db.prepare('UPDATE operations SET input_json = NULL, updated_at = ? WHERE principal IS NOT NULL AND input_json IS NOT NULL').run(nowIso());
    const ws = this.deps.db.prepare("SELECT DISTINCT workspace_id FROM tasks WHERE state = 'pending'").pluck().all() as string[];
    for (const w of ws) this.schedule(w);
    this.pruneCalls();
  }

  /** When a workspace closes: stop what runs and remove its output files. */
  async forgetWorkspace(workspaceId: string): Promise<void> {
    const ids = [
      ...(this.deps.db.prepare('SELECT id FROM operations WHERE workspace_id = ?').pluck().all(workspaceId) as string[]),
      ...(this.deps.db.prepare('SELECT id FROM tasks WHERE workspace_id = ?').pluck().all(workspaceId) as string[]),
    ];
    for (const id of ids) this.running.get(id)?.abort.abort();
    for (const id of ids) await rm(join(this.outDir, `${id}.log`), { force: true });
  }

  async shutdown(): Promise<void> {
    this.stopping = true;
    for (const r of this.running.values()) r.abort.abort();
    await Promise.all([...this.running.values()].map((r) => r.done.catch(() => undefined)));
  }
}
