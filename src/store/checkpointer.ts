/**
 * WAL checkpoints off the service's thread. SQLite checkpoints a WAL database automatically from
 * the connection whose commit crosses 1000 pages, inside that commit: it copies the pages back and
 * fsyncs the database file, synchronously, on the event loop. Measured here (WAL, synchronous
 * NORMAL, the audit insert of every tool call): p50 0.03 ms a commit, but every 110 to 230 commits
 * one took 5 to 40 ms, and the call after it waited that long (issue #21 item 3, p99).
 *
 * Serving, the service's own connection checkpoints never (`wal_autocheckpoint = 0`); a worker
 * thread with its own connection runs a PASSIVE checkpoint every `intervalMs`, which never blocks
 * a writer or a reader, and the next write after a complete checkpoint starts the WAL over, so it
 * stays small. Should the worker fail or end, the connection checkpoints itself again as before.
 * stop() closes the worker's connection and waits for it (at most 2 s), so the service's close can
 * then truncate the WAL as it always did. A worker that has not opened its connection yet (a start
 * that fails or is stopped early, on a loaded machine the worker takes seconds to load) has nothing
 * to close: it is terminated and the main thread does not wait in `Atomics.wait` for it (issue #42 item 9).
 */
import { Worker } from 'node:worker_threads';
import type { DB } from './db.js';

export class WalCheckpointer {
  private readonly worker: Worker;
  private readonly closed = new Int32Array(new SharedArrayBuffer(4));
  private stopped = false;
  /** The worker has opened its connection (its first message). */
  private ready = false;

  constructor(
    private readonly db: DB,
    file: string,
    opts: { intervalMs?: number; onError?: (message: string) => void } = {},
  ) {
    this.worker = new Worker(new URL('./checkpoint-worker.js', import.meta.url), {
      workerData: { file, intervalMs: opts.intervalMs ?? 1_000, closed: this.closed },
    });
    this.worker.unref();
    db.pragma('wal_autocheckpoint = 0');
    this.worker.on('message', (m: { error?: string; ready?: boolean }) => {
      if (m.ready) this.ready = true;
      if (m.error) opts.onError?.(`background checkpoint failed: ${m.error}`);
    });
    const fallBack = (why: string): void => {
      if (this.stopped) return;
      this.stopped = true;
      if (this.db.open) this.db.pragma('wal_autocheckpoint = 1000');
      opts.onError?.(`background checkpoints stopped (${why}): the service's connection checkpoints again`);
    };
    this.worker.on('error', (err: Error) => fallBack(err.message));
    this.worker.on('exit', (code) => fallBack(`exit ${code}`));
  }

  /** Ends the worker after closing its connection (waits at most 2 s); idempotent. */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.ready) {
      this.worker.postMessage('stop');
      Atomics.wait(this.closed, 0, 0, 2_000);
    } else {
      void this.worker.terminate().catch(() => undefined);
    }
    if (this.db.open) this.db.pragma('wal_autocheckpoint = 1000');
  }
}
