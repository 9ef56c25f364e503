import type { Migration } from '../migrations.js';

/**
 * Workspace checkpoints (issue #33 item 1, docs/checkpoints.md): one row per checkpoint, its
 * filesystem image at <dataDir>/checkpoints/<id>.img. source_json is what a fork from it copies
 * of the source workspace (repository, branch, head, environment, open options), kept so a fork
 * works after the source is closed. disk_bytes (blocks on the host) counts against the owner's
 * quota; expires_at_ms is the retention (swept like artifacts).
 */
export const m0027: Migration = {
  version: 27,
  name: 'checkpoints: workspace filesystem checkpoints',
  sql: `
    CREATE TABLE checkpoints (
      seq INTEGER PRIMARY KEY AUTOINCREMENT,
      id TEXT NOT NULL UNIQUE,
      owner_id TEXT NOT NULL,
      workspace_id TEXT NOT NULL,
      label TEXT NOT NULL DEFAULT '',
      source_json TEXT NOT NULL,
      size_bytes INTEGER NOT NULL,
      disk_bytes INTEGER NOT NULL,
      copy_mode TEXT NOT NULL,
      processes_frozen INTEGER NOT NULL,
      frozen_ms INTEGER NOT NULL,
      retention_seconds INTEGER NOT NULL,
      expires_at_ms INTEGER NOT NULL,
      created_at TEXT NOT NULL
    );
    CREATE INDEX checkpoints_workspace ON checkpoints(workspace_id, seq);
    CREATE INDEX checkpoints_owner ON checkpoints(owner_id, seq);
    CREATE INDEX checkpoints_expiry ON checkpoints(expires_at_ms);
  `,
};
