/**
 * What the 2025-era direct path (src/mcp/node-transport.ts) needs to ask a client for input in the
 * middle of a call (URL-mode elicitation of 2025-11-25: approvals inside the client, issue #32 item
 * 3; docs/mcp-tasks.md):
 *
 * - LegacySessions: a 2025-era client declares its capabilities only in `initialize`, and /mcp
 *   serves that era statelessly. Every initialize gets an Mcp-Session-Id (random, 192 bits) naming
 *   its principal and capabilities, which the client sends on every later request; it carries
 *   nothing else (every request is still served on its own, named by explicit ids), so a client
 *   that never uses it loses nothing. It is what lets a call ask a client that declared URL-mode
 *   elicitation for input, and what the 2025-11-25 transport's SEP-1699 streams are keyed on. The
 *   record lives in memory (bounded, idle ones dropped, DELETE ends it): after a restart, or once
 *   dropped, an unknown id serves statelessly as before (never a 404 that would make the client
 *   start over), without the capabilities (a call then answers the approval refusal of old).
 * - ClientRequests: the elicitation/create the server sends on a call's SSE stream, waiting for the
 *   client's answer, which arrives as a POSTed JSON-RPC response. The request id is random, and the
 *   answer is taken only from the principal the request went to.
 */
import { randomBytes } from 'node:crypto';

/** Sessions kept at most (the least recently used goes first). */
const MAX_SESSIONS = 10_000;
/** A session unused this long is dropped. */
const SESSION_IDLE_MS = 24 * 60 * 60 * 1000;
/** Server-to-client requests waiting at once, at most. */
const MAX_PENDING = 1000;

interface SessionRecord {
  principal: string;
  capabilities: Record<string, unknown>;
  lastSeen: number;
}

export class LegacySessions {
  private readonly sessions = new Map<string, SessionRecord>();
  /** Sessions ended by DELETE (id to principal), oldest first: requests bearing one answer 404 (2025-11-25 transport). */
  private readonly endedIds = new Map<string, { principal: string; at: number }>();

  /** The session of an initialize: its id, remembering the principal and the capabilities it declared. */
  open(principal: string, capabilities: unknown): string {
    const caps = capabilities !== null && typeof capabilities === 'object' && !Array.isArray(capabilities) ? (capabilities as Record<string, unknown>) : {};
    const id = `mcps_${randomBytes(24).toString('base64url')}`;
    this.sessions.set(id, { principal, capabilities: caps, lastSeen: Date.now() });
    while (this.sessions.size > MAX_SESSIONS) this.sessions.delete(this.sessions.keys().next().value!);
    return id;
  }

  /** Ends a session of this principal (DELETE with its id); false when there is none to end. */
  close(sessionId: string | undefined, principal: string): boolean {
    if (!sessionId) return false;
    const s = this.sessions.get(sessionId);
    if (!s || s.principal !== principal) return false;
    this.sessions.delete(sessionId);
    this.endedIds.set(sessionId, { principal, at: Date.now() });
    while (this.endedIds.size > MAX_SESSIONS) this.endedIds.delete(this.endedIds.keys().next().value!);
    return true;
  }

  /**
   * Whether this principal ended that session with DELETE (then every request bearing it answers
   * 404, and the client starts a new one). Remembered in memory like the sessions: after a restart,
   * or a day later, the id is merely unknown and serves statelessly.
   */
  ended(sessionId: string | undefined, principal: string): boolean {
    if (!sessionId) return false;
    const e = this.endedIds.get(sessionId);
    if (!e || e.principal !== principal) return false;
    if (Date.now() - e.at > SESSION_IDLE_MS) {
      this.endedIds.delete(sessionId);
      return false;
    }
    return true;
  }

  /** The capabilities of a session of this principal, or undefined (unknown, idle, another principal's). */
  capabilities(sessionId: string | undefined, principal: string): Record<string, unknown> | undefined {
    if (!sessionId) return undefined;
    const s = this.sessions.get(sessionId);
    if (!s || s.principal !== principal) return undefined;
    if (Date.now() - s.lastSeen > SESSION_IDLE_MS) {
      this.sessions.delete(sessionId);
      return undefined;
    }
    s.lastSeen = Date.now();
    // Most recently used last.
    this.sessions.delete(sessionId);
    this.sessions.set(sessionId, s);
    return s.capabilities;
  }
}

interface Pending {
  principal: string;
  resolve: (answer: { result?: unknown; error?: unknown }) => void;
}

export class ClientRequests {
  private readonly pending = new Map<string, Pending>();

  /** Whether any request waits for its answer (only then does the direct path look at POSTed responses). */
  get waiting(): boolean {
    return this.pending.size > 0;
  }

  /**
   * Sends a request to the client through `send` (on the stream of the call it belongs to) and
   * waits for the client's answer: its result, or an Error for its error, the timeout or `signal`.
   */
  async request(
    send: (message: { jsonrpc: '2.0'; id: string; method: string; params: Record<string, unknown> }) => Promise<void>,
    principal: string,
    method: string,
    params: Record<string, unknown>,
    signal: AbortSignal,
    timeoutMs: number,
  ): Promise<Record<string, unknown>> {
    if (this.pending.size >= MAX_PENDING) throw new Error('too many requests to clients are waiting; try again later');
    const id = `atelier-${randomBytes(18).toString('base64url')}`;
    const answer = new Promise<{ result?: unknown; error?: unknown }>((resolve) => {
      const timer = setTimeout(() => finish({ error: { message: `no answer from the client within ${Math.round(timeoutMs / 1000)} s` } }), timeoutMs);
      const onAbort = () => finish({ error: { message: 'the call ended before the client answered' } });
      const finish = (a: { result?: unknown; error?: unknown }) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        this.pending.delete(id);
        resolve(a);
      };
      this.pending.set(id, { principal, resolve: finish });
      if (signal.aborted) onAbort();
      else signal.addEventListener('abort', onAbort, { once: true });
    });
    await send({ jsonrpc: '2.0', id, method, params });
    const a = await answer;
    if (a.error !== undefined) throw new Error(`the client refused ${method}: ${String((a.error as { message?: unknown })?.message ?? 'error')}`);
    return (a.result ?? {}) as Record<string, unknown>;
  }

  /** Takes a POSTed JSON-RPC response that answers one of the requests waiting for this principal; false for anything else. */
  take(body: unknown, principal: string): boolean {
    if (body === null || typeof body !== 'object' || Array.isArray(body)) return false;
    const m = body as { jsonrpc?: unknown; id?: unknown; method?: unknown; result?: unknown; error?: unknown };
    if (m.jsonrpc !== '2.0' || typeof m.id !== 'string' || m.method !== undefined || (m.result === undefined && m.error === undefined)) return false;
    const p = this.pending.get(m.id);
    if (!p || p.principal !== principal) return false;
    p.resolve(m.error !== undefined ? { error: m.error } : { result: m.result });
    return true;
  }
}
