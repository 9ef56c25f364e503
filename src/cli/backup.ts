/**
 * `atelier backup DEST [--include-master-key] [--json]`, `atelier backup verify SRC [--json]` and
 * `atelier restore SRC [--master-key-file F] [--json]` (issue #35 item 2, docs/operations.md).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ConfigError, loadConfig } from '../core/config.js';
import { createApp, loadMasterKey, type App } from '../app.js';
import { BackupError, restoreBackup, verifyBackup, type BackupManifest } from '../store/backup.js';
import { requireServiceDataDir } from './admin.js';

export const BACKUP_FLAGS = ['--include-master-key', '--json', '--master-key-file'];

const mib = (n: number) => `${(n / 1_048_576).toFixed(1)} MiB`;

function describe(m: BackupManifest): string {
  const t = m.database.tables;
  const counts = ['api_tokens', 'model_profiles', 'provider_credentials', 'repo_credentials', 'approvals', 'spend_reservations', 'memory_notes', 'knowledge_items', 'knowledge_links', 'artifacts', 'audit_log']
    .filter((k) => t[k] !== undefined)
    .map((k) => `${k} ${t[k]}`)
    .join(', ');
  return (
    `  schema version ${m.schemaVersion} (Atelier ${m.atelierVersion}), taken ${m.createdAt}\n` +
    `  ${m.files.length} files, ${mib(m.totalBytes)}; database integrity ok; rows: ${counts}\n` +
    `  master key: ${m.masterKey.included ? 'INCLUDED (keep this backup as secret as the key itself)' : `not included (fingerprint ${m.masterKey.fingerprint}): keep the key apart from the backup; a restore needs it`}\n` +
    `  workspaces: not included (${m.workspaces.records} open at the time)\n` +
    (m.skipped.length ? `  left out: ${m.skipped.map((s) => `${s.path} (${s.why})`).join('; ')}\n` : '')
  );
}

function parseKey(text: string, where: string): Buffer {
  const t = text.trim();
  const k = /^[0-9a-fA-F]{64}$/.test(t) ? Buffer.from(t, 'hex') : Buffer.from(t, 'base64');
  if (k.length !== 32) throw new ConfigError(`${where}: must hold a 32-byte master key (base64, as in <data-dir>/master.key, or 64 hex characters)`);
  return k;
}

export async function backupCommand(positional: string[], rest: Record<string, string | true>, common: string[], out: (s: string) => void): Promise<number> {
  const json = rest['--json'] === true;
  if (positional[0] === 'verify') {
    const src = positional[1];
    if (!src || positional.length > 2) throw new ConfigError('usage: atelier backup verify SRC');
    try {
      const m = verifyBackup(resolve(src));
      out(json ? JSON.stringify({ ok: true, manifest: m }) + '\n' : `backup ${resolve(src)} is complete and intact:\n${describe(m)}`);
      return 0;
    } catch (e) {
      if (e instanceof BackupError) throw new ConfigError(`backup verify: ${e.message}`, 'backup');
      throw e;
    }
  }
  const dest = positional[0];
  if (!dest || positional.length > 1) throw new ConfigError('usage: atelier backup DEST [--include-master-key] | atelier backup verify SRC');
  if (rest['--master-key-file'] !== undefined) throw new ConfigError('--master-key-file is an option of atelier restore');
  const config = loadConfig(common);
  requireServiceDataDir(config);
  const abs = resolve(dest);
  if (abs === config.dataDir || abs.startsWith(config.dataDir + '/')) throw new ConfigError(`backup: DEST ${abs} is inside the data directory ${config.dataDir}: a backup must live elsewhere`);
  if (!existsSync(join(config.dataDir, 'atelier.db'))) throw new ConfigError(`backup: no database at ${join(config.dataDir, 'atelier.db')}: is ${config.dataDir} an Atelier data directory?`);
  // Never a new key by accident: the manifest names the key that seals this instance's secrets.
  if (process.env.ATELIER_MASTER_KEY === undefined && !existsSync(join(config.dataDir, 'master.key'))) {
    throw new ConfigError(`backup: ${config.dataDir} has no master.key: the service takes its key from ATELIER_MASTER_KEY; run atelier backup with the same variable`);
  }
  const app = createApp({ ...config, logLevel: 'warn' });
  try {
    const { record, manifest } = await app.backups.run({ dest: abs, kind: 'manual', includeMasterKey: rest['--include-master-key'] === true });
    out(json ? JSON.stringify({ backup: record, manifest }) + '\n' : `backup written to ${abs} (${record.id}):\n${describe(manifest)}`);
  } finally {
    app.close();
  }
  return 0;
}

export async function restoreCommand(positional: string[], rest: Record<string, string | true>, common: string[], out: (s: string) => void): Promise<number> {
  const src = positional[0];
  if (!src || positional.length > 1) throw new ConfigError('usage: atelier restore SRC [--master-key-file FILE] (into an empty --data-dir)');
  if (rest['--include-master-key'] !== undefined) throw new ConfigError('--include-master-key is an option of atelier backup');
  const json = rest['--json'] === true;
  const config = loadConfig(common);
  let masterKey: Buffer | undefined;
  const fromEnv = process.env.ATELIER_MASTER_KEY !== undefined;
  if (typeof rest['--master-key-file'] === 'string') {
    if (fromEnv) throw new ConfigError('give the master key once: --master-key-file or ATELIER_MASTER_KEY, not both');
    const f = resolve(rest['--master-key-file']);
    if (!existsSync(f)) throw new ConfigError(`--master-key-file ${f}: no such file`);
    masterKey = parseKey(readFileSync(f, 'utf8'), `--master-key-file ${f}`);
  } else if (rest['--master-key-file'] === true) {
    throw new ConfigError('--master-key-file needs a value: the file holding the master key');
  } else if (fromEnv) {
    masterKey = loadMasterKey(config.dataDir, process.env);
  }
  let manifest: BackupManifest;
  try {
    manifest = restoreBackup({ src: resolve(src), dataDir: config.dataDir, masterKey, masterKeyFromEnv: fromEnv });
  } catch (e) {
    if (e instanceof BackupError) throw new ConfigError(`restore: ${e.message}`, 'restore');
    throw e;
  }
  // Opening it migrates a backup of an older release forward (each migration in one transaction).
  let app: App | undefined;
  try {
    app = createApp({ ...config, logLevel: 'warn' });
    const closed = app.backups.afterRestore();
    app.audit.record({ actor: 'cli', action: 'restore', target: resolve(src), outcome: 'ok', details: { schemaFrom: manifest.schemaVersion, schemaTo: app.schemaVersion, files: manifest.files.length, workspacesClosed: closed } });
    const r = { restoredFrom: resolve(src), dataDir: config.dataDir, schemaFrom: manifest.schemaVersion, schemaTo: app.schemaVersion, files: manifest.files.length, bytes: manifest.totalBytes, workspacesClosed: closed };
    out(
      json
        ? JSON.stringify(r) + '\n'
        : `restored ${resolve(src)} into ${config.dataDir}:\n${describe(manifest)}  schema ${manifest.schemaVersion} -> ${app.schemaVersion}; ${closed} workspace(s) closed (their files are not in a backup)\n` +
            `Start it with: atelier serve --data-dir ${config.dataDir}${manifest.masterKey.included || !fromEnv ? '' : ' (with the same ATELIER_MASTER_KEY)'}\n`,
    );
  } finally {
    app?.close();
  }
  return 0;
}
