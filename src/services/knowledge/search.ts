/**
 * The knowledge store's searches (knowledge_search, and the lists the benchmark ranks alone):
 * the lexical list (BM25 over knowledge_fts), the expanded list (the query with its WordNet
 * expansions over the stemmed table), the semantic list (the exact vector scan) and their
 * reciprocal rank fusion. KnowledgeService is the store (store.ts) with these; what they weigh is
 * in ranking.ts. Decisions: docs/knowledge.md.
 */
import { ServiceError } from '../../core/errors.js';
import { digest, snippet } from '../memories.js';
import { EMBEDDING_MODEL, MODEL_LABEL } from './embedder.js';
import { EXPANSION_SOURCE } from './expansion.js';
import { KnowledgeStore, type Filters, type ItemRow, type SearchMode, type VectorMeta } from './store.js';
import { CANDIDATES, EXPANDED_WEIGHT, LEXICAL_POOL, LEXICAL_WEIGHT, MIN_SIMILARITY, QUERY_CACHE, RRF_K, SEMANTIC_WEIGHT, STOPWORDS, dot, embedQueryText, ftsQuery } from './ranking.js';

export class KnowledgeService extends KnowledgeStore {
  /** Lexical ranking: FTS5 BM25 (title weighted over tags over content), best first. */
  lexical(owner: string, workspaceId: string | undefined, query: string, filters: Filters, limit = CANDIDATES, table: 'knowledge_fts' | 'knowledge_fts_stem' = 'knowledge_fts'): string[] {
    const matchQuery = ftsQuery(query);
    if (!matchQuery) return [];
    const workspace = this.where(owner, workspaceId, filters);
    // BM25 over the index alone first (the best LEXICAL_POOL matches), then the filters on the
    // items: joining every match to its row before ranking cost ~20x at 20,000 items.
    // CROSS JOIN keeps that order of work (the planner would otherwise walk every item of the
    // owner), and the covering index answers the filters without reading whole rows.
    return this.stmt(
      `SELECT i.id FROM (SELECT rowid AS r, bm25(${table}, 4.0, 1.0, 2.0) AS s FROM ${table} WHERE ${table} MATCH ? ORDER BY s LIMIT ?) m
         CROSS JOIN knowledge_items AS i INDEXED BY knowledge_items_filters ON i.seq = m.r WHERE ${workspace.sql} ORDER BY m.s, i.seq DESC LIMIT ?`,
    )
      .pluck()
      .all(matchQuery, LEXICAL_POOL, ...workspace.params, limit) as string[];
  }

  /**
   * The expanded list: the query's words and their WordNet synonyms and derivations (expansion.ts)
   * over the Porter-stemmed table, BM25, best first. `words` are the expansion words used.
   */
  expanded(owner: string, workspaceId: string | undefined, query: string, filters: Filters, limit = CANDIDATES): { ids: string[]; words: string[] } {
    const words = this.expander.expand(query, STOPWORDS);
    // The query's own words come first, so the 64-word cap of ftsQuery never drops them.
    return { ids: this.lexical(owner, workspaceId, words.length > 0 ? `${query} ${words.join(' ')}` : query, filters, limit, 'knowledge_fts_stem'), words };
  }

  /** Semantic ranking over the vectors in memory (exact scan), best first. */
  semantic(owner: string, workspaceId: string | undefined, qv: Float32Array, filters: Filters, limit = CANDIDATES): Array<{ id: string; similarity: number }> {
    const idx = this.loadVectors().get(owner);
    if (!idx) return [];
    const now = this.now();
    const accept = (m: VectorMeta) => this.passes(workspaceId, filters, m, now);
    let hits = idx.search(qv, limit, MIN_SIMILARITY, accept);
    // Pseudo-relevance feedback (Rocchio): the query moved towards its best few hits, scanned again.
    if (this.ranking.feedback.docs > 0 && hits.length > 0) {
      const q2 = Float32Array.from(qv);
      const top = hits.slice(0, this.ranking.feedback.docs);
      for (const h of top) {
        const v = idx.vector(h.id);
        if (v) for (let i = 0; i < q2.length; i++) q2[i]! += (this.ranking.feedback.weight / top.length) * v[i]!;
      }
      let n = 0;
      for (let i = 0; i < q2.length; i++) n += q2[i]! * q2[i]!;
      n = Math.sqrt(n) || 1;
      for (let i = 0; i < q2.length; i++) q2[i]! /= n;
      const second = idx.search(q2, limit, MIN_SIMILARITY, accept);
      // Similarity shown is still the cosine to the query itself.
      hits = second.map((h) => ({ ...h, score: dot(qv, idx.vector(h.id) ?? q2) }));
    }
    return hits.map((h) => ({ id: h.id, similarity: h.score }));
  }

  private async queryVector(query: string): Promise<Float32Array> {
    const hit = this.queryCache.get(query);
    if (hit) {
      // Least recently used goes first: a hit moves to the end.
      this.queryCache.delete(query);
      this.queryCache.set(query, hit);
      return hit;
    }
    const [v] = await this.deps.embedder.embed([embedQueryText(query)], 5_000);
    this.queryCache.set(query, v!);
    // 4,096 query vectors (8 MiB at 512 dimensions): a working set of a few hundred repeated
    // queries stays cached (the benchmark's 258 labelled queries no longer evict one another).
    if (this.queryCache.size > QUERY_CACHE) this.queryCache.delete(this.queryCache.keys().next().value!);
    return v!;
  }

  async search(
    owner: string,
    workspaceId: string | undefined,
    args: Filters & { query: string; limit: number; cursor?: string },
    force?: SearchMode,
  ) {
    this.scopeWithout(workspaceId, args.scope, 'knowledge_search');
    this.sweep();
    const filter = digest([args.query, args.kinds ?? null, args.scope ?? null, args.projectId ?? null, args.journalType ?? null, args.tags ?? null, args.tagMatch]);
    let offset = 0;
    if (args.cursor) {
      const c = this.deps.cursors.decode<{ f?: string; o?: number }>('knowledge_search', args.cursor);
      if (c.f !== filter) throw new ServiceError('INVALID_ARGUMENT', 'cursor: issued for another query or filters; repeat the same query and filters, or start without a cursor', { field: 'cursor' });
      offset = c.o ?? 0;
    }
    // The query's vector is asked of the worker first, so the lexical and expanded lists (and
    // WordNet's look-ups) run on this thread while the model embeds it.
    const vector = force !== 'lexical' && this.deps.embedder.state === 'ready' ? this.queryVector(args.query) : undefined;
    vector?.catch(() => undefined);
    const lex = force === 'semantic' ? [] : this.lexical(owner, workspaceId, args.query, args);
    const expandedList = vector && force !== 'semantic' && this.ranking.expansion ? this.expanded(owner, workspaceId, args.query, args) : undefined;
    let sem: Array<{ id: string; similarity: number }> = [];
    let mode: SearchMode = 'lexical';
    let reason: string | undefined;
    if (force !== 'lexical') {
      if (vector) {
        try {
          sem = this.semantic(owner, workspaceId, await vector, args);
          mode = force === 'semantic' ? 'semantic' : 'hybrid';
        } catch (e) {
          reason = `semantic ranking failed for this query: ${(e as Error).message}`;
        }
      } else reason = this.deps.embedder.reason;
    } else reason = 'lexical ranking requested';
    // The third list (WordNet expansion over stemmed words) in hybrid answers only.
    const exp = mode === 'hybrid' ? expandedList : undefined;
    // Reciprocal rank fusion; relevance is the fused score over the best possible one, 0-100.
    const fused = new Map<string, { score: number; lexRank?: number; semRank?: number; expRank?: number; similarity?: number }>();
    lex.forEach((id, i) => fused.set(id, { score: LEXICAL_WEIGHT / (RRF_K + i + 1), lexRank: i + 1 }));
    sem.forEach((state, i) => {
      const entry = fused.get(state.id) ?? { score: 0 };
      entry.score += SEMANTIC_WEIGHT / (RRF_K + i + 1);
      entry.semRank = i + 1;
      entry.similarity = state.similarity;
      fused.set(state.id, entry);
    });
    exp?.ids.forEach((id, i) => {
      const entry = fused.get(id) ?? { score: 0 };
      entry.score += EXPANDED_WEIGHT / (RRF_K + i + 1);
      entry.expRank = i + 1;
      fused.set(id, entry);
    });
    const best = ((mode === 'semantic' ? 0 : LEXICAL_WEIGHT) + (mode === 'lexical' ? 0 : SEMANTIC_WEIGHT) + (exp ? EXPANDED_WEIGHT : 0)) / (RRF_K + 1);
    const ranked = [...fused.entries()].sort((x, y) => y[1].score - x[1].score || (x[0] < y[0] ? -1 : 1));
    const page = ranked.slice(offset, offset + args.limit);
    const rows = new Map<string, ItemRow>();
    if (page.length > 0) {
      const got = this.stmt(`SELECT * FROM knowledge_items WHERE id IN (${page.map(() => '?').join(',')})`).all(...(page.map((p) => p[0]) as unknown[])) as ItemRow[];
      for (const r of got) rows.set(r.id, r);
    }
    const needle = (args.query.toLowerCase().match(/[\p{L}\p{N}_]+/gu) ?? [args.query.toLowerCase()]).sort((x, y) => y.length - x.length)[0]!;
    const pending = this.pendingCount(owner);
    const next = offset + page.length;
    return {
      query: args.query,
      mode,
      ...(reason && mode !== 'hybrid' ? { modeReason: reason } : {}),
      model: { ...EMBEDDING_MODEL, label: MODEL_LABEL, state: this.deps.embedder.state },
      // Which method made the third list, and with what (absent when it did not run: lexical or
      // semantic answers).
      ...(exp
        ? {
            expansion: {
              method: 'WordNet synonyms and derivations over Porter-stemmed words',
              ...EXPANSION_SOURCE,
              state: this.expander.state,
              words: exp.words,
              ...(this.expander.state !== 'ready' ? { note: `${this.expander.reason}; the expanded list used the query's own words, stemmed` } : {}),
            },
          }
        : {}),
      notYetEmbedded: pending,
      // Items waiting for a vector of this model (new, changed, or embedded by an older model or
      // recipe and being re-embedded in the background) are still found, lexically only: said here
      // and on each such hit (embedded: false, matchedBy without semantic).
      ...(pending > 0 && mode !== 'lexical'
        ? { notYetEmbeddedNote: `${pending} item(s) have no vector of ${MODEL_LABEL} yet (being embedded in the background); until then they are ranked lexically only` }
        : {}),
      results: page
        .filter(([id]) => rows.has(id))
        .map(([id, s], i) => {
          const item = rows.get(id)!;
          return {
            ...this.describe(item, false),
            rank: offset + i + 1,
            relevance: Math.max(1, Math.min(100, Math.round((100 * s.score) / best))),
            matchedBy: [...(s.lexRank ? ['lexical'] : []), ...(s.semRank ? ['semantic'] : []), ...(s.expRank ? ['expanded'] : [])],
            ...(s.lexRank ? { lexicalRank: s.lexRank } : {}),
            ...(s.expRank ? { expandedRank: s.expRank } : {}),
            ...(s.semRank ? { semanticRank: s.semRank, similarity: Math.round(s.similarity! * 1000) / 1000 } : {}),
            snippet: snippet(item.content, needle),
          };
        }),
      count: page.length,
      total: ranked.length,
      nextCursor: next < ranked.length ? this.deps.cursors.encode('knowledge_search', { f: filter, o: next }) : null,
    };
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type KnowledgeSearchResult = Awaited<ReturnType<KnowledgeService['search']>>;
