#!/usr/bin/env node
/**
 * Writes a fixture database as a given release wrote it (issue #35 item 3; test/e2e/upgrade.test.ts):
 * the migrations up to --schema applied in order (migrations are never edited, so this is the
 * schema that release had), then rows in EVERY table, made from the columns themselves (foreign
 * keys point at the parent's rows, CHECK (c IN (…)) lists are honoured, *_at columns hold times,
 * *_json columns JSON). The upgrade test migrates a copy with the current release and checks that
 * every row survives.
 *
 *   node scripts/make-db-fixture.mjs --schema 23 [--out test/fixtures/db/schema-23.db]
 *
 * At each schema change: add a fixture of the new version (so the next change is tested from it),
 * keep the older ones. A table whose constraints the generic rows cannot meet gets an entry in
 * OVERRIDES below. Run it after `npx tsc -p .` (it reads the built migrations).
 */
import Database from 'better-sqlite3';
import { existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const { MIGRATIONS } = await import(join(ROOT, 'dist/store/migrations.js'));

const args = process.argv.slice(2);
const opt = (name) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const schema = Number(opt('--schema') ?? Math.max(...MIGRATIONS.map((m) => m.version)));
if (!Number.isInteger(schema) || !MIGRATIONS.some((m) => m.version === schema)) {
  console.error(`--schema: must be a migration version (${MIGRATIONS.map((m) => m.version).join(', ')})`);
  process.exit(2);
}
const out = opt('--out') ?? join(ROOT, 'test/fixtures/db', `schema-${schema}.db`);
const ROWS = 3;

/** Values the generic rows cannot guess: 'table.column' -> (row index) => value. */
const OVERRIDES = {
  // JSON without the _json suffix: null is every toolset, else a list of toolset names.
  'api_tokens.toolsets': (i) => (i === 0 ? null : JSON.stringify(['workspace', 'files'])),
};

/** Rows of every table of a database at schema `upto`, in the file `file` (replaced). */
export function makeFixture(file, upto) {
  for (const f of [file, file + '-wal', file + '-shm']) rmSync(f, { force: true });
  const db = new Database(file);
  db.pragma('foreign_keys = ON');
  db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)');
  for (const m of MIGRATIONS.filter((x) => x.version <= upto)) {
    db.transaction(() => {
      db.exec(m.sql);
      db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(m.version, m.name, '2026-01-01T00:00:00.000Z');
    })();
  }
  const all = db.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name != 'schema_migrations'").all();
  const virtual = all.filter((t) => /^CREATE VIRTUAL TABLE/i.test(t.sql)).map((t) => t.name);
  const tables = all.filter((t) => !virtual.includes(t.name) && !virtual.some((v) => t.name.startsWith(v + '_')));
  // Parents before children.
  const fks = Object.fromEntries(tables.map((t) => [t.name, db.prepare(`PRAGMA foreign_key_list("${t.name}")`).all()]));
  const order = [];
  const visit = (n, seen = new Set()) => {
    if (order.includes(n) || seen.has(n)) return;
    seen.add(n);
    for (const fk of fks[n] ?? []) if (fk.table !== n && fks[fk.table]) visit(fk.table, seen);
    order.push(n);
  };
  for (const t of tables) visit(t.name);
  const made = {};
  for (const name of order) {
    const sql = tables.find((t) => t.name === name).sql;
    const cols = db.prepare(`PRAGMA table_info("${name}")`).all();
    const checks = {};
    for (const m of sql.matchAll(/CHECK\s*\(\s*(\w+)\s+IN\s*\(([^)]*)\)\s*\)/gi)) checks[m[1]] = [...m[2].matchAll(/'([^']*)'/g)].map((x) => x[1]);
    const single = /CHECK\s*\(\s*id\s*=\s*1\s*\)/i.test(sql);
    // A one-row table its migration already filled (auth_epoch) keeps that row.
    const seeded = single ? db.prepare(`SELECT * FROM "${name}"`).all() : [];
    const rows = [...seeded];
    for (let i = seeded.length; i < (single ? 1 : ROWS); i++) {
      const row = {};
      for (const c of cols) {
        const key = `${name}.${c.name}`;
        const fk = fks[name].find((f) => f.from === c.name);
        const type = (c.type || '').toUpperCase();
        let v;
        if (OVERRIDES[key]) v = OVERRIDES[key](i);
        else if (fk && made[fk.table]) v = made[fk.table][i % made[fk.table].length][fk.to];
        else if (checks[c.name]) v = checks[c.name][i % checks[c.name].length];
        else if (single && c.name === 'id') v = 1;
        else if (type.includes('INT')) v = i + 1;
        else if (type.includes('BLOB')) v = Buffer.from(`${key}.${i}`);
        else if (type.includes('REAL')) v = i + 0.5;
        else if (/_at$|_until$|^at$/.test(c.name)) v = new Date(Date.UTC(2026, 0, 1 + i)).toISOString();
        else if (/_json$/.test(c.name)) v = JSON.stringify({ fixture: key, i });
        else v = `${key}.${i}`;
        row[c.name] = v;
      }
      const names = Object.keys(row);
      try {
        db.prepare(`INSERT INTO "${name}" (${names.map((n) => `"${n}"`).join(', ')}) VALUES (${names.map(() => '?').join(', ')})`).run(...names.map((n) => row[n]));
      } catch (e) {
        throw new Error(`${name}: a generic row does not fit (${e.message}); add OVERRIDES in scripts/make-db-fixture.mjs`);
      }
      rows.push(row);
    }
    made[name] = rows;
  }
  const empty = tables.filter((t) => db.prepare(`SELECT count(*) FROM "${t.name}"`).pluck().get() === 0).map((t) => t.name);
  if (empty.length) throw new Error(`tables left empty: ${empty.join(', ')}`);
  db.pragma('journal_mode = DELETE');
  db.exec('VACUUM');
  db.close();
  return order.length;
}

if (existsSync(out) && !args.includes('--force')) {
  console.error(`${out} exists: fixtures of released schemas are not rewritten (--force to replace it)`);
  process.exit(2);
}
const n = makeFixture(out, schema);
console.log(`${out}: schema ${schema}, ${n} tables with rows`);
