/**
 * One lock discipline per workspace (issue #13 item 6): the workspace lifecycle, the git tools and
 * the registry's idempotent replay share core/locks.ts. Checked with the real lock, the real
 * IdempotentRunner and the real idempotency records on a temporary database.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WorkspaceLocks } from '../../src/core/locks.js';
import { ServiceError } from '../../src/core/errors.js';
import { openDatabase } from '../../src/store/db.js';
import { IdempotencyStore } from '../../src/services/instance/idempotency.js';
import { IdempotentRunner } from '../../src/mcp/registry.js';

const dirs: string[] = [];
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));
const tmpDb = () => {
  const d = mkdtempSync(join(tmpdir(), 'atelier-locks-'));
  dirs.push(d);
  return openDatabase(join(d, 'a.db'));
};

/** A promise and the function that resolves it. */
function gate(): { open: () => void; wait: Promise<void> } {
  let open!: () => void;
  const wait = new Promise<void>((r) => (open = r));
  return { open, wait };
}
const tick = () => new Promise((r) => setTimeout(r, 5));
/** Fails instead of hanging when a lock deadlocks. */
const within = <T>(p: Promise<T>, ms = 2000): Promise<T> =>
  Promise.race([p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`still waiting after ${ms} ms (deadlock?)`)), ms))]);

describe('WorkspaceLocks', () => {
  it('lifecycle and git exclude each other on one workspace, in arrival order; other workspaces run alongside', async () => {
    const locks = new WorkspaceLocks();
    const events: string[] = [];
    const g = gate();
    const push = locks.workspace('ws1', 'git', async () => {
      events.push('push start');
      await g.wait;
      events.push('push end');
    });
    await tick();
    const close = locks.workspace('ws1', 'lifecycle', async () => {
      events.push('close');
    });
    const commit = locks.workspace('ws1', 'git', async () => {
      events.push('commit');
    });
    const other = locks.workspace('ws2', 'lifecycle', async () => {
      events.push('other workspace');
    });
    await other;
    await tick();
    expect(events).toEqual(['push start', 'other workspace']);
    expect(locks.busy()).toEqual([
      { key: 'workspace:ws1', mode: 'git' },
      { key: 'workspace:ws1', mode: 'lifecycle' },
      { key: 'workspace:ws1', mode: 'git' },
    ]);
    g.open();
    await Promise.all([push, close, commit]);
    expect(events).toEqual(['push start', 'other workspace', 'push end', 'close', 'commit']);
    await tick();
    expect(locks.busy()).toEqual([]);
  });

  it('a failing holder releases the lock and its error reaches only its caller', async () => {
    const locks = new WorkspaceLocks();
    await expect(locks.workspace('ws1', 'git', async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    await expect(within(locks.workspace('ws1', 'lifecycle', async () => 'next'))).resolves.toBe('next');
  });

  it('a holder asking again for its own workspace runs at once (no deadlock); others still wait', async () => {
    const locks = new WorkspaceLocks();
    const events: string[] = [];
    const outer = locks.workspace('ws1', 'git', async () => {
      events.push('git');
      expect(locks.holdsWorkspace('ws1')).toBe(true);
      await tick();
      const inner = await locks.workspace('ws1', 'lifecycle', async () => {
        events.push('lifecycle inside git');
        return 'inner';
      });
      events.push('git end');
      return inner;
    });
    const stranger = locks.workspace('ws1', 'lifecycle', async () => {
      events.push('stranger');
      expect(locks.holdsWorkspace('ws1')).toBe(true);
    });
    await expect(within(outer)).resolves.toBe('inner');
    await within(stranger);
    expect(events).toEqual(['git', 'lifecycle inside git', 'git end', 'stranger']);
    expect(locks.holdsWorkspace('ws1')).toBe(false);
  });

  it('work a holder leaves running does not keep its lock', async () => {
    const locks = new WorkspaceLocks();
    const later = gate();
    let background: Promise<string> | undefined;
    await locks.workspace('ws1', 'lifecycle', async () => {
      background = (async () => {
        await later.wait;
        return locks.holdsWorkspace('ws1') ? 'still held' : 'released';
      })();
    });
    const g = gate();
    const holder = locks.workspace('ws1', 'git', () => g.wait);
    later.open();
    // The background work asks after its parent released: it must queue like anyone else.
    expect(await background).toBe('released');
    const events: string[] = [];
    const queued = locks.workspace('ws1', 'lifecycle', async () => void events.push('after git'));
    await tick();
    expect(events).toEqual([]);
    g.open();
    await within(Promise.all([holder, queued]));
    expect(events).toEqual(['after git']);
  });

  it('settled(mode) waits for that mode only', async () => {
    const locks = new WorkspaceLocks();
    const g = gate();
    const h = gate();
    void locks.workspace('ws1', 'git', () => g.wait);
    void locks.workspace('ws2', 'lifecycle', () => h.wait);
    let lifecycleSettled = false;
    const s = locks.settled('lifecycle').then(() => (lifecycleSettled = true));
    g.open();
    await tick();
    expect(lifecycleSettled).toBe(false);
    h.open();
    await within(s);
    expect(lifecycleSettled).toBe(true);
    await within(locks.settled());
  });

  it('cannot interleave badly: a close during a git push during an idempotent replay', async () => {
    const locks = new WorkspaceLocks();
    const host = { idempotency: new IdempotencyStore(tmpDb()) };
    const runner = new IdempotentRunner(locks);
    const events: string[] = [];
    let state: 'active' | 'closed' = 'active';
    const pushGate = gate();
    // A git_push with an idempotency key: the registry takes the key, the git service the workspace.
    const push = () =>
      locks.workspace('ws1', 'git', async () => {
        if (state === 'closed') throw new ServiceError('NOT_FOUND', 'workspace ws1 was closed', { workspaceId: 'ws1' });
        events.push('push start');
        await pushGate.wait;
        // The files are still there: a close cannot have removed them while the push ran.
        events.push(`push end (${state})`);
        return { pushed: true, state };
      });
    const first = runner.run(host, 'git_push', 'key-00001', { workspaceId: 'ws1', ref: 'main' }, push);
    await tick();
    // The same call again (a client retry) while the first runs: it waits, then replays.
    const retry = runner.run(host, 'git_push', 'key-00001', { workspaceId: 'ws1', ref: 'main' }, push);
    // workspace_close arrives during the push: it waits for the push.
    const close = locks.workspace('ws1', 'lifecycle', async () => {
      events.push('close');
      state = 'closed';
      return { state };
    });
    // A new push (another key) queued behind the close finds the workspace closed.
    const late = runner.run(host, 'git_push', 'key-00002', { workspaceId: 'ws1', ref: 'main' }, push);
    await tick();
    expect(events).toEqual(['push start']);
    pushGate.open();
    const [a, b, c] = await within(Promise.all([first, retry, close]));
    await expect(within(late)).rejects.toMatchObject({ code: 'NOT_FOUND' });
    expect(a).toEqual({ pushed: true, state: 'active' });
    expect(b).toEqual({ pushed: true, state: 'active', replayed: true });
    expect(c).toEqual({ state: 'closed' });
    expect(events).toEqual(['push start', 'push end (active)', 'close']);
    // After the close, the key still replays its first result (the record outlives the workspace).
    await expect(runner.run(host, 'git_push', 'key-00001', { workspaceId: 'ws1', ref: 'main' }, push)).resolves.toEqual({ pushed: true, state: 'active', replayed: true });
  });
});
