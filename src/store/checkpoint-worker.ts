/**
 * The WAL checkpointer's thread (src/store/checkpointer.ts): its own connection to the database,
 * a PASSIVE checkpoint every interval (it copies what no reader still needs back into the database
 * and fsyncs, never waiting on a writer or a reader), closed on 'stop'. It signals that it has
 * closed through the shared word, so the service's synchronous close can wait for it.
 */
import Database from 'better-sqlite3';
import { parentPort, workerData } from 'node:worker_threads';

const { file, intervalMs, closed } = workerData as { file: string; intervalMs: number; closed: Int32Array };
const db = new Database(file);
db.pragma('busy_timeout = 1000');
const tick = (): void => {
  try {
    db.pragma('wal_checkpoint(PASSIVE)');
  } catch (err) {
    parentPort!.postMessage({ error: (err as Error).message });
  }
};
const timer = setInterval(tick, intervalMs);
parentPort!.on('message', (m: unknown) => {
  if (m !== 'stop') return;
  clearInterval(timer);
  try {
    db.close();
  } finally {
    Atomics.store(closed, 0, 1);
    Atomics.notify(closed, 0);
    parentPort!.close();
  }
});
parentPort!.postMessage({ ready: true });
