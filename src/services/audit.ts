/** The audit log: who did what to what, with which outcome and why. Readable by the owner. */
import type { DB } from '../store/db.js';
import { newId } from '../core/ids.js';
import { nowIso } from '../core/clock.js';

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
  constructor(private readonly db: DB) {}

  record(auditEntry: AuditEntry): string {
    const id = newId('audit');
    this.db
      .prepare('INSERT INTO audit_log (id, at, actor, principal, action, target, outcome, reason, details_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)')
      .run(id, nowIso(), auditEntry.actor, auditEntry.principal ?? null, auditEntry.action, auditEntry.target ?? null, auditEntry.outcome, auditEntry.reason ?? null, auditEntry.details ? JSON.stringify(auditEntry.details) : null);
    return id;
  }

  /** Newest first; `beforeSeq` pages backwards. */
  list(opts: { limit: number; beforeSeq?: number; actor?: string; action?: string; outcome?: string; target?: string; reasonPrefix?: string; since?: string; until?: string }): AuditRow[] {
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
