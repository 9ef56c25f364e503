/**
 * Why a sandbox's daemon died, for the caller that found it gone: how its keeper (and so bwrap
 * and the daemon) ended, the cgroup's OOM kills, and the last lines of the daemon's log.
 */
import { constants as fsConstants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { constants as osConstants } from 'node:os';
import type { SandboxCgroup } from '../cgroups.js';
import type { DaemonDeath } from '../executor.js';

/** How a keeper this runner started ended (its status is bwrap's, which is the daemon's: 128+n when a signal ended it). */
export interface KeeperExit {
  pid: number | undefined;
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Signal names by number, to read a shell's 128+n exit status. */
const SIGNAL_NAMES = new Map<number, string>();
// The first name of each number (SIGABRT before its alias SIGIOT).
for (const [name, n] of Object.entries(osConstants.signals)) if (!SIGNAL_NAMES.has(n)) SIGNAL_NAMES.set(n, name);
/** Bytes of the daemon's log read back when it died (its last lines). */
const DEATH_LOG_BYTES = 4096;

/** `ended`: how the keeper of the sandbox ended, when this runner started it; only read when it is the keeper `pid`. */
export async function daemonDeath(ended: KeeperExit | undefined, pid: number, cg: SandboxCgroup | undefined, log: string): Promise<DaemonDeath> {
  let exit: string | null = null;
  if (ended && ended.pid === pid) {
    if (ended.signal) exit = `signal ${ended.signal}`;
    else if (ended.code !== null && ended.code > 128 && SIGNAL_NAMES.has(ended.code - 128)) exit = `signal ${SIGNAL_NAMES.get(ended.code - 128)} (exit ${ended.code})`;
    else exit = `exit ${ended.code}`;
  }
  const oomKills = cg ? await cg.oomKills() : null;
  // The log is root's file in the runner's own directory (the daemon writes it through an
  // inherited descriptor); only its end is read, and shown as plain text.
  const text = await tailBytes(log, DEATH_LOG_BYTES);
  const lines = text.split('\n').slice(text.length >= DEATH_LOG_BYTES ? 1 : 0);
  const stderrTail = lines
    .map((l) => l.replace(/[\u0000-\u001f\u007f-\u009f]/g, ' ').trimEnd().slice(0, 300))
    .filter((l) => l !== '')
    .slice(-8);
  return { exit, oomKills, stderrTail };
}

/** The last `bytes` bytes of a file (no more is read), as text; '' when it cannot be read. */
async function tailBytes(file: string, bytes: number): Promise<string> {
  let fh: FileHandle | undefined;
  try {
    fh = await open(file, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
    const { size } = await fh.stat();
    const n = Math.min(size, bytes);
    const buf = Buffer.alloc(n);
    await fh.read(buf, 0, n, size - n);
    return buf.toString('utf8');
  } catch {
    return '';
  } finally {
    await fh?.close();
  }
}
