/** The audit log: who did what to what, with which outcome and why. Readable by the owner. */
import type { DB } from '../../store/db.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';

export type AuditOutcome = 'ok' | 'refused' | 'failed';

/** Who acts: a transport, the system itself, or an agent by its id (agent_…). */
export type Actor = 'mcp' | 'dashboard' | 'cli' | 'system' | `agent_${string}`;

export interface AuditEntry {
  actor: Actor;
  principal?: string | null;
  action: string;
  target?: string | null;
  outcome: AuditOutcome;
  reason?: string | null;
  details?: Record<string, unknown>;
}

export interface AuditRow extends AuditEntry {
  id: string;
  seq: number;
  at: string;
}

export class AuditLog {
  /** Entries of finished calls not written yet (see recordAfterReply), with their time. */
  private pending: Array<{ id: string; at: string; entry: AuditEntry }> = [];
  private flushing: NodeJS.Immediate | undefined;

  /** onError: a deferred write failed (the database is gone or full); the entries are reported there. */
  constructor(
    private readonly db: DB,
    private readonly onError: (err: unknown, lost: AuditEntry[]) => void = () => undefined,
  ) {}

  record(auditEntry: AuditEntry): string {
    this.flush();
    const id = newId('audit');
    this.insert(id, nowIso(), auditEntry);
    return id;
  }

  /**
   * The entry of a tool call that has finished, written right after its answer has gone out: a
   * SQLite commit (about 0.2 ms here) is then off the caller's wait (issue #21 item 3), not
   * postponed. It is stamped now; it is written at the end of this turn of the event loop (a
   * setImmediate runs after the answer's socket write), all entries of one turn in one transaction,
   * and at once before anything reads the log (list), writes another entry (record) or the
   * database closes (flush). A crash between the answer and that write loses it, exactly as a crash
   * between the call's effect and a synchronous write would.
   */
  recordAfterReply(auditEntry: AuditEntry): string {
    const id = newId('audit');
    this.pending.push({ id, at: nowIso(), entry: auditEntry });
    this.flushing ??= setImmediate(() => this.flush());
    return id;
  }

  /** Writes the entries recordAfterReply holds; never throws (a failure goes to onError with the entries). */
  flush(): void {
    if (this.flushing) clearImmediate(this.flushing);
    this.flushing = undefined;
    if (this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    try {
      if (batch.length === 1) this.insert(batch[0]!.id, batch[0]!.at, batch[0]!.entry);
      else this.db.transaction(() => batch.forEach((b) => this.insert(b.id, b.at, b.entry)))();
    } catch (err) {
      this.onError(err, batch.map((b) => b.entry));
    }
  }

  private insert(id: string, at: string, auditEntry: AuditEntry): void {
    this.db
      .prepare('INSERT INTO audit_log (id, at, actor, principal, action, target, outcome, reason, details_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)')
      .run(id, at, auditEntry.actor, auditEntry.principal ?? null, auditEntry.action, auditEntry.target ?? null, auditEntry.outcome, auditEntry.reason ?? null, auditEntry.details ? JSON.stringify(auditEntry.details) : null);
  }

  /** Newest first; `beforeSeq` pages backwards. */
  list(opts: { limit: number; beforeSeq?: number; actor?: string; action?: string; outcome?: string; target?: string; reasonPrefix?: string; since?: string; until?: string }): AuditRow[] {
    this.flush();
    const where: string[] = [];
    const params: unknown[] = [];
    if (opts.beforeSeq !== undefined) (where.push('seq < ?'), params.push(opts.beforeSeq));
    if (opts.actor) (where.push('actor = ?'), params.push(opts.actor));
    if (opts.action) (where.push('action = ?'), params.push(opts.action));
    if (opts.outcome) (where.push('outcome = ?'), params.push(opts.outcome));
    if (opts.target) (where.push('target = ?'), params.push(opts.target));
    if (opts.reasonPrefix) (where.push('substr(reason, 1, ?) = ?'), params.push(opts.reasonPrefix.length, opts.reasonPrefix));
    if (opts.since) (where.push('at >= ?'), params.push(opts.since));
    if (opts.until) (where.push('at < ?'), params.push(opts.until));
    const sql = `SELECT * FROM audit_log ${where.length ? 'WHERE ' + where.join(' AND ') : ''} ORDER BY seq DESC LIMIT ?`;
    params.push(opts.limit);
    return (this.db.prepare(sql).all(...params) as Array<Record<string, unknown>>).map((r) => ({
      id: r.id as string,
      seq: r.seq as number,
      at: r.at as string,
      actor: r.actor as AuditEntry['actor'],
      principal: (r.principal as string | null) ?? null,
      action: r.action as string,
      target: (r.target as string | null) ?? null,
      outcome: r.outcome as AuditOutcome,
      reason: (r.reason as string | null) ?? null,
      details: r.details_json ? JSON.parse(r.details_json as string) : undefined,
    }));
  }
}
