import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync, openSync, ftruncateSync, writeSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { filesHolding } from '../e2e/secret-scan.js';

const dir = mkdtempSync(join(tmpdir(), 'scan-test-'));
const outside = mkdtempSync(join(tmpdir(), 'scan-outside-'));
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

describe('filesHolding (the tests secret scan of a data directory)', () => {
  it('finds a secret in binary and sparse files, skips the named directories and the pool file, follows no link', () => {
    const SECRET = 'tok_0123456789abcdef';
    writeFileSync(join(dir, 'clean.db'), Buffer.from([0, 1, 2, 3, 0, 0xff]));
    writeFileSync(join(dir, 'state.db-wal'), Buffer.concat([Buffer.from([0, 0xfe, 0]), Buffer.from(SECRET), Buffer.from([0])]));
    mkdirSync(join(dir, 'image-pool', 'disks'), { recursive: true });
    // A sparse 64 MB image with the secret at its end.
    const fd = openSync(join(dir, 'image-pool', 'disks', 'ws.img'), 'w');
    ftruncateSync(fd, 64 << 20);
    writeSync(fd, Buffer.from(SECRET), 0, SECRET.length, (64 << 20) - 100);
    closeSync(fd);
    for (const skipped of ['workspaces', 'run']) {
      mkdirSync(join(dir, skipped, 'deep'), { recursive: true });
      writeFileSync(join(dir, skipped, 'deep', 'f'), SECRET);
    }
    writeFileSync(join(dir, 'image-pool.xfs'), SECRET);
    writeFileSync(join(outside, 'f'), SECRET);
    symlinkSync(outside, join(dir, 'link'));
    expect(filesHolding(dir, [SECRET]).sort()).toEqual([join(dir, 'image-pool', 'disks', 'ws.img'), join(dir, 'state.db-wal')]);
    expect(filesHolding(dir, ['not-there-at-all'])).toEqual([]);
    expect(filesHolding(dir, ['not-there', SECRET]).length).toBe(2);
    expect(() => filesHolding(dir, [''])).toThrow(/no secret/);
  });
});
