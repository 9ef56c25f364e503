/**
 * The root-side descriptor walks over a workspace tree (src/sandbox/rootdir.ts): nothing outside
 * the tree is ever re-owned, re-moded or removed, whatever symlinks the tree holds. Needs root.
 */
import { chownSync, existsSync, lstatSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chownTree, prepareRootDir, removeTreeNoFollow } from '../../src/sandbox/rootdir.js';
import { isRoot, traversableTempDir } from './helpers.js';

const IDS = { uid: 64000, gid: 64000 };
let base: string;
let outside: string;

beforeEach(() => {
  base = traversableTempDir('atl-r-');
  outside = path.join(base, 'outside');
  mkdirSync(path.join(outside, 'sub'), { recursive: true, mode: 0o755 });
  writeFileSync(path.join(outside, 'f'), 'outside\n', { mode: 0o644 });
  writeFileSync(path.join(outside, 'sub', 'g'), 'outside g\n', { mode: 0o600 });
});

afterEach(async () => {
  await rm(base, { recursive: true, force: true });
});

function outsideUntouched(): void {
  for (const rel of ['.', 'f', 'sub', 'sub/g']) {
    const st = statSync(path.join(outside, rel));
    expect([st.uid, st.gid], rel).toEqual([0, 0]);
  }
  expect(statSync(path.join(outside, 'sub', 'g')).mode & 0o777).toBe(0o600);
  expect(readFileSync(path.join(outside, 'f'), 'utf8')).toBe('outside\n');
}

describe.skipIf(!isRoot)('descriptor walks over a workspace tree', () => {
  it('prepareRootDir makes the layout with its owners and modes', async () => {
    const root = path.join(base, 'ws');
    await prepareRootDir(root, IDS);
    expect(statSync(root).mode & 0o7777).toBe(0o700);
    expect(statSync(path.join(root, 'tmp')).mode & 0o7777).toBe(0o1777);
    for (const rel of ['.', 'repo', 'home', 'tmp']) expect(statSync(path.join(root, rel)).uid, rel).toBe(IDS.uid);
  });

  it('prepareRootDir refuses a subdirectory replaced by a symlink and changes nothing through it', async () => {
    const root = path.join(base, 'ws');
    mkdirSync(root);
    symlinkSync(outside, path.join(root, 'tmp'));
    await expect(prepareRootDir(root, IDS)).rejects.toMatchObject({ code: 'FAILED_PRECONDITION' });
    outsideUntouched();
    expect(statSync(outside).mode & 0o7777).toBe(0o755);
  });

  it('re-owning a tree re-owns symlinks themselves, never their targets, and stays on its filesystem', async () => {
    const tree = path.join(base, 'tree');
    mkdirSync(path.join(tree, 'a', 'b'), { recursive: true });
    writeFileSync(path.join(tree, 'a', 'b', 'file'), 'x');
    symlinkSync(outside, path.join(tree, 'a', 'dirlink'));
    symlinkSync(path.join(outside, 'f'), path.join(tree, 'a', 'filelink'));
    await chownTree(tree, IDS);
    outsideUntouched();
    expect(statSync(path.join(tree, 'a', 'b', 'file')).uid).toBe(IDS.uid);
    expect(lstatSync(path.join(tree, 'a', 'dirlink')).uid).toBe(IDS.uid);
    expect(lstatSync(path.join(tree, 'a', 'filelink')).uid).toBe(IDS.uid);
  });

  it('removing a tree unlinks its symlinks and deletes nothing they point to', async () => {
    const tree = path.join(base, 'tree');
    mkdirSync(path.join(tree, 'a', 'b'), { recursive: true });
    writeFileSync(path.join(tree, 'a', 'b', 'file'), 'x');
    chownSync(path.join(tree, 'a'), IDS.uid, IDS.gid);
    symlinkSync(outside, path.join(tree, 'a', 'dirlink'));
    symlinkSync(path.join(outside, 'f'), path.join(tree, 'filelink'));
    await removeTreeNoFollow(tree);
    expect(existsSync(tree)).toBe(false);
    outsideUntouched();
    // A symlink given as the tree itself is unlinked, not followed.
    symlinkSync(outside, path.join(base, 'toplink'));
    await removeTreeNoFollow(path.join(base, 'toplink'));
    expect(existsSync(path.join(base, 'toplink'))).toBe(false);
    outsideUntouched();
  });
});
