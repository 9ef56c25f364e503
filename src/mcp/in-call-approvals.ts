/**
 * Approvals inside the client (issue #32 item 3; docs/mcp-tasks.md, "Approvals inside the client").
 * A call that needs the owner's approval (a privileged exec_run, a repository or workspace skill's
 * script, a package plan) refuses with PERMISSION_DENIED naming the pending approval request
 * (details.approvalRequestId). When the caller's client can open a URL for its user (URL-mode
 * elicitation of 2025-11-25, an `input_required` result of 2026-07-28, a task's input request),
 * the pipeline asks it to open that request's own page on the dashboard instead, waits for the
 * owner's decision, and runs the call again: the grant is spent by the call itself, bound by digest
 * and single-use exactly as a grant token is (ApprovalService.consume, withApprovedRequest).
 * A client without the capability gets today's refusal, unchanged.
 */
import { randomUUID } from 'node:crypto';
import { ProtocolError, ProtocolErrorCode } from '@modelcontextprotocol/server';
import { ServiceError } from '../core/errors.js';
import { sha256Hex } from '../core/crypto.js';
import type { CursorCodec } from '../core/cursor.js';
import { withApprovedRequest, type ApprovalService } from '../services/approvals.js';

/** What the client is asked to open. */
export interface ApprovalAsk {
  approvalId: string;
  kind: string;
  /** The approval request's own page on the dashboard. */
  url: string;
  /** What the user reads in the client. */
  message: string;
}

/** The client's answer to an elicitation (accept: the user opened the page). */
export type AskAnswer = 'accept' | 'decline' | 'cancel';

/** How a caller's client completes an approval inside a call; absent on a CallContext: the plain refusal. */
export interface InCallApprovals {
  /** The dashboard's origin (the issuer): the approval pages are under it. */
  origin: string;
  /** A request the client already answered in an earlier round of this call (a 2026-07-28 retry): waited for first. */
  resumed?: { approvalId: string; answer: AskAnswer };
  /**
   * Has the client open the approval: resolves with its answer (2025-11-25 URL elicitation, a
   * task's input request), or throws InputRequired (a 2026-07-28 call then answers input_required
   * and ends; the client retries it with the answer).
   */
  ask(ask: ApprovalAsk, signal: AbortSignal): Promise<AskAnswer>;
  /** Told once the owner decided a request the client opened (2025-11-25: notifications/elicitation/complete). */
  decided?(ask: ApprovalAsk): void;
}

/** Thrown by InCallApprovals.ask where the call must end with an input_required result; the registry passes it through. */
export class InputRequired extends Error {
  constructor(readonly ask: ApprovalAsk) {
    super(`input required: approval ${ask.approvalId}`);
    this.name = 'InputRequired';
  }
}

/** How long a call waits for the owner's decision once the client opened the page. */
export const APPROVAL_WAIT_MS = 10 * 60 * 1000;

/** APPROVAL_WAIT_MS, or shorter under the test hook ATELIER_TEST_APPROVAL_WAIT_MS (tests only; never longer). */
export function approvalWaitMs(): number {
  const raw = process.env.ATELIER_TEST_APPROVAL_WAIT_MS;
  const n = raw === undefined || raw.trim() === '' ? NaN : Number(raw);
  return Number.isFinite(n) && n >= 0 ? Math.min(Math.floor(n), APPROVAL_WAIT_MS) : APPROVAL_WAIT_MS;
}

/** Approvals a single call may open one after another (a changed subject files a new request). */
const MAX_ROUNDS = 3;

const KIND_WORDS: Record<string, string> = { privileged_command: 'a privileged command', package_plan: 'a package plan', skill_script: 'a skill script' };

/** The deep link of one approval request on the dashboard (GET /approvals/<id>). */
export function approvalUrl(origin: string, id: string): string {
  return `${origin}/approvals/${encodeURIComponent(id)}`;
}

/** The ask for approval request `id` (its kind from the refusal). */
export function askFor(origin: string, id: string, kind: string, tool: string): ApprovalAsk {
  return {
    approvalId: id,
    kind,
    url: approvalUrl(origin, id),
    message: `${tool} needs the owner's approval of ${KIND_WORDS[kind] ?? kind} (request ${id}). Open the page, read the exact content and approve or deny it there; the call goes on once it is decided.`,
  };
}

/** The pending approval request a refusal names, or null (any other error, or a request no longer pending). */
export function pendingApprovalOf(err: unknown, approvals: Pick<ApprovalService, 'get'>): { id: string; kind: string } | null {
  if (!(err instanceof ServiceError) || err.code !== 'PERMISSION_DENIED') return null;
  const id = err.details.approvalRequestId;
  if (typeof id !== 'string') return null;
  try {
    const a = approvals.get(id);
    return a.state === 'pending' ? { id, kind: a.kind } : null;
  } catch {
    return null;
  }
}

/** Waits for the owner's decision on a request the client answered; returns when approved, throws the refusal otherwise. */
async function decided(approvals: Pick<ApprovalService, 'waitDecision'>, id: string, answer: AskAnswer, signal: AbortSignal): Promise<void> {
  if (answer !== 'accept') {
    throw new ServiceError(
      'PERMISSION_DENIED',
      `approvalGrantToken: the client did not open approval request ${id} (its answer: ${answer}); nothing ran. The request stays pending on the dashboard: once the owner approves it, call again with approvalGrantToken`,
      { field: 'approvalGrantToken', approvalRequestId: id, approvalState: 'pending', clientAnswer: answer },
    );
  }
  const waitMs = approvalWaitMs();
  const state = await approvals.waitDecision(id, waitMs, signal);
  if (state === 'approved') return;
  if (signal.aborted) throw new ServiceError('CANCELLED', `the call was cancelled while it waited for the owner's decision on approval request ${id}; nothing ran`, { approvalRequestId: id });
  if (state === 'denied') throw new ServiceError('PERMISSION_DENIED', `approvalGrantToken: the owner denied approval request ${id}; nothing ran`, { field: 'approvalGrantToken', approvalRequestId: id, approvalState: 'denied' });
  if (state === 'pending')
    throw new ServiceError(
      'PERMISSION_DENIED',
      `approvalGrantToken: approval request ${id} is still pending after ${Math.round(waitMs / 1000)} s of waiting; nothing ran. Once the owner approves it, call again (with approvalGrantToken, or from a client that opens approvals)`,
      { field: 'approvalGrantToken', approvalRequestId: id, approvalState: 'pending' },
    );
  throw new ServiceError('PERMISSION_DENIED', `approvalGrantToken: approval request ${id} is ${state}, its grant is not available to this call; nothing ran`, { field: 'approvalGrantToken', approvalRequestId: id, approvalState: state });
}

/**
 * Step: runs the call; when it refuses for a pending approval and the caller's client can open it,
 * asks the client, waits for the owner, and runs the call again as the call that waited (its grant
 * is spent by consume() only if it binds exactly what is asked now). Without InCallApprovals, or
 * for any other outcome, the call's own result or refusal stands.
 */
export async function runWithApprovals<T>(approvals: ApprovalService, inCall: InCallApprovals | undefined, tool: string, signal: AbortSignal, run: () => Promise<T>): Promise<T> {
  let approved: string | undefined;
  if (inCall?.resumed) {
    await decided(approvals, inCall.resumed.approvalId, inCall.resumed.answer, signal);
    approved = inCall.resumed.approvalId;
  }
  for (let round = 0; ; round++) {
    try {
      return await withApprovedRequest(approved, run);
    } catch (err) {
      const pending = inCall ? pendingApprovalOf(err, approvals) : null;
      if (!inCall || !pending || pending.id === approved || round >= MAX_ROUNDS) throw err;
      const ask = askFor(inCall.origin, pending.id, pending.kind, tool);
      const answer = await inCall.ask(ask, signal);
      try {
        await decided(approvals, pending.id, answer, signal);
      } finally {
        if (answer === 'accept') inCall.decided?.(ask);
      }
      approved = pending.id;
    }
  }
}

// ---------- the wire forms (src/mcp/http.ts picks one per request) ----------

/** How long a 2026-07-28 client's retry may carry the requestState of an approval it was asked to open. */
const REQUEST_STATE_TTL_MS = 60 * 60 * 1000;

/** The key of an approval's input request: unique per approval, so per call and per task. */
export const approvalKey = (approvalId: string): string => `approval-${approvalId}`;

/** The principal as a requestState binds it (a digest: the wire value does not carry the id). */
const principalTag = (principal: string): string => sha256Hex(principal).slice(0, 32);

/**
 * Approvals inside a 2026-07-28 call: the call answers input_required naming the approval's page
 * (inputRequiredResult), and the client's retry carries its answer (inputResponses) and the
 * requestState minted there, bound to the principal, the tool and the approval, tamper-evident (the
 * cursor codec's HMAC) and valid REQUEST_STATE_TTL_MS; anything else is -32602.
 */
export function modernApprovals(
  cursors: CursorCodec,
  caller: { principal: string; origin: string },
  tool: string,
  ctx: { mcpReq: { inputResponses?: Record<string, unknown>; requestState: () => unknown } },
): InCallApprovals {
  const raw = ctx.mcpReq.requestState();
  let resumed: InCallApprovals['resumed'];
  if (raw !== undefined) {
    const invalid = () => new ProtocolError(ProtocolErrorCode.InvalidParams, 'Invalid or expired requestState', { reason: 'invalid_request_state' });
    let state: { a?: unknown; t?: unknown; p?: unknown; e?: unknown };
    try {
      state = cursors.decode('mcp_approval', String(raw), 'requestState');
    } catch {
      throw invalid();
    }
    if (typeof raw !== 'string' || typeof state.a !== 'string' || state.t !== tool || state.p !== principalTag(caller.principal) || typeof state.e !== 'number' || state.e < Date.now()) throw invalid();
    const action = (ctx.mcpReq.inputResponses?.[approvalKey(state.a)] as { action?: unknown } | undefined)?.action;
    resumed = { approvalId: state.a, answer: action === 'accept' || action === 'decline' ? action : 'cancel' };
  }
  return {
    origin: caller.origin,
    resumed,
    ask: async (ask) => {
      throw new InputRequired(ask);
    },
  };
}

/** The input_required result of a 2026-07-28 call that asks its client to open an approval. */
export function inputRequiredResult(cursors: CursorCodec, ask: ApprovalAsk, principal: string, tool: string): Record<string, unknown> {
  return {
    resultType: 'input_required',
    inputRequests: { [approvalKey(ask.approvalId)]: { method: 'elicitation/create', params: { mode: 'url', message: ask.message, url: ask.url } } },
    requestState: cursors.encode('mcp_approval', { a: ask.approvalId, t: tool, p: principalTag(principal), e: Date.now() + REQUEST_STATE_TTL_MS }),
  };
}

/**
 * Approvals inside a 2025-11-25 call on the direct path: URL-mode elicitation on the call's own
 * stream (its client declared it in initialize: legacy-sessions.ts), then
 * notifications/elicitation/complete once the owner decided.
 */
export function legacyApprovals(
  origin: string,
  request: (method: string, params: Record<string, unknown>, signal: AbortSignal, timeoutMs: number) => Promise<Record<string, unknown>>,
  notify: (n: { method: string; params?: Record<string, unknown> }) => Promise<void>,
): InCallApprovals {
  const elicitations = new Map<string, string>();
  return {
    origin,
    ask: async (ask, signal) => {
      const elicitationId = randomUUID();
      elicitations.set(ask.approvalId, elicitationId);
      let answer: Record<string, unknown>;
      try {
        answer = await request('elicitation/create', { mode: 'url', message: ask.message, url: ask.url, elicitationId }, signal, approvalWaitMs());
      } catch {
        return 'cancel';
      }
      return answer.action === 'accept' || answer.action === 'decline' ? answer.action : 'cancel';
    },
    decided: (ask) => {
      const elicitationId = elicitations.get(ask.approvalId);
      if (elicitationId) void notify({ method: 'notifications/elicitation/complete', params: { elicitationId } }).catch(() => undefined);
    },
  };
}
