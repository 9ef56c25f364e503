import type { Migration } from '../migrations.js';

/**
 * Issue #31 items 1 and 2: what a caller sets in motion stays bound to it.
 * - agents: the access (toolsets, read-only) of whoever spawned the agent, which binds every call
 *   it proxies and every child it spawns; the token budgets carved for it from its parent (the
 *   cost part was already carved_micros).
 * - hook_activations: an activation is either for every workspace of the repository (made by the
 *   owner with full access) or for the one workspace it was made in (made by a narrowed token or
 *   OAuth grant, or by an agent). Activations made before this migration cannot say which caller
 *   made them with what access, so they are dropped: nothing repository-driven runs on a consent
 *   that may have come from a narrowed caller (re-activating is one hooks_activate call).
 */
export const m0020: Migration = {
  version: 20,
  name: 'caller binding: agent access, carved tokens, scoped hook activations',
  sql: `
    ALTER TABLE agents ADD COLUMN access_json TEXT;
    ALTER TABLE agents ADD COLUMN carved_input_tokens INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE agents ADD COLUMN carved_output_tokens INTEGER NOT NULL DEFAULT 0;
    DROP TABLE hook_activations;
    CREATE TABLE hook_activations (
      repository_url TEXT NOT NULL,
      event TEXT NOT NULL CHECK (event IN ('on_workspace_open', 'post_checkout', 'pre_commit', 'post_commit', 'manual')),
      workspace_id TEXT NOT NULL DEFAULT '',
      manifest_sha256 TEXT NOT NULL,
      activated_at TEXT NOT NULL,
      expires_at TEXT NOT NULL,
      activated_by TEXT,
      actor TEXT,
      PRIMARY KEY (repository_url, event, workspace_id)
    );
    CREATE INDEX hook_activations_workspace ON hook_activations(workspace_id) WHERE workspace_id <> '';
  `,
};
