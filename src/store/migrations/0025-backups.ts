import type { Migration } from '../migrations.js';

/**
 * Backups (issue #35 item 2, docs/operations.md): one row per backup taken, by `atelier backup`
 * or the schedule (--backup-dir), successful or not, so the dashboard shows the last one's time
 * and size and a failure is seen. services/backups owns the table.
 */
export const m0025: Migration = {
  version: 25,
  name: 'backups',
  sql: `
    CREATE TABLE backups (
      id TEXT PRIMARY KEY,
      kind TEXT NOT NULL CHECK (kind IN ('manual', 'scheduled')),
      dest TEXT NOT NULL,
      started_at TEXT NOT NULL,
      finished_at TEXT NOT NULL,
      outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'failed')),
      bytes INTEGER NOT NULL DEFAULT 0,
      files INTEGER NOT NULL DEFAULT 0,
      schema_version INTEGER,
      master_key_included INTEGER NOT NULL DEFAULT 0,
      error TEXT
    );
    CREATE INDEX backups_finished ON backups(finished_at);
  `,
};
