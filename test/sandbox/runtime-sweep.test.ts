/**
 * The start-up sweep of sandbox runtime directories (issue #42 item 12; bwrap/rundir.ts
 * sweepRunDir) against a hostile run directory, with real tmpfs mounts (needs root): a leftover's
 * socket tmpfs is unmounted and its directory removed; an owned directory, other names, another
 * user's directory are left; an entry that is a link, and a `m` that is a link to a mounted
 * directory elsewhere, never make it unmount or remove anything outside the run directory.
 * The service-level test is test/e2e/crash-recovery.test.ts.
 */
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runPaths, sweepRunDir, type RunState } from '../../src/sandbox/bwrap/rundir.js';
import { isRoot } from './helpers.js';

const base = mkdtempSync(path.join(tmpdir(), 'atelier-sweep-'));
afterAll(() => {
  for (const m of mounted()) execFileSync('umount', ['-l', m]);
  rmSync(base, { recursive: true, force: true });
});

function mounted(): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4])
    .filter((m): m is string => !!m && m.startsWith(base + '/'));
}

function tmpfsAt(dir: string): void {
  mkdirSync(dir, { recursive: true });
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', dir]);
  writeFileSync(path.join(dir, 'marker'), 'x');
}

describe.skipIf(!isRoot)('sweepRunDir', () => {
  it('removes what no sandbox owns, unmounting its tmpfs, and follows no link', async () => {
    const runDir = path.join(base, 'run');
    mkdirSync(runDir, { mode: 0o711 });
    const victim = path.join(base, 'victim');
    tmpfsAt(path.join(victim, 'mnt'));
    const leftover = runPaths(runDir, 'eph-leftover');
    tmpfsAt(leftover.mnt);
    const owned = runPaths(runDir, 'ws_owned');
    tmpfsAt(owned.mnt);
    // A live-looking state file of a pid that is no keeper: not "running", removed like any leftover.
    const stale = runPaths(runDir, 'ws_stale');
    tmpfsAt(stale.mnt);
    writeFileSync(stale.state, JSON.stringify({ id: 'ws_stale', pid: process.pid, startedAt: '', proxy: null } satisfies RunState));
    // A state file naming another sandbox's id (its hash is not this directory's name): never trusted.
    const forged = runPaths(runDir, 'ws_forged');
    mkdirSync(forged.dir);
    writeFileSync(forged.state, JSON.stringify({ id: 'ws_owned', pid: process.pid, startedAt: '', proxy: null }));
    // Hostile entries: a runtime-directory name that is a link to a mounted directory; a `m` that is such a link; another user's directory; another name.
    const linkEntry = path.join(runDir, 'aaaaaaaaaaaaaaaa');
    symlinkSync(victim, linkEntry);
    const linkedM = path.join(runDir, 'bbbbbbbbbbbbbbbb');
    mkdirSync(linkedM);
    symlinkSync(path.join(victim, 'mnt'), path.join(linkedM, 'm'));
    const foreign = path.join(runDir, 'cccccccccccccccc');
    mkdirSync(foreign);
    chownSync(foreign, 1000, 1000);
    const other = path.join(runDir, 'eg-not-a-sandbox');
    mkdirSync(other);

    const notes: string[] = [];
    const ended: string[] = [];
    await sweepRunDir(runDir, {
      owned: (dir) => dir === owned.dir,
      claim: () => undefined,
      running: (state) => state.id === 'ws_running',
      endSandbox: async (state) => void ended.push(state.id),
      onNote: (m) => notes.push(m),
    });

    expect(existsSync(leftover.dir)).toBe(false);
    expect(existsSync(stale.dir)).toBe(false);
    expect(existsSync(forged.dir)).toBe(false);
    expect(ended).toEqual([]);
    expect(lstatSync(owned.dir).isDirectory()).toBe(true);
    expect(existsSync(path.join(owned.mnt, 'marker'))).toBe(true);
    // The links went as links; what they pointed at is untouched and still mounted.
    expect(existsSync(linkEntry)).toBe(false);
    expect(existsSync(linkedM)).toBe(false);
    expect(readFileSync(path.join(victim, 'mnt', 'marker'), 'utf8')).toBe('x');
    expect(mounted().sort()).toEqual([owned.mnt, path.join(victim, 'mnt')].sort());
    expect(existsSync(foreign)).toBe(true);
    expect(notes.some((n) => n.includes(foreign) && n.includes('not this runner'))).toBe(true);
    expect(existsSync(other)).toBe(true);
  });

  it('ends a sandbox still running that nothing owns before removing its directory', async () => {
    const runDir = path.join(base, 'run2');
    mkdirSync(runDir, { mode: 0o711 });
    const p = runPaths(runDir, 'ws_running');
    tmpfsAt(p.mnt);
    writeFileSync(p.state, JSON.stringify({ id: 'ws_running', pid: 4242, startedAt: '', proxy: null }));
    const ended: string[] = [];
    await sweepRunDir(runDir, { owned: () => false, claim: () => undefined, running: (s) => s.id === 'ws_running', endSandbox: async (s) => void ended.push(s.id), onNote: () => undefined });
    expect(ended).toEqual(['ws_running']);
    expect(existsSync(p.dir)).toBe(false);
    expect(mounted().filter((m) => m.startsWith(runDir))).toEqual([]);
  });
});
