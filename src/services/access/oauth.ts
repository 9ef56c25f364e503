/**
 * The runner's OAuth 2.1 authorization server state for the single owner (issue #16): registered
 * clients (RFC 7591), pending consents, one-time authorization codes bound to a PKCE S256
 * challenge and an exact redirect URI, grants (what the owner approved: scope and resource), and
 * opaque access and refresh tokens stored as SHA-256 hashes. Access tokens are short-lived and
 * bound to one resource (RFC 8707); refresh tokens rotate on use, and presenting a used refresh
 * token revokes the whole grant (replay detection, OAuth 2.1 section 4.3.1).
 *
 * Clients come two ways: registered (RFC 7591, an `oauthc_` id this server made), or identified by
 * the HTTPS URL of their Client ID Metadata Document (CIMD, src/mcp/oauth/cimd.ts fetches and
 * checks it): such a client is a row like a registered one, with its own `oauthc_` id that grants,
 * codes and tokens name, and the URL in `metadata_url`; the client itself presents the URL.
 */
import { createHash } from 'node:crypto';
import type { DB } from '../../store/db.js';
import { tx } from '../../store/db.js';
import { safeEqual, sha256Hex } from '../../core/crypto.js';
import { randomToken } from '../../core/ids.js';
import { isoIn, nowIso } from '../../core/clock.js';
import { accessFromScope, intersect, scopeFromAccess, type Access } from '../../core/toolsets.js';

/** The authorization server's paths (served by src/mcp/oauth/routes.ts; the consent page by src/dashboard/oauth.ts). */
export const OAUTH_PATHS = {
  authorize: '/oauth/authorize',
  token: '/oauth/token',
  register: '/oauth/register',
  revoke: '/oauth/revoke',
  consent: '/oauth/consent',
};

export const ACCESS_PREFIX = 'atla_';
export const REFRESH_PREFIX = 'atlr_';
export const CODE_TTL_MS = 60_000;
export const PENDING_TTL_MS = 10 * 60_000;
export const REFRESH_TTL_MS = 30 * 24 * 3600_000;
export const MAX_UNAPPROVED = 200;
export const MAX_PENDING = 500;

/** An OAuth error as RFC 6749 section 5.2 names them. */
export class OAuthFailure extends Error {
  constructor(
    readonly error: string,
    readonly description: string,
    readonly status = 400,
  ) {
    super(description);
  }
}

export interface ClientRecord {
  id: string;
  name: string;
  redirectUris: string[];
  metadata: Record<string, unknown>;
  hasSecret: boolean;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
  /** The Client ID Metadata Document URL the client presents as its client_id; null for a registered client. */
  metadataUrl: string | null;
}

/** What the HTTP caching rules allow of a client's fetched metadata document. */
export interface CimdCache {
  /** Fresh until (ISO); null: revalidate at every authorization request. */
  freshUntil: string | null;
  /** Validators for a conditional request; null under no-store or when the server sent none. */
  etag: string | null;
  lastModified: string | null;
  /** The answer's Cache-Control, for a 304 that carries none (RFC 9111 section 4.3.4). */
  cacheControl: string | null;
}

/** A validated metadata document, as kept. */
export interface CimdDocument {
  name: string;
  redirectUris: string[];
  metadata: Record<string, unknown>;
}

export interface CimdClientRecord extends ClientRecord {
  metadataUrl: string;
  cache: CimdCache;
  fetchedAt: string;
}

/** True when a client_id is a Client ID Metadata Document URL rather than an id this server made. */
export function isMetadataUrlClientId(id: string): boolean {
  return id.startsWith('https://');
}

export interface PendingRequest {
  clientId: string;
  redirectUri: string;
  codeChallenge: string;
  state?: string;
  scope: string;
  resource: string;
}

export interface ConnectedClient extends ClientRecord {
  grants: Array<{ id: string; scope: string; resource: string; createdAt: string }>;
}

export interface TokenSet {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  refresh_token: string;
  scope?: string;
}

export interface VerifiedAccess {
  principal: string;
  clientId: string;
  grantId: string;
  resource: string;
  access: Access;
  expiresAt: number;
}

/**
 * A client's self-declared name as shown to the owner: Unicode format characters (bidirectional
 * overrides and isolates such as U+202E, zero-width characters, the BOM) removed, control
 * characters, line and paragraph separators and whitespace runs made one space, at most 100
 * characters. Pages also set it in <bdi>, so what remains cannot reorder the text around it.
 */
export function cleanClientName(name: string): string {
  const clean = name
    .replace(/\p{Cf}/gu, '')
    .replace(/[\p{Cc}\p{Zl}\p{Zp}\s]+/gu, ' ')
    .trim();
  return [...clean].slice(0, 100).join('') || 'unnamed client';
}

/** base64url(SHA-256(verifier)) per RFC 7636 section 4.6. */
export function s256(verifier: string): string {
  return createHash('sha256').update(verifier, 'ascii').digest('base64url');
}

const VERIFIER_RE = /^[A-Za-z0-9._~-]{43,128}$/;

/**
 * A token's access: the grant's, narrowed by the scope stored on the token (NULL for tokens issued
 * before migration 0020: the grant's). An intersection, so never wider than the grant.
 */
export function tokenAccess(grantScope: string, tokenScope: string | null): Access {
  const granted = accessFromScope(grantScope);
  return tokenScope === null ? granted : intersect(granted, accessFromScope(tokenScope));
}

/** True when `asked` is within `bound` (same or fewer toolsets; read-only kept). */
export function narrows(asked: Access, bound: Access): boolean {
  const toolsets = bound.toolsets === null || (asked.toolsets !== null && asked.toolsets.every((t) => bound.toolsets!.includes(t)));
  return toolsets && (!bound.readOnly || asked.readOnly);
}

export class OAuthStore {
  constructor(
    private readonly db: DB,
    private readonly accessTtlMs: () => number,
  ) {}

  // ---- clients ----

  /**
   * Registration is open (RFC 7591, as MCP clients expect), so unapproved registrations are
   * bounded: those never approved are forgotten after a day, and at most MAX_UNAPPROVED live.
   */
  registrationRoom(): boolean {
    // A metadata-document client counts from its last fetch (each authorization request refreshes it).
    this.db
      .prepare(`DELETE FROM oauth_clients WHERE revoked_at IS NULL AND coalesce(doc_fetched_at, created_at) < ? AND id NOT IN (SELECT client_id FROM oauth_grants)`)
      .run(new Date(Date.now() - 24 * 3600_000).toISOString());
    const n = this.db.prepare('SELECT count(*) FROM oauth_clients WHERE revoked_at IS NULL AND id NOT IN (SELECT client_id FROM oauth_grants)').pluck().get() as number;
    return n < MAX_UNAPPROVED;
  }

  registerClient(name: string, redirectUris: string[], metadata: Record<string, unknown>, withSecret: boolean): { client: ClientRecord; secret?: string } {
    const id = 'oauthc_' + randomToken(24);
    const secret = withSecret ? 'atls_' + randomToken(40) : undefined;
    const createdAt = nowIso();
    this.db
      .prepare('INSERT INTO oauth_clients (id, name, redirect_uris_json, metadata_json, secret_hash, created_at) VALUES (?, ?, ?, ?, ?, ?)')
      .run(id, name, JSON.stringify(redirectUris), JSON.stringify(metadata), secret ? sha256Hex(secret) : null, createdAt);
    return { client: { id, name, redirectUris, metadata, hasSecret: !!secret, createdAt, lastUsedAt: null, revokedAt: null, metadataUrl: null }, secret };
  }

  /** The live (not revoked) client identified by this metadata document URL, with its cache state. */
  cimdClient(url: string): CimdClientRecord | null {
    const id = this.db.prepare('SELECT id FROM oauth_clients WHERE metadata_url = ? AND revoked_at IS NULL').pluck().get(url) as string | undefined;
    if (!id) return null;
    const c = this.db.prepare('SELECT doc_fresh_until, doc_etag, doc_last_modified, doc_cache_control, doc_fetched_at FROM oauth_clients WHERE id = ?').get(id) as Record<string, string | null>;
    return {
      ...this.client(id)!,
      metadataUrl: url,
      cache: { freshUntil: c.doc_fresh_until ?? null, etag: c.doc_etag ?? null, lastModified: c.doc_last_modified ?? null, cacheControl: c.doc_cache_control ?? null },
      fetchedAt: c.doc_fetched_at!,
    };
  }

  /**
   * Keeps a freshly fetched and validated metadata document: updates the live client of this URL,
   * or makes one (null when too many clients wait for the owner's approval, as for registration).
   */
  saveCimdClient(url: string, doc: CimdDocument, cache: CimdCache): CimdClientRecord | null {
    const now = nowIso();
    const made = tx(this.db, () => {
      const existing = this.db.prepare('SELECT id FROM oauth_clients WHERE metadata_url = ? AND revoked_at IS NULL').pluck().get(url) as string | undefined;
      if (existing) {
        this.db
          .prepare('UPDATE oauth_clients SET name = ?, redirect_uris_json = ?, metadata_json = ?, doc_fresh_until = ?, doc_etag = ?, doc_last_modified = ?, doc_cache_control = ?, doc_fetched_at = ? WHERE id = ?')
          .run(doc.name, JSON.stringify(doc.redirectUris), JSON.stringify(doc.metadata), cache.freshUntil, cache.etag, cache.lastModified, cache.cacheControl, now, existing);
        return true;
      }
      if (!this.registrationRoom()) return false;
      this.db
        .prepare(
          'INSERT INTO oauth_clients (id, name, redirect_uris_json, metadata_json, secret_hash, created_at, metadata_url, doc_fresh_until, doc_etag, doc_last_modified, doc_cache_control, doc_fetched_at) VALUES (?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?)',
        )
        .run('oauthc_' + randomToken(24), doc.name, JSON.stringify(doc.redirectUris), JSON.stringify(doc.metadata), now, url, cache.freshUntil, cache.etag, cache.lastModified, cache.cacheControl, now);
      return true;
    });
    return made ? this.cimdClient(url) : null;
  }

  /** A revalidation answered 304: the kept document stays, with the cache state the answer gives (its headers update the kept ones). */
  refreshCimdCache(id: string, cache: CimdCache): void {
    this.db
      .prepare(
        'UPDATE oauth_clients SET doc_fresh_until = ?, doc_etag = coalesce(?, doc_etag), doc_last_modified = coalesce(?, doc_last_modified), doc_cache_control = coalesce(?, doc_cache_control), doc_fetched_at = ? WHERE id = ? AND revoked_at IS NULL',
      )
      .run(cache.freshUntil, cache.etag, cache.lastModified, cache.cacheControl, nowIso(), id);
  }

  client(id: string): ClientRecord | null {
    const record = this.db.prepare('SELECT * FROM oauth_clients WHERE id = ?').get(id) as Record<string, string | null> | undefined;
    if (!record) return null;
    return {
      id: record.id!,
      name: record.name!,
      redirectUris: JSON.parse(record.redirect_uris_json!) as string[],
      metadata: JSON.parse(record.metadata_json!) as Record<string, unknown>,
      hasSecret: !!record.secret_hash,
      createdAt: record.created_at!,
      lastUsedAt: record.last_used_at,
      revokedAt: record.revoked_at,
      metadataUrl: record.metadata_url ?? null,
    };
  }

  /** Authenticates a client at the token and revocation endpoints (public clients send no secret). */
  authenticateClient(presented: string | undefined, secret: string | undefined): ClientRecord {
    if (!presented) throw new OAuthFailure('invalid_client', 'client_id is required', 401);
    // A metadata-document client presents its URL: its live row (none once the owner revoked it).
    const id = isMetadataUrlClientId(presented) ? ((this.db.prepare('SELECT id FROM oauth_clients WHERE metadata_url = ? AND revoked_at IS NULL').pluck().get(presented) as string | undefined) ?? '') : presented;
    const row = this.db.prepare('SELECT secret_hash, revoked_at FROM oauth_clients WHERE id = ?').get(id) as { secret_hash: string | null; revoked_at: string | null } | undefined;
    if (!row || row.revoked_at) throw new OAuthFailure('invalid_client', 'unknown or revoked client', 401);
    if (row.secret_hash) {
      if (!secret || !safeEqual(sha256Hex(secret), row.secret_hash)) throw new OAuthFailure('invalid_client', 'wrong or missing client secret', 401);
    } else if (secret) {
      throw new OAuthFailure('invalid_client', 'this client was registered without a secret (token_endpoint_auth_method none)', 401);
    }
    return this.client(id)!;
  }

  /** Connected clients: not revoked, with their live grants. */
  connectedClients(): ConnectedClient[] {
    const rows = this.db.prepare('SELECT id FROM oauth_clients WHERE revoked_at IS NULL ORDER BY created_at').pluck().all() as string[];
    return rows.map((id) => ({
      ...this.client(id)!,
      grants: (
        this.db.prepare('SELECT id, scope, resource, created_at FROM oauth_grants WHERE client_id = ? AND revoked_at IS NULL ORDER BY created_at').all(id) as Array<Record<string, string>>
      ).map((g) => ({ id: g.id!, scope: g.scope!, resource: g.resource!, createdAt: g.created_at! })),
    }));
  }

  /** Revokes a client: its registration, every grant and every token. */
  revokeClient(id: string): boolean {
    return tx(this.db, () => {
      const r = this.db.prepare('UPDATE oauth_clients SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL').run(nowIso(), id);
      if (r.changes === 0) return false;
      const grants = this.db.prepare('SELECT id FROM oauth_grants WHERE client_id = ?').pluck().all(id) as string[];
      for (const g of grants) this.revokeGrant(g, 'client revoked by the owner');
      return true;
    });
  }

  /**
   * True when the owner approved a request of this client with exactly this redirect URI and the
   * grant is still live: only then may /oauth/authorize send an error back to it (a redirect).
   */
  approvedRedirect(clientId: string, redirectUri: string): boolean {
    return !!this.db
      .prepare('SELECT 1 FROM oauth_codes c JOIN oauth_grants g ON g.id = c.grant_id WHERE c.client_id = ? AND c.redirect_uri = ? AND g.revoked_at IS NULL LIMIT 1')
      .get(clientId, redirectUri);
  }

  // ---- authorization requests and consent ----

  savePending(req: PendingRequest): string | null {
    const id = randomToken(32);
    this.db.prepare('DELETE FROM oauth_pending WHERE expires_at <= ?').run(nowIso());
    const n = this.db.prepare('SELECT count(*) FROM oauth_pending').pluck().get() as number;
    if (n >= MAX_PENDING) return null;
    this.db
      .prepare('INSERT INTO oauth_pending (id_hash, client_id, request_json, created_at, expires_at) VALUES (?, ?, ?, ?, ?)')
      .run(sha256Hex(id), req.clientId, JSON.stringify(req), nowIso(), isoIn(PENDING_TTL_MS));
    return id;
  }

  pending(id: string): PendingRequest | null {
    const r = this.db.prepare('SELECT request_json FROM oauth_pending WHERE id_hash = ? AND expires_at > ?').get(sha256Hex(id), nowIso()) as { request_json: string } | undefined;
    return r ? (JSON.parse(r.request_json) as PendingRequest) : null;
  }

  /** Consumes a pending request (approve or deny: either way it is gone). */
  takePending(id: string): PendingRequest | null {
    return tx(this.db, () => {
      const p = this.pending(id);
      this.db.prepare('DELETE FROM oauth_pending WHERE id_hash = ?').run(sha256Hex(id));
      return p;
    });
  }

  /** The owner approved: a grant and a one-time code for it. */
  approve(pendingRequest: PendingRequest): string {
    const code = randomToken(43);
    const grantId = 'grant_' + randomToken(24);
    tx(this.db, () => {
      this.db.prepare('INSERT INTO oauth_grants (id, client_id, scope, resource, created_at) VALUES (?, ?, ?, ?, ?)').run(grantId, pendingRequest.clientId, pendingRequest.scope, pendingRequest.resource, nowIso());
      this.db
        .prepare('INSERT INTO oauth_codes (code_hash, client_id, grant_id, redirect_uri, code_challenge, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)')
        .run(sha256Hex(code), pendingRequest.clientId, grantId, pendingRequest.redirectUri, pendingRequest.codeChallenge, nowIso(), isoIn(CODE_TTL_MS));
    });
    return code;
  }

  // ---- token endpoint ----

  // Not in a transaction: a refusal must not roll back the code's use or a replay's revocation
  // (better-sqlite3 is synchronous, so nothing interleaves with these statements).
  exchangeCode(client: ClientRecord, code: string, verifier: string | undefined, redirectUri: string | undefined, resource: string | undefined, expectedResource: string): TokenSet {
    {
      const row = this.db.prepare('SELECT * FROM oauth_codes WHERE code_hash = ?').get(sha256Hex(code)) as Record<string, string | null> | undefined;
      if (!row || row.client_id !== client.id) throw new OAuthFailure('invalid_grant', 'unknown authorization code');
      if (row.used_at) {
        // A code presented twice: its grant (and whatever it issued) is revoked (RFC 6749 section 4.1.2).
        this.revokeGrant(row.grant_id!, 'authorization code reused');
        throw new OAuthFailure('invalid_grant', 'authorization code already used');
      }
      this.db.prepare('UPDATE oauth_codes SET used_at = ? WHERE code_hash = ?').run(nowIso(), row.code_hash);
      if (row.expires_at! <= nowIso()) throw new OAuthFailure('invalid_grant', 'authorization code expired');
      if (redirectUri !== row.redirect_uri) throw new OAuthFailure('invalid_grant', 'redirect_uri does not match the authorization request');
      if (!verifier) throw new OAuthFailure('invalid_request', 'code_verifier is required (PKCE)');
      if (!VERIFIER_RE.test(verifier)) throw new OAuthFailure('invalid_grant', 'code_verifier: must be 43-128 characters of A-Z a-z 0-9 - . _ ~');
      if (!safeEqual(s256(verifier), row.code_challenge!)) throw new OAuthFailure('invalid_grant', 'code_verifier does not match the code_challenge');
      const grant = this.liveGrant(row.grant_id!);
      if (resource !== undefined && resource !== grant.resource) throw new OAuthFailure('invalid_target', 'resource does not match the authorization request');
      if (grant.resource !== expectedResource) throw new OAuthFailure('invalid_target', `resource must be ${expectedResource}`);
      this.touchClient(client.id);
      return this.issue(grant.id, grant.scope);
    }
  }

  /**
   * A refresh rotates the refresh token. Its `scope` may only narrow what this refresh token
   * carries (the grant's scope, or what an earlier refresh of its chain narrowed it to); without a
   * scope the new tokens carry the same. The narrowing sticks to the chain: a later refresh cannot
   * widen back to the grant (docs/access.md). Both new tokens store their scope, and verifyAccess
   * enforces it.
   */
  refresh(client: ClientRecord, refreshToken: string, scope: string | undefined, resource: string | undefined): TokenSet {
    {
      const row = this.db
        .prepare("SELECT t.token_hash, t.grant_id, t.expires_at, t.used_at, t.revoked_at, t.scope, g.client_id FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id WHERE t.token_hash = ? AND t.kind = 'refresh'")
        .get(sha256Hex(refreshToken)) as Record<string, string | null> | undefined;
      if (!row || row.client_id !== client.id) throw new OAuthFailure('invalid_grant', 'unknown refresh token');
      if (row.used_at) {
        this.revokeGrant(row.grant_id!, 'refresh token reused');
        throw new OAuthFailure('invalid_grant', 'refresh token already used; the grant is revoked, authorize again');
      }
      if (row.revoked_at) throw new OAuthFailure('invalid_grant', 'refresh token revoked');
      if (row.expires_at! <= nowIso()) throw new OAuthFailure('invalid_grant', 'refresh token expired');
      const grant = this.liveGrant(row.grant_id!);
      if (resource !== undefined && resource !== grant.resource) throw new OAuthFailure('invalid_target', 'resource does not match the grant');
      // What this refresh token may hand on: the grant, narrowed by the token's own scope.
      const carried = tokenAccess(grant.scope, row.scope);
      let next = carried;
      if (scope !== undefined && scope.trim() !== '') {
        const asked = accessFromScope(scope);
        if (!narrows(asked, carried))
          throw new OAuthFailure('invalid_scope', `scope: a refresh may only narrow the scope this refresh token carries (${scopeFromAccess(carried) || 'mcp'}), never widen it`);
        next = intersect(carried, asked);
      }
      this.db.prepare('UPDATE oauth_tokens SET used_at = ? WHERE token_hash = ?').run(nowIso(), row.token_hash);
      this.touchClient(client.id);
      return this.issue(grant.id, scopeFromAccess(next));
    }
  }

  /** RFC 7009: revokes the token (either kind); unknown tokens are not an error. Revoking a refresh token ends its grant. */
  revokeToken(client: ClientRecord, token: string): void {
    const row = this.db
      .prepare('SELECT t.token_hash, t.kind, t.grant_id, g.client_id FROM oauth_tokens t JOIN oauth_grants g ON g.id = t.grant_id WHERE t.token_hash = ?')
      .get(sha256Hex(token)) as { token_hash: string; kind: string; grant_id: string; client_id: string } | undefined;
    if (!row || row.client_id !== client.id) return;
    if (row.kind === 'refresh') this.revokeGrant(row.grant_id, 'refresh token revoked by the client');
    else this.db.prepare('UPDATE oauth_tokens SET revoked_at = coalesce(revoked_at, ?) WHERE token_hash = ?').run(nowIso(), row.token_hash);
  }

  /** Verifies an OAuth access token; null when unknown, revoked, expired, or its grant/client is revoked. */
  verifyAccess(token: string): VerifiedAccess | null {
    if (!token.startsWith(ACCESS_PREFIX) || token.length > 200) return null;
    const hash = sha256Hex(token);
    const record = this.db
      .prepare(
        `SELECT t.token_hash, t.expires_at, t.scope AS token_scope, g.id AS grant_id, g.client_id, g.scope, g.resource FROM oauth_tokens t
         JOIN oauth_grants g ON g.id = t.grant_id JOIN oauth_clients c ON c.id = g.client_id
         WHERE t.token_hash = ? AND t.kind = 'access' AND t.revoked_at IS NULL AND g.revoked_at IS NULL AND c.revoked_at IS NULL`,
      )
      .get(hash) as Record<string, string> | undefined;
    if (!record || !safeEqual(record.token_hash!, hash) || record.expires_at! <= nowIso()) return null;
    return {
      principal: record.client_id!,
      clientId: record.client_id!,
      grantId: record.grant_id!,
      resource: record.resource!,
      access: tokenAccess(record.scope!, record.token_scope ?? null),
      expiresAt: Math.floor(Date.parse(record.expires_at!) / 1000),
    };
  }

  // ---- internals ----

  private liveGrant(id: string): { id: string; scope: string; resource: string } {
    const g = this.db.prepare('SELECT id, scope, resource, revoked_at FROM oauth_grants WHERE id = ?').get(id) as { id: string; scope: string; resource: string; revoked_at: string | null } | undefined;
    if (!g || g.revoked_at) throw new OAuthFailure('invalid_grant', 'the grant was revoked; authorize again');
    return g;
  }

  private revokeGrant(id: string, reason: string): void {
    const now = nowIso();
    this.db.prepare('UPDATE oauth_grants SET revoked_at = coalesce(revoked_at, ?), revoked_reason = coalesce(revoked_reason, ?) WHERE id = ?').run(now, reason, id);
    this.db.prepare('UPDATE oauth_tokens SET revoked_at = coalesce(revoked_at, ?) WHERE grant_id = ?').run(now, id);
  }

  private issue(grantId: string, scope: string): TokenSet {
    const access = ACCESS_PREFIX + randomToken(43);
    const refresh = REFRESH_PREFIX + randomToken(43);
    const ttl = this.accessTtlMs();
    const ins = this.db.prepare('INSERT INTO oauth_tokens (token_hash, grant_id, kind, scope, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)');
    tx(this.db, () => {
      ins.run(sha256Hex(access), grantId, 'access', scope, nowIso(), isoIn(ttl));
      ins.run(sha256Hex(refresh), grantId, 'refresh', scope, nowIso(), isoIn(REFRESH_TTL_MS));
    });
    return { access_token: access, token_type: 'Bearer', expires_in: Math.floor(ttl / 1000), refresh_token: refresh, ...(scope ? { scope } : {}) };
  }

  private touchClient(id: string): void {
    this.db.prepare('UPDATE oauth_clients SET last_used_at = ? WHERE id = ?').run(nowIso(), id);
  }
}
