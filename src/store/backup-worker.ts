/**
 * A backup's thread (src/store/backup.ts, started by services/instance/backups.ts): VACUUM INTO, hashing and
 * copying are synchronous, so they run here, off the service's event loop, on a connection of their own.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { BackupError, takeBackup, type BackupOptions } from './backup.js';

const o = workerData as Omit<BackupOptions, 'masterKey'> & { masterKey: Uint8Array };
try {
  const manifest = takeBackup({ ...o, masterKey: Buffer.from(o.masterKey) });
  parentPort!.postMessage({ manifest });
} catch (e) {
  parentPort!.postMessage({ error: (e as Error).message, expected: e instanceof BackupError || typeof (e as NodeJS.ErrnoException).code === 'string' });
}
