import type { Migration } from '../migrations.js';

/**
 * Knowledge search, issue #36: the recipe of the full-text rows changed (identifiers also stand for
 * their words: src/services/knowledge/code-words.ts). The service re-indexes the rows written under
 * an older recipe at start and records the recipe here, so it happens once.
 */
export const m0024: Migration = {
  version: 24,
  name: 'knowledge: recipe of the full-text rows',
  sql: `
    CREATE TABLE knowledge_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
  `,
};
