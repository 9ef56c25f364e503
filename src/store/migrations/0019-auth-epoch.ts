import type { Migration } from '../migrations.js';

/**
 * A counter of changes to what token verification reads (services/access/token-cache.ts): every insert,
 * update and delete on api_tokens, oauth_clients, oauth_grants and oauth_tokens moves it, by any
 * connection (the service, the CLI, a future process). The cache of verified tokens keeps its
 * entries while it stands still, so a tool call's own writes (its audit entry) no longer empty the
 * cache and send the next request back to the database.
 */
const TABLES = ['api_tokens', 'oauth_clients', 'oauth_grants', 'oauth_tokens'];

export const m0019: Migration = {
  version: 19,
  name: 'auth: a change counter of the token tables, for the cache of verified tokens',
  sql: `
    CREATE TABLE auth_epoch (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL);
    INSERT INTO auth_epoch (id, n) VALUES (1, 0);
    ${TABLES.flatMap((t) =>
      ['INSERT', 'UPDATE', 'DELETE'].map((op) => `CREATE TRIGGER ${t}_auth_epoch_${op.toLowerCase()} AFTER ${op} ON ${t} BEGIN UPDATE auth_epoch SET n = n + 1 WHERE id = 1; END;`),
    ).join('\n    ')}
  `,
};
