/**
 * The owner principal and how callers prove they are the owner:
 *  - MCP: bearer tokens ("atl_" + 40 random characters), stored as SHA-256 hashes, shown once.
 *  - Dashboard: the owner's password (scrypt) or a one-time login link, then a session cookie
 *    (HttpOnly, SameSite=Strict) with a CSRF token for every state-changing request.
 */
import type { DB } from '../../store/db.js';
import { tx } from '../../store/db.js';
import { hashPassword, safeEqual, sha256Hex, verifyPassword } from '../../core/crypto.js';
import { ServiceError } from '../../core/errors.js';
import { newId, randomToken } from '../../core/ids.js';
import { isoIn, nowIso } from '../../core/clock.js';

export const TOKEN_PREFIX = 'atl_';
export const SESSION_TTL_MS = 12 * 3600 * 1000;
export const LOGIN_LINK_TTL_MS = 15 * 60 * 1000;

export interface TokenInfo {
  id: string;
  name: string;
  prefix: string;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
  /** Toolsets the token is limited to (null: every toolset); see src/core/toolsets.ts. */
  toolsets: string[] | null;
  readOnly: boolean;
  allowInUrl: boolean;
  /** Connections with this token start in the dynamic mode (docs/access.md "Dynamic toolsets"). */
  dynamicToolsets: boolean;
}

/** A token's narrowing of MCP access (toolset names already validated by the caller). */
export interface TokenAccess {
  toolsets: string[] | null;
  readOnly: boolean;
  /**
   * May be sent as the `access_token` query parameter (RFC 6750 section 2.3) for clients that
   * cannot send headers (the conformance suite 0.1.13). Only read-only tokens may allow it.
   */
  allowInUrl?: boolean;
  /** Connections start in the dynamic mode unless they say otherwise (X-MCP-Dynamic-Toolsets: false). */
  dynamicToolsets?: boolean;
}

export interface DashboardSession {
  ownerId: string;
  csrf: string;
  expiresAt: string;
}

export class AuthService {
  readonly ownerId: string;

  constructor(private readonly db: DB) {
    this.ownerId = this.ensureOwner();
  }

  private ensureOwner(): string {
    const row = this.db.prepare('SELECT id FROM owner LIMIT 1').get() as { id: string } | undefined;
    if (row) return row.id;
    const id = 'owner';
    this.db.prepare('INSERT INTO owner (id, created_at) VALUES (?, ?)').run(id, nowIso());
    return id;
  }

  // ---- MCP bearer tokens ----

  createToken(name: string, access: TokenAccess = { toolsets: null, readOnly: false }): { token: string; info: TokenInfo } {
    const trimmed = name.trim();
    if (access.allowInUrl && !access.readOnly)
      throw new ServiceError('INVALID_ARGUMENT', 'allowInUrl: only a read-only token may be sent in a URL (add --read-only)', { field: 'allowInUrl' });
    if (!/^[A-Za-z0-9 ._:@-]{1,80}$/.test(trimmed))
      throw new ServiceError('INVALID_ARGUMENT', 'name: must be 1-80 characters of letters, digits, space and . _ : @ -', { field: 'name' });
    const token = TOKEN_PREFIX + randomToken(40);
    const id = newId('token');
    const createdAt = nowIso();
    this.db
      .prepare('INSERT INTO api_tokens (id, owner_id, name, token_hash, prefix, created_at, toolsets, read_only, allow_in_url, dynamic_toolsets) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)')
      .run(id, this.ownerId, trimmed, sha256Hex(token), token.slice(0, 8), createdAt, access.toolsets ? JSON.stringify(access.toolsets) : null, access.readOnly ? 1 : 0, access.allowInUrl ? 1 : 0, access.dynamicToolsets ? 1 : 0);
    return {
      token,
      info: { id, name: trimmed, prefix: token.slice(0, 8), createdAt, lastUsedAt: null, revokedAt: null, toolsets: access.toolsets, readOnly: access.readOnly, allowInUrl: !!access.allowInUrl, dynamicToolsets: !!access.dynamicToolsets },
    };
  }

  listTokens(): TokenInfo[] {
    return (
      this.db
        .prepare('SELECT id, name, prefix, created_at, last_used_at, revoked_at, toolsets, read_only, allow_in_url, dynamic_toolsets FROM api_tokens ORDER BY created_at')
        .all() as Array<Record<string, string | null>>
    ).map((r) => ({
      toolsets: r.toolsets ? (JSON.parse(r.toolsets) as string[]) : null,
      readOnly: Number(r.read_only) === 1,
      allowInUrl: Number(r.allow_in_url) === 1,
      dynamicToolsets: Number(r.dynamic_toolsets) === 1,
      id: r.id!,
      name: r.name!,
      prefix: r.prefix!,
      createdAt: r.created_at!,
      lastUsedAt: r.last_used_at ?? null,
      revokedAt: r.revoked_at ?? null,
    }));
  }

  activeTokenCount(): number {
    return this.db.prepare('SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL').pluck().get() as number;
  }

  revokeToken(idOrPrefix: string): TokenInfo {
    const row = this.db
      .prepare('SELECT id FROM api_tokens WHERE id = ? OR (prefix = ? AND length(?) >= 8)')
      .all(idOrPrefix, idOrPrefix, idOrPrefix) as Array<{ id: string }>;
    if (row.length === 0) throw new ServiceError('NOT_FOUND', `no token with id ${idOrPrefix}`, { field: 'id' });
    if (row.length > 1) throw new ServiceError('INVALID_ARGUMENT', `${idOrPrefix} matches several tokens; give the id`, { field: 'id' });
    this.db.prepare('UPDATE api_tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?').run(nowIso(), row[0]!.id);
    return this.listTokens().find((t) => t.id === row[0]!.id)!;
  }

  private lastTouch = new Map<string, number>();

  /** Returns the token id (the principal) for a valid bearer token, or null. */
  verifyBearer(token: string): string | null {
    return this.verifyBearerAccess(token)?.principal ?? null;
  }

  /** The principal and the token's access narrowing for a valid bearer token, or null. */
  verifyBearerAccess(token: string): { principal: string; access: TokenAccess } | null {
    if (!token.startsWith(TOKEN_PREFIX) || token.length > 200) return null;
    const hash = sha256Hex(token);
    const row = this.db
      .prepare('SELECT id, token_hash, toolsets, read_only, allow_in_url, dynamic_toolsets FROM api_tokens WHERE token_hash = ? AND revoked_at IS NULL')
      .get(hash) as { id: string; token_hash: string; toolsets: string | null; read_only: number; allow_in_url: number; dynamic_toolsets: number } | undefined;
    if (!row || !safeEqual(row.token_hash, hash)) return null;
    // last_used_at is informational: write it at most once a minute per token.
    const now = Date.now();
    if ((this.lastTouch.get(row.id) ?? 0) < now - 60_000) {
      this.lastTouch.set(row.id, now);
      this.db.prepare('UPDATE api_tokens SET last_used_at = ? WHERE id = ?').run(nowIso(), row.id);
    }
    return {
      principal: row.id,
      access: { toolsets: row.toolsets ? (JSON.parse(row.toolsets) as string[]) : null, readOnly: row.read_only === 1, allowInUrl: row.allow_in_url === 1, dynamicToolsets: row.dynamic_toolsets === 1 },
    };
  }

  // ---- Dashboard ----

  async setPassword(password: string): Promise<void> {
    if (password.length < 12) throw new ServiceError('INVALID_ARGUMENT', 'password: must be at least 12 characters', { field: 'password' });
    if (password.length > 1024) throw new ServiceError('INVALID_ARGUMENT', 'password: must be at most 1024 characters', { field: 'password' });
    const hash = await hashPassword(password);
    tx(this.db, () => {
      this.db.prepare('UPDATE owner SET password_hash = ?, password_set_at = ? WHERE id = ?').run(hash, nowIso(), this.ownerId);
      // A new password ends every existing dashboard session.
      this.db.prepare('DELETE FROM dashboard_sessions').run();
    });
  }

  hasPassword(): boolean {
    return !!this.db.prepare('SELECT password_hash FROM owner WHERE id = ?').pluck().get(this.ownerId);
  }

  async checkPassword(password: string): Promise<boolean> {
    const hash = this.db.prepare('SELECT password_hash FROM owner WHERE id = ?').pluck().get(this.ownerId) as string | null;
    if (!hash) return false;
    return verifyPassword(password, hash);
  }

  createLoginLink(): string {
    const token = randomToken(43);
    this.db
      .prepare('INSERT INTO login_links (token_hash, created_at, expires_at) VALUES (?, ?, ?)')
      .run(sha256Hex(token), nowIso(), isoIn(LOGIN_LINK_TTL_MS));
    return token;
  }

  /** Consumes a one-time login link; true once, false for unknown, used or expired links. */
  consumeLoginLink(token: string): boolean {
    return tx(this.db, () => {
      const r = this.db
        .prepare('UPDATE login_links SET used_at = ? WHERE token_hash = ? AND used_at IS NULL AND expires_at > ?')
        .run(nowIso(), sha256Hex(token), nowIso());
      return r.changes === 1;
    });
  }

  createSession(): { sessionId: string; csrf: string; expiresAt: string } {
    const sessionId = randomToken(43);
    const csrf = randomToken(32);
    const expiresAt = isoIn(SESSION_TTL_MS);
    this.db.prepare('DELETE FROM dashboard_sessions WHERE expires_at <= ?').run(nowIso());
    this.db
      .prepare('INSERT INTO dashboard_sessions (id_hash, owner_id, csrf, created_at, expires_at) VALUES (?, ?, ?, ?, ?)')
      .run(sha256Hex(sessionId), this.ownerId, csrf, nowIso(), expiresAt);
    return { sessionId, csrf, expiresAt };
  }

  getSession(sessionId: string): DashboardSession | null {
    const r = this.db
      .prepare('SELECT owner_id, csrf, expires_at FROM dashboard_sessions WHERE id_hash = ? AND expires_at > ?')
      .get(sha256Hex(sessionId), nowIso()) as { owner_id: string; csrf: string; expires_at: string } | undefined;
    return r ? { ownerId: r.owner_id, csrf: r.csrf, expiresAt: r.expires_at } : null;
  }

  endSession(sessionId: string): void {
    this.db.prepare('DELETE FROM dashboard_sessions WHERE id_hash = ?').run(sha256Hex(sessionId));
  }
}
