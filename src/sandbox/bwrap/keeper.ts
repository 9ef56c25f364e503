/**
 * The keeper process of a long-lived sandbox (bwrap's parent, named atelier-keeper on its command
 * line): whether the one a handle names still runs, and how it is killed when there are no
 * cgroups. Never signals or trusts a recycled pid.
 */
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Whether `pid` is a running keeper, and, when the sandbox has cgroups (`inCgroups`), one in
 * sandbox `id`'s cgroups (a recycled pid that happens to be another sandbox's keeper is not this one).
 */
export function keeperRuns(pid: number, id: string, inCgroups: () => boolean): boolean {
  if (!isAlive(pid)) return false;
  try {
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    if (!cmdline.split('\0').includes('atelier-keeper')) return false;
    // A recycled pid that happens to be another sandbox's keeper is not this one.
    if (inCgroups()) {
      const cgroups = readFileSync(`/proc/${pid}/cgroup`, 'utf8');
      return cgroups.includes(`/${id}\n`) || cgroups.includes(`/${id}/`);
    }
    return true;
  } catch {
    return false;
  }
}

/** Kills a keeper we started (no-cgroup mode): its death takes the whole sandbox down. */
export async function killKeeper(pid: number): Promise<void> {
  let cmdline: string;
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return;
  }
  // Never signal a recycled pid that is not ours.
  if (!cmdline.split('\0').includes('atelier-keeper')) return;
  killGroup(pid);
  for (let i = 0; i < 200 && isAlive(pid); i++) await sleep(10);
}

export function killGroup(pid: number | undefined): void {
  if (pid === undefined) return;
  for (const target of [-pid, pid]) {
    try {
      process.kill(target, 'SIGKILL');
    } catch {
      // gone
    }
  }
}

function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}
