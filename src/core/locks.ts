/**
 * One lock discipline per workspace. Three parts of the runner serialise work: the workspace
 * lifecycle (open, renew, recover, close, expiry), the mutating git tools, and the tool registry's
 * idempotent replay (concurrent calls with one key run once). They share this module:
 *
 *  - `workspace(id, mode, fn)`: one exclusive lock per workspace for both modes, `lifecycle` and
 *    `git`, so a close cannot remove the files under a running push, and a push cannot start on a
 *    workspace that is closing (it waits, then finds it closed). Waiters run in arrival order.
 *  - `idempotencyKey(key, fn)`: one lock per idempotency key (tool scope and key).
 *
 * Order: an idempotency key is taken before a workspace lock (the registry takes the key, then the
 * handler takes the workspace), never inside one. A holder that asks again for a lock it already
 * holds (a git tool whose step calls a lifecycle step of the same workspace) runs at once instead
 * of waiting for itself: holding is tracked per async call chain (AsyncLocalStorage), and ends
 * when the holder's function settles, so work it left running does not inherit the lock.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

export type WorkspaceLockMode = 'lifecycle' | 'git';
export type LockMode = WorkspaceLockMode | 'idempotency';

/** One lock held by a call chain, linked to the locks its caller held. */
interface Held {
  key: string;
  active: boolean;
  outer: Held | undefined;
}

function holds(chain: Held | undefined, key: string): boolean {
  for (let h = chain; h; h = h.outer) if (h.active && h.key === key) return true;
  return false;
}

interface Holding {
  key: string;
  mode: LockMode;
  done: Promise<unknown>;
}

export class WorkspaceLocks {
  /** The last holder or waiter per key: the next one queues behind it. */
  private readonly tails = new Map<string, Promise<unknown>>();
  /** Everything holding or waiting, for settled() and tests. */
  private readonly pending = new Set<Holding>();
  private readonly held = new AsyncLocalStorage<Held>();

  /** Runs fn holding the workspace's lock (lifecycle changes and mutating git tools exclude each other). */
  workspace<T>(workspaceId: string, mode: WorkspaceLockMode, fn: () => Promise<T>): Promise<T> {
    return this.run(`workspace:${workspaceId}`, mode, fn);
  }

  /** Runs fn holding an idempotency key's lock (taken before any workspace lock, never inside one). */
  idempotencyKey<T>(key: string, fn: () => Promise<T>): Promise<T> {
    return this.run(`idempotency:${key}`, 'idempotency', fn);
  }

  /** True when the current call chain holds the workspace's lock. */
  holdsWorkspace(workspaceId: string): boolean {
    return holds(this.held.getStore(), `workspace:${workspaceId}`);
  }

  /** Resolves once every lock of this mode (or of any mode) taken or queued so far is released. */
  async settled(mode?: LockMode): Promise<void> {
    const waiting = [...this.pending].filter((h) => mode === undefined || h.mode === mode).map((h) => h.done.catch(() => undefined));
    await Promise.all(waiting);
  }

  /** The keys held or waited for, with their modes (diagnostics and tests). */
  busy(): Array<{ key: string; mode: LockMode }> {
    return [...this.pending].map((h) => ({ key: h.key, mode: h.mode }));
  }

  private run<T>(key: string, mode: LockMode, fn: () => Promise<T>): Promise<T> {
    const outer = this.held.getStore();
    if (holds(outer, key)) return fn();
    const prev = this.tails.get(key) ?? Promise.resolve();
    const mine: Held = { key, active: true, outer };
    const done = prev
      .catch(() => undefined)
      .then(() => this.held.run(mine, fn))
      .finally(() => {
        mine.active = false;
      });
    const holding: Holding = { key, mode, done };
    this.tails.set(key, done);
    this.pending.add(holding);
    void done
      .catch(() => undefined)
      .then(() => {
        this.pending.delete(holding);
        if (this.tails.get(key) === done) this.tails.delete(key);
      });
    return done;
  }
}
