/**
 * Preview URLs (issue #33 item 4; docs/workspaces.md "Preview URLs"): a signed, expiring,
 * revocable link on the service's own origin to one port a server inside a workspace listens on.
 *
 *   <origin>/p/<previewId>.<signature>/<path>
 *
 * The signature is HMAC-SHA256 (a key derived from the master key) over the preview's id, its
 * workspace, its port, its expiry and its kind: an owner link and a public link of the same
 * preview differ, so consenting to a public link never turns an owner link already handed out
 * into a public one. The port is not in the URL at all: a link reaches exactly the port it was
 * signed for. A browser that showed the owner's session is sent on to a grant link
 * (<id>.<signature>.<grantExpiry>.<grantMac>) whose grant stands in for the session inside the
 * preview's sandboxed documents (which carry no cookies of this origin).
 *
 * This module owns the `previews` table (migration 0028); http-gate.ts serves the links.
 */
import type { DB } from '../../store/db.js';
import type { CursorCodec } from '../../core/cursor.js';
import { hmac, safeEqual } from '../../core/crypto.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import type { AuditLog, Actor } from '../instance/index.js';
import type { WorkspaceService } from '../workspaces/index.js';

/** Default lifetime of a preview link, and the longest one may live. */
export const PREVIEW_DEFAULT_TTL_S = 3600;
export const PREVIEW_MAX_TTL_S = 7 * 24 * 3600;
/** A browser grant lives at most this long (and never past the preview's expiry). */
export const PREVIEW_GRANT_S = 12 * 3600;
/** Open previews (not revoked, not expired) per workspace. */
export const PREVIEW_MAX_PER_WORKSPACE = 20;
/** The sandbox's egress bridge listens here; a preview of it would lead out of the sandbox. */
export const PREVIEW_FORBIDDEN_PORTS = [3128];

export type PublicState = 'none' | 'requested' | 'granted';

interface Row {
  id: string;
  owner_id: string;
  workspace_id: string;
  port: number;
  label: string | null;
  created_at: string;
  created_by: string;
  expires_at: string;
  public_state: PublicState;
  public_at: string | null;
  revoked_at: string | null;
  revoked_by: string | null;
  generation: number;
}

export interface PreviewView {
  previewId: string;
  workspaceId: string;
  port: number;
  label: string | null;
  state: 'open' | 'expired' | 'revoked';
  /** The owner's link: opens with the dashboard session or a bearer token. */
  url: string;
  path: string;
  /** 'owner': only the owner; 'public': a public link exists (the owner consented on the dashboard). */
  access: 'owner' | 'public';
  publicLink: { state: PublicState; url?: string; path?: string; consentedAt?: string };
  createdAt: string;
  expiresAt: string;
  revokedAt: string | null;
  generation: number;
}

/** What the HTTP side learns from a link's first path segment. */
export interface ResolvedLink {
  row: Row;
  /** 'public': the public link of a preview whose owner consented; 'owner': needs the owner; 'grant': the owner, via a browser grant. */
  kind: 'public' | 'owner' | 'grant';
  /** The segment without a grant (the preview's owner link prefix is /p/<base>/). */
  base: string;
}

export interface PreviewServiceDeps {
  db: DB;
  key: Buffer;
  cursors: CursorCodec;
  audit: AuditLog;
  workspaces: Pick<WorkspaceService, 'get'>;
  /** Milliseconds one second of a link's lifetime lasts (1000; tests shorten it: --retention-second-ms). */
  secondMs?: number;
  now?: () => number;
}

const SEGMENT = /^(prv_[A-Za-z0-9_-]{24})\.([A-Za-z0-9_-]{43})(?:\.([0-9a-z]{1,12})\.([A-Za-z0-9_-]{43}))?$/;

export class PreviewService {
  /** The service's public origin (set by the server once it listens). */
  origin = '';
  /** Called with a preview's id when it is revoked: its open connections are closed (http-gate.ts). */
  onRevoke: ((id: string) => void) | undefined;

  constructor(private readonly deps: PreviewServiceDeps) {}

  private now(): number {
    return (this.deps.now ?? Date.now)();
  }

  private sign(row: Pick<Row, 'id' | 'workspace_id' | 'port' | 'expires_at'>, kind: 'owner' | 'public'): string {
    return hmac(this.deps.key, `preview|v1|${kind}|${row.id}|${row.workspace_id}|${row.port}|${row.expires_at}`).toString('base64url');
  }

  private grantMac(base: string, until: number): string {
    return hmac(this.deps.key, `preview-grant|v1|${base}|${until}`).toString('base64url');
  }

  /** A grant segment for a browser that showed the owner's session (http-gate.ts). */
  grantSegment(resolved: ResolvedLink): string {
    const until = Math.min(Math.floor(this.now() / 1000) + PREVIEW_GRANT_S, Math.floor(Date.parse(resolved.row.expires_at) / 1000));
    const exp = until.toString(36);
    return `${resolved.base}.${exp}.${this.grantMac(resolved.base, until)}`;
  }

  private pathOf(row: Row, kind: 'owner' | 'public'): string {
    return `/p/${row.id}.${this.sign(row, kind)}/`;
  }

  private view(row: Row): PreviewView {
    const path = this.pathOf(row, 'owner');
    const state = row.revoked_at ? 'revoked' : Date.parse(row.expires_at) <= this.now() ? 'expired' : 'open';
    const pub: PreviewView['publicLink'] = { state: row.public_state };
    if (row.public_state === 'granted') {
      pub.path = this.pathOf(row, 'public');
      pub.url = this.origin + pub.path;
      pub.consentedAt = row.public_at ?? undefined;
    }
    return {
      previewId: row.id,
      workspaceId: row.workspace_id,
      port: row.port,
      label: row.label,
      state,
      url: this.origin + path,
      path,
      access: row.public_state === 'granted' ? 'public' : 'owner',
      publicLink: pub,
      createdAt: row.created_at,
      expiresAt: row.expires_at,
      revokedAt: row.revoked_at,
      generation: row.generation,
    };
  }

  private row(owner: string, id: string, field = 'previewId'): Row {
    const row = this.deps.db.prepare('SELECT * FROM previews WHERE id = ? AND owner_id = ?').get(id, owner) as Row | undefined;
    if (!row) throw new ServiceError('NOT_FOUND', `${field}: no preview ${id}`, { field, previewId: id });
    return row;
  }

  open(owner: string, workspaceId: string, args: { port: number; ttlSeconds?: number; public?: boolean; label?: string }, who: { actor: Actor; principal?: string | null }): PreviewView & { note: string } {
    const port = args.port;
    if (!Number.isInteger(port) || port < 1 || port > 65535) throw new ServiceError('INVALID_ARGUMENT', 'port: must be an integer from 1 to 65535', { field: 'port', rule: '1-65535' });
    if (PREVIEW_FORBIDDEN_PORTS.includes(port))
      throw new ServiceError('INVALID_ARGUMENT', `port: ${port} is the sandbox's egress bridge (it leads to the host's egress proxy), not a workspace server`, { field: 'port', rule: 'not the egress bridge port' });
    const ttl = args.ttlSeconds ?? PREVIEW_DEFAULT_TTL_S;
    if (!Number.isInteger(ttl) || ttl < 60 || ttl > PREVIEW_MAX_TTL_S)
      throw new ServiceError('INVALID_ARGUMENT', `ttlSeconds: must be an integer from 60 to ${PREVIEW_MAX_TTL_S}`, { field: 'ttlSeconds', rule: `60-${PREVIEW_MAX_TTL_S}` });
    const ws = this.deps.workspaces.get(workspaceId);
    if (ws.state !== 'active') throw new ServiceError('FAILED_PRECONDITION', `workspaceId: workspace ${workspaceId} is ${ws.state}; previews need an active workspace`, { field: 'workspaceId', state: ws.state });
    const nowIso = new Date(this.now()).toISOString();
    const open = this.deps.db.prepare('SELECT COUNT(*) FROM previews WHERE workspace_id = ? AND revoked_at IS NULL AND expires_at > ?').pluck().get(workspaceId, nowIso) as number;
    if (open >= PREVIEW_MAX_PER_WORKSPACE)
      throw new ServiceError('RESOURCE_EXHAUSTED', `workspaceId: workspace ${workspaceId} has ${open} open previews, the most it may have (${PREVIEW_MAX_PER_WORKSPACE}); revoke one with preview_revoke`, { field: 'workspaceId', limit: PREVIEW_MAX_PER_WORKSPACE });
    // Whole seconds: the expiry is signed as written.
    const expires = new Date(Math.floor(this.now() / 1000) * 1000 + ttl * (this.deps.secondMs ?? 1000)).toISOString();
    const row: Row = {
      id: newId('preview'),
      owner_id: owner,
      workspace_id: workspaceId,
      port,
      label: args.label ?? null,
      created_at: nowIso,
      created_by: who.actor,
      expires_at: expires,
      public_state: args.public ? 'requested' : 'none',
      public_at: null,
      revoked_at: null,
      revoked_by: null,
      generation: 1,
    };
    this.deps.db
      .prepare('INSERT INTO previews (id, owner_id, workspace_id, port, label, created_at, created_by, expires_at, public_state, generation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)')
      .run(row.id, owner, workspaceId, port, row.label, row.created_at, row.created_by, row.expires_at, row.public_state);
    this.deps.audit.record({ actor: who.actor, principal: who.principal ?? null, action: 'preview_open', target: row.id, outcome: 'ok', details: { workspaceId, port, expiresAt: expires, publicRequested: !!args.public } });
    const note = args.public
      ? 'The link opens for the owner only (dashboard session or bearer token). A public link was asked for: it exists once the owner consents on the dashboard (Previews); preview_list then shows publicLink.url.'
      : 'The link opens for the owner only (dashboard session or bearer token). A public link needs the owner\'s consent on the dashboard.';
    return { ...this.view(row), note };
  }

  list(owner: string, args: { workspaceId?: string; includeClosed?: boolean; limit?: number; cursor?: string }): { previews: PreviewView[]; nextCursor: string | null } {
    const limit = args.limit ?? 50;
    const after = args.cursor ? this.deps.cursors.decode<{ c: string; i: string }>('previews', args.cursor) : null;
    const nowIso = new Date(this.now()).toISOString();
    const where = ['owner_id = ?'];
    const params: unknown[] = [owner];
    if (args.workspaceId) {
      where.push('workspace_id = ?');
      params.push(args.workspaceId);
    }
    if (!args.includeClosed) {
      where.push('revoked_at IS NULL AND expires_at > ?');
      params.push(nowIso);
    }
    if (after) {
      where.push('(created_at, id) > (?, ?)');
      params.push(after.c, after.i);
    }
    const rows = this.deps.db.prepare(`SELECT * FROM previews WHERE ${where.join(' AND ')} ORDER BY created_at, id LIMIT ?`).all(...params, limit + 1) as Row[];
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    return { previews: page.map((r) => this.view(r)), nextCursor: rows.length > limit && last ? this.deps.cursors.encode('previews', { c: last.created_at, i: last.id }) : null };
  }

  get(owner: string, id: string): PreviewView {
    return this.view(this.row(owner, id));
  }

  revoke(owner: string, id: string, who: { actor: Actor; principal?: string | null }): { previewId: string; revoked: true; alreadyRevoked: boolean; revokedAt: string; generation: number } {
    const row = this.row(owner, id);
    if (row.revoked_at) return { previewId: id, revoked: true, alreadyRevoked: true, revokedAt: row.revoked_at, generation: row.generation };
    const at = new Date(this.now()).toISOString();
    this.deps.db.prepare('UPDATE previews SET revoked_at = ?, revoked_by = ?, generation = generation + 1 WHERE id = ? AND revoked_at IS NULL').run(at, who.actor, id);
    this.deps.audit.record({ actor: who.actor, principal: who.principal ?? null, action: 'preview_revoke', target: id, outcome: 'ok', details: { workspaceId: row.workspace_id, port: row.port } });
    this.onRevoke?.(id);
    return { previewId: id, revoked: true, alreadyRevoked: false, revokedAt: at, generation: row.generation + 1 };
  }

  /** The owner's consent on the dashboard: the preview gets a public link (only there; no tool does this). */
  consentPublic(owner: string, id: string, expectedGeneration?: number): PreviewView {
    const row = this.row(owner, id);
    if (expectedGeneration !== undefined && expectedGeneration !== row.generation)
      throw new ServiceError('STALE_GENERATION', `expectedGeneration: preview ${id} is at generation ${row.generation}, not ${expectedGeneration}; reload`, { field: 'expectedGeneration', generation: row.generation });
    if (row.revoked_at) throw new ServiceError('FAILED_PRECONDITION', `previewId: preview ${id} was revoked`, { field: 'previewId' });
    if (Date.parse(row.expires_at) <= this.now()) throw new ServiceError('FAILED_PRECONDITION', `previewId: preview ${id} expired at ${row.expires_at}`, { field: 'previewId' });
    if (row.public_state !== 'granted') {
      const at = new Date(this.now()).toISOString();
      this.deps.db.prepare("UPDATE previews SET public_state = 'granted', public_at = ?, generation = generation + 1 WHERE id = ?").run(at, id);
      this.deps.audit.record({ actor: 'dashboard', action: 'preview_public_consent', target: id, outcome: 'ok', details: { workspaceId: row.workspace_id, port: row.port, expiresAt: row.expires_at } });
    }
    return this.view(this.row(owner, id));
  }

  /** Revokes every open preview of a workspace (it closed). */
  forgetWorkspace(workspaceId: string): void {
    const ids = this.deps.db.prepare('SELECT id FROM previews WHERE workspace_id = ? AND revoked_at IS NULL').pluck().all(workspaceId) as string[];
    const at = new Date(this.now()).toISOString();
    this.deps.db.prepare("UPDATE previews SET revoked_at = ?, revoked_by = 'system', generation = generation + 1 WHERE workspace_id = ? AND revoked_at IS NULL").run(at, workspaceId);
    for (const id of ids) this.onRevoke?.(id);
  }

  /**
   * The first path segment of a /p/ request → the preview and what the link grants, or a
   * ServiceError (NOT_FOUND for anything that is not a link of an existing preview,
   * PERMISSION_DENIED for a signature or grant that does not match, FAILED_PRECONDITION for a
   * revoked or expired preview, or a public link without the owner's consent).
   */
  resolve(segment: string): ResolvedLink {
    const m = SEGMENT.exec(segment);
    if (!m) throw new ServiceError('NOT_FOUND', 'no such preview link (a link is /p/<previewId>.<signature>/)', { field: 'path' });
    const [, id, sig, exp, mac] = m as unknown as [string, string, string, string | undefined, string | undefined];
    const row = this.deps.db.prepare('SELECT * FROM previews WHERE id = ?').get(id) as Row | undefined;
    if (!row) throw new ServiceError('NOT_FOUND', 'no such preview link', { field: 'path' });
    const base = `${id}.${sig}`;
    let kind: ResolvedLink['kind'];
    if (safeEqual(sig, this.sign(row, 'owner'))) kind = 'owner';
    else if (safeEqual(sig, this.sign(row, 'public'))) kind = 'public';
    else throw new ServiceError('PERMISSION_DENIED', 'the preview link\'s signature does not match (altered, or made for another preview or port)', { field: 'path' });
    if (row.revoked_at) throw new ServiceError('FAILED_PRECONDITION', `preview ${id} was revoked at ${row.revoked_at}`, { field: 'path', previewId: id, state: 'revoked' });
    if (Date.parse(row.expires_at) <= this.now()) throw new ServiceError('FAILED_PRECONDITION', `preview ${id} expired at ${row.expires_at}`, { field: 'path', previewId: id, state: 'expired' });
    if (kind === 'public' && row.public_state !== 'granted') throw new ServiceError('PERMISSION_DENIED', 'this public link has not been consented to by the owner', { field: 'path' });
    if (exp !== undefined && mac !== undefined) {
      if (kind !== 'owner') throw new ServiceError('NOT_FOUND', 'no such preview link', { field: 'path' });
      const until = parseInt(exp, 36);
      if (!safeEqual(mac, this.grantMac(base, until))) throw new ServiceError('PERMISSION_DENIED', 'the preview grant does not match', { field: 'path' });
      if (until * 1000 <= this.now()) throw new ServiceError('UNAUTHENTICATED', 'the preview grant expired: open the preview link again signed in to the dashboard', { field: 'path' });
      kind = 'grant';
    }
    return { row, kind, base };
  }

  /** Milliseconds the connection a link opened may stay open (until the preview or the grant expires). */
  remainingMs(resolved: ResolvedLink, segment: string): number {
    let until = Date.parse(resolved.row.expires_at);
    if (resolved.kind === 'grant') until = Math.min(until, parseInt(segment.split('.')[2]!, 36) * 1000);
    return Math.max(0, until - this.now());
  }
}
