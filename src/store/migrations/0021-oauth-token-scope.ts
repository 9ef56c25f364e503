import type { Migration } from '../migrations.js';

/**
 * OAuth refresh narrowing (issue #31 item 4): each access and refresh token carries the scope it
 * was issued for, so a refresh that narrows the scope yields a token that is narrowed too (the
 * grant keeps what the owner approved; a token's access is the intersection of both, never wider).
 * NULL, for tokens issued before this migration, means the grant's scope.
 */
export const m0021: Migration = {
  version: 21,
  name: 'oauth: each token carries its own scope',
  sql: `
    ALTER TABLE oauth_tokens ADD COLUMN scope TEXT;
  `,
};
