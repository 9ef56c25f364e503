import type { Migration } from '../migrations.js';

/**
 * OAuth Client ID Metadata Documents (issue #32 item 1): a client whose client_id is an HTTPS URL
 * is kept as a row of oauth_clients like a registered one (its own oauthc_ id, which its grants,
 * codes and tokens name), with the URL in metadata_url and what the HTTP caching rules allow of
 * the fetched document: until when it is fresh (NULL: revalidate at every authorization request),
 * its validators (ETag, Last-Modified; NULL under no-store), its Cache-Control (a 304 without one
 * is judged by it, RFC 9111 section 4.3.4), and when it was fetched. At most one
 * live (not revoked) row per URL; revoking it ends that row, and the URL may ask again, as a new
 * client the owner must approve again.
 */
export const m0022: Migration = {
  version: 22,
  name: 'oauth: clients identified by a Client ID Metadata Document URL',
  sql: `
    ALTER TABLE oauth_clients ADD COLUMN metadata_url TEXT;
    ALTER TABLE oauth_clients ADD COLUMN doc_fresh_until TEXT;
    ALTER TABLE oauth_clients ADD COLUMN doc_etag TEXT;
    ALTER TABLE oauth_clients ADD COLUMN doc_last_modified TEXT;
    ALTER TABLE oauth_clients ADD COLUMN doc_cache_control TEXT;
    ALTER TABLE oauth_clients ADD COLUMN doc_fetched_at TEXT;
    CREATE UNIQUE INDEX oauth_clients_live_metadata_url ON oauth_clients(metadata_url) WHERE metadata_url IS NOT NULL AND revoked_at IS NULL;
  `,
};
