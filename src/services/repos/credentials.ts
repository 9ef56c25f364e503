/**
 * Repository credentials held by the credential broker (issue #6, item 6): per-host (or per path
 * prefix) tokens, and GitHub Apps from whose id and private key the broker mints short-lived
 * installation tokens. Secrets are sealed at rest with the master key (SecretBox, bound to the row
 * and its version) and leave this module only toward the broker's one-operation socket or the
 * repository host / GitHub API over TLS. The owner manages them with `atelier credentials ...` and
 * the dashboard REST (docs/credentials.md); nothing here is reachable from MCP.
 */
import { createHash, createPrivateKey, createPublicKey, createSign, type KeyObject } from 'node:crypto';
import { request as httpsRequest } from 'node:https';
import { rootCertificates } from 'node:tls';
import type { DB } from '../../store/db.js';
import type { SecretBox } from '../../core/crypto.js';
import type { AuditLog } from '../instance/index.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';
import { parseRepoUrl, type ParsedRepoUrl } from './policy.js';

export type RepoCredentialKind = 'token' | 'github_app';
export type Actor = 'cli' | 'dashboard';

export interface RepoCredentialMeta {
  id: string;
  prefix: string;
  kind: RepoCredentialKind;
  label: string;
  /** Token credentials: the user name git presents (x-access-token by default). */
  username: string | null;
  appId: string | null;
  installationId: string | null;
  apiUrl: string | null;
  secretVersion: number;
  /** Identifies the secret without revealing it: sha256 of a token (first 16 hex), or SHA256:base64 of an app key's public key. */
  fingerprint: string;
  createdAt: string;
  updatedAt: string;
  lastUsedAt: string | null;
  lastError: string | null;
}

interface Row {
  id: string;
  prefix: string;
  kind: RepoCredentialKind;
  label: string;
  username: string | null;
  app_id: string | null;
  installation_id: string | null;
  api_url: string | null;
  secret_version: number;
  secret_sealed: string;
  fingerprint: string;
  created_at: string;
  updated_at: string;
  last_used_at: string | null;
  last_error: string | null;
}

/** What the broker hands to git for one operation. */
export interface ResolvedCredential {
  username: string;
  token: string;
  credentialId: string;
  kind: RepoCredentialKind;
  /** For minted tokens: when GitHub says the token expires. */
  expiresAt?: string;
}

const aadOf = (id: string, v: number) => `repo_credential:${id}:v${v}`;
const GITHUB_API_VERSION = '2022-11-28';
/** A minted token is reused while it has at least this long to live. */
const REUSE_MARGIN_MS = 5 * 60_000;
const API_TIMEOUT_MS = 15_000;

const bad = (field: string, rule: string) => new ServiceError('INVALID_ARGUMENT', `${field}: ${rule}`, { field, rule });

/**
 * Normalises a credential prefix: "https://host[:port]/" (the whole host) or
 * "https://host[:port]/path/" (repositories under a path, at a segment boundary). A trailing "*" is
 * accepted and dropped; a prefix always ends with "/".
 */
export function normalisePrefix(raw: unknown, field = 'prefix'): string {
  if (typeof raw !== 'string' || raw.length === 0 || raw.length > 500) throw bad(field, 'must be an https:// URL prefix of at most 500 characters');
  let text = raw.trim().replace(/\*$/, '');
  if (!text.endsWith('/')) text += '/';
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw bad(field, 'must be an absolute https:// URL, for example https://github.com/ or https://github.com/acme/');
  }
  if (url.protocol !== 'https:') throw bad(field, 'must use https://');
  if (url.username || url.password) throw bad(field, 'must not carry a user name or password');
  if (url.search || url.hash) throw bad(field, 'must not have a query or fragment');
  if (/[\s\\]/.test(text) || /\/\.\.?(\/|$)/.test(text.replace(/^https?:\/\//i, '/'))) throw bad(field, 'must not contain spaces, backslashes or dot segments');
  const port = url.port ? Number(url.port) : 443;
  const host = url.hostname.toLowerCase();
  return `https://${port === 443 ? host : `${host}:${port}`}${url.pathname.replace(/\/+$/, '')}/`;
}

/**
 * Does a normalised prefix cover a repository? Same authority, and the path starts at a segment
 * boundary; a trailing ".git" on either side is ignored (https://h/o/r/ covers https://h/o/r.git).
 */
export function prefixCovers(prefix: string, repo: ParsedRepoUrl): boolean {
  const base = `https://${repo.authority}`;
  if (!prefix.startsWith(base + '/')) return false;
  const p = prefix.slice(base.length).replace(/\.git\/$/, '/'); // "/..." ending in "/"
  return (repo.path.replace(/\.git$/, '') + '/').startsWith(p);
}

/** "owner/name" of a GitHub repository URL path ("/owner/name.git" -> ["owner", "name"]). */
export function ownerAndName(repo: ParsedRepoUrl): [string, string] | null {
  const parts = repo.path.replace(/^\/+/, '').replace(/\.git$/, '').split('/');
  if (parts.length !== 2 || !parts[0] || !parts[1]) return null;
  return [parts[0], parts[1]];
}

/** A GitHub App JWT (RS256), valid from a minute ago for nine minutes (GitHub allows at most ten). */
export function appJwt(appId: string, key: KeyObject, nowMs = Date.now()): string {
  const now = Math.floor(nowMs / 1000);
  const enc = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const head = enc({ alg: 'RS256', typ: 'JWT' });
  const body = enc({ iat: now - 60, exp: now + 540, iss: appId });
  const sig = createSign('RSA-SHA256').update(`${head}.${body}`).sign(key).toString('base64url');
  return `${head}.${body}.${sig}`;
}

function checkAppKey(pem: unknown): { key: KeyObject; fingerprint: string } {
  if (typeof pem !== 'string' || pem.length > 16_384 || !pem.includes('PRIVATE KEY')) throw bad('privateKey', 'must be the PEM text of the GitHub App private key (at most 16 KiB)');
  let key: KeyObject;
  try {
    key = createPrivateKey(pem);
  } catch {
    throw bad('privateKey', 'is not a readable PEM private key');
  }
  if (key.asymmetricKeyType !== 'rsa') throw bad('privateKey', `must be an RSA key (GitHub App keys are RSA; got ${key.asymmetricKeyType})`);
  const der = createPublicKey(key).export({ type: 'spki', format: 'der' });
  return { key, fingerprint: 'SHA256:' + createHash('sha256').update(der).digest('base64') };
}

function checkToken(token: unknown): string {
  if (typeof token !== 'string' || token.length < 8 || token.length > 4096 || /[\s\x00-\x1f\x7f]/.test(token))
    throw bad('token', 'must be 8-4096 characters without spaces or control characters');
  return token;
}

function optText(value: unknown, field: string, max: number, pattern?: RegExp, rule?: string): string | null {
  if (value === undefined || value === null || value === '') return null;
  if (typeof value !== 'string' || value.length > max || (pattern && !pattern.test(value))) throw bad(field, rule ?? `must be a string of at most ${max} characters`);
  return value;
}

export interface AddTokenInput {
  prefix: unknown;
  token: unknown;
  username?: unknown;
  label?: unknown;
}
export interface AddAppInput {
  prefix: unknown;
  appId: unknown;
  privateKey: unknown;
  installationId?: unknown;
  apiUrl?: unknown;
  label?: unknown;
}

export class RepoCredentialStore {
  private readonly minted = new Map<string, { token: string; expiresAtMs: number; expiresAt: string }>();
  private readonly installations = new Map<string, { atMs: number; value: { credentialId: string; installationId: string; permissions: Record<string, string> } }>();

  constructor(
    private readonly deps: {
      db: DB;
      secrets: SecretBox;
      audit: AuditLog;
      /** PEM of the operator's extra CA certificates ('' when none): trusted for GitHub API calls too. */
      extraCaPem: () => string;
      now?: () => number;
    },
  ) {}

  private now(): number {
    return (this.deps.now ?? Date.now)();
  }

  /** TLS trust for the runner's own HTTPS calls: the system CAs plus the operator's extra CAs. */
  private caOption(): { ca?: string[] } {
    const extra = this.deps.extraCaPem();
    return extra ? { ca: [...rootCertificates, extra] } : {};
  }

  private meta(row: Row): RepoCredentialMeta {
    return {
      id: row.id,
      prefix: row.prefix,
      kind: row.kind,
      label: row.label,
      username: row.kind === 'token' ? row.username ?? 'x-access-token' : 'x-access-token',
      appId: row.app_id,
      installationId: row.installation_id,
      apiUrl: row.api_url,
      secretVersion: row.secret_version,
      fingerprint: row.fingerprint,
      createdAt: row.created_at,
      updatedAt: row.updated_at,
      lastUsedAt: row.last_used_at,
      lastError: row.last_error,
    };
  }

  private row(id: string, field = 'id'): Row {
    const r = this.deps.db.prepare('SELECT * FROM repo_credentials WHERE id = ?').get(id) as Row | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `${field}: no repository credential ${id}; \`atelier credentials list\` lists them`, { field, id });
    return r;
  }

  list(): RepoCredentialMeta[] {
    return (this.deps.db.prepare('SELECT * FROM repo_credentials ORDER BY prefix').all() as Row[]).map((r) => this.meta(r));
  }

  get(id: string): RepoCredentialMeta {
    return this.meta(this.row(id));
  }

  private insert(actor: Actor, row: Omit<Row, 'id' | 'secret_version' | 'secret_sealed' | 'created_at' | 'updated_at' | 'last_used_at' | 'last_error'>, secret: string): RepoCredentialMeta {
    const existing = this.deps.db.prepare('SELECT id FROM repo_credentials WHERE prefix = ?').get(row.prefix) as { id: string } | undefined;
    if (existing)
      throw new ServiceError('CONFLICT', `prefix: ${row.prefix} already has credential ${existing.id}; rotate its secret or remove it first`, { field: 'prefix', id: existing.id });
    const id = newId('repoCredential');
    const now = nowIso();
    this.deps.db
      .prepare(
        'INSERT INTO repo_credentials (id, prefix, kind, label, username, app_id, installation_id, api_url, secret_version, secret_sealed, fingerprint, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)',
      )
      .run(id, row.prefix, row.kind, row.label, row.username, row.app_id, row.installation_id, row.api_url, this.deps.secrets.seal(secret, aadOf(id, 1)), row.fingerprint, now, now);
    this.deps.audit.record({ actor, action: 'repo_credential_create', target: id, outcome: 'ok', details: { prefix: row.prefix, kind: row.kind, fingerprint: row.fingerprint } });
    return this.get(id);
  }

  addToken(input: AddTokenInput, actor: Actor): RepoCredentialMeta {
    const prefix = normalisePrefix(input.prefix);
    const token = checkToken(input.token);
    const username = optText(input.username, 'username', 100, /^[^\s:@/]+$/, 'must be a user name without spaces, ":", "@" or "/" (at most 100 characters)') ?? 'x-access-token';
    const label = optText(input.label, 'label', 100) ?? '';
    const fingerprint = 'sha256:' + createHash('sha256').update(token).digest('hex').slice(0, 16);
    return this.insert(actor, { prefix, kind: 'token', label, username, app_id: null, installation_id: null, api_url: null, fingerprint }, token);
  }

  addGitHubApp(input: AddAppInput, actor: Actor): RepoCredentialMeta {
    const prefix = normalisePrefix(input.prefix);
    const appId = optText(typeof input.appId === 'number' ? String(input.appId) : input.appId, 'appId', 64, /^[A-Za-z0-9.]+$/, 'must be the GitHub App id (digits) or client id');
    if (!appId) throw bad('appId', 'is required: the GitHub App id (digits) or client id');
    const installationId = optText(typeof input.installationId === 'number' ? String(input.installationId) : input.installationId, 'installationId', 20, /^[0-9]+$/, 'must be digits');
    const { fingerprint } = checkAppKey(input.privateKey);
    const host = new URL(prefix).host;
    let apiUrl = optText(input.apiUrl, 'apiUrl', 500);
    if (apiUrl === null) {
      if (host !== 'github.com') throw bad('apiUrl', `is required for ${host} (not github.com): GitHub Enterprise Server answers at https://${host}/api/v3`);
      apiUrl = 'https://api.github.com';
    }
    let url: URL;
    try {
      url = new URL(apiUrl);
    } catch {
      throw bad('apiUrl', 'must be an absolute https:// URL');
    }
    if (url.protocol !== 'https:' || url.username || url.password || url.search || url.hash) throw bad('apiUrl', 'must be an https:// URL without credentials, query or fragment');
    apiUrl = `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
    return this.insert(actor, { prefix, kind: 'github_app', label: optText(input.label, 'label', 100) ?? '', username: null, app_id: appId, installation_id: installationId, api_url: apiUrl, fingerprint }, input.privateKey as string);
  }

  /** Replaces the secret (a token, or an app's private key): the version goes up and minted tokens are dropped. */
  rotate(id: string, secret: unknown, actor: Actor): RepoCredentialMeta {
    const row = this.row(id);
    let plain: string;
    let fingerprint: string;
    if (row.kind === 'token') {
      plain = checkToken(secret);
      fingerprint = 'sha256:' + createHash('sha256').update(plain).digest('hex').slice(0, 16);
    } else {
      fingerprint = checkAppKey(secret).fingerprint;
      plain = secret as string;
    }
    const value = row.secret_version + 1;
    this.deps.db
      .prepare('UPDATE repo_credentials SET secret_version = ?, secret_sealed = ?, fingerprint = ?, updated_at = ?, last_error = NULL WHERE id = ?')
      .run(value, this.deps.secrets.seal(plain, aadOf(id, value)), fingerprint, nowIso(), id);
    this.forget(id);
    this.deps.audit.record({ actor, action: 'repo_credential_rotate', target: id, outcome: 'ok', details: { secretVersion: value, fingerprint } });
    return this.get(id);
  }

  remove(id: string, actor: Actor): { deleted: true; id: string; prefix: string } {
    const row = this.row(id);
    this.deps.db.prepare('DELETE FROM repo_credentials WHERE id = ?').run(id);
    this.forget(id);
    this.deps.audit.record({ actor, action: 'repo_credential_delete', target: id, outcome: 'ok', details: { prefix: row.prefix } });
    return { deleted: true, id, prefix: row.prefix };
  }

  private forget(id: string): void {
    for (const k of this.minted.keys()) if (k.startsWith(id + ':')) this.minted.delete(k);
    for (const k of this.installations.keys()) if (k.startsWith(id + ':')) this.installations.delete(k);
  }

  private matchRow(repo: ParsedRepoUrl): Row | null {
    const rows = this.deps.db.prepare('SELECT * FROM repo_credentials WHERE prefix LIKE ?').all(`https://${repo.authority}/%`) as Row[];
    return rows.filter((r) => prefixCovers(r.prefix, repo)).sort((a, b) => b.prefix.length - a.prefix.length)[0] ?? null;
  }

  /** The credential covering a repository (longest prefix), without touching its secret. */
  match(repo: ParsedRepoUrl): RepoCredentialMeta | null {
    const r = this.matchRow(repo);
    return r ? this.meta(r) : null;
  }

  /**
   * The secret git should present for one operation on `repo`, or null when no credential covers
   * it. A GitHub App's installation token is minted (scoped to this one repository) and reused
   * while it has more than five minutes to live. Failures name the credential and what GitHub said.
   */
  async resolve(repo: ParsedRepoUrl): Promise<ResolvedCredential | null> {
    const row = this.matchRow(repo);
    if (!row) return null;
    const secret = this.deps.secrets.open(row.secret_sealed, aadOf(row.id, row.secret_version)).toString('utf8');
    this.deps.db.prepare('UPDATE repo_credentials SET last_used_at = ? WHERE id = ?').run(nowIso(), row.id);
    if (row.kind === 'token') return { username: row.username ?? 'x-access-token', token: secret, credentialId: row.id, kind: 'token' };
    try {
      const t = await this.installationToken(row, secret, repo);
      if (row.last_error) this.deps.db.prepare('UPDATE repo_credentials SET last_error = NULL WHERE id = ?').run(row.id);
      return { username: 'x-access-token', token: t.token, credentialId: row.id, kind: 'github_app', expiresAt: t.expiresAt };
    } catch (e) {
      const msg = (e as Error).message;
      this.deps.db.prepare('UPDATE repo_credentials SET last_error = ? WHERE id = ?').run(msg.slice(0, 500), row.id);
      throw e;
    }
  }

  /**
   * The REST API base for a repository (issue #17): github.com answers at https://api.github.com; a
   * GitHub App credential names its own API URL (GitHub Enterprise Server); a token credential on
   * another host uses the Enterprise layout https://host/api/v3.
   */
  apiBase(repo: ParsedRepoUrl, meta: RepoCredentialMeta | null = this.match(repo)): string {
    if (meta?.kind === 'github_app' && meta.apiUrl) return meta.apiUrl;
    if (repo.host === 'github.com' && repo.port === 443) return 'https://api.github.com';
    return `https://${repo.authority}/api/v3`;
  }

  /**
   * What a GitHub App installation may do on one repository, read with the app's JWT (GET
   * /repos/{owner}/{repo}/installation): no installation token is minted. Cached for a minute.
   * Null for a repository without an app credential.
   */
  async installationPermissions(repo: ParsedRepoUrl): Promise<{ credentialId: string; installationId: string; permissions: Record<string, string> } | null> {
    const row = this.matchRow(repo);
    if (!row || row.kind !== 'github_app') return null;
    const on = ownerAndName(repo);
    const who = `repository credential ${row.id} (GitHub App ${row.app_id})`;
    if (!on) throw new ServiceError('FAILED_PRECONDITION', `${who}: ${repo.url} is not an owner/name repository path`, { credentialId: row.id });
    const cacheKey = `${row.id}:${row.secret_version}:${on[0]}/${on[1]}`;
    const hit = this.installations.get(cacheKey);
    if (hit && hit.atMs > this.now() - 60_000) return hit.value;
    const pem = this.deps.secrets.open(row.secret_sealed, aadOf(row.id, row.secret_version)).toString('utf8');
    const jwt = appJwt(row.app_id!, createPrivateKey(pem), this.now());
    const inst = await this.api(row.api_url!, 'GET', `/repos/${encodeURIComponent(on[0])}/${encodeURIComponent(on[1])}/installation`, jwt);
    if (inst.status === 404) throw new ServiceError('PERMISSION_DENIED', `${who}: the app is not installed on ${on[0]}/${on[1]} (GitHub answered 404); install it on the repository or its owner`, { credentialId: row.id, missing: 'installation' });
    if (inst.status !== 200 || typeof inst.body?.id !== 'number') throw this.apiError(who, 'reading the installation', inst);
    if (row.installation_id && String(inst.body.id) !== row.installation_id)
      throw new ServiceError('FAILED_PRECONDITION', `${who}: ${on[0]}/${on[1]} belongs to installation ${String(inst.body.id)}, not the configured ${row.installation_id}`, { credentialId: row.id });
    const perms: Record<string, string> = {};
    for (const [k, v] of Object.entries((inst.body.permissions as Record<string, unknown> | undefined) ?? {})) if (typeof v === 'string') perms[k] = v;
    const value = { credentialId: row.id, installationId: String(inst.body.id), permissions: perms };
    this.installations.set(cacheKey, { atMs: this.now(), value });
    return value;
  }

  /**
   * A token for GitHub API calls on one repository (issue #17), or null when no credential covers
   * it. A token credential is returned as is; a GitHub App mints an installation token scoped to
   * this one repository and to exactly `permissions` (GitHub answers 422 when the installation
   * lacks one), reused while it has more than five minutes to live. The token goes only to the
   * API over TLS; callers never return or log it.
   */
  async apiToken(repo: ParsedRepoUrl, permissions: Record<string, 'read' | 'write'>): Promise<{ token: string; credentialId: string; kind: RepoCredentialKind; apiUrl: string } | null> {
    const row = this.matchRow(repo);
    if (!row) return null;
    const secret = this.deps.secrets.open(row.secret_sealed, aadOf(row.id, row.secret_version)).toString('utf8');
    this.deps.db.prepare('UPDATE repo_credentials SET last_used_at = ? WHERE id = ?').run(nowIso(), row.id);
    const apiUrl = this.apiBase(repo, this.meta(row));
    if (row.kind === 'token') return { token: secret, credentialId: row.id, kind: 'token', apiUrl };
    const t = await this.installationToken(row, secret, repo, { ...permissions, metadata: 'read' });
    return { token: t.token, credentialId: row.id, kind: 'github_app', apiUrl };
  }

  private async installationToken(row: Row, pem: string, repo: ParsedRepoUrl, permissions?: Record<string, string>): Promise<{ token: string; expiresAt: string }> {
    const on = ownerAndName(repo);
    const who = `repository credential ${row.id} (GitHub App ${row.app_id})`;
    if (!on) throw new ServiceError('FAILED_PRECONDITION', `${who}: ${repo.url} is not an owner/name repository path, so no installation token can be minted for it`, { credentialId: row.id });
    const permKey = permissions ? ':' + Object.keys(permissions).sort().map((k) => `${k}=${permissions[k]}`).join(',') : '';
    const cacheKey = `${row.id}:${row.secret_version}:${on[0]}/${on[1]}${permKey}`;
    const hit = this.minted.get(cacheKey);
    if (hit && hit.expiresAtMs - this.now() > REUSE_MARGIN_MS) return hit;
    const key = createPrivateKey(pem);
    const jwt = appJwt(row.app_id!, key, this.now());
    let installationId = row.installation_id;
    if (!installationId) {
      const inst = await this.api(row.api_url!, 'GET', `/repos/${encodeURIComponent(on[0])}/${encodeURIComponent(on[1])}/installation`, jwt);
      if (inst.status === 404) throw new ServiceError('FAILED_PRECONDITION', `${who}: the app is not installed on ${on[0]}/${on[1]} (GitHub answered 404); install it on the repository or its owner`, { credentialId: row.id });
      if (inst.status !== 200 || typeof inst.body?.id !== 'number') throw this.apiError(who, 'finding the installation', inst);
      installationId = String(inst.body.id);
    }
    const res = await this.api(row.api_url!, 'POST', `/app/installations/${installationId}/access_tokens`, jwt, { repositories: [on[1]], ...(permissions ? { permissions } : {}) });
    if (res.status === 404) throw new ServiceError('FAILED_PRECONDITION', `${who}: installation ${installationId} does not exist or does not include ${on[0]}/${on[1]} (GitHub answered 404)`, { credentialId: row.id });
    if (res.status === 422 && permissions && /permission/i.test(String(res.body?.message ?? '')))
      throw new ServiceError('PERMISSION_DENIED', `${who}: installation ${installationId} does not grant ${Object.entries(permissions).map(([k, v]) => `${k}: ${v}`).join(', ')} on ${on[0]}/${on[1]}: ${String(res.body?.message ?? 'unprocessable')}`, { credentialId: row.id, missing: permissions });
    if (res.status === 422) throw new ServiceError('FAILED_PRECONDITION', `${who}: installation ${installationId} cannot access ${on[0]}/${on[1]}: ${String(res.body?.message ?? 'unprocessable')}`, { credentialId: row.id });
    if (res.status !== 201 || typeof res.body?.token !== 'string') throw this.apiError(who, 'minting an installation token', res);
    const expiresAt = String(res.body.expires_at ?? '');
    const expiresAtMs = Date.parse(expiresAt) || this.now() + 3600_000;
    const t = { token: res.body.token as string, expiresAtMs, expiresAt: new Date(expiresAtMs).toISOString() };
    this.minted.set(cacheKey, t);
    this.deps.audit.record({ actor: 'system', action: 'repo_token_mint', target: row.id, outcome: 'ok', details: { repository: `${on[0]}/${on[1]}`, installationId, expiresAt: t.expiresAt, ...(permissions ? { permissions } : {}) } });
    return t;
  }

  private apiError(who: string, what: string, res: { status: number; body: Record<string, unknown> | null }): ServiceError {
    const gh = typeof res.body?.message === 'string' ? `: ${res.body.message}` : '';
    if (res.status === 401 || res.status === 403)
      return new ServiceError('FAILED_PRECONDITION', `${who}: GitHub refused the app's JWT while ${what} (HTTP ${res.status}${gh}); check the app id and rotate the private key`, { httpStatus: res.status });
    return new ServiceError('UNAVAILABLE', `${who}: GitHub answered HTTP ${res.status} while ${what}${gh}`, { httpStatus: res.status });
  }

  /** One GitHub REST call with the app JWT. Trusts the system CAs plus the operator's extra CAs; never follows redirects. */
  private api(base: string, method: string, path: string, jwt: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> | null }> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    return new Promise((resolve, reject) => {
      const req = httpsRequest(
        base + path,
        {
          method,
          timeout: API_TIMEOUT_MS,
          ...this.caOption(),
          headers: {
            accept: 'application/vnd.github+json',
            authorization: `Bearer ${jwt}`,
            'x-github-api-version': GITHUB_API_VERSION,
            'user-agent': 'atelier-credential-broker',
            ...(payload ? { 'content-type': 'application/json', 'content-length': payload.length } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          let n = 0;
          res.on('data', (c: Buffer) => {
            n += c.length;
            if (n <= 1024 * 1024) chunks.push(c);
          });
          res.on('end', () => {
            let parsed: Record<string, unknown> | null = null;
            try {
              parsed = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            } catch {
              parsed = null;
            }
            resolve({ status: res.statusCode ?? 0, body: parsed });
          });
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${API_TIMEOUT_MS / 1000} s`)));
      req.on('error', (e) => reject(new ServiceError('UNAVAILABLE', `the GitHub API at ${base} could not be reached: ${(e as Error).message}`, { apiUrl: base })));
      req.end(payload);
    });
  }

  /**
   * Checks a credential against one repository it covers, the way git would use it: resolves (mints
   * for apps), then asks the host for the repository's refs (GET info/refs?service=git-upload-pack
   * with Basic auth). Returns what happened, never the secret.
   */
  async test(id: string, repositoryUrl: unknown): Promise<{ ok: boolean; credentialId: string; repository: string; httpStatus: number | null; minted: boolean; expiresAt: string | null; detail: string }> {
    if (typeof repositoryUrl !== 'string') throw bad('repositoryUrl', 'is required: an https:// repository URL the credential covers');
    const repo = parseRepoUrl(repositoryUrl, 'repositoryUrl');
    const meta = this.get(id);
    const m = this.match(repo);
    if (!m || m.id !== id) throw bad('repositoryUrl', `${repo.url} is not covered by ${id} (prefix ${meta.prefix})${m ? `; ${m.id} (${m.prefix}) covers it` : ''}`);
    const resolvedCredential = (await this.resolve(repo))!;
    const status = await new Promise<number | null>((resolve) => {
      const req = httpsRequest(
        `${repo.url}/info/refs?service=git-upload-pack`,
        {
          method: 'GET',
          timeout: API_TIMEOUT_MS,
          ...this.caOption(),
          headers: { authorization: 'Basic ' + Buffer.from(`${resolvedCredential.username}:${resolvedCredential.token}`).toString('base64'), 'user-agent': 'git/2 (atelier-credential-test)', 'git-protocol': 'version=2' },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? null);
        },
      );
      req.on('timeout', () => req.destroy());
      req.on('error', () => resolve(null));
      req.end();
    });
    const ok = status === 200;
    const detail =
      status === null
        ? `${repo.authority} could not be reached`
        : ok
          ? `the host accepted the credential for ${repo.url}`
          : status === 401 || status === 403
            ? `the host refused the credential (HTTP ${status})`
            : status >= 300 && status < 400
              ? `the host answered a redirect (HTTP ${status}); the broker never follows redirects with a credential`
              : `the host answered HTTP ${status}`;
    return { ok, credentialId: id, repository: repo.url, httpStatus: status, minted: resolvedCredential.kind === 'github_app', expiresAt: resolvedCredential.expiresAt ?? null, detail };
  }
}
