import type { Migration } from '../migrations.js';

/**
 * Coding subagents (issue #14): one row per agent (tree, status, pinned revision and credential,
 * budgets, lease, terminal summary). Logs live on disk under <dataDir>/state/agents/.
 */
export const m0010: Migration = {
  version: 10,
  name: 'agents',
  sql: `
    CREATE TABLE agents (
      seq INTEGER PRIMARY KEY AUTOINCREMENT,
      id TEXT NOT NULL UNIQUE,
      owner_id TEXT NOT NULL,
      principal TEXT NOT NULL,
      spawned_by TEXT NOT NULL,
      workspace_id TEXT NOT NULL,
      parent_id TEXT,
      root_id TEXT NOT NULL,
      depth INTEGER NOT NULL,
      idempotency_key TEXT NOT NULL,
      profile_id TEXT NOT NULL,
      revision INTEGER NOT NULL,
      credential_id TEXT NOT NULL,
      api_mode TEXT NOT NULL,
      model TEXT NOT NULL,
      status TEXT NOT NULL,
      prompt TEXT NOT NULL,
      proxy_ops_json TEXT NOT NULL,
      budgets_json TEXT NOT NULL,
      repository_context TEXT NOT NULL,
      lease_id TEXT,
      carved_micros INTEGER NOT NULL DEFAULT 0,
      used_json TEXT,
      log_bytes INTEGER NOT NULL DEFAULT 0,
      summary TEXT,
      end_reason TEXT,
      error_json TEXT,
      cancel_reason TEXT,
      created_at TEXT NOT NULL,
      started_at TEXT,
      ended_at TEXT,
      expires_at TEXT NOT NULL
    );
    CREATE INDEX agents_parent ON agents(parent_id, seq);
    CREATE INDEX agents_workspace ON agents(workspace_id, seq);
    CREATE INDEX agents_key ON agents(idempotency_key);
    CREATE INDEX agents_live ON agents(status) WHERE status IN ('SPAWNING', 'RUNNING', 'CANCELLING');
  `,
};
