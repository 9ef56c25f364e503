/**
 * Environments (env_ ids) with variables and secrets, plus global ones. The owner manages them
 * through the CLI and the dashboard REST API; MCP clients only see secret names and descriptions
 * (secrets_list). Secret values are sealed at rest, injected only into workspaces opened with
 * environmentId and confirmEnvironmentInjection: true, and redacted from every tool result.
 * Owns tables: environments, env_entries.
 */
import type { DB } from '../store/db.js';
import type { Statement } from 'better-sqlite3';
import { tx } from '../store/db.js';
import type { SecretBox } from '../core/crypto.js';
import { ServiceError } from '../core/errors.js';
import { newId } from '../core/ids.js';
import { nowIso } from '../core/clock.js';

export const GLOBAL = 'global';
const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const ENV_NAME_RE = /^[A-Za-z0-9._-]{1,80}$/;
/** Values shorter than this are not redacted (they would match everywhere); documented. */
export const MIN_REDACT_LENGTH = 4;

export interface Environment {
  id: string;
  name: string;
  description: string;
  createdAt: string;
}

export interface EntryInfo {
  scope: string; // 'global' or env_ id
  name: string;
  kind: 'variable' | 'secret';
  description: string;
  updatedAt: string;
}

export class EnvironmentService {
  private secretCache: Array<{ name: string; value: string }> | null = null;
  /** SQLite's data_version when the cache was filled: it moves when another connection commits. */
  private cacheDataVersion = -1;

  constructor(
    private readonly db: DB,
    private readonly box: SecretBox,
  ) {}

  create(name: string, description = ''): Environment {
    if (!ENV_NAME_RE.test(name)) throw new ServiceError('INVALID_ARGUMENT', 'name: must be 1-80 characters of A-Za-z0-9._-', { field: 'name' });
    if (description.length > 500) throw new ServiceError('INVALID_ARGUMENT', 'description: must have at most 500 characters', { field: 'description' });
    if (this.db.prepare('SELECT 1 FROM environments WHERE name = ?').get(name)) throw new ServiceError('CONFLICT', `name: an environment named ${name} exists`, { field: 'name' });
    const env = { id: newId('environment'), name, description, createdAt: nowIso() };
    this.db.prepare('INSERT INTO environments (id, name, description, created_at) VALUES (?, ?, ?, ?)').run(env.id, env.name, env.description, env.createdAt);
    return env;
  }

  list(): Environment[] {
    return (this.db.prepare('SELECT id, name, description, created_at FROM environments ORDER BY name').all() as Array<Record<string, string>>).map((r) => ({
      id: r.id!,
      name: r.name!,
      description: r.description!,
      createdAt: r.created_at!,
    }));
  }

  /** By id or name; 'global' is the global scope. */
  resolve(idOrName: string, field = 'environmentId'): string {
    if (idOrName === GLOBAL) return GLOBAL;
    const r = this.db.prepare('SELECT id FROM environments WHERE id = ? OR name = ?').get(idOrName, idOrName) as { id: string } | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `${field}: no environment ${idOrName}`, { field });
    return r.id;
  }

  delete(idOrName: string): void {
    const id = this.resolve(idOrName, 'environment');
    if (id === GLOBAL) throw new ServiceError('INVALID_ARGUMENT', 'the global scope cannot be deleted', { field: 'environment' });
    tx(this.db, () => {
      this.db.prepare('DELETE FROM env_entries WHERE scope = ?').run(id);
      this.db.prepare('DELETE FROM environments WHERE id = ?').run(id);
    });
    this.secretCache = null;
  }

  set(scope: string, name: string, value: string, opts: { secret: boolean; description?: string }): EntryInfo {
    const sc = this.resolve(scope, 'environment');
    if (!NAME_RE.test(name)) throw new ServiceError('INVALID_ARGUMENT', 'name: must be an environment variable name (letters, digits, _; not starting with a digit; at most 128)', { field: 'name' });
    if (value.length > 65536) throw new ServiceError('INVALID_ARGUMENT', 'value: must have at most 65536 characters', { field: 'value' });
    if (value.includes('\0')) throw new ServiceError('INVALID_ARGUMENT', 'value: must not contain NUL', { field: 'value' });
    const description = opts.description ?? '';
    if (description.length > 500) throw new ServiceError('INVALID_ARGUMENT', 'description: must have at most 500 characters', { field: 'description' });
    const kind = opts.secret ? 'secret' : 'variable';
    const stored = opts.secret ? this.box.seal(value, `env:${sc}:${name}`) : value;
    const now = nowIso();
    this.db
      .prepare(
        `INSERT INTO env_entries (scope, name, kind, value, description, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT(scope, name) DO UPDATE SET kind = excluded.kind, value = excluded.value, description = excluded.description, updated_at = excluded.updated_at`,
      )
      .run(sc, name, kind, stored, description, now, now);
    this.secretCache = null;
    return { scope: sc, name, kind, description, updatedAt: now };
  }

  unset(scope: string, name: string): void {
    const sc = this.resolve(scope, 'environment');
    const r = this.db.prepare('DELETE FROM env_entries WHERE scope = ? AND name = ?').run(sc, name);
    if (r.changes === 0) throw new ServiceError('NOT_FOUND', `name: no ${name} in ${scope}`, { field: 'name' });
    this.secretCache = null;
  }

  entries(scope: string): EntryInfo[] {
    const sc = this.resolve(scope, 'environment');
    return (this.db.prepare('SELECT scope, name, kind, description, updated_at FROM env_entries WHERE scope = ? ORDER BY name').all(sc) as Array<Record<string, string>>).map((r) => ({
      scope: r.scope!,
      name: r.name!,
      kind: r.kind as EntryInfo['kind'],
      description: r.description!,
      updatedAt: r.updated_at!,
    }));
  }

  /** Secret names with descriptions from the global scope and (optionally) one environment. Never values. */
  listSecrets(environmentId: string | null, query: string | undefined, offset: number, limit: number): { items: Array<{ name: string; scope: string; description: string }>; more: boolean } {
    const scopes = [GLOBAL, ...(environmentId ? [this.resolve(environmentId)] : [])];
    const likePattern = query ? `%${query.toLowerCase().replace(/[%_\\]/g, (c) => '\\' + c)}%` : null;
    const rows = this.db
      .prepare(
        `SELECT name, scope, description FROM env_entries WHERE kind = 'secret' AND scope IN (${scopes.map(() => '?').join(',')})
         ${likePattern ? "AND (lower(name) LIKE ? ESCAPE '\\' OR lower(description) LIKE ? ESCAPE '\\')" : ''}
         ORDER BY name, scope LIMIT ? OFFSET ?`,
      )
      .all(...scopes, ...(likePattern ? [likePattern, likePattern] : []), limit + 1, offset) as Array<{ name: string; scope: string; description: string }>;
    return { items: rows.slice(0, limit), more: rows.length > limit };
  }

  /** Variables and secrets to inject: global first, the environment's override. */
  injection(environmentId: string): Record<string, string> {
    const id = this.resolve(environmentId);
    const out: Record<string, string> = {};
    for (const sc of [GLOBAL, id]) {
      const rows = this.db.prepare('SELECT name, kind, value FROM env_entries WHERE scope = ?').all(sc) as Array<{ name: string; kind: string; value: string }>;
      for (const r of rows) out[r.name] = r.kind === 'secret' ? this.box.open(r.value, `env:${sc}:${r.name}`).toString('utf8') : r.value;
    }
    return out;
  }

  /**
   * Every secret value known (decrypted once, cached until a change), for redaction. A change made
   * by another process (the CLI's `atelier env set` while the service runs) shows as a new SQLite
   * data_version, which drops the cache too: a secret is redacted from the moment it is stored.
   */
  private dataVersion: Statement | undefined;

  private secrets(): Array<{ name: string; value: string }> {
    // A statement kept, not db.pragma(): preparing it again on every tool call was measured hot (#21 item 5).
    const version = (this.dataVersion ??= this.db.prepare('PRAGMA data_version').pluck()).get() as number;
    if (version !== this.cacheDataVersion) {
      this.secretCache = null;
      this.cacheDataVersion = version;
    }
    if (this.secretCache) return this.secretCache;
    const rows = this.db.prepare("SELECT scope, name, value FROM env_entries WHERE kind = 'secret'").all() as Array<{ scope: string; name: string; value: string }>;
    this.secretCache = rows
      .map((r) => ({ name: r.name, value: this.box.open(r.value, `env:${r.scope}:${r.name}`).toString('utf8') }))
      .filter((s) => s.value.length >= MIN_REDACT_LENGTH)
      .sort((a, b) => b.value.length - a.value.length);
    return this.secretCache;
  }

  /** Replaces every secret value in every string of a result with [redacted:NAME]. */
  redact<T>(value: T): T {
    const secrets = this.secrets();
    if (secrets.length === 0) return value;
    const walk = (node: unknown): unknown => {
      if (typeof node === 'string') {
        let s = node;
        for (const sec of secrets) if (s.includes(sec.value)) s = s.split(sec.value).join(`[redacted:${sec.name}]`);
        return s;
      }
      if (Array.isArray(node)) return node.map(walk);
      if (node && typeof node === 'object') return Object.fromEntries(Object.entries(node).map(([k, x]) => [k, walk(x)]));
      return node;
    };
    return walk(value) as T;
  }
}
