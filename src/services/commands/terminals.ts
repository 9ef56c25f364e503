/**
 * Terminals (docs/commands.md): interactive shells and named sessions, each a pty in the
 * workspace daemon (shell_* and sessions_* tools); open (a named session reattaches), input and
 * output pages, close, list. Owns table: terminals. On operations.ts; runs.ts builds on it.
 */
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';
import { CommandOperations } from './operations.js';

export class CommandTerminals extends CommandOperations {
  // ---------- terminals: shells and sessions ----------

  protected termRow(workspaceId: string, id: string, kind: 'shell' | 'session') {
    const r = this.deps.db.prepare('SELECT * FROM terminals WHERE id = ?').get(id) as Record<string, unknown> | undefined;
    const field = kind === 'shell' ? 'shellId' : 'sessionId';
    if (!r || r.workspace_id !== workspaceId || r.kind !== kind) throw new ServiceError('NOT_FOUND', `${field}: no ${kind} ${id} in workspace ${workspaceId}`, { field });
    return r;
  }

  protected describeTerm(row: Record<string, unknown>) {
    const idField = row.kind === 'shell' ? 'shellId' : 'sessionId';
    return { [idField]: row.id, workspaceId: row.workspace_id, ...(row.kind === 'session' ? { name: row.name } : {}), cwd: row.cwd, state: row.state, reason: row.reason ?? null, createdAt: row.created_at, closedAt: row.closed_at ?? null };
  }

  async openTerminal(workspaceId: string, kind: 'shell' | 'session', cwd: string, name?: string) {
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

  async terminalIo(workspaceId: string, kind: 'shell' | 'session', id: string, input: string | undefined, cursor: string | undefined, waitMs: number, signal: AbortSignal) {
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

  protected endTerminal(id: string, state: 'ended' | 'closed' | 'interrupted', reason: string): void {
    this.deps.db.prepare("UPDATE terminals SET state = ?, reason = ?, closed_at = coalesce(closed_at, ?) WHERE id = ? AND state = 'open'").run(state, reason, nowIso(), id);
  }

  async closeTerminal(workspaceId: string, kind: 'shell' | 'session', id: string) {
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

  listSessions(workspaceId: string, cursor: string | undefined, limit: number) {
    this.deps.workspaces.get(workspaceId);
    const after = cursor ? this.deps.cursors.decode<{ c: string; i: string }>('sessions_list', cursor) : null;
    const rows = this.deps.db
      .prepare(`SELECT * FROM terminals WHERE workspace_id = ? AND kind = 'session' ${after ? 'AND (created_at > ? OR (created_at = ? AND id > ?))' : ''} ORDER BY created_at, id LIMIT ?`)
      .all(workspaceId, ...(after ? [after.c, after.c, after.i] : []), limit + 1) as Array<Record<string, unknown>>;
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    return { sessions: page.map((r) => this.describeTerm(r)), nextCursor: rows.length > limit && last ? this.deps.cursors.encode('sessions_list', { c: last.created_at, i: last.id }) : null };
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type CommandOpenTerminalResult = Awaited<ReturnType<CommandTerminals['openTerminal']>>;
export type CommandTerminalIoResult = Awaited<ReturnType<CommandTerminals['terminalIo']>>;
export type CommandCloseTerminalResult = Awaited<ReturnType<CommandTerminals['closeTerminal']>>;
export type CommandListSessionsResult = Awaited<ReturnType<CommandTerminals['listSessions']>>;
