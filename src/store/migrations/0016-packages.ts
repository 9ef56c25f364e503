import type { Migration } from '../migrations.js';

/** Managed packages (services/packages): plans, resolutions, applies, releases, bindings, workspace mounts. */
export const m0016: Migration = {
  version: 16,
  name: 'managed packages',
  sql: `
    CREATE TABLE package_plans (
      id TEXT PRIMARY KEY,
      digest TEXT NOT NULL UNIQUE,
      ecosystem TEXT NOT NULL,
      name TEXT NOT NULL,
      version TEXT NOT NULL,
      scope TEXT NOT NULL,
      workspace_id TEXT,
      plan_json TEXT NOT NULL,
      build_json TEXT NOT NULL,
      approval TEXT NOT NULL,
      approval_id TEXT,
      created_at TEXT NOT NULL
    );
    CREATE TABLE package_resolutions (
      id TEXT PRIMARY KEY,
      state TEXT NOT NULL,
      plan_id TEXT,
      error_json TEXT,
      created_at TEXT NOT NULL,
      ended_at TEXT
    );
    CREATE TABLE package_applies (
      id TEXT PRIMARY KEY,
      plan_id TEXT NOT NULL UNIQUE,
      state TEXT NOT NULL,
      step TEXT,
      error_code TEXT,
      error_message TEXT,
      output_tail TEXT,
      release_id TEXT,
      binding_id TEXT,
      created_at TEXT NOT NULL,
      ended_at TEXT
    );
    CREATE TABLE package_releases (
      id TEXT PRIMARY KEY,
      digest TEXT NOT NULL UNIQUE,
      ecosystem TEXT NOT NULL,
      name TEXT NOT NULL,
      version TEXT NOT NULL,
      manifest_json TEXT NOT NULL,
      executor_image TEXT NOT NULL,
      created_at TEXT NOT NULL
    );
    CREATE TABLE package_bindings (
      id TEXT PRIMARY KEY,
      scope TEXT NOT NULL,
      workspace_id TEXT NOT NULL DEFAULT '',
      ecosystem TEXT NOT NULL,
      name TEXT NOT NULL,
      release_id TEXT NOT NULL,
      generation INTEGER NOT NULL,
      created_at TEXT NOT NULL,
      updated_at TEXT NOT NULL,
      UNIQUE (scope, workspace_id, ecosystem, name)
    );
    CREATE TABLE package_binding_history (
      binding_id TEXT NOT NULL,
      release_id TEXT NOT NULL,
      bound_at TEXT NOT NULL,
      PRIMARY KEY (binding_id, release_id)
    );
    CREATE TABLE workspace_package_mounts (
      workspace_id TEXT NOT NULL,
      ecosystem TEXT NOT NULL,
      name TEXT NOT NULL,
      release_id TEXT NOT NULL,
      PRIMARY KEY (workspace_id, ecosystem, name)
    );
  `,
};
