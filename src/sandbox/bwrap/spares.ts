/**
 * Spare exec starters: per sandbox, a few processes the daemon started ahead of time and the
 * runner already moved into their own exec cgroups, so that a command is born in its cgroup with
 * no process start or cgroup write on the exec's path (exec.ts). Topped up in the background, in
 * rounds.
 */
import { ServiceError } from '../../core/errors.js';
import type { SandboxCgroup } from '../cgroups.js';
import type { DaemonClient } from '../client.js';
import type { SandboxHandle } from '../executor.js';

/**
 * Spare exec starters each sandbox keeps placed in their own exec cgroups, ready for the next
 * execs: one per 64 of the sandbox's process limit, from 2 to 8 (each waiting spare is a process
 * of the sandbox; 8 cover a burst of eight concurrent commands at the default limit of 512).
 */
const MIN_SPARES = 2;
const MAX_SPARES = 8;
const PIDS_PER_SPARE = 64;
/** How long an exec that found no spare ready waits for one being placed before it goes without. */
const SPARE_WAIT_MS = 50;

export function spareTarget(pidsMax: number | undefined): number {
  if (pidsMax === undefined) return MIN_SPARES;
  return Math.max(MIN_SPARES, Math.min(MAX_SPARES, Math.floor(pidsMax / PIDS_PER_SPARE)));
}

/** A spare exec starter placed in its exec cgroup, ready for an exec. */
export interface Spare {
  id: string;
  dir: string;
}

interface SparePool {
  ready: Spare[];
  /** Spares started and being moved into their exec cgroups. */
  placing: number;
  /** Execs that found no spare ready, waiting (SPARE_WAIT_MS at most) for one being placed. */
  waiters: Array<(spare: Spare | undefined) => void>;
  filling: boolean;
  /** The daemon has no exec starter (an older daemon, or no cgroups): every exec is placed after it starts. */
  unsupported: boolean;
  /** The first fill ends spares an earlier runner left in the daemon. */
  fresh: boolean;
}

export class Spares {
  /** Per sandbox: spare exec starters already in their exec cgroups. */
  private readonly spares = new Map<string, SparePool>();

  constructor(
    /** The runner's connection to the sandbox's daemon. */
    private readonly client: (h: SandboxHandle) => DaemonClient,
    /** The sandbox's process limit, when its spec is known (sets how many spares it keeps). */
    private readonly pidsMax: (id: string) => number | undefined,
  ) {}

  /** A ready spare for an exec, taken (else see next()). */
  ready(id: string): Spare | undefined {
    return this.spares.get(id)?.ready.shift();
  }

  /** A new start of the sandbox: spares of an earlier one are forgotten (the next fill ends them in the daemon). */
  reset(id: string): void {
    this.spares.delete(id);
  }

  /** The sandbox stops: its waiting execs go without a spare. */
  drop(id: string): void {
    const pool = this.spares.get(id);
    this.spares.delete(id);
    if (pool) for (const w of pool.waiters.splice(0)) w(undefined);
  }

  /**
   * No spare is ready (a burst of execs used them all): start a round if none is under way and
   * wait a little for the next spare placed, which is sooner than starting and placing a held
   * process for this exec alone. Undefined when none comes in time (the exec is then placed after
   * it starts).
   */
  next(h: SandboxHandle, cg: SandboxCgroup): Promise<Spare | undefined> {
    this.fill(h, cg);
    const p = this.spares.get(h.id);
    if (!p || p.unsupported || (!p.filling && p.placing === 0)) return Promise.resolve(p?.ready.shift());
    return new Promise<Spare | undefined>((resolve) => {
      const waiter = (s: Spare | undefined): void => {
        clearTimeout(timer);
        resolve(s);
      };
      const timer = setTimeout(() => {
        const i = p.waiters.indexOf(waiter);
        if (i >= 0) p.waiters.splice(i, 1);
        resolve(undefined);
      }, SPARE_WAIT_MS);
      p.waiters.push(waiter);
    });
  }

  /** Hands ready spares to waiting execs; once no round is under way, waiting execs go without. */
  private serveWaiters(p: SparePool): void {
    while (p.waiters.length > 0 && p.ready.length > 0) p.waiters.shift()!(p.ready.shift());
    if (!p.filling && p.placing === 0) for (const w of p.waiters.splice(0)) w(undefined);
  }

  /**
   * Tops up a sandbox's spare exec starters in the background (one filler at a time): one `spare`
   * request starts the whole round in the daemon (one process start, see daemon/exec.ts), and its
   * spares are placed in their exec cgroups side by side, so consecutive placements share the
   * kernel's wait for a quiet cgroup state instead of paying it one after the other.
   */
  fill(h: SandboxHandle, cg: SandboxCgroup): void {
    let pool = this.spares.get(h.id);
    if (!pool) {
      pool = { ready: [], placing: 0, waiters: [], filling: false, unsupported: false, fresh: true };
      this.spares.set(h.id, pool);
    }
    const target = spareTarget(this.pidsMax(h.id));
    // Topped up in rounds once half are used, not after every exec: most execs then run while no
    // spare is being started or placed (a placement briefly holds up every fork and exit on the
    // host), and the placements of one round follow each other closely, which makes them cheaper.
    if (pool.filling || pool.unsupported || pool.ready.length + pool.placing > Math.floor(target / 2)) return;
    const p = pool;
    p.filling = true;
    void (async () => {
      const client = this.client(h);
      let placementFailed = false;
      try {
        while (!placementFailed && p.ready.length + p.placing < target && this.spares.get(h.id) === p) {
          // One request, one process start in the daemon, for the whole round.
          const s = await client.request('spare', { fresh: p.fresh, count: target - p.ready.length - p.placing }, { timeoutMs: 10_000 });
          p.fresh = false;
          for (const one of [{ spareId: s.spareId, pid: s.pid }, ...(s.more ?? [])]) {
            p.placing++;
            void this.place(client, cg, h.id, p, one).then((ok) => {
              p.placing--;
              // A spare that cannot be placed ends this round; the next exec tries again.
              if (!ok) placementFailed = true;
              this.serveWaiters(p);
            });
          }
        }
      } catch (err) {
        // No starter in this daemon: never ask again. Anything else (out of pids, the sandbox
        // stopping): the next exec tries again; until then execs are placed after they start.
        if (err instanceof ServiceError && err.details.daemonCode === 'NOT_IMPLEMENTED') p.unsupported = true;
      } finally {
        p.filling = false;
        this.serveWaiters(p);
      }
    })();
  }

  /** Moves one new spare into its own exec cgroup and makes it ready (or ends it). */
  private async place(client: DaemonClient, cg: SandboxCgroup, id: string, p: SparePool, s: { spareId: string; pid: number }): Promise<boolean> {
    let dir: string;
    try {
      dir = await cg.attachExec(s.spareId, s.pid);
    } catch {
      await client.request('kill', { execId: s.spareId }).catch(() => undefined);
      return false;
    }
    if (this.spares.get(id) !== p) {
      // The sandbox stopped meanwhile.
      await client.request('kill', { execId: s.spareId }).catch(() => undefined);
      return true;
    }
    p.ready.push({ id: s.spareId, dir });
    return true;
  }
}
