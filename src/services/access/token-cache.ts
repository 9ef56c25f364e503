/**
 * Verified bearer tokens of /mcp, remembered so a busy client does not pay a lookup on every call.
 * Keyed by the SHA-256 of the token; the token itself is never kept, unknown tokens are never
 * remembered.
 *
 * Revocation is honoured at once: an entry is trusted only while the token tables are unchanged
 * since it was verified. Triggers on api_tokens and the OAuth tables move the auth_epoch counter on
 * every insert, update and delete (migration 0019), whichever connection writes: `atelier token
 * revoke` from the CLI, the dashboard, an OAuth revocation. A changed counter clears the cache, so
 * the next request of a revoked token is looked up again and refused. Writes to other tables (a
 * tool call's audit entry) leave it alone. Entries also end after ttlMs, and an OAuth token at its
 * expiry.
 */
import { createHash } from 'node:crypto';
import type { DB } from '../../store/db.js';

const DEFAULT_TTL_MS = 30_000;
const MAX_ENTRIES = 256;

interface Entry {
  value: unknown;
  until: number;
}

export class TokenVerifyCache {
  private readonly entries = new Map<string, Entry>();
  private readonly epoch;
  private seen = -1;

  constructor(
    db: DB,
    private readonly ttlMs = DEFAULT_TTL_MS,
  ) {
    this.epoch = db.prepare('SELECT n FROM auth_epoch WHERE id = 1').pluck();
  }

  /**
   * The verified value for this token: remembered while the token tables are unchanged, otherwise
   * `verify()` (the real check) and remembered if valid. `expiresAt` (ms) bounds an entry's life.
   */
  verify<V>(kind: string, token: string, verify: () => V | null, expiresAt?: (v: V) => number): V | null {
    const epoch = this.epoch.get() as number;
    if (epoch !== this.seen) {
      this.entries.clear();
      this.seen = epoch;
    }
    const key = `${kind}:${createHash('sha256').update(token).digest('base64')}`;
    const now = Date.now();
    const hit = this.entries.get(key);
    if (hit && hit.until > now) return hit.value as V;
    this.entries.delete(key);
    const value = verify();
    if (value === null) return null;
    // The verification may itself write (a token's last use, at most once a minute): what was
    // remembered before was checked against the tables as they were, so it is dropped. The stamp
    // stays the counter read before the check, so a change by anyone during it clears this entry too.
    if ((this.epoch.get() as number) !== epoch) this.entries.clear();
    if (this.entries.size >= MAX_ENTRIES) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, { value, until: Math.min(now + this.ttlMs, expiresAt ? expiresAt(value) : Infinity) });
    return value;
  }
}
