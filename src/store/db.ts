/**
 * SQLite through better-sqlite3: WAL, foreign keys, numbered migrations applied in one
 * transaction each. Services own their tables (see migrations.ts for who owns what);
 * nothing above the services layer touches the database.
 */
import Database from 'better-sqlite3';
import { chmodSync, existsSync } from 'node:fs';
import { MIGRATIONS, type Migration } from './migrations.js';
import { ConfigError } from '../core/config.js';

export type DB = Database.Database;

export function openDatabase(file: string): DB {
  const fresh = !existsSync(file);
  const db = cachePreparedStatements(new Database(file));
  if (fresh) chmodSync(file, 0o600);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  migrate(db);
  return db;
}

/** How many distinct statements one connection keeps prepared (beyond it, the oldest is dropped). */
export const STATEMENT_CACHE_SIZE = 512;

type Mode = '' | 'pluck' | 'raw' | 'expand';
const MODES = ['pluck', 'raw', 'expand'] as const;

/**
 * Makes `db.prepare(sql)` return the statement already prepared for the same SQL text. Services
 * write `this.db.prepare('…').run(…)` where they use it; preparing is most of the cost of a small
 * query (measured on the exec path: about 0.25 ms of every call went to preparing the audit insert
 * and the token lookup again), so the connection keeps what it prepared.
 *
 * A better-sqlite3 statement carries modes of its own (pluck, raw, expand), and a shared statement
 * must not change under another holder (a service keeps `prepare('PRAGMA data_version').pluck()` in
 * a field). So a cached statement's mode methods do not change it: `pluck()` returns the cached
 * statement of the same SQL in pluck mode (another statement object), `pluck(false)` the plain one.
 * A statement still being iterated (busy) is never handed out twice: the caller gets a fresh one.
 * SQLite re-prepares a statement itself when the schema changes under it. The cache is bounded.
 */
export function cachePreparedStatements(db: DB): DB {
  const prepare = db.prepare.bind(db) as (sql: string) => Database.Statement;
  const cache = new Map<string, Database.Statement>();
  const variant = (sql: string, mode: Mode): Database.Statement => {
    const key = `${mode}\u0000${sql}`;
    const known = cache.get(key);
    if (known && !known.busy) return known;
    const stmt = prepare(sql);
    if (mode) stmt[mode](true);
    if (known) return stmt; // the cached one is busy: this one is the caller's alone, with its own modes
    if (stmt.reader)
      for (const m of MODES) (stmt as unknown as Record<string, unknown>)[m] = (on = true) => variant(sql, on ? m : mode === m ? '' : mode);
    if (cache.size >= STATEMENT_CACHE_SIZE) cache.delete(cache.keys().next().value!);
    cache.set(key, stmt);
    return stmt;
  };
  db.prepare = ((sql: string) => variant(sql, '')) as DB['prepare'];
  return db;
}

/** The schema version this release writes: the highest migration number it knows. */
export const SCHEMA_VERSION: number = Math.max(...MIGRATIONS.map((m) => m.version));

/** The schema version of an open database (the highest migration applied; 0 for an empty one). */
export function schemaVersionOf(db: DB): number {
  const t = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").get();
  if (!t) return 0;
  return (db.prepare('SELECT max(version) FROM schema_migrations').pluck().get() as number | null) ?? 0;
}

/**
 * Applies the migrations not applied yet, in order, forward only: each in one transaction with its
 * schema_migrations row, so a failing one leaves the database exactly as the previous one left it
 * (SQLite's DDL is transactional) and stops with an error naming it. A database written by a newer
 * release (a version this one does not know) is refused: downgrades are not supported.
 */
export function migrate(db: DB, migrations: Migration[] = MIGRATIONS): number {
  db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)');
  const applied = new Set(db.prepare('SELECT version FROM schema_migrations').pluck().all() as number[]);
  const known = new Set(migrations.map((m) => m.version));
  const newest = Math.max(0, ...migrations.map((m) => m.version));
  const unknown = [...applied].filter((v) => !known.has(v) && v > newest);
  if (unknown.length > 0) {
    throw new ConfigError(
      `database schema version ${Math.max(...unknown)} is newer than this release's (${newest}): it was written by a newer Atelier, and downgrades are not supported. ` +
        'Run the newer release, or restore a backup taken by this one (docs/operations.md)',
      'schema',
    );
  }
  let count = 0;
  for (const m of migrations) {
    if (applied.has(m.version)) continue;
    const before = Math.max(0, ...applied);
    try {
      db.transaction(() => {
        db.exec(m.sql);
        db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(m.version, m.name, new Date().toISOString());
      })();
    } catch (e) {
      throw new ConfigError(
        `database migration ${m.version} (${m.name}) failed: ${(e as Error).message}. It was rolled back: the database is as it was, at schema version ${before}. ` +
          'Nothing was lost; fix the cause (or restore a backup) and start again',
        'schema',
      );
    }
    applied.add(m.version);
    count++;
  }
  return count;
}

/** Runs fn in one transaction (immediate, so concurrent writers queue instead of failing late). */
export function tx<T>(db: DB, fn: () => T): T {
  return db.transaction(fn).immediate();
}
