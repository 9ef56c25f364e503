import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AuditLog, type AuditEntry } from '../../src/services/instance/audit.js';
import { openDatabase, type DB } from '../../src/store/db.js';

const entry = (action: string): AuditEntry => ({ actor: 'mcp', principal: 'token_x', action, target: 'ws_1', outcome: 'ok' });
const written = (db: DB): string[] => db.prepare('SELECT action FROM audit_log ORDER BY seq').pluck().all() as string[];

describe('audit entries of finished calls are written once the answer has gone out', () => {
  let dir: string;
  let db: DB;
  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'atelier-audit-'));
    db = openDatabase(path.join(dir, 'a.db'));
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('at the end of the turn, all of one turn in one go, in order', async () => {
    const audit = new AuditLog(db);
    audit.recordAfterReply(entry('a'));
    audit.recordAfterReply(entry('b'));
    expect(written(db)).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(written(db)).toEqual(['a', 'b']);
  });

  it('at once before the log is read or another entry written, so nothing reads around it', () => {
    const audit = new AuditLog(db);
    audit.recordAfterReply(entry('first'));
    expect(audit.list({ limit: 10 }).map((r) => r.action)).toEqual(['first']);
    audit.recordAfterReply(entry('second'));
    audit.record(entry('third'));
    expect(written(db)).toEqual(['first', 'second', 'third']);
  });

  it('keeps the time of the call, not of the write', async () => {
    const audit = new AuditLog(db);
    const before = new Date().toISOString();
    audit.recordAfterReply(entry('timed'));
    await new Promise((r) => setTimeout(r, 20));
    const row = audit.list({ limit: 1 })[0]!;
    expect(row.at >= before && row.at < new Date(Date.now() - 10).toISOString()).toBe(true);
  });

  it('a failed write is reported with its entries and never throws into the event loop', async () => {
    const failures: Array<{ err: unknown; lost: AuditEntry[] }> = [];
    const audit = new AuditLog(db, (err, lost) => failures.push({ err, lost }));
    db.exec('DROP TABLE audit_log');
    audit.recordAfterReply(entry('lost'));
    await new Promise((r) => setImmediate(r));
    expect(failures).toHaveLength(1);
    expect(String(failures[0]!.err)).toMatch(/audit_log/);
    expect(failures[0]!.lost.map((e) => e.action)).toEqual(['lost']);
  });
});
