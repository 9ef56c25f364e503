import type { Migration } from '../migrations.js';

/**
 * A token may start its connections in the dynamic mode (issue #45 item 2, docs/access.md
 * "Dynamic toolsets"): `atelier token create --dynamic-toolsets`.
 */
export const m0030: Migration = {
  version: 30,
  name: 'tokens that start in the dynamic mode',
  sql: `
    ALTER TABLE api_tokens ADD COLUMN dynamic_toolsets INTEGER NOT NULL DEFAULT 0;
  `,
};
