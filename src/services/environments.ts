/**
 * Environments (env_ ids) with variables and secrets, plus global ones. The owner manages them
 * through the CLI and the dashboard REST API; MCP clients only see secret names and descriptions
 * (secrets_list). Secret values are sealed at rest, injected only into workspaces opened with
 * environmentId and confirmEnvironmentInjection: true, and redacted from every tool result.
 * An environment may also carry a setup script and a maintenance script, and an entry may be
 * setup-only: injected into the setup script alone, never into a workspace (docs/templates.md).
 * Owns tables: environments, env_entries.
 */
import { createHash } from 'node:crypto';
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
  /** Injected into the environment's setup script only (docs/templates.md). */
  setupOnly: boolean;
}

export interface EnvironmentScripts {
  environmentId: string;
  setupScript: string | null;
  maintenanceScript: string | null;
}

/** The longest setup or maintenance script accepted (a script, not a payload). */
export const MAX_SCRIPT_CHARS = 65536;

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

  set(scope: string, name: string, value: string, opts: { secret: boolean; description?: string; setupOnly?: boolean }): EntryInfo {
    const sc = this.resolve(scope, 'environment');
    if (!NAME_RE.test(name)) throw new ServiceError('INVALID_ARGUMENT', 'name: must be an environment variable name (letters, digits, _; not starting with a digit; at most 128)', { field: 'name' });
    if (value.length > 65536) throw new ServiceError('INVALID_ARGUMENT', 'value: must have at most 65536 characters', { field: 'value' });
    if (value.includes('\0')) throw new ServiceError('INVALID_ARGUMENT', 'value: must not contain NUL', { field: 'value' });
    const description = opts.description ?? '';
    if (description.length > 500) throw new ServiceError('INVALID_ARGUMENT', 'description: must have at most 500 characters', { field: 'description' });
    const kind = opts.secret ? 'secret' : 'variable';
    const setupOnly = opts.setupOnly === true;
    if (setupOnly && sc === GLOBAL) throw new ServiceError('INVALID_ARGUMENT', 'setupOnly: only an environment\'s own entries can be setup-only (a setup script belongs to an environment, not to the global scope)', { field: 'setupOnly' });
    const stored = opts.secret ? this.box.seal(value, `env:${sc}:${name}`) : value;
    const now = nowIso();
    this.db
      .prepare(
        `INSERT INTO env_entries (scope, name, kind, value, description, created_at, updated_at, setup_only) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT(scope, name) DO UPDATE SET kind = excluded.kind, value = excluded.value, description = excluded.description, updated_at = excluded.updated_at, setup_only = excluded.setup_only`,
      )
      .run(sc, name, kind, stored, description, now, now, setupOnly ? 1 : 0);
    this.secretCache = null;
    return { scope: sc, name, kind, description, updatedAt: now, setupOnly };
  }

  unset(scope: string, name: string): void {
    const sc = this.resolve(scope, 'environment');
    const r = this.db.prepare('DELETE FROM env_entries WHERE scope = ? AND name = ?').run(sc, name);
    if (r.changes === 0) throw new ServiceError('NOT_FOUND', `name: no ${name} in ${scope}`, { field: 'name' });
    this.secretCache = null;
  }

  entries(scope: string): EntryInfo[] {
    const sc = this.resolve(scope, 'environment');
    return (this.db.prepare('SELECT scope, name, kind, description, updated_at, setup_only FROM env_entries WHERE scope = ? ORDER BY name').all(sc) as Array<Record<string, string | number>>).map((r) => ({
      scope: r.scope as string,
      name: r.name as string,
      kind: r.kind as EntryInfo['kind'],
      description: r.description as string,
      updatedAt: r.updated_at as string,
      setupOnly: r.setup_only === 1,
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

  /**
   * Variables and secrets to inject: global first, the environment's override. Setup-only entries
   * are left out (a workspace never sees them) unless `forSetup` (the environment's setup script).
   */
  injection(environmentId: string, opts: { forSetup?: boolean } = {}): Record<string, string> {
    const id = this.resolve(environmentId);
    const out: Record<string, string> = {};
    for (const sc of [GLOBAL, id]) {
      const rows = this.db.prepare('SELECT name, kind, value, setup_only FROM env_entries WHERE scope = ?').all(sc) as Array<{ name: string; kind: string; value: string; setup_only: number }>;
      for (const r of rows) {
        if (r.setup_only === 1 && !opts.forSetup) continue;
        out[r.name] = r.kind === 'secret' ? this.box.open(r.value, `env:${sc}:${r.name}`).toString('utf8') : r.value;
      }
    }
    return out;
  }

  /** The values of an environment's setup-only entries (names with values), for the template scan. */
  setupOnlyValues(environmentId: string): Array<{ name: string; value: string }> {
    const id = this.resolve(environmentId);
    const rows = this.db.prepare('SELECT name, kind, value FROM env_entries WHERE scope = ? AND setup_only = 1').all(id) as Array<{ name: string; kind: string; value: string }>;
    return rows.map((r) => ({ name: r.name, value: r.kind === 'secret' ? this.box.open(r.value, `env:${id}:${r.name}`).toString('utf8') : r.value }));
  }

  /**
   * What a template of the environment is built from, of its entries (issue #42 item 5;
   * docs/templates.md "What a template is keyed on"): read in one transaction, so the digest and
   * the values agree. `env` is what the setup script gets (global entries, the environment's
   * over them, setup-only ones included), `setupOnly` the values a template must not hold, and
   * `digest` covers every one of those entries: scope, name, kind, setup-only flag and a version
   * of its value. A secret's version is a hash of its sealed form (a fresh random IV at every set,
   * so every rotation is a new version, even back to an old value); a variable's a hash of its
   * value (stored in clear beside it anyway). No value is in the digest in clear. A template keyed
   * on it is never used once any of them changed, whichever process changed it (the service's
   * REST API, or `atelier env set` on the same database).
   */
  setupInputs(environmentId: string): { digest: string; env: Record<string, string>; setupOnly: Array<{ name: string; value: string }> } {
    return this.db.transaction(() => ({ digest: this.entriesDigest(environmentId), env: this.injection(environmentId, { forSetup: true }), setupOnly: this.setupOnlyValues(environmentId) }))();
  }

  /** The digest of setupInputs alone (what a template's key holds of the entries). */
  entriesDigest(environmentId: string): string {
    const id = this.resolve(environmentId);
    const rows = this.db
      .prepare("SELECT scope, name, kind, value, setup_only FROM env_entries WHERE scope IN (?, ?) ORDER BY CASE scope WHEN 'global' THEN 0 ELSE 1 END, name")
      .all(GLOBAL, id) as Array<{ scope: string; name: string; kind: string; value: string; setup_only: number }>;
    const h = createHash('sha256');
    for (const r of rows) h.update(JSON.stringify([r.scope === GLOBAL ? 'g' : 'e', r.name, r.kind, r.setup_only, createHash('sha256').update(r.value).digest('hex')])).update('\n');
    return h.digest('hex');
  }

  /** An environment's setup and maintenance scripts (null when it has none). */
  scripts(idOrName: string): EnvironmentScripts {
    const id = this.resolve(idOrName, 'environment');
    if (id === GLOBAL) return { environmentId: GLOBAL, setupScript: null, maintenanceScript: null };
    const r = this.db.prepare('SELECT setup_script, maintenance_script FROM environments WHERE id = ?').get(id) as { setup_script: string | null; maintenance_script: string | null };
    return { environmentId: id, setupScript: r.setup_script, maintenanceScript: r.maintenance_script };
  }

  /**
   * Sets (a string), clears (null) or keeps (undefined) an environment's setup and maintenance
   * scripts. A changed setup script makes later opens build a new template (the key holds its hash).
   */
  setScripts(idOrName: string, scripts: { setupScript?: string | null; maintenanceScript?: string | null }): EnvironmentScripts {
    const id = this.resolve(idOrName, 'environment');
    if (id === GLOBAL) throw new ServiceError('INVALID_ARGUMENT', 'environment: the global scope has no setup or maintenance script; name an environment', { field: 'environment' });
    for (const field of ['setupScript', 'maintenanceScript'] as const) {
      const v = scripts[field];
      if (v === undefined || v === null) continue;
      if (typeof v !== 'string') throw new ServiceError('INVALID_ARGUMENT', `${field}: must be a string or null`, { field });
      if (v.trim() === '') throw new ServiceError('INVALID_ARGUMENT', `${field}: must not be empty (send null to remove the script)`, { field });
      if (v.length > MAX_SCRIPT_CHARS) throw new ServiceError('INVALID_ARGUMENT', `${field}: must have at most ${MAX_SCRIPT_CHARS} characters`, { field });
      if (v.includes('\0')) throw new ServiceError('INVALID_ARGUMENT', `${field}: must not contain NUL`, { field });
    }
    const cur = this.scripts(id);
    const setup = scripts.setupScript === undefined ? cur.setupScript : scripts.setupScript;
    const maintenance = scripts.maintenanceScript === undefined ? cur.maintenanceScript : scripts.maintenanceScript;
    this.db.prepare('UPDATE environments SET setup_script = ?, maintenance_script = ? WHERE id = ?').run(setup, maintenance, id);
    return { environmentId: id, setupScript: setup, maintenanceScript: maintenance };
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
