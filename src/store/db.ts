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
  const db = new Database(file);
  if (fresh) chmodSync(file, 0o600);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  migrate(db);
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
