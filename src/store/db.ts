/**
 * SQLite through better-sqlite3: WAL, foreign keys, numbered migrations applied in one
 * transaction each. Services own their tables (see migrations.ts for who owns what);
 * nothing above the services layer touches the database.
 */
import Database from 'better-sqlite3';
import { chmodSync, existsSync } from 'node:fs';
import { MIGRATIONS } from './migrations.js';

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

export function migrate(db: DB): number {
  db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)');
  const applied = new Set(db.prepare('SELECT version FROM schema_migrations').pluck().all() as number[]);
  let count = 0;
  for (const m of MIGRATIONS) {
    if (applied.has(m.version)) continue;
    db.transaction(() => {
      db.exec(m.sql);
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(m.version, m.name, new Date().toISOString());
    })();
    count++;
  }
  return count;
}

/** Runs fn in one transaction (immediate, so concurrent writers queue instead of failing late). */
export function tx<T>(db: DB, fn: () => T): T {
  return db.transaction(fn).immediate();
}
