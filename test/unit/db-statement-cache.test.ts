import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openDatabase, STATEMENT_CACHE_SIZE, type DB } from '../../src/store/db.js';

describe('prepared statements are cached per connection', () => {
  let dir: string;
  let db: DB;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'atelier-stmt-'));
    db = openDatabase(path.join(dir, 'a.db'));
    db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)');
    for (let i = 1; i <= 3; i++) db.prepare('INSERT INTO t (id, name) VALUES (?, ?)').run(i, `n${i}`);
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('hands out the same statement for the same SQL', () => {
    expect(db.prepare('SELECT name FROM t WHERE id = ?')).toBe(db.prepare('SELECT name FROM t WHERE id = ?'));
    expect(db.prepare('INSERT INTO t (id, name) VALUES (?, ?)')).toBe(db.prepare('INSERT INTO t (id, name) VALUES (?, ?)'));
  });

  it("one holder's pluck() never changes what another holder of the same SQL gets", () => {
    const kept = db.prepare('SELECT name FROM t WHERE id = ?').pluck(); // kept in a field, as services do
    expect(db.prepare('SELECT name FROM t WHERE id = ?').get(1)).toEqual({ name: 'n1' });
    expect(kept.get(2)).toBe('n2');
    const plain = db.prepare('SELECT name FROM t WHERE id = ?');
    expect(plain.pluck(false).get(3)).toEqual({ name: 'n3' });
    expect(kept.get(3)).toBe('n3');
    expect(db.prepare('SELECT id, name FROM t WHERE id = ?').raw().get(1)).toEqual([1, 'n1']);
    expect(db.prepare('SELECT id, name FROM t WHERE id = ?').get(1)).toEqual({ id: 1, name: 'n1' });
    expect(db.prepare('SELECT id, name FROM t WHERE id = ?').raw().pluck().get(2)).toBe(2);
  });

  it('a statement being iterated is not handed out again: the nested query gets its own', () => {
    const seen: Array<[number, number]> = [];
    for (const row of db.prepare('SELECT id FROM t ORDER BY id').iterate() as IterableIterator<{ id: number }>) {
      const inner = db.prepare('SELECT id FROM t ORDER BY id').all() as Array<{ id: number }>;
      seen.push([row.id, inner.length]);
    }
    expect(seen).toEqual([[1, 3], [2, 3], [3, 3]]);
  });

  it('follows the schema when it changes under a cached statement', () => {
    expect(db.prepare('SELECT * FROM t WHERE id = ?').get(1)).toEqual({ id: 1, name: 'n1' });
    db.exec("ALTER TABLE t ADD COLUMN extra TEXT DEFAULT 'x'");
    expect(db.prepare('SELECT * FROM t WHERE id = ?').get(1)).toEqual({ id: 1, name: 'n1', extra: 'x' });
  });

  it('stays bounded when the SQL is built from many shapes: the oldest statements are dropped', () => {
    const first = db.prepare('SELECT 0 AS v');
    for (let i = 0; i < STATEMENT_CACHE_SIZE + 50; i++) expect(db.prepare(`SELECT ${i} AS v`).pluck().get()).toBe(i);
    const again = db.prepare('SELECT 0 AS v');
    expect(again).not.toBe(first); // dropped and prepared again
    expect(again.pluck().get()).toBe(0); // still right
    expect(db.prepare(`SELECT ${STATEMENT_CACHE_SIZE + 49} AS v`).pluck().get()).toBe(STATEMENT_CACHE_SIZE + 49);
  });
});
