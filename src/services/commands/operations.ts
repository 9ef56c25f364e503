/**
 * Async operations (docs/commands.md): exec_run's async runs (operation_status, operation_wait,
 * operation_cancel, as the caller's access may reach them: access.ts), and tool calls run as MCP
 * tasks (docs/mcp-tasks.md), each an operation of its own. Owns table: operations. On tasks.ts;
 * terminals.ts builds on it.
 */
import { mkdirSync, type WriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { mayReachOperation, type OperationViewer } from './access.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';
import { CALL_TTL_SCAN_MS, CallHandle, CallOutcome, CallRecord, ENDED, RunState, closeLog, outputLog } from './records.js';
import { CommandTasks } from './tasks.js';

export class CommandOperations extends CommandTasks {
  async startOperation(workspaceId: string, tool: string, command: string, cwd: string, timeoutMs: number, signal?: AbortSignal) {
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
  protected opRow(id: string, viewer?: OperationViewer) {
    const r = this.deps.db.prepare('SELECT * FROM operations WHERE id = ?').get(id) as Record<string, unknown> | undefined;
    if (!r || (viewer !== undefined && !mayReachOperation({ principal: typeof r.principal === 'string' ? r.principal : null, tool: String(r.tool) }, viewer)))
      throw new ServiceError('NOT_FOUND', `operationId: no operation ${id}`, { field: 'operationId' });
    return r;
  }

  async operationStatus(id: string, cursor: string | undefined, viewer?: OperationViewer) {
    const r = this.opRow(id, viewer);
    const out = await this.readOutput('op_output', id, cursor);
    return { ...this.describeRun(this.opRow(id), 'operationId'), output: out.output, nextCursor: out.cursor, moreOutput: out.more, outputNote: 'stdout and stderr merged in the order written', tool: r.tool };
  }

  async operationWait(id: string, timeoutMs: number, signal: AbortSignal, progress?: (p: number, t?: number, m?: string) => void, viewer?: OperationViewer) {
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

  async operationCancel(id: string, viewer?: OperationViewer) {
    const r = this.opRow(id, viewer);
    const run = this.running.get(id);
    if (!run) return { operationId: id, state: r.state, alreadyEnded: true };
    run.abort.abort();
    await run.done;
    return { operationId: id, state: this.opRow(id).state, alreadyEnded: false };
  }

  // ---------- tool calls run as MCP tasks ----------

  protected readonly callStatus = new Map<string, string>();

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
  protected pruneCalls(): void {
    const due = this.deps.db
      .prepare("SELECT id, created_at, ttl_ms FROM operations WHERE principal IS NOT NULL AND ended_at IS NOT NULL AND ttl_ms > 0 AND created_at < ?")
      .all(new Date(Date.now() - CALL_TTL_SCAN_MS).toISOString()) as Array<{ id: string; created_at: string; ttl_ms: number }>;
    for (const r of due) {
      if (Date.parse(r.created_at) + r.ttl_ms > Date.now()) continue;
      this.deps.db.prepare('DELETE FROM operations WHERE id = ?').run(r.id);
      void rm(join(this.outDir, `${r.id}.log`), { force: true });
    }
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type CommandStartOperationResult = Awaited<ReturnType<CommandOperations['startOperation']>>;
export type CommandOperationStatusResult = Awaited<ReturnType<CommandOperations['operationStatus']>>;
export type CommandOperationWaitResult = Awaited<ReturnType<CommandOperations['operationWait']>>;
export type CommandOperationCancelResult = Awaited<ReturnType<CommandOperations['operationCancel']>>;
