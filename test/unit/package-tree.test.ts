/**
 * The package builder's tree copy (src/services/packages/tree.ts; issue #31 item 3): what root
 * makes of a hostile tree. The service-level tests are in test/e2e/packages.test.ts.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { copyTreeNoFollow, TreeRefusal } from '../../src/services/packages/tree.js';

let base: string;
let work: string;
let host: string;

beforeEach(() => {
  base = mkdtempSync(join(tmpdir(), 'atl-tree-'));
  work = join(base, 'work');
  host = join(base, 'host');
  mkdirSync(work);
  mkdirSync(host, { mode: 0o700 });
  writeFileSync(join(host, 'secret'), 'host secret', { mode: 0o600 });
});
afterEach(() => rmSync(base, { recursive: true, force: true }));

const refusal = async (p: Promise<unknown>): Promise<string> => {
  const e = await p.then(
    () => null,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(TreeRefusal);
  return (e as Error).message;
};

describe('copyTreeNoFollow', () => {
  it('copies files, directories and links into a new read-only tree of its own, hashing each file, following nothing', async () => {
    const nm = join(work, 'node_modules');
    mkdirSync(join(nm, 'a', 'bin'), { recursive: true });
    writeFileSync(join(nm, 'a', 'package.json'), '{"name":"a"}', { mode: 0o600 });
    writeFileSync(join(nm, 'a', 'bin', 'cli.js'), '#!/usr/bin/env node\n', { mode: 0o755 });
    symlinkSync(host, join(nm, 'a', 'host-dir'));
    symlinkSync(join(host, 'secret'), join(nm, 'a', 'host-file'));
    const dest = join(base, 'stage');
    const files = await copyTreeNoFollow(work, 'node_modules', dest);
    expect(files.map((f) => [f.path, f.type, f.mode])).toEqual([
      ['a', 'dir', 0o755],
      ['a/bin', 'dir', 0o755],
      ['a/bin/cli.js', 'file', 0o555],
      ['a/host-dir', 'symlink', 0o777],
      ['a/host-file', 'symlink', 0o777],
      ['a/package.json', 'file', 0o444],
    ]);
    expect(files.find((f) => f.path === 'a/package.json')).toMatchObject({ size: 12, sha256: createHash('sha256').update('{"name":"a"}').digest('hex') });
    expect(files.find((f) => f.path === 'a/host-dir')!.target).toBe(host);
    expect(readFileSync(join(dest, 'a', 'package.json'), 'utf8')).toBe('{"name":"a"}');
    expect(readlinkSync(join(dest, 'a', 'host-dir'))).toBe(host);
    for (const [p, mode] of [[dest, 0o555], [join(dest, 'a'), 0o555], [join(dest, 'a', 'bin', 'cli.js'), 0o555], [join(dest, 'a', 'package.json'), 0o444]] as const) {
      const st = lstatSync(p);
      expect([p, st.uid, st.mode & 0o777]).toEqual([p, 0, mode]);
    }
    // Nothing of the source changed, and the link targets neither.
    expect(statSync(join(nm, 'a', 'package.json')).mode & 0o777).toBe(0o600);
    expect(statSync(host).mode & 0o777).toBe(0o700);
    expect(statSync(join(host, 'secret')).mode & 0o777).toBe(0o600);
  });

  it('refuses a top that is a symbolic link (to a host directory) or not a directory, and touches nothing', async () => {
    symlinkSync(host, join(work, 'node_modules'));
    expect(await refusal(copyTreeNoFollow(work, 'node_modules', join(base, 's1')))).toMatch(/^node_modules: the install left a symbolic link where the top/);
    writeFileSync(join(work, 'site'), 'x');
    expect(await refusal(copyTreeNoFollow(work, 'site', join(base, 's2')))).toMatch(/^site: the install left something other than a directory/);
    expect(await refusal(copyTreeNoFollow(work, 'missing', join(base, 's3')))).toMatch(/^missing: .* is missing/);
    expect(statSync(host).mode & 0o777).toBe(0o700);
    expect(statSync(join(host, 'secret')).mode & 0o777).toBe(0o600);
  });

  it('refuses a special file anywhere in the tree', async () => {
    mkdirSync(join(work, 'node_modules', 'p'), { recursive: true });
    execFileSync('mkfifo', [join(work, 'node_modules', 'p', 'pipe')]);
    expect(await refusal(copyTreeNoFollow(work, 'node_modules', join(base, 's')))).toBe('p/pipe: the install left a special file (not a file, directory or symlink)');
  });

  it('opens the parent without following it either', async () => {
    mkdirSync(join(host, 'node_modules'));
    chmodSync(host, 0o700);
    const linked = join(base, 'linked-work');
    symlinkSync(host, linked);
    const e = await copyTreeNoFollow(linked, 'node_modules', join(base, 's')).then(
      () => null,
      (err: NodeJS.ErrnoException) => err.code,
    );
    expect(['ENOTDIR', 'ELOOP']).toContain(e);
  });
});
