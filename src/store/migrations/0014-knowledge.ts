import type { Migration } from '../migrations.js';

/**
 * Memory notes (services/memories), the knowledge store with its full-text index and embeddings
 * (services/knowledge) and retained artifacts with content-addressed blobs (services/artifacts).
 * Times that drive retention are epoch milliseconds (expires_at_ms, NULL = kept until deleted).
 */
export const m0014: Migration = {
  version: 14,
  name: 'memory notes, knowledge store, artifacts',
  sql: `
    CREATE TABLE memory_notes (
      id TEXT PRIMARY KEY,
      owner_id TEXT NOT NULL,
      scope TEXT NOT NULL CHECK (scope IN ('owner', 'repository', 'workspace')),
      scope_key TEXT NOT NULL,
      name TEXT NOT NULL,
      content TEXT NOT NULL,
      tags_json TEXT NOT NULL DEFAULT '[]',
      generation INTEGER NOT NULL,
      retention_seconds INTEGER,
      expires_at_ms INTEGER,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL,
      UNIQUE (owner_id, scope, scope_key, name)
    );
    CREATE INDEX memory_notes_expiry ON memory_notes(expires_at_ms) WHERE expires_at_ms IS NOT NULL;

    CREATE TABLE knowledge_projects (
      id TEXT PRIMARY KEY,
      owner_id TEXT NOT NULL,
      created_at TEXT NOT NULL
    );
    CREATE TABLE knowledge_items (
      seq INTEGER PRIMARY KEY AUTOINCREMENT,
      id TEXT NOT NULL UNIQUE,
      owner_id TEXT NOT NULL,
      kind TEXT NOT NULL CHECK (kind IN ('memory', 'journal')),
      scope TEXT NOT NULL CHECK (scope IN ('owner', 'project', 'workspace')),
      workspace_id TEXT,
      project_id TEXT,
      title TEXT NOT NULL,
      content TEXT NOT NULL,
      journal_type TEXT,
      occurred_at INTEGER,
      tags_json TEXT NOT NULL DEFAULT '[]',
      generation INTEGER NOT NULL,
      retention_seconds INTEGER,
      expires_at_ms INTEGER,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL,
      deleted_at TEXT,
      deleted_reason TEXT,
      embed_text_sha TEXT NOT NULL,
      embedding BLOB,
      embedding_model TEXT,
      embedding_sha TEXT
    );
    CREATE INDEX knowledge_items_live ON knowledge_items(deleted_at, seq);
    CREATE INDEX knowledge_items_owner ON knowledge_items(owner_id, deleted_at);
    CREATE INDEX knowledge_items_expiry ON knowledge_items(expires_at_ms) WHERE expires_at_ms IS NOT NULL AND deleted_at IS NULL;
    CREATE VIRTUAL TABLE knowledge_fts USING fts5(title, content, tags, tokenize = 'unicode61 remove_diacritics 2');
    CREATE TABLE knowledge_links (
      id TEXT PRIMARY KEY,
      owner_id TEXT NOT NULL,
      source_id TEXT NOT NULL,
      target_id TEXT NOT NULL,
      relation TEXT NOT NULL CHECK (relation IN ('relates-to', 'references', 'supports', 'contradicts', 'supersedes')),
      generation INTEGER NOT NULL,
      created_at TEXT NOT NULL,
      deleted_at TEXT
    );
    CREATE UNIQUE INDEX knowledge_links_live ON knowledge_links(source_id, target_id, relation) WHERE deleted_at IS NULL;
    CREATE INDEX knowledge_links_target ON knowledge_links(target_id) WHERE deleted_at IS NULL;

    CREATE TABLE artifact_blobs (
      sha256 TEXT PRIMARY KEY,
      size INTEGER NOT NULL,
      created_at TEXT NOT NULL
    );
    CREATE TABLE artifacts (
      seq INTEGER PRIMARY KEY AUTOINCREMENT,
      id TEXT NOT NULL UNIQUE,
      owner_id TEXT NOT NULL,
      logical_name TEXT NOT NULL,
      sha256 TEXT NOT NULL,
      size INTEGER NOT NULL,
      generation INTEGER NOT NULL,
      retention_seconds INTEGER NOT NULL,
      expires_at_ms INTEGER NOT NULL,
      source_workspace_id TEXT,
      source_path TEXT,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL,
      UNIQUE (owner_id, logical_name)
    );
    CREATE INDEX artifacts_sha ON artifacts(sha256);
    CREATE INDEX artifacts_expiry ON artifacts(expires_at_ms);
  `,
};
