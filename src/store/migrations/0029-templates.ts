import type { Migration } from '../migrations.js';

/**
 * Setup that runs once (issue #33 item 3, docs/templates.md): an environment may carry a setup
 * script (run at the first open of a repository with it) and a maintenance script (run at later
 * opens); an entry may be setup-only (injected into the setup script alone). The result of a setup
 * is a workspace template (tpl_ id): a saved workspace filesystem image per repository,
 * environment, clone request and base commit, which later opens start from.
 */
export const m0029: Migration = {
  version: 29,
  name: 'environment setup scripts and workspace templates',
  sql: `
    ALTER TABLE environments ADD COLUMN setup_script TEXT;
    ALTER TABLE environments ADD COLUMN maintenance_script TEXT;
    ALTER TABLE env_entries ADD COLUMN setup_only INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE workspace_templates (
      id TEXT PRIMARY KEY,
      repository_url TEXT NOT NULL,
      environment_id TEXT NOT NULL,
      template_key TEXT NOT NULL,
      clone_json TEXT NOT NULL,
      base_oid TEXT,
      branch TEXT,
      state TEXT NOT NULL CHECK (state IN ('building', 'ready', 'failed')),
      failure TEXT,
      size_bytes INTEGER,
      setup_ms INTEGER,
      uses INTEGER NOT NULL DEFAULT 0,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL,
      last_used_at TEXT
    );
    CREATE INDEX workspace_templates_key ON workspace_templates(template_key, state, updated_at);
    CREATE INDEX workspace_templates_env ON workspace_templates(environment_id);
  `,
};
