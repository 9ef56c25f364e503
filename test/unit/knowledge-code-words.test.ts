/**
 * Code-aware knowledge search (issue #36 item 2): identifiers stand for their words and for their
 * words joined, in the FTS row and in the query, so `fooBarBaz`, `foo_bar_baz`, `FooBarBaz` and
 * "foo bar baz" find one another. Run against a real FTS5 table shaped as migration 14's, through
 * the service's own ftsQuery / ftsText; plus hostile input (huge and odd identifiers).
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { ftsQuery } from '../../src/services/knowledge/index.js';
import { codeWords, ftsText, identifierWords, identifiers, queryWords } from '../../src/services/knowledge/code-words.js';

describe('identifier words', () => {
  it('splits camelCase, PascalCase, snake_case, SCREAMING_CASE and acronyms', () => {
    expect(identifierWords('fooBarBaz')).toEqual(['foo', 'bar', 'baz']);
    expect(identifierWords('FooBarBaz')).toEqual(['foo', 'bar', 'baz']);
    expect(identifierWords('foo_bar_baz')).toEqual(['foo', 'bar', 'baz']);
    expect(identifierWords('MAX_POOL_SIZE')).toEqual(['max', 'pool', 'size']);
    expect(identifierWords('parseHTTPRequest')).toEqual(['parse', 'http', 'request']);
    expect(identifierWords('sha256Sum')).toEqual(['sha256', 'sum']);
    expect(identifiers('call fooBar() then set max_pool_size; plain words stay out')).toEqual(['fooBar', 'max_pool_size']);
    expect(codeWords('no identifiers here')).toBe('');
    expect(queryWords('where is calculate_invoice_total')).toEqual(['where', 'is', 'calculateinvoicetotal', 'calculate', 'invoice', 'total']);
    expect(queryWords('calculateInvoiceTotal')).toEqual(['calculateinvoicetotal', 'calculate', 'invoice', 'total']);
  });
});

describe('FTS5 with code words', () => {
  const db = new Database(':memory:');
  db.exec("CREATE VIRTUAL TABLE knowledge_fts USING fts5(title, content, tags, tokenize = 'unicode61 remove_diacritics 2')");
  const docs = [
    [1, 'Invoices', 'calculateInvoiceTotal() in src/billing.ts sums the lines.'],
    [2, 'Pool', 'Set max_pool_size in config/database.yml.'],
    [3, 'Tokens', 'The RefreshAccessToken class renews sessions.'],
    [4, 'Unrelated', 'The total of the invoice is shown on the page.'],
  ] as const;
  for (const [id, t, c] of docs) db.prepare('INSERT INTO knowledge_fts (rowid, title, content, tags) VALUES (?, ?, ?, ?)').run(id, ftsText(t), ftsText(c), '');
  const find = (q: string): number[] => db.prepare('SELECT rowid FROM knowledge_fts WHERE knowledge_fts MATCH ? ORDER BY bm25(knowledge_fts, 4, 1, 2)').pluck().all(ftsQuery(q)!) as number[];

  it('each form of an identifier finds the others, and its words find it', () => {
    expect(find('calculate_invoice_total')[0]).toBe(1);
    expect(find('calculateInvoiceTotal')[0]).toBe(1);
    expect(find('CalculateInvoiceTotal')[0]).toBe(1);
    expect(find('calculate invoice total')).toContain(1);
    expect(find('maxPoolSize')[0]).toBe(2);
    expect(find('max pool size')[0]).toBe(2);
    expect(find('refresh_access_token')[0]).toBe(3);
    expect(find('refreshAccessToken')[0]).toBe(3);
  });

  it('hostile: huge, odd and operator-like identifiers are plain words', () => {
    const huge = Array.from({ length: 5000 }, (_, i) => `fooBar${i}Baz_qux`).join(' ');
    expect(codeWords(huge).split(' ').length).toBeLessThanOrEqual(2000 * 6);
    for (const q of ['NEAR_AND_OR', 'a_"b"_c', 'x_*_y', 'col:fooBar', '^fooBar', '(fooBar) OR bazQux', '_'.repeat(500), 'aB'.repeat(300)]) {
      const m = ftsQuery(q);
      if (m === null) continue;
      expect(() => db.prepare('SELECT rowid FROM knowledge_fts WHERE knowledge_fts MATCH ?').all(m)).not.toThrow();
      expect(m.split(' OR ').length).toBeLessThanOrEqual(64);
    }
  });
});
