/**
 * After a service is disposed: nothing of its data directory may be left on the host: no mount,
 * no loop device backed by one of its disk images, no process whose command line names it (a
 * sandbox keeper, bwrap, a daemon). Throws naming what is left.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';

export function leftoversOf(dataDir: string): string[] {
  const left: string[] = [];
  for (const line of readFileSync('/proc/mounts', 'utf8').split('\n')) {
    const target = line.split(' ')[1];
    if (target && (target === dataDir || target.startsWith(dataDir + '/'))) left.push(`mount ${target}`);
  }
  try {
    for (const line of execFileSync('losetup', ['-a'], { encoding: 'utf8' }).split('\n')) if (line.includes(dataDir + '/')) left.push(`loop ${line.split(':')[0]}`);
  } catch {
    // no losetup: nothing to check
  }
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p) || Number(p) === process.pid) continue;
    try {
      const cmd = readFileSync(`/proc/${p}/cmdline`, 'utf8');
      // Sandboxes name no host path on their command lines; their keeper, bwrap and daemon hold the
      // daemon log (<dataDir>/run/<hash>/daemon.log) open, so open descriptors are checked too.
      const fds = readdirSync(`/proc/${p}/fd`).map((fd) => {
        try {
          return readlinkSync(`/proc/${p}/fd/${fd}`);
        } catch {
          return '';
        }
      });
      if (cmd.includes(dataDir + '/') || fds.some((f) => f.startsWith(dataDir + '/'))) left.push(`process ${p}: ${cmd.split('\0').slice(0, 3).join(' ')}`);
    } catch {
      // gone
    }
  }
  return left;
}

/** Waits briefly (processes take a moment to be reaped), then throws if anything is left. */
export async function assertNothingLeft(dataDir: string): Promise<void> {
  let left: string[] = [];
  for (let i = 0; i < 50; i++) {
    left = leftoversOf(dataDir);
    if (left.length === 0) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`left behind by the tests of ${dataDir}:\n${left.join('\n')}`);
}
