/**
 * What a test run leaves on the host: mounts, loop devices and processes that refer to a directory
 * (the run's temporary directory, or one service's data directory). Used by the run's last check
 * (test/global-setup.ts) and by tests that must release a data directory a stopped service kept
 * (workspace disks stay mounted across a runner restart by design).
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';

const under = (p: string, dir: string) => p === dir || p.startsWith(dir.endsWith('/') ? dir : dir + '/');

/** Mount points under dir, deepest first (mountinfo field 5, octal escapes decoded). */
export function mountsUnder(dir: string): string[] {
  const out: string[] = [];
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    if (f.length < 5) continue;
    const mp = f[4]!.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    if (under(mp, dir)) out.push(mp);
  }
  return out.sort((a, b) => b.length - a.length);
}

/** Loop devices whose backing file is under dir. */
export function loopsUnder(dir: string): string[] {
  const out: string[] = [];
  let names: string[] = [];
  try {
    names = readdirSync('/sys/block').filter((n) => n.startsWith('loop'));
  } catch {
    return out;
  }
  for (const n of names) {
    try {
      const back = readFileSync(`/sys/block/${n}/loop/backing_file`, 'utf8').trim().replace(/ \(deleted\)$/, '');
      if (under(back, dir)) out.push(`/dev/${n} (${back})`);
    } catch {
      /* not attached */
    }
  }
  return out;
}

/** Processes (other than this one) whose command line or working directory names dir. */
export function processesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').join(' ').trim();
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      if (/\) Z /.test(stat)) continue; // a zombie holds nothing
      if (cmd.includes(dir)) out.push(`${p} ${cmd.slice(0, 200)}`);
    } catch {
      /* gone */
    }
  }
  return out;
}

export function leaksUnder(dir: string): string[] {
  return [...mountsUnder(dir).map((m) => `mount ${m}`), ...loopsUnder(dir).map((l) => `loop ${l}`), ...processesUnder(dir).map((p) => `process ${p}`)];
}

/**
 * Releases what a stopped service left under its data directory (its sandboxes' disks stay
 * mounted across a runner restart by design), then removes the directory.
 */
export function releaseDataDir(dir: string): void {
  for (const p of processesUnder(dir)) {
    try {
      process.kill(Number(p.split(' ')[0]), 'SIGKILL');
    } catch {
      /* gone */
    }
  }
  for (const m of mountsUnder(dir)) {
    try {
      execFileSync('umount', [m], { stdio: 'ignore' });
    } catch {
      execFileSync('umount', ['-l', m], { stdio: 'ignore' });
    }
  }
  for (const l of loopsUnder(dir)) {
    try {
      execFileSync('losetup', ['-d', l.split(' ')[0]!], { stdio: 'ignore' });
    } catch {
      /* autoclear got it */
    }
  }
  rmSync(dir, { recursive: true, force: true });
}
