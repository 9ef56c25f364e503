import type { Migration } from '../migrations.js';

/**
 * Knowledge search speed (docs/knowledge.md "Search design"): a partial index holding exactly the
 * live items without a current vector, so counting what is not yet embedded (every search answer
 * reports it) and finding the next batch to embed no longer read every item.
 */
export const m0018: Migration = {
  version: 18,
  name: 'knowledge: index of items waiting for a vector',
  sql: `
    CREATE INDEX knowledge_items_unembedded ON knowledge_items(owner_id, seq) WHERE deleted_at IS NULL AND embedding_sha IS NOT embed_text_sha;
  `,
};
