/**
 * Owner approvals, one queue for every kind: privileged commands, package plans, repository skill
 * scripts (and whatever comes next). Owns table: approvals.
 *
 * A request is bound to its subject by digest (the workspace, when there is one, and the SHA-256
 * of the exact subject: command text, plan digest, script content). The owner approves or denies
 * it on the dashboard; approving issues a single-use grant, valid GRANT_TTL_MS, shown once and
 * stored hashed. A grant past its expiry is spent, whichever path would use it (a token given to a
 * tool, or a package plan applied by its id). The full subject text is kept and shown wherever it
 * is approved (no preview cut: a client must not hide the dangerous part past some length), and
 * every view carries it as the owner must read it: hidden characters escaped and flagged
 * (core/display.ts). Every step is audited.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { EventEmitter } from 'node:events';
import type { DB } from '../store/db.js';
import type { AuditLog } from './instance/index.js';
import type { Actor } from './instance/index.js';
import { ServiceError } from '../core/errors.js';
import { newId, randomToken } from '../core/ids.js';
import { isoIn, nowIso } from '../core/clock.js';
import { safeEqual, sha256Hex } from '../core/crypto.js';
import { canonicalJson } from '../core/canonical-json.js';
import { displayText, type HiddenKind } from '../core/display.js';

export const GRANT_TTL_MS = 10 * 60 * 1000;

/**
 * How long a new grant lasts: GRANT_TTL_MS, or shorter under the test hook ATELIER_TEST_GRANT_TTL_MS
 * (tests only; it can shorten a grant, never lengthen one; 0 issues grants already expired).
 */
export function grantTtlMs(): number {
  const raw = process.env.ATELIER_TEST_GRANT_TTL_MS;
  if (raw === undefined || raw.trim() === '') return GRANT_TTL_MS;
  const n = Number(raw);
  return Number.isFinite(n) && n >= 0 ? Math.min(Math.floor(n), GRANT_TTL_MS) : GRANT_TTL_MS;
}

const ttlWords = (ms: number): string => (ms >= 60_000 && ms % 60_000 === 0 ? `${ms / 60_000} minutes` : `${ms / 1000} seconds`);

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

/** A hidden character found in a field of an approval, for the owner's warning. */
export interface ApprovalHidden {
  field: 'subject' | 'details' | 'cwd' | 'requestedBy';
  codePoint: string;
  kind: HiddenKind;
  count: number;
}

export interface ApprovalView {
  id: string;
  kind: ApprovalKind;
  workspaceId: string | null;
  /** The full subject text, never cut: the exact bytes the digest binds. */
  subject: string;
  subjectSha256: string;
  details: Record<string, unknown>;
  /**
   * What the owner reads: the same fields with every hidden character escaped as \u{XXXX}
   * (core/display.ts). `details` is the details as indented JSON.
   */
  display: { subject: string; details: string; requestedBy: string | null; cwd?: string };
  /** `hidden_characters` when any field holds a character shown escaped. */
  flags: Array<'hidden_characters'>;
  hiddenCharacters: ApprovalHidden[];
  state: ApprovalState;
  requestedBy: string | null;
  createdAt: string;
  decidedAt: string | null;
  decidedBy: string | null;
  grantExpiresAt: string | null;
  usedAt: string | null;
  /** Privileged commands: the command (same as subject), its own SHA-256, and the working directory the grant binds. */
  command?: string;
  commandSha256?: string;
  cwd?: string;
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
/** What a grant of each kind binds, in the words of a refusal. */
const BINDS: Record<ApprovalKind, string> = {
  privileged_command: 'command or working directory (it binds the exact command text and cwd by their SHA-256)',
  package_plan: 'plan (it binds the exact plan by its digest)',
  skill_script: 'script (it binds the exact script, every file of the skill and the arguments by their SHA-256)',
};

/** Workspace column value for subjects outside any workspace (the column is NOT NULL). */
const NO_WORKSPACE = '';

/**
 * An approval the owner granted while the call that asked for it waited (approvals inside the
 * client, docs/mcp-tasks.md): the call runs again inside this scope, and consume() spends that
 * request's grant itself when it binds exactly the subject asked for now (kind, workspace, digest),
 * as a grant token would. Nothing outside the waiting call can enter the scope.
 */
const inCallApproval = new AsyncLocalStorage<string>();

/** Runs `fn` as the call that waited for approval request `id` (the id of a request it filed itself). */
export function withApprovedRequest<T>(id: string | undefined, fn: () => T): T {
  return id === undefined ? fn() : inCallApproval.run(id, fn);
}

export class ApprovalService {
  /** Each decision, by request id (for calls waiting on it: waitDecision). */
  private readonly decisions = new EventEmitter().setMaxListeners(0);

  constructor(private readonly deps: { db: DB; audit: AuditLog }) {}

  /**
   * The state of request `id` once the owner has decided it (or at once when it is not pending),
   * waiting at most `timeoutMs`, or until `signal` aborts; a request still undecided then answers
   * 'pending'. NOT_FOUND for an unknown id.
   */
  async waitDecision(id: string, timeoutMs: number, signal: AbortSignal): Promise<ApprovalState> {
    const now = (): ApprovalState => this.get(id).state;
    if (now() !== 'pending' || signal.aborted) return now();
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.decisions.off(id, done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      this.decisions.on(id, done);
      signal.addEventListener('abort', done, { once: true });
    });
    return now();
  }

  /** The digest a subject binds. */
  static digestOf(subject: ApprovalSubject): string {
    return subject.digest ?? sha256Hex(subject.text);
  }

  /**
   * A privileged command as an approval subject: the text is the command; the digest binds the
   * command and the working directory it runs in (SHA-256 of the canonical JSON {command, cwd}),
   * so a grant for one directory cannot run the same text in another.
   */
  static privilegedCommand(workspaceId: string, command: string, cwd: string): ApprovalSubject {
    return { kind: 'privileged_command', workspaceId, text: command, digest: sha256Hex(canonicalJson({ command, cwd })), details: { cwd } };
  }

  /** Grants past their expiry are spent: marked expired (on every read and use, so no path can skip it). */
  private expireDue(): void {
    this.deps.db.prepare("UPDATE approvals SET state = 'expired' WHERE state = 'approved' AND grant_expires_at <= ?").run(nowIso());
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
        `(SHA-256 ${digest}), valid ${ttlWords(grantTtlMs())}; then call again with approvalGrantToken`,
      { field: 'approvalGrantToken', approvalRequestId: id, subjectSha256: digest, kind: subject.kind },
    );
  }

  /**
   * Without a token: files the request and throws its refusal. With one: checks that the grant is
   * approved, unexpired, unused and bound to this kind, workspace and digest, marks it used, and
   * returns the approval id. Every refusal names why.
   */
  consume(subject: ApprovalSubject, token: string | undefined, principal: string, actor: Actor, how: string): string {
    if (!token) {
      const approved = inCallApproval.getStore();
      const used = approved === undefined ? null : this.consumeInCall(approved, subject, principal, actor);
      if (used) return used;
      throw this.requestApproval(subject, principal, actor, how);
    }
    const digest = ApprovalService.digestOf(subject);
    const db = this.deps.db;
    const hash = sha256Hex(token);
    const row = db.prepare("SELECT * FROM approvals WHERE state IN ('approved', 'expired') AND grant_hash = ?").get(hash) as Row | undefined;
    const bad = (why: string) => {
      this.deps.audit.record({ actor, principal, action: `${subject.kind}_grant`, target: subject.workspaceId, outcome: 'refused', reason: why });
      return new ServiceError('PERMISSION_DENIED', `approvalGrantToken: ${why}; ask the owner for a new approval (call again without a token to file one)`, {
        field: 'approvalGrantToken',
      });
    };
    if (!row || !row.grant_hash || !safeEqual(row.grant_hash, hash)) throw bad('unknown, used or expired grant');
    if (row.state === 'expired' || Date.parse(row.grant_expires_at!) <= Date.now()) {
      db.prepare("UPDATE approvals SET state = 'expired' WHERE id = ? AND state = 'approved'").run(row.id);
      throw bad(`the grant expired at ${row.grant_expires_at}`);
    }
    if (row.kind !== subject.kind) throw bad(`the grant is for a ${row.kind.replace('_', ' ')}, not a ${subject.kind.replace('_', ' ')}`);
    if (row.workspace_id !== (subject.workspaceId ?? NO_WORKSPACE)) throw bad('the grant is for another workspace');
    if (row.command_sha256 !== digest) throw bad(`the grant is for another ${BINDS[subject.kind]}`);
    const now = nowIso();
    const used = db.prepare("UPDATE approvals SET state = 'used', used_at = ? WHERE id = ? AND state = 'approved' AND grant_expires_at > ?").run(now, row.id, now);
    if (used.changes !== 1) throw bad('the grant was already used');
    this.deps.audit.record({ actor, principal, action: `${subject.kind}_grant`, target: subject.workspaceId, outcome: 'ok', details: { approvalId: row.id } });
    return row.id;
  }

  /**
   * The grant of request `id`, spent by the call that waited for it (withApprovedRequest): only when
   * the request is approved, unexpired, unused and binds exactly this kind, workspace and digest.
   * Returns the id when spent; null otherwise (the caller then files a request for what it asks now).
   */
  private consumeInCall(id: string, subject: ApprovalSubject, principal: string, actor: Actor): string | null {
    const row = this.deps.db.prepare('SELECT * FROM approvals WHERE id = ?').get(id) as Row | undefined;
    if (!row || row.kind !== subject.kind || row.workspace_id !== (subject.workspaceId ?? NO_WORKSPACE) || row.command_sha256 !== ApprovalService.digestOf(subject)) return null;
    const now = nowIso();
    const used = this.deps.db.prepare("UPDATE approvals SET state = 'used', used_at = ? WHERE id = ? AND state = 'approved' AND grant_expires_at > ?").run(now, id, now);
    if (used.changes !== 1) return null;
    this.deps.audit.record({ actor, principal, action: `${subject.kind}_grant`, target: subject.workspaceId, outcome: 'ok', details: { approvalId: id, inCall: true } });
    return id;
  }

  /**
   * Consumes an approved request by id, for subjects whose tool takes no grant token (a package
   * plan is applied by its id and digest): checks kind, digest and the grant's expiry exactly as
   * consume() does, marks it used once.
   */
  markUsed(id: string, kind: ApprovalKind, digest: string, actor: Actor, principal: string): void {
    const db = this.deps.db;
    const row = db.prepare('SELECT * FROM approvals WHERE id = ?').get(id) as Row | undefined;
    if (!row || row.kind !== kind || row.command_sha256 !== digest) throw new ServiceError('PERMISSION_DENIED', `approval ${id} does not cover this ${NOUN[kind]}`, { approvalRequestId: id });
    if (row.state === 'approved' && Date.parse(row.grant_expires_at!) <= Date.now()) {
      db.prepare("UPDATE approvals SET state = 'expired' WHERE id = ? AND state = 'approved'").run(id);
      this.deps.audit.record({ actor, principal, action: `${kind}_grant`, target: row.workspace_id || null, outcome: 'refused', reason: 'the grant expired', details: { approvalId: id } });
      throw new ServiceError('PERMISSION_DENIED', `approval ${id}: the owner's grant expired at ${row.grant_expires_at} (a grant lasts ${ttlWords(grantTtlMs())}); ask again for a new approval`, {
        approvalRequestId: id,
        approvalState: 'expired',
      });
    }
    const now = nowIso();
    const used = db.prepare("UPDATE approvals SET state = 'used', used_at = ? WHERE id = ? AND state = 'approved' AND grant_expires_at > ?").run(now, id, now);
    if (used.changes !== 1) {
      const state = (db.prepare('SELECT state FROM approvals WHERE id = ?').pluck().get(id) as ApprovalState | undefined) ?? row.state;
      throw new ServiceError('PERMISSION_DENIED', `approval ${id} is ${state}, not approved`, { approvalRequestId: id, approvalState: state });
    }
    this.deps.audit.record({ actor, principal, action: `${kind}_grant`, target: row.workspace_id || null, outcome: 'ok', details: { approvalId: id } });
  }

  list(filter: { state?: ApprovalState; kind?: ApprovalKind } = {}, limit = 200): ApprovalView[] {
    this.expireDue();
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
    this.expireDue();
    const r = this.deps.db.prepare('SELECT * FROM approvals WHERE id = ?').get(id) as Row | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `no approval request ${id}`, { field: 'id' });
    return view(r);
  }

  /** Approve (issues a single-use grant, shown once) or deny a pending request. */
  decide(id: string, approve: boolean, actor: Actor = 'dashboard') {
    const db = this.deps.db;
    const row = db.prepare('SELECT * FROM approvals WHERE id = ?').get(id) as Row | undefined;
    if (!row) throw new ServiceError('NOT_FOUND', `no approval request ${id}`, { field: 'id' });
    if (row.state !== 'pending') throw new ServiceError('FAILED_PRECONDITION', `approval request ${id} is ${row.state}, not pending`, { state: row.state });
    if (!approve) {
      db.prepare("UPDATE approvals SET state = 'denied', decided_at = ?, decided_by = ? WHERE id = ?").run(nowIso(), actor, id);
      this.deps.audit.record({ actor, action: `${row.kind}_deny`, target: id, outcome: 'ok' });
      this.decisions.emit(id);
      return { id, kind: row.kind, state: 'denied' };
    }
    const grant = 'agt_' + randomToken(40);
    const expiresAt = isoIn(grantTtlMs());
    db.prepare("UPDATE approvals SET state = 'approved', decided_at = ?, decided_by = ?, grant_hash = ?, grant_expires_at = ? WHERE id = ?").run(
      nowIso(),
      actor,
      sha256Hex(grant),
      expiresAt,
      id,
    );
    this.deps.audit.record({ actor, action: `${row.kind}_approve`, target: id, outcome: 'ok', details: { subjectSha256: row.command_sha256 } });
    this.decisions.emit(id);
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
  const details = row.details_json ? (JSON.parse(row.details_json) as Record<string, unknown>) : {};
  // What the owner reads: every field a client or a repository wrote, hidden characters escaped.
  const hidden: ApprovalHidden[] = [];
  const shown = (field: ApprovalHidden['field'], text: string, multiline: boolean): string => {
    const d = displayText(text, { multiline });
    for (const h of d.hidden) hidden.push({ field, ...h });
    return d.text;
  };
  const cwd = row.kind === 'privileged_command' && typeof details.cwd === 'string' ? details.cwd : undefined;
  const display: ApprovalView['display'] = {
    subject: shown('subject', subject, true),
    details: shown('details', JSON.stringify(details, null, 2), true),
    requestedBy: row.requested_by === null ? null : shown('requestedBy', row.requested_by, false),
    ...(cwd !== undefined ? { cwd: shown('cwd', cwd, false) } : {}),
  };
  const approvalView: ApprovalView = {
    id: row.id,
    kind: row.kind,
    workspaceId: row.workspace_id === NO_WORKSPACE ? null : row.workspace_id,
    subject,
    subjectSha256: row.command_sha256,
    details,
    display,
    flags: hidden.length ? ['hidden_characters'] : [],
    hiddenCharacters: hidden,
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
    approvalView.commandSha256 = sha256Hex(subject);
    // Requests filed before the working directory was bound have none: they bound the command alone.
    if (cwd !== undefined) approvalView.cwd = cwd;
  }
  return approvalView;
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type ApprovalDecideResult = Awaited<ReturnType<ApprovalService['decide']>>;
