/**
 * Upgrades that keep everything (issue #35 item 3, docs/operations.md "Upgrades"): databases as
 * older releases of this repository wrote them (test/fixtures/db/schema-N.db, made by
 * scripts/make-db-fixture.mjs with rows in every table) are opened by this release's CLI and
 * service, which migrate them; every row of every table is still there, column for column. A
 * migration that fails (here a real one meeting a table in its way) stops the CLI and the service
 * with an error naming it and leaves the database exactly as it was; a database of a newer schema
 * is refused. `atelier --version` and `/healthz` say the schema version.
 */
import Database from 'better-sqlite3';
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { httpRequest, runCli, serveExpectingFailure, startService, ROOT } from './harness.js';

const FIXTURES = join(ROOT, 'test/fixtures/db');
const fixtures = readdirSync(FIXTURES).filter((f) => /^schema-\d+\.db$/.test(f));
const dirs: string[] = [];
const newDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'atelier-upgrade-'));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

type Row = Record<string, unknown>;
/** Every table's rows (SQLite's own and full-text indexes left out). */
function dump(file: string): Record<string, { cols: string[]; rows: Row[] }> {
  const db = new Database(file, { readonly: true });
  try {
    const all = db.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'").all() as Array<{ name: string; sql: string }>;
    const virtual = all.filter((t) => /^CREATE VIRTUAL TABLE/i.test(t.sql)).map((t) => t.name);
    const out: Record<string, { cols: string[]; rows: Row[] }> = {};
    for (const t of all) {
      // Full-text indexes are derived from their tables (and rebuilt by them): the tables are compared.
      if (virtual.includes(t.name) || virtual.some((v) => t.name.startsWith(v + '_'))) continue;
      const cols = (db.prepare(`PRAGMA table_info("${t.name}")`).all() as Array<{ name: string }>).map((c) => c.name);
      out[t.name] = { cols, rows: db.prepare(`SELECT * FROM "${t.name}"`).all() as Row[] };
    }
    return out;
  } finally {
    db.close();
  }
}
const key = (r: Row, cols: string[]) => JSON.stringify(cols.map((c) => (Buffer.isBuffer(r[c]) ? (r[c] as Buffer).toString('hex') : r[c])));
const schemaOf = (file: string) => {
  const db = new Database(file, { readonly: true });
  try {
    return db.prepare('SELECT max(version) FROM schema_migrations').pluck().get() as number;
  } finally {
    db.close();
  }
};

describe('a database written by an older release', () => {
  it('has fixtures of at least two older schemas', () => {
    expect(fixtures.length).toBeGreaterThanOrEqual(2);
  });

  it('atelier --version says the schema version it writes', async () => {
    const r = await runCli(['--version']);
    expect(r.stdout).toMatch(/^\d+\.\d+\.\d+ \(schema \d+\)\n$/);
  });

  for (const f of fixtures) {
    it(`${f}: migrated by this release, every row of every table survives; the service serves it and /healthz says the new schema`, async () => {
      const dir = newDir();
      const db = join(dir, 'atelier.db');
      copyFileSync(join(FIXTURES, f), db);
      const old = dump(db);
      const oldSchema = schemaOf(db);
      for (const [t, v] of Object.entries(old)) if (t !== 'sqlite_sequence') expect(v.rows.length, `fixture table ${t} is empty`).toBeGreaterThan(0);
      // The CLI opens it (and migrates it): the fixture's tokens are listed.
      const r = await runCli(['token', 'list', '--json', '--data-dir', dir]);
      expect(r.code, r.stderr).toBe(0);
      expect((JSON.parse(r.stdout) as Row[]).map((x) => x.id)).toEqual(expect.arrayContaining(old.api_tokens!.rows.map((x) => x.id)));
      const version = /\(schema (\d+)\)/.exec((await runCli(['--version'])).stdout)![1]!;
      expect(schemaOf(db)).toBe(Number(version));
      expect(Number(version)).toBeGreaterThan(oldSchema);
      const now = dump(db);
      for (const [t, v] of Object.entries(old)) {
        expect(now[t], `table ${t} is gone after the migrations`).toBeDefined();
        // Columns may be added, never lost; every old row is there with the same values.
        for (const c of v.cols) expect(now[t]!.cols, `${t}.${c}`).toContain(c);
        const have = new Set(now[t]!.rows.map((x) => key(x, v.cols)));
        const lost = v.rows.filter((x) => !have.has(key(x, v.cols)));
        // Rows added by the migrations are fine; a changed or missing one is not.
        expect(lost, `rows of ${t} changed or lost`).toEqual([]);
      }
      // The service starts on it and says the schema.
      const svc = await startService({ dataDir: dir, args: ['--unsafe-dev-no-sandbox'] });
      try {
        const h = JSON.parse((await httpRequest(svc.url, 'GET', '/healthz')).body);
        expect(h).toMatchObject({ status: 'ok', schema: Number(version) });
        expect(h.version).toMatch(/^\d+\.\d+\.\d+$/);
      } finally {
        await svc.stop();
      }
    }, 120_000);
  }
});

describe('a migration that fails', () => {
  it('stops the CLI and the service with an error naming it; the database is exactly as it was', async () => {
    const newest = fixtures.map((f) => Number(/\d+/.exec(f)![0])).sort((a, b) => b - a)[0]!;
    const dir = newDir();
    const file = join(dir, 'atelier.db');
    copyFileSync(join(FIXTURES, `schema-${newest}.db`), file);
    // A table in the way of migration 25 (backups): it fails half-way through its SQL.
    const w = new Database(file);
    w.exec("CREATE TABLE backups (id TEXT PRIMARY KEY, note TEXT); INSERT INTO backups VALUES ('bkp_x', 'in the way')");
    w.close();
    const before = dump(file);
    const r = await runCli(['token', 'list', '--data-dir', dir]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(new RegExp(`database migration \\d+ \\(backups\\) failed: .*table backups already exists.*rolled back: the database is as it was, at schema version ${newest}`));
    const fail = await serveExpectingFailure(['--port', '0', '--data-dir', dir, '--unsafe-dev-no-sandbox']);
    expect(fail.code).not.toBe(0);
    expect(fail.stderr).toMatch(/database migration \d+ \(backups\) failed/);
    // Migrations before it (none here past the fixture's) and nothing of it: the same tables and rows.
    const after = dump(file);
    expect(Object.keys(after).sort()).toEqual(Object.keys(before).sort());
    for (const [t, v] of Object.entries(before)) expect(after[t]!.rows.map((x) => key(x, v.cols)).sort(), t).toEqual(v.rows.map((x) => key(x, v.cols)).sort());
    expect(schemaOf(file)).toBe(newest);
  }, 120_000);

  it('a database of a newer schema than this release is refused, unchanged', async () => {
    const dir = newDir();
    const file = join(dir, 'atelier.db');
    copyFileSync(join(FIXTURES, fixtures[0]!), file);
    const w = new Database(file);
    w.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'from the future', '2030-01-01T00:00:00Z')").run();
    w.close();
    const r = await runCli(['token', 'list', '--data-dir', dir]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/database schema version 9999 is newer than this release's \(\d+\).*downgrades are not supported/);
    expect(schemaOf(file)).toBe(9999);
  }, 60_000);
});
