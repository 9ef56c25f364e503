/**
 * Background runs and tasks (docs/commands.md). A run (an async operation or a task) is launched
 * through the workspace daemon with its output streamed to <dataDir>/state/output/<id>.log (merged
 * stdout and stderr in the order written) up to the configured cap, never in memory; pages of that
 * log, the cwd check at the call, and a run's description are shared with operations.ts. Tasks:
 * tasks_run with dependencies, scheduling, status, cancel, list and graph. Owns table: tasks. The
 * base of the command service (runs.ts).
 */
import { type WriteStream } from 'node:fs';
import { mkdir, open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';
import { Deps, OUTPUT_PAGE, RunState, Running, closeLog, outputLog, stateOf } from './records.js';

export class CommandTasks {
  protected readonly running = new Map<string, Running>();
  protected readonly outDir: string;
  protected stopping = false;

  constructor(protected readonly deps: Deps) {
    this.outDir = join(deps.config.dataDir, 'state', 'output');
  }

  protected get outputCap(): number {
    return this.deps.config.outputMaxMb * 1024 * 1024;
  }

  // ---------- shared: running a command with output on disk ----------

  /** Starts a command through the workspace daemon, streaming its output to the record's log. */
  protected launch(table: 'operations' | 'tasks', id: string, workspaceId: string, command: string, cwd: string, timeoutMs: number): void {
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
  protected async readOutput(kind: string, id: string, cursor: string | undefined): Promise<{ output: string; cursor: string | null; more: boolean }> {
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

  /**
   * Checks a cwd at the call the way a synchronous exec does (the daemon resolves it under the
   * workspace: outside, NUL, missing or not a directory is refused), so an async run or a task is
   * refused at once with details.field = 'cwd' instead of failing later.
   */
  protected async checkCwd(workspaceId: string, cwd: string, signal?: AbortSignal): Promise<void> {
    try {
      await this.deps.workspaces.exec(workspaceId, { command: 'true', cwd, timeoutMs: 15_000, maxOutputBytes: 2 }, undefined, signal);
    } catch (err) {
      if (err instanceof ServiceError && /\bcwd\b/.test(err.message) && !('field' in (err.details ?? {}))) {
        throw new ServiceError(err.code, err.message.startsWith('cwd') ? err.message : `cwd: ${err.message}`, { ...err.details, field: 'cwd' });
      }
      throw err;
    }
  }

  protected describeRun<K extends string>(row: Record<string, unknown>, idField: K) {
    const ended = row.ended_at ? Date.parse(row.ended_at as string) : Date.now();
    const started = Date.parse((row.started_at ?? row.created_at) as string);
    return {
      ...({ [idField]: row.id } as { [F in K]: unknown }), // the id first, under the record's own name
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

  // ---------- tasks ----------

  protected taskRow(workspaceId: string, id: string, field = 'taskId') {
    const r = this.deps.db.prepare('SELECT * FROM tasks WHERE id = ?').get(id) as Record<string, unknown> | undefined;
    if (!r || r.workspace_id !== workspaceId) throw new ServiceError('NOT_FOUND', `${field}: no task ${id} in workspace ${workspaceId}`, { field });
    return r;
  }

  async runTask(workspaceId: string, args: { command: string; cwd: string; timeoutMs: number; dependsOn: string[] }, signal?: AbortSignal) {
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
  protected schedule(workspaceId: string): void {
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

  protected describeTask(row: Record<string, unknown>) {
    return { ...this.describeRun(row, 'taskId'), dependsOn: JSON.parse(row.depends_on as string), startedAt: row.started_at ?? null };
  }

  async taskStatus(workspaceId: string, id: string, cursor: string | undefined) {
    this.taskRow(workspaceId, id);
    const out = await this.readOutput('task_output', id, cursor);
    return { ...this.describeTask(this.taskRow(workspaceId, id)), output: out.output, nextCursor: out.cursor, moreOutput: out.more, outputNote: 'stdout and stderr merged in the order written' };
  }

  async taskCancel(workspaceId: string, id: string) {
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

  listTasks(workspaceId: string, cursor: string | undefined, limit: number) {
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

  graph(workspaceId: string) {
    this.deps.workspaces.get(workspaceId);
    const rows = this.deps.db.prepare('SELECT id, command, state, depends_on FROM tasks WHERE workspace_id = ? ORDER BY created_at, id').all(workspaceId) as Array<Record<string, string>>;
    return {
      workspaceId,
      nodes: rows.map((r) => ({ taskId: r.id, state: r.state, command: r.command!.length > 200 ? r.command!.slice(0, 200) + '…' : r.command })),
      edges: rows.flatMap((r) => (JSON.parse(r.depends_on!) as string[]).map((dep) => ({ from: dep, to: r.id, meaning: `${r.id} runs after ${dep} succeeds` }))),
    };
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type CommandRunTaskResult = Awaited<ReturnType<CommandTasks['runTask']>>;
export type CommandTaskStatusResult = Awaited<ReturnType<CommandTasks['taskStatus']>>;
export type CommandTaskCancelResult = Awaited<ReturnType<CommandTasks['taskCancel']>>;
export type CommandListTasksResult = Awaited<ReturnType<CommandTasks['listTasks']>>;
export type CommandGraphResult = Awaited<ReturnType<CommandTasks['graph']>>;
