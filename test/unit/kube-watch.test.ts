/**
 * The Kubernetes driver's list+watch wait (src/sandbox/kubernetes/watch.ts) against a hand-driven
 * Watch, for what the fixture API server does not do: a server that ignores the field selector
 * (events about other objects must not decide the wait), a watch refused 403 (the wait ends with
 * the error instead of retrying until the deadline), and an ERROR event that is not a 410 (re-list,
 * with back-off). The fixture-backed behaviour (410, drops, deadline, nothing left open) is in
 * test/sandbox/kube-watch.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { ServiceError } from '../../src/core/errors.js';
import { newWatchCounters, waitForObjects, type KubeObjectLike, type WatchSource } from '../../src/sandbox/kubernetes/watch.js';

type Cb = (type: string, obj: unknown) => void;
type Done = (err: unknown) => void;

/** A Watch whose every request is handed to `serve`; records the queries and aborts. */
function fakeWatch(serve: (n: number, cb: Cb, done: Done, query: Record<string, unknown>) => void) {
  const queries: Record<string, unknown>[] = [];
  let aborted = 0;
  const watch = {
    watch: async (_path: string, query: Record<string, unknown>, cb: Cb, done: Done) => {
      queries.push(query);
      const ctl = new AbortController();
      ctl.signal.addEventListener('abort', () => aborted++);
      const n = queries.length;
      setImmediate(() => serve(n, cb, done, query));
      return ctl;
    },
  };
  return { watch: watch as never, queries, aborted: () => aborted };
}

const pod = (name: string, rv: string, phase: string) => ({ metadata: { name, resourceVersion: rv }, status: { phase } });

function source(lists: { n: number }, object: KubeObjectLike | null = pod('target', '1', 'Pending')): WatchSource<KubeObjectLike> {
  return {
    path: '/api/v1/namespaces/ns/pods',
    name: 'target',
    list: async () => {
      lists.n++;
      return { object, resourceVersion: String(10 + lists.n) };
    },
  };
}

const running = ([p]: Array<KubeObjectLike | null | undefined>) => ((p as { status?: { phase?: string } } | null | undefined)?.status?.phase === 'Running' ? { done: (p as { metadata: { name: string } }).metadata.name } : undefined);
const timeout = () => new ServiceError('DEADLINE_EXCEEDED', 'not in time');

describe('kubernetes list+watch wait (watch.ts)', () => {
  it('events about other objects (a server ignoring the field selector) never decide the wait', async () => {
    const lists = { n: 0 };
    const seen: string[] = [];
    const w = fakeWatch((_n, cb) => {
      cb('ADDED', pod('other', '12', 'Running'));
      cb('MODIFIED', pod('target', '13', 'Running'));
    });
    const name = await waitForObjects({
      watch: w.watch,
      sources: [source(lists)],
      judge: (objs) => {
        const p = objs[0] as { metadata?: { name?: string } } | null | undefined;
        if (p?.metadata?.name) seen.push(p.metadata.name);
        return running(objs);
      },
      deadline: Date.now() + 30_000,
      timeout,
      counters: newWatchCounters(),
    });
    expect(name).toBe('target');
    expect(seen).not.toContain('other');
    // Watched from the list's version, by name, bounded server-side too.
    expect(w.queries[0]).toMatchObject({ fieldSelector: 'metadata.name=target', resourceVersion: '11', allowWatchBookmarks: true });
    expect(Number(w.queries[0]!.timeoutSeconds)).toBeLessThanOrEqual(30);
    expect(w.aborted()).toBeGreaterThan(0);
  });

  it('a watch refused 403 ends the wait with PERMISSION_DENIED at once (no retrying until the deadline)', async () => {
    const lists = { n: 0 };
    const w = fakeWatch((_n, _cb, done) => done(Object.assign(new Error('Forbidden'), { statusCode: 403 })));
    const started = Date.now();
    await expect(waitForObjects({ watch: w.watch, sources: [source(lists)], judge: running, deadline: Date.now() + 60_000, timeout, counters: newWatchCounters() })).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(w.queries.length).toBe(1);
  });

  it('an ERROR event that is not a 410 is followed by a re-list and a new watch', async () => {
    const lists = { n: 0 };
    const counters = newWatchCounters();
    const w = fakeWatch((n, cb) => {
      if (n === 1) return cb('ERROR', { kind: 'Status', code: 500, message: 'etcd hiccup' });
      cb('MODIFIED', pod('target', '20', 'Running'));
    });
    expect(await waitForObjects({ watch: w.watch, sources: [source(lists)], judge: running, deadline: Date.now() + 30_000, timeout, counters })).toBe('target');
    expect(lists.n).toBe(2);
    expect(w.queries.map((q) => q.resourceVersion)).toEqual(['11', '12']);
    expect(counters).toMatchObject({ lists: 2, watches: 2, dropped: 1, expired: 0 });
  });

  it('the deadline ends the wait with the caller\'s error, naming what was last seen, and aborts the watch', async () => {
    const lists = { n: 0 };
    const w = fakeWatch(() => undefined); // a watch that never says anything
    await expect(
      waitForObjects({
        watch: w.watch,
        sources: [source(lists)],
        judge: running,
        deadline: Date.now() + 300,
        timeout: ([p]) => new ServiceError('DEADLINE_EXCEEDED', `last phase ${(p as { status?: { phase?: string } }).status?.phase}`),
        counters: newWatchCounters(),
      }),
    ).rejects.toMatchObject({ code: 'DEADLINE_EXCEEDED', message: 'last phase Pending' });
    await new Promise((r) => setImmediate(r)); // a watch still being opened is aborted as it opens
    expect(w.aborted()).toBe(1);
  });
});
