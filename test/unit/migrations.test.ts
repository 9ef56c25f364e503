/**
 * Migrations are forward only, each in one transaction (issue #35 item 3): an injected migration
 * that fails half-way leaves the database exactly as the one before it left it and throws an error
 * naming it; the next start applies it once fixed; a database of a newer schema is refused.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { migrate, schemaVersionOf, SCHEMA_VERSION } from '../../src/store/db.js';
import { MIGRATIONS, type Migration } from '../../src/store/migrations.js';

const tables = (db: Database.Database) => db.prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'index', 'trigger') ORDER BY name").pluck().all();

describe('migrate', () => {
  it('applies every migration once and reports the schema version', () => {
    const db = new Database(':memory:');
    expect(migrate(db)).toBe(MIGRATIONS.length);
    expect(schemaVersionOf(db)).toBe(SCHEMA_VERSION);
    expect(migrate(db)).toBe(0);
  });

  it('an injected failing migration rolls back entirely, names itself, and applies once fixed', () => {
    const db = new Database(':memory:');
    migrate(db);
    db.exec("CREATE TABLE keep (v TEXT); INSERT INTO keep VALUES ('row')");
    const before = tables(db);
    const broken: Migration = {
      version: SCHEMA_VERSION + 1,
      name: 'injected failure',
      sql: `CREATE TABLE half (x INTEGER); INSERT INTO half VALUES (1); UPDATE keep SET v = 'changed'; INSERT INTO no_such_table VALUES (1);`,
    };
    expect(() => migrate(db, [...MIGRATIONS, broken])).toThrow(
      new RegExp(`database migration ${SCHEMA_VERSION + 1} \\(injected failure\\) failed: no such table: no_such_table\\. It was rolled back: the database is as it was, at schema version ${SCHEMA_VERSION}`),
    );
    expect(tables(db)).toEqual(before);
    expect(db.prepare('SELECT v FROM keep').pluck().all()).toEqual(['row']);
    expect(schemaVersionOf(db)).toBe(SCHEMA_VERSION);
    // Fixed, it applies.
    expect(migrate(db, [...MIGRATIONS, { ...broken, sql: 'CREATE TABLE half (x INTEGER);' }])).toBe(1);
    expect(schemaVersionOf(db)).toBe(SCHEMA_VERSION + 1);
  });

  it('the migrations before a failing one stay applied (each in its own transaction)', () => {
    const db = new Database(':memory:');
    const first = MIGRATIONS.slice(0, 3);
    const bad: Migration = { version: MIGRATIONS[3]!.version, name: 'bad', sql: 'CREATE TABLE x (a); SELECT * FROM nope;' };
    expect(() => migrate(db, [...first, bad])).toThrow(/migration \d+ \(bad\) failed/);
    expect(schemaVersionOf(db)).toBe(first.at(-1)!.version);
    expect(db.prepare("SELECT 1 FROM sqlite_master WHERE name = 'x'").get()).toBeUndefined();
  });

  it('refuses a database written by a newer release', () => {
    const db = new Database(':memory:');
    migrate(db);
    db.prepare("INSERT INTO schema_migrations VALUES (?, 'future', 'x')").run(SCHEMA_VERSION + 5);
    expect(() => migrate(db)).toThrow(new RegExp(`database schema version ${SCHEMA_VERSION + 5} is newer than this release's \\(${SCHEMA_VERSION}\\).*downgrades are not supported`));
  });
});
