/**
 * Idempotency records: the same key with the same input replays the first result; the same key
 * with different input is a CONFLICT. Records expire (24 hours by default). Scopes keep keys of
 * different tools apart.
 */
import type { DB } from '../../store/db.js';
import { sha256Hex } from '../../core/crypto.js';
import { ServiceError } from '../../core/errors.js';
import { isoIn, nowIso } from '../../core/clock.js';
import { canonicalJson } from '../../core/canonical-json.js';

export const IDEMPOTENCY_TTL_MS = 24 * 3600 * 1000;

export interface IdemRecord {
  result: Record<string, unknown>;
  isError: boolean;
}

export class IdempotencyStore {
  constructor(private readonly db: DB) {}

  /** The earlier result for (scope, key), null when there is none; CONFLICT when the input differs. */
  lookup(scope: string, key: string, input: unknown, field = 'idempotencyKey'): IdemRecord | null {
    const row = this.db
      .prepare('SELECT input_hash, result_json, is_error FROM idempotency WHERE scope = ? AND key = ? AND expires_at > ?')
      .get(scope, key, nowIso()) as { input_hash: string; result_json: string; is_error: number } | undefined;
    if (!row) return null;
    if (row.input_hash !== sha256Hex(canonicalJson(input))) {
      throw new ServiceError('CONFLICT', `${field}: this key was already used with different input; use a new key for a different request`, {
        field,
        rule: 'same key requires same input',
      });
    }
    return { result: JSON.parse(row.result_json), isError: row.is_error === 1 };
  }

  save(scope: string, key: string, input: unknown, result: Record<string, unknown>, isError = false, ttlMs = IDEMPOTENCY_TTL_MS): void {
    this.db
      .prepare(
        `INSERT INTO idempotency (scope, key, input_hash, result_json, is_error, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT(scope, key) DO UPDATE SET input_hash = excluded.input_hash, result_json = excluded.result_json,
           is_error = excluded.is_error, created_at = excluded.created_at, expires_at = excluded.expires_at
         WHERE idempotency.expires_at <= excluded.created_at`,
      )
      .run(scope, key, sha256Hex(canonicalJson(input)), JSON.stringify(result), isError ? 1 : 0, nowIso(), isoIn(ttlMs));
  }

  purgeExpired(): number {
    return this.db.prepare('DELETE FROM idempotency WHERE expires_at <= ?').run(nowIso()).changes;
  }
}
