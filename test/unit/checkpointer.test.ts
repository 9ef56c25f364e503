import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { WalCheckpointer } from '../../dist/store/checkpointer.js';
import { openDatabase, type DB } from '../../src/store/db.js';

// The worker runs compiled code (dist/store/checkpoint-worker.js), so this test uses the built
// module, as the service does.
describe('WAL checkpoints in a worker thread', () => {
  let dir: string;
  let file: string;
  let db: DB;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'atelier-ckpt-'));
    file = path.join(dir, 'a.db');
    db = openDatabase(file);
    db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)');
  });
  afterEach(() => {
    if (db.open) db.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const autocheckpoint = () => db.pragma('wal_autocheckpoint', { simple: true });
  const fill = (n: number) => {
    const ins = db.prepare('INSERT INTO t (v) VALUES (?)');
    for (let i = 0; i < n; i++) ins.run('x'.repeat(400));
  };

  it("copies the WAL back from its own thread; the service's connection never checkpoints", async () => {
    // First with a worker that does not run yet (an hour's interval): on a busy machine the fill
    // below outlasts a short interval, and the worker's own checkpoint then grew the file mid-fill.
    const idle = new WalCheckpointer(db, file, { intervalMs: 3_600_000 });
    expect(autocheckpoint()).toBe(0);
    const before = statSync(file).size;
    fill(6000); // well past the 1000 pages after which the connection itself would checkpoint
    // Nothing was copied back by the commits themselves: the database file is as it was.
    expect(statSync(file).size).toBe(before);
    idle.stop();
    const ckpt = new WalCheckpointer(db, file, { intervalMs: 50 });
    expect(autocheckpoint()).toBe(0);
    // The worker copies the pages back (a checkpoint may take more than one round on a busy machine).
    for (let i = 0; i < 250 && statSync(file).size <= before + 1_000_000; i++) await sleep(20);
    expect(statSync(file).size).toBeGreaterThan(before + 1_000_000);
    ckpt.stop();
    expect(autocheckpoint()).toBe(1000);
    db.pragma('wal_checkpoint(TRUNCATE)');
    expect(statSync(`${file}-wal`).size).toBe(0);
    expect(db.prepare('SELECT count(*) FROM t').pluck().get()).toBe(6000);
  });

  it('hands checkpoints back to the connection when the worker fails', async () => {
    const errors: string[] = [];
    new WalCheckpointer(db, path.join(dir, 'no-such-dir', 'x.db'), { intervalMs: 50, onError: (m) => errors.push(m) });
    expect(autocheckpoint()).toBe(0);
    for (let i = 0; i < 100 && errors.length === 0; i++) await sleep(20);
    expect(errors.join('\n')).toMatch(/background checkpoints stopped/);
    expect(autocheckpoint()).toBe(1000);
  });

  it('stops at once and only once', () => {
    const ckpt = new WalCheckpointer(db, file, { intervalMs: 50 });
    const t0 = Date.now();
    ckpt.stop();
    ckpt.stop();
    expect(Date.now() - t0).toBeLessThan(2_500);
    expect(autocheckpoint()).toBe(1000);
  });
});
