/**
 * favordynmods (src/sandbox/cgroups.ts favorDynamicCgroupModifications): set through a throwaway
 * cgroup2 mount that keeps the flags the host's cgroup2 root already has, leaving no mount and no
 * directory behind. Runs as root on the real kernel (Linux 6.1+ knows the flag).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { favorDynamicCgroupModifications } from '../../src/sandbox/cgroups.js';

const cgroup2Mounts = () =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.includes(' - cgroup2 '));
const superOpts = (line: string) => line.slice(line.indexOf(' - ') + 3).split(' ')[2]!.split(',');

const dir = mkdtempSync(path.join(os.tmpdir(), 'atl-dynmods-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('favordynmods', () => {
  it('is set (or found set) and leaves no mount or directory behind', () => {
    const before = cgroup2Mounts().length;
    const r = favorDynamicCgroupModifications(dir);
    expect(['set', 'already set']).toContain(r);
    expect(cgroup2Mounts()).toHaveLength(before);
    expect(readdirSync(dir)).toEqual([]);
    expect(['set', 'already set']).toContain(favorDynamicCgroupModifications(dir));
  });

  // The host's own cgroup2 mount (a hybrid layout, as on this project's machines) keeps every
  // other flag it had: a cgroup2 mount sets all of the root's flags at once. The flag is first
  // cleared the same way (a throwaway mount with the host's other flags), so the mount path runs.
  it.skipIf(cgroup2Mounts().length === 0)("keeps the other flags of the host's cgroup2 root", () => {
    const hostLine = () => cgroup2Mounts()[0]!;
    const known = ['nsdelegate', 'favordynmods', 'memory_localevents', 'memory_recursiveprot', 'memory_hugetlb_accounting', 'pids_localevents'];
    const others = superOpts(hostLine()).filter((o) => known.includes(o) && o !== 'favordynmods');
    const scratch = mkdtempSync(path.join(dir, 'clear-'));
    execFileSync('mount', ['-t', 'cgroup2', '-o', others.join(',') || 'rw', 'none', scratch]);
    execFileSync('umount', [scratch]);
    expect(superOpts(hostLine())).not.toContain('favordynmods');
    expect(favorDynamicCgroupModifications(dir)).toBe('set');
    const after = superOpts(hostLine()).filter((o) => known.includes(o));
    expect(after.sort()).toEqual([...others, 'favordynmods'].sort());
    expect(favorDynamicCgroupModifications(dir)).toBe('already set');
    expect(readdirSync(dir).filter((n) => n.startsWith('cg2-'))).toEqual([]);
  });
});
