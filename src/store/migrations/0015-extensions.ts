import type { Migration } from '../migrations.js';

/**
 * Repository extensions (services/extensions, issue #19): owner skills, each workspace's skill
 * configuration (skillSets, skillOverrides), hook activations by manifest digest per repository
 * and event, and the owner's deployment enrolments by target digest.
 */
export const m0015: Migration = {
  version: 15,
  name: 'repository extensions',
  sql: `
    CREATE TABLE owner_skills (
      name TEXT PRIMARY KEY,
      files_json TEXT NOT NULL,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL
    );
    CREATE TABLE extension_workspaces (
      workspace_id TEXT PRIMARY KEY,
      repository_url TEXT NOT NULL,
      skill_sets_json TEXT NOT NULL,
      skill_overrides_json TEXT NOT NULL,
      created_at TEXT NOT NULL
    );
    CREATE TABLE hook_activations (
      repository_url TEXT NOT NULL,
      event TEXT NOT NULL CHECK (event IN ('on_workspace_open', 'post_checkout', 'pre_commit', 'post_commit', 'manual')),
      manifest_sha256 TEXT NOT NULL,
      activated_at TEXT NOT NULL,
      expires_at TEXT NOT NULL,
      activated_by TEXT,
      PRIMARY KEY (repository_url, event)
    );
    CREATE TABLE deployment_enrolments (
      repository_url TEXT NOT NULL,
      target TEXT NOT NULL,
      target_sha256 TEXT NOT NULL,
      environment_id TEXT,
      allow_private INTEGER NOT NULL DEFAULT 0,
      created_at TEXT NOT NULL,
      created_by TEXT,
      PRIMARY KEY (repository_url, target)
    );
  `,
};
