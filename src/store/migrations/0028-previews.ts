import type { Migration } from '../migrations.js';

/**
 * Preview URLs (issue #33 item 4, docs/workspaces.md "Preview URLs"): a signed, expiring,
 * revocable link on the service's origin to one port a workspace server listens on. The signing
 * key is derived from the master key; the row keeps what the signature binds (workspace, port,
 * expiry) and the owner's decisions (public consent, revocation).
 */
export const m0028: Migration = {
  version: 28,
  name: 'preview URLs',
  sql: `
    CREATE TABLE previews (
      id TEXT PRIMARY KEY,
      owner_id TEXT NOT NULL,
      workspace_id TEXT NOT NULL,
      port INTEGER NOT NULL,
      label TEXT,
      created_at TEXT NOT NULL,
      created_by TEXT NOT NULL,
      expires_at TEXT NOT NULL,
      public_state TEXT NOT NULL DEFAULT 'none' CHECK (public_state IN ('none', 'requested', 'granted')),
      public_at TEXT,
      revoked_at TEXT,
      revoked_by TEXT,
      generation INTEGER NOT NULL DEFAULT 1
    );
    CREATE INDEX previews_owner ON previews(owner_id, created_at, id);
    CREATE INDEX previews_workspace ON previews(workspace_id, revoked_at);
  `,
};
