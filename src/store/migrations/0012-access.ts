import type { Migration } from '../migrations.js';

/**
 * MCP access (issue #16): bearer tokens may be narrowed to toolsets and read-only; the runner's
 * OAuth 2.1 authorization server keeps registered clients, pending consents, one-time codes,
 * grants and hashed access/refresh tokens (never a token value).
 */
export const m0012: Migration = {
  version: 12,
  name: 'mcp access: token toolsets, oauth',
  sql: `
    ALTER TABLE api_tokens ADD COLUMN toolsets TEXT;
    ALTER TABLE api_tokens ADD COLUMN read_only INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE api_tokens ADD COLUMN allow_in_url INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE oauth_clients (
      id TEXT PRIMARY KEY,
      name TEXT NOT NULL,
      redirect_uris_json TEXT NOT NULL,
      metadata_json TEXT NOT NULL,
      secret_hash TEXT,
      created_at TEXT NOT NULL,
      last_used_at TEXT,
      revoked_at TEXT
    );
    CREATE TABLE oauth_pending (
      id_hash TEXT PRIMARY KEY,
      client_id TEXT NOT NULL,
      request_json TEXT NOT NULL,
      created_at TEXT NOT NULL,
      expires_at TEXT NOT NULL
    );
    CREATE TABLE oauth_codes (
      code_hash TEXT PRIMARY KEY,
      client_id TEXT NOT NULL,
      grant_id TEXT NOT NULL,
      redirect_uri TEXT NOT NULL,
      code_challenge TEXT NOT NULL,
      created_at TEXT NOT NULL,
      expires_at TEXT NOT NULL,
      used_at TEXT
    );
    CREATE TABLE oauth_grants (
      id TEXT PRIMARY KEY,
      client_id TEXT NOT NULL,
      scope TEXT NOT NULL,
      resource TEXT NOT NULL,
      created_at TEXT NOT NULL,
      revoked_at TEXT,
      revoked_reason TEXT
    );
    CREATE INDEX oauth_grants_client ON oauth_grants(client_id);
    CREATE TABLE oauth_tokens (
      token_hash TEXT PRIMARY KEY,
      grant_id TEXT NOT NULL,
      kind TEXT NOT NULL CHECK (kind IN ('access', 'refresh')),
      created_at TEXT NOT NULL,
      expires_at TEXT NOT NULL,
      used_at TEXT,
      revoked_at TEXT
    );
    CREATE INDEX oauth_tokens_grant ON oauth_tokens(grant_id);
  `,
};
