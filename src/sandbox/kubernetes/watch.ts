/**
 * Waiting on the API server by watching instead of polling (issue #34): the list+watch pattern
 * of client-go's reflector, for one object by name.
 *
 * - Each object is read once (a list of its collection with `fieldSelector=metadata.name=<name>`,
 *   or the answer of the create that made it), then watched from that resourceVersion with the
 *   official client's `Watch` (`?watch=true`, the same selector, `allowWatchBookmarks`, a
 *   server-side `timeoutSeconds` no longer than the wait).
 * - A watch answered `410 Gone` (an ERROR event with a 410 Status: the version was compacted, or
 *   an HTTP 410) and a watch that ends (dropped by the server, a load balancer, the network) are
 *   followed by a re-list, then a new watch from the list's version: no event can be missed. Watch
 *   or list failures other than 401/403/404 are retried with back-off (100 ms doubling to 2 s),
 *   as are watches that end at once with nothing seen.
 * - The wait is bounded: at its deadline every watch is closed and the caller's error (naming the
 *   object and its last phase) is thrown. However the wait ends, no watch stays open.
 */
import type { Watch } from '@kubernetes/client-node';
import { ServiceError } from '../../core/errors.js';
import { asServiceError, statusCode } from './api.js';

export interface KubeObjectLike {
  metadata?: { name?: string; resourceVersion?: string; deletionTimestamp?: unknown };
}

/** One object to follow: the collection it is in and how to list it. */
export interface WatchSource<O extends KubeObjectLike> {
  /** The collection's path, e.g. /api/v1/namespaces/<ns>/pods. */
  path: string;
  name: string;
  /** A list of the collection filtered to the name: the object (null when absent) and the list's resourceVersion. */
  list(fieldSelector: string): Promise<{ object: O | null; resourceVersion: string }>;
  /** Already read (a create's or a get's answer): watched from its version, no first list. */
  from?: O;
}

/** What a wait decides after each change: done with a value, failed, or keep waiting (undefined). */
export type Verdict<T> = { done: T } | { fail: Error } | undefined;

/** Counters for tests and the bench (per executor). */
export interface WatchCounters {
  lists: number;
  watches: number;
  /** Watches answered 410 Gone (then re-listed). */
  expired: number;
  /** Watches that ended without the wait being over (then re-listed). */
  dropped: number;
}

export function newWatchCounters(): WatchCounters {
  return { lists: 0, watches: 0, expired: 0, dropped: 0 };
}

const FIRST_RETRY_MS = 100;
const MAX_RETRY_MS = 2_000;

/** One object followed by list+watch until close(). `current`: undefined until first known, null while absent. */
class ObjectWatch<O extends KubeObjectLike> {
  current: O | null | undefined;
  private rv: string | undefined;
  private ctl: AbortController | undefined;
  private closed = false;
  private readonly selector: string;

  constructor(
    private readonly watch: Watch,
    private readonly src: WatchSource<O>,
    private readonly counters: WatchCounters,
    private readonly timeoutSeconds: () => number,
    private readonly changed: () => void,
    private readonly failed: (err: Error) => void,
  ) {
    this.selector = `metadata.name=${src.name}`;
    if (src.from) {
      this.current = src.from;
      this.rv = src.from.metadata?.resourceVersion;
    }
  }

  start(): void {
    void this.run().catch((err: unknown) => this.failed(err instanceof Error ? err : new Error(String(err))));
  }

  close(): void {
    this.closed = true;
    this.ctl?.abort();
  }

  private async run(): Promise<void> {
    let delay = 0;
    while (!this.closed) {
      if (this.rv === undefined) {
        try {
          this.counters.lists++;
          const l = await this.src.list(this.selector);
          if (this.closed) return;
          this.set(l.object, l.resourceVersion);
          delay = 0;
        } catch (err) {
          if (isFinal(err)) throw asServiceError(err, `list ${this.src.path}`);
          delay = Math.min(Math.max(FIRST_RETRY_MS, delay * 2), MAX_RETRY_MS);
          await pause(delay, () => this.closed);
          continue;
        }
      }
      const started = Date.now();
      const { outcome, events } = await this.once();
      if (this.closed) return;
      if (outcome === 'final') return;
      if (outcome === 'expired') this.counters.expired++;
      else this.counters.dropped++;
      // 410 Gone, a dropped or failed watch: list again, then watch from the list's version.
      this.rv = undefined;
      if (outcome === 'error' || (events === 0 && Date.now() - started < 1_000)) {
        delay = Math.min(Math.max(FIRST_RETRY_MS, delay * 2), MAX_RETRY_MS);
        await pause(delay, () => this.closed);
      } else delay = 0;
    }
  }

  private set(object: O | null, rv: string | undefined): void {
    this.current = object;
    if (rv) this.rv = rv;
    this.changed();
  }

  /** One watch request, until it ends: how, and how many events it carried. */
  private once(): Promise<{ outcome: 'expired' | 'dropped' | 'error' | 'final'; events: number }> {
    return new Promise((resolve) => {
      let events = 0;
      let ended = false;
      const end = (outcome: 'expired' | 'dropped' | 'error' | 'final'): void => {
        if (ended) return;
        ended = true;
        this.ctl?.abort();
        resolve({ outcome, events });
      };
      this.counters.watches++;
      const query = { fieldSelector: this.selector, resourceVersion: this.rv, allowWatchBookmarks: true, timeoutSeconds: this.timeoutSeconds() };
      this.watch
        .watch(
          this.src.path,
          query,
          (type: string, obj: unknown) => {
            if (ended || this.closed) return;
            events++;
            const o = obj as O & { code?: number; message?: string };
            if (type === 'ERROR') return end(o?.code === 410 ? 'expired' : 'error');
            const rv = o?.metadata?.resourceVersion;
            if (type === 'BOOKMARK') return void (rv && (this.rv = rv));
            if (o?.metadata?.name !== this.src.name) return;
            this.set(type === 'DELETED' ? null : o, rv);
          },
          (err: unknown) => {
            if (!err) return end('dropped');
            const code = (err as { statusCode?: number }).statusCode ?? statusCode(err);
            if (code === 410) return end('expired');
            if (code === 401 || code === 403 || code === 404) {
              end('final');
              return this.failed(asServiceError(Object.assign(new Error((err as Error).message), { code }), `watch ${this.src.path}`));
            }
            end('error');
          },
        )
        .then(
          (ctl) => {
            this.ctl = ctl;
            if (ended || this.closed) ctl.abort();
          },
          () => end('error'),
        );
    });
  }
}

function isFinal(err: unknown): boolean {
  const c = statusCode(err);
  return c === 401 || c === 403 || c === 404;
}

function pause(ms: number, stop: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    if (stop()) return resolve();
    setTimeout(resolve, ms).unref?.();
  });
}

/**
 * Follows the objects (list+watch each) until `judge` decides, or until the deadline: then
 * `timeout(objects)` is thrown. Every watch is closed when this settles.
 */
export function waitForObjects<T>(args: {
  watch: Watch;
  sources: WatchSource<KubeObjectLike>[];
  judge: (objects: Array<KubeObjectLike | null | undefined>) => Verdict<T>;
  deadline: number;
  timeout: (objects: Array<KubeObjectLike | null | undefined>) => ServiceError;
  counters: WatchCounters;
}): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const watches: ObjectWatch<KubeObjectLike>[] = [];
    const objects = () => watches.map((w) => w.current);
    const finish = (fn: () => void): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      for (const w of watches) w.close();
      fn();
    };
    const judgeNow = (): void => {
      if (settled || watches.length < args.sources.length) return;
      let v: Verdict<T>;
      try {
        v = args.judge(objects());
      } catch (err) {
        return finish(() => reject(err));
      }
      if (v && 'done' in v) finish(() => resolve(v.done));
      else if (v && 'fail' in v) finish(() => reject(v.fail));
    };
    const remaining = (): number => Math.max(1, Math.ceil((args.deadline - Date.now()) / 1000));
    const timer = setTimeout(() => finish(() => reject(args.timeout(objects()))), Math.max(0, args.deadline - Date.now()));
    for (const src of args.sources) {
      watches.push(new ObjectWatch(args.watch, src, args.counters, remaining, judgeNow, (err) => finish(() => reject(err))));
    }
    judgeNow();
    for (const w of watches) if (!settled) w.start();
  });
}
