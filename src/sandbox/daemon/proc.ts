/**
 * Process-table helpers for the daemon. Inside the sandbox /proc shows the sandbox's own pid
 * namespace only, so a scan is cheap (bounded by pids.max).
 */
import { readdirSync, readFileSync } from 'node:fs';

interface ProcEntry {
  ppid: number;
  pgid: number;
  /** The state letter (R, S, D, Z, ...). */
  state: string;
}

/** pid -> (ppid, pgid) for every process currently visible in /proc. */
export function processTable(): Map<number, ProcEntry> {
  const table = new Map<number, ProcEntry>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // exited while we were looking
    }
    // "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    table.set(Number(name), { ppid: Number(fields[1]), pgid: Number(fields[2]), state: fields[0] ?? '' });
  }
  return table;
}

/** Every process that descends from `root` (not including root) or sits in process group `pgid`. */
export function treeMembers(root: number, pgid: number): number[] {
  const table = processTable();
  const children = new Map<number, number[]>();
  for (const [pid, e] of table) {
    const list = children.get(e.ppid);
    if (list) list.push(pid);
    else children.set(e.ppid, [pid]);
  }
  const found = new Set<number>();
  const queue = [root];
  while (queue.length > 0) {
    for (const child of children.get(queue.pop()!) ?? []) {
      if (!found.has(child)) {
        found.add(child);
        queue.push(child);
      }
    }
  }
  for (const [pid, e] of table) if (e.pgid === pgid) found.add(pid);
  found.delete(process.pid);
  return [...found];
}

/**
 * Signals a process, its process group and all of its descendants. The tree is scanned before
 * anything is signalled (a parent that dies first would orphan its children), and every pid
 * found is remembered in `known`, so a later SIGKILL still reaches a child that ignored an
 * earlier SIGTERM and was re-parented when its parent died. SIGKILL rounds repeat the scan to
 * catch processes forked between scan and kill.
 *
 * What this cannot reach: a process that detached completely (setsid, then its parent exited)
 * before any scan saw it; it is re-parented to the sandbox's init and no longer linked to the
 * exec. The runner closes that gap with a per-exec freezer cgroup; see ../bwrap/exec.ts.
 */
export function signalTree(root: number, signal: NodeJS.Signals, known: Set<number>): void {
  const rounds = signal === 'SIGKILL' ? 3 : 1;
  for (let round = 0; round < rounds; round++) {
    const members = treeMembers(root, root);
    const fresh = members.filter((pid) => !known.has(pid));
    for (const pid of members) known.add(pid);
    trySignal(-root, signal);
    trySignal(root, signal);
    for (const pid of known) trySignal(pid, signal);
    if (round > 0 && fresh.length === 0) break;
  }
}

function trySignal(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // ESRCH: already gone.
  }
}

/**
 * Ends what is left in process group `pgid` once its leader (a command's shell) has exited: what
 * the command started with `&` or `nohup` keeps the group. Returns how many live processes (not
 * zombies) were killed. Safe from pid reuse: the kernel allocates no pid that is still some
 * process's group id, and the group is signalled as a whole too, so a fork between the scan and
 * the kill dies with it (and is counted when a later round still sees it). What left the group
 * (`setsid`) is not reached: the bubblewrap driver's exec cgroup ends that.
 */
export function endGroup(pgid: number): number {
  const ended = new Set<number>();
  for (let round = 0; round < 5; round++) {
    const fresh = groupMembers(pgid).filter((pid) => !ended.has(pid));
    if (fresh.length === 0) break;
    for (const pid of fresh) ended.add(pid);
    trySignal(-pgid, 'SIGKILL');
    for (const pid of fresh) trySignal(pid, 'SIGKILL');
  }
  return ended.size;
}

/** Resolves once no live process is left in group `pgid` (SIGKILLed ones take a moment to die), or after `ms`. */
export async function groupGone(pgid: number, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (groupMembers(pgid).length > 0 && Date.now() < end) {
    trySignal(-pgid, 'SIGKILL');
    await new Promise((r) => setTimeout(r, 5));
  }
}

function groupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const [pid, e] of processTable()) if (e.pgid === pgid && e.state !== 'Z' && pid !== process.pid) members.push(pid);
  return members;
}
