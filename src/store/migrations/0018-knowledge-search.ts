import type { Migration } from '../migrations.js';

/**
 * Knowledge search speed (docs/knowledge.md "Search design"):
 * - a partial index holding exactly the live items without a current vector, so counting what is
 *   not yet embedded (every search answer reports it) and finding the next batch to embed no longer
 *   read every item;
 * - a covering index of the columns the visibility filters read, keyed by seq (the FTS rowid), so
 *   checking the best BM25 matches reads small index entries instead of whole rows (a row carries
 *   its content and a 2 KiB vector).
 */
export const m0018: Migration = {
  version: 18,
  name: 'knowledge: indexes of items waiting for a vector and of the search filters',
  sql: `
    CREATE INDEX knowledge_items_unembedded ON knowledge_items(owner_id, seq) WHERE deleted_at IS NULL AND embedding_sha IS NOT embed_text_sha;
    CREATE INDEX knowledge_items_filters ON knowledge_items(seq, owner_id, deleted_at, expires_at_ms, scope, workspace_id, kind, project_id, journal_type, id, tags_json);
  `,
};
