/**
 * Owner approvals, one queue for every kind: privileged commands, package plans, repository skill
 * scripts (and whatever comes next). Owns table: approvals.
 *
 * A request is bound to its subject by digest (the workspace, when there is one, and the SHA-256
 * of the exact subject: command text, plan digest, script content). The owner approves or denies
 * it on the dashboard; approving issues a single-use grant, valid GRANT_TTL_MS, shown once and
 * stored hashed. The full subject text is kept and shown wherever it is approved (no preview
 * cut: a client must not hide the dangerous part past some length). Every step is audited.
 */
import type { DB } from '../store/db.js';
import type { AuditLog } from './audit.js';
import type { Actor } from './audit.js';
import { ServiceError } from '../core/errors.js';
import { newId, randomToken } from '../core/ids.js';
import { isoIn, nowIso } from '../core/clock.js';
import { safeEqual, sha256Hex } from '../core/crypto.js';

export const GRANT_TTL_MS = 10 * 60 * 1000;
export const APPROVAL_KINDS = ['privileged_command', 'package_plan', 'skill_script'] as const;
export type ApprovalKind = (typeof APPROVAL_KINDS)[number];
export const APPROVAL_STATES = ['pending', 'approved', 'denied', 'used', 'expired'] as const;
export type ApprovalState = (typeof APPROVAL_STATES)[number];

/** What an approval is about. */
export interface ApprovalSubject {
  kind: ApprovalKind;
  /** The workspace the grant is bound to, or null for subjects outside any workspace (package plans). */
  workspaceId: string | null;
  /** The exact text the owner approves (the command, the plan, the script); digested for the binding. */
  text: string;
  /** SHA-256 hex the grant binds; defaults to sha256(text). */
  digest?: string;
  /** Extra facts shown to the owner (skill name and source, plan summary, ...). */
  details?: Record<string, unknown>;
}

export interface ApprovalView {
  id: string;
  kind: ApprovalKind;
  workspaceId: string | null;
  /** The full subject text, never cut. */
  subject: string;
  subjectSha256: string;
  details: Record<string, unknown>;
  state: ApprovalState;
  requestedBy: string | null;
  createdAt: string;
  decidedAt: string | null;
  decidedBy: string | null;
  grantExpiresAt: string | null;
  usedAt: string | null;
  /** Kept for the REST body of privileged commands (same as subject). */
  command?: string;
  commandSha256?: string;
}

interface Row {
  id: string;
  kind: ApprovalKind;
  workspace_id: string;
  command_sha256: string;
  subject_text: string | null;
  command_preview: string;
  details_json: string | null;
  state: ApprovalState;
  requested_by: string | null;
  created_at: string;
  decided_at: string | null;
  decided_by: string | null;
  grant_hash: string | null;
  grant_expires_at: string | null;
  used_at: string | null;
}

const NOUN: Record<ApprovalKind, string> = { privileged_command: 'command', package_plan: 'plan', skill_script: 'script' };

/** Workspace column value for subjects outside any workspace (the column is NOT NULL). */
const NO_WORKSPACE = '';

export class ApprovalService {
  constructor(private readonly deps: { db: DB; audit: AuditLog }) {}

  /** The digest a subject binds. */
  static digestOf(subject: ApprovalSubject): string {
    return subject.digest ?? sha256Hex(subject.text);
  }

  /**
   * Files (or finds) the pending request for a subject and returns the refusal to throw:
   * PERMISSION_DENIED naming `approvalGrantToken`, with the request id and the subject digest.
   */
  requestApproval(subject: ApprovalSubject, principal: string, actor: Actor, how: string): ServiceError {
    const digest = ApprovalService.digestOf(subject);
    const ws = subject.workspaceId ?? NO_WORKSPACE;
    const db = this.deps.db;
    const existing = db
      .prepare("SELECT id FROM approvals WHERE kind = ? AND workspace_id = ? AND command_sha256 = ? AND state = 'pending'")
      .pluck()
      .get(subject.kind, ws, digest) as string | undefined;
    const id = existing ?? newId('approval');
    if (!existing) {
      db.prepare(
        `INSERT INTO approvals (id, kind, workspace_id, command_sha256, command_preview, subject_text, details_json, state, requested_by, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)`,
      ).run(id, subject.kind, ws, digest, subject.text, subject.text, JSON.stringify(subject.details ?? {}), principal, nowIso());
    }
    this.deps.audit.record({ actor, principal, action: `${subject.kind}_request`, target: id, outcome: 'refused', reason: 'approval required', details: { digest } });
    return new ServiceError(
      'PERMISSION_DENIED',
      `approvalGrantToken: ${how} needs the owner's approval. Approval request ${id} is pending: the owner approves it on the dashboard's approvals page ` +
        `(or POST /api/v1/approvals/${id}/approve), which issues a single-use grant bound to ${subject.workspaceId ? 'this workspace and ' : ''}this exact content ` +
        `(SHA-256 ${digest}), valid ${GRANT_TTL_MS / 60000} minutes; then call again with approvalGrantToken`,
      { field: 'approvalGrantToken', approvalRequestId: id, subjectSha256: digest, kind: subject.kind },
    );
  }

  /**
   * Without a token: files the request and throws its refusal. With one: checks that the grant is
   * approved, unexpired, unused and bound to this kind, workspace and digest, marks it used, and
   * returns the approval id. Every refusal names why.
   */
  consume(subject: ApprovalSubject, token: string | undefined, principal: string, actor: Actor, how: string): string {
    if (!token) throw this.requestApproval(subject, principal, actor, how);
    const digest = ApprovalService.digestOf(subject);
    const db = this.deps.db;
    const hash = sha256Hex(token);
    const row = db.prepare("SELECT * FROM approvals WHERE state = 'approved' AND grant_hash = ?").get(hash) as Row | undefined;
    const bad = (why: string) => {
      this.deps.audit.record({ actor, principal, action: `${subject.kind}_grant`, target: subject.workspaceId, outcome: 'refused', reason: why });
      return new ServiceError('PERMISSION_DENIED', `approvalGrantToken: ${why}; ask the owner for a new approval (call again without a token to file one)`, {
        field: 'approvalGrantToken',
      });
    };
    if (!row || !row.grant_hash || !safeEqual(row.grant_hash, hash)) throw bad('unknown, used or expired grant');
    if (Date.parse(row.grant_expires_at!) <= Date.now()) {
      db.prepare("UPDATE approvals SET state = 'expired' WHERE id = ?").run(row.id);
      throw bad('the grant expired');
    }
    if (row.kind !== subject.kind) throw bad(`the grant is for a ${row.kind.replace('_', ' ')}, not a ${subject.kind.replace('_', ' ')}`);
    if (row.workspace_id !== (subject.workspaceId ?? NO_WORKSPACE)) throw bad('the grant is for another workspace');
    if (row.command_sha256 !== digest) throw bad(`the grant is for another ${NOUN[subject.kind]} (it binds the exact ${NOUN[subject.kind]} text by its SHA-256)`);
    const used = db.prepare("UPDATE approvals SET state = 'used', used_at = ? WHERE id = ? AND state = 'approved'").run(nowIso(), row.id);
    if (used.changes !== 1) throw bad('the grant was already used');
    this.deps.audit.record({ actor, principal, action: `${subject.kind}_grant`, target: subject.workspaceId, outcome: 'ok', details: { approvalId: row.id } });
    return row.id;
  }

  /**
   * Consumes an approved request by id, for subjects whose tool takes no grant token (a package
   * plan is applied by its id and digest): checks kind and digest, marks it used once.
   */
  markUsed(id: string, kind: ApprovalKind, digest: string, actor: Actor, principal: string): void {
    const row = this.deps.db.prepare('SELECT * FROM approvals WHERE id = ?').get(id) as Row | undefined;
    if (!row || row.kind !== kind || row.command_sha256 !== digest) throw new ServiceError('PERMISSION_DENIED', `approval ${id} does not cover this ${NOUN[kind]}`, { approvalRequestId: id });
    const used = this.deps.db.prepare("UPDATE approvals SET state = 'used', used_at = ? WHERE id = ? AND state = 'approved'").run(nowIso(), id);
    if (used.changes !== 1) throw new ServiceError('PERMISSION_DENIED', `approval ${id} is ${row.state}, not approved`, { approvalRequestId: id, approvalState: row.state });
    this.deps.audit.record({ actor, principal, action: `${kind}_grant`, target: row.workspace_id || null, outcome: 'ok', details: { approvalId: id } });
  }

  list(filter: { state?: ApprovalState; kind?: ApprovalKind } = {}, limit = 200): ApprovalView[] {
    const where: string[] = [];
    const params: unknown[] = [];
    if (filter.state) {
      where.push('state = ?');
      params.push(filter.state);
    }
    if (filter.kind) {
      where.push('kind = ?');
      params.push(filter.kind);
    }
    const rows = this.deps.db
      .prepare(`SELECT * FROM approvals ${where.length ? 'WHERE ' + where.join(' AND ') : ''} ORDER BY created_at DESC, id DESC LIMIT ?`)
      .all(...params, limit) as Row[];
    return rows.map(view);
  }

  get(id: string): ApprovalView {
    const r = this.deps.db.prepare('SELECT * FROM approvals WHERE id = ?').get(id) as Row | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `no approval request ${id}`, { field: 'id' });
    return view(r);
  }

  /** Approve (issues a single-use grant, shown once) or deny a pending request. */
  decide(id: string, approve: boolean, actor: Actor = 'dashboard'): Record<string, unknown> {
    const db = this.deps.db;
    const row = db.prepare('SELECT * FROM approvals WHERE id = ?').get(id) as Row | undefined;
    if (!row) throw new ServiceError('NOT_FOUND', `no approval request ${id}`, { field: 'id' });
    if (row.state !== 'pending') throw new ServiceError('FAILED_PRECONDITION', `approval request ${id} is ${row.state}, not pending`, { state: row.state });
    if (!approve) {
      db.prepare("UPDATE approvals SET state = 'denied', decided_at = ?, decided_by = ? WHERE id = ?").run(nowIso(), actor, id);
      this.deps.audit.record({ actor, action: `${row.kind}_deny`, target: id, outcome: 'ok' });
      return { id, kind: row.kind, state: 'denied' };
    }
    const grant = 'agt_' + randomToken(40);
    const expiresAt = isoIn(GRANT_TTL_MS);
    db.prepare("UPDATE approvals SET state = 'approved', decided_at = ?, decided_by = ?, grant_hash = ?, grant_expires_at = ? WHERE id = ?").run(
      nowIso(),
      actor,
      sha256Hex(grant),
      expiresAt,
      id,
    );
    this.deps.audit.record({ actor, action: `${row.kind}_approve`, target: id, outcome: 'ok', details: { subjectSha256: row.command_sha256 } });
    return {
      id,
      kind: row.kind,
      state: 'approved',
      approvalGrantToken: grant,
      expiresAt,
      subjectSha256: row.command_sha256,
      note: `shown once; single use; bound to ${row.workspace_id ? 'this workspace and ' : ''}this exact content`,
    };
  }

  /** Pending requests, for the owner's overview. */
  pendingCount(): number {
    return this.deps.db.prepare("SELECT count(*) FROM approvals WHERE state = 'pending'").pluck().get() as number;
  }
}

function view(row: Row): ApprovalView {
  const subject = row.subject_text ?? row.command_preview;
  const approvalView: ApprovalView = {
    id: row.id,
    kind: row.kind,
    workspaceId: row.workspace_id === NO_WORKSPACE ? null : row.workspace_id,
    subject,
    subjectSha256: row.command_sha256,
    details: row.details_json ? (JSON.parse(row.details_json) as Record<string, unknown>) : {},
    state: row.state,
    requestedBy: row.requested_by,
    createdAt: row.created_at,
    decidedAt: row.decided_at,
    decidedBy: row.decided_by,
    grantExpiresAt: row.grant_expires_at,
    usedAt: row.used_at,
  };
  if (row.kind === 'privileged_command') {
    approvalView.command = subject;
    approvalView.commandSha256 = row.command_sha256;
  }
  return approvalView;
}
