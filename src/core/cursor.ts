import { deriveKey, hmac, safeEqual } from './crypto.js';
import { ServiceError } from './errors.js';

/**
 * Opaque, tamper-evident cursors of at most 256 characters.
 * Layout: base64url(JSON payload) "." base64url(first 16 bytes of HMAC-SHA256(kind "|" payload)).
 * The kind binds a cursor to the listing that made it: a files_list cursor is refused by git_log.
 */
export const MAX_CURSOR_LENGTH = 256;

export class CursorCodec {
  private readonly key: Buffer;
  constructor(master: Buffer) {
    this.key = deriveKey(master, 'cursor');
  }

  encode(kind: string, state: Record<string, unknown>): string {
    const payload = Buffer.from(JSON.stringify(state)).toString('base64url');
    const sig = hmac(this.key, `${kind}|${payload}`).subarray(0, 16).toString('base64url');
    const cursor = `${payload}.${sig}`;
    if (cursor.length > MAX_CURSOR_LENGTH) {
      throw new ServiceError('INTERNAL', `cursor for ${kind} would exceed ${MAX_CURSOR_LENGTH} characters`);
    }
    return cursor;
  }

  decode<T extends Record<string, unknown>>(kind: string, cursor: string, field = 'cursor'): T {
    const bad = () =>
      new ServiceError('INVALID_ARGUMENT', `${field}: not a cursor this listing issued (tampered, expired or from another call)`, {
        field,
        rule: 'cursor',
      });
    const dot = cursor.indexOf('.');
    if (dot <= 0) throw bad();
    const payload = cursor.slice(0, dot);
    const sig = cursor.slice(dot + 1);
    const want = hmac(this.key, `${kind}|${payload}`).subarray(0, 16).toString('base64url');
    if (!safeEqual(sig, want)) throw bad();
    try {
      const v = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
      if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad();
      return v as T;
    } catch {
      throw bad();
    }
  }
}
