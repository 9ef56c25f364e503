/**
 * How the knowledge store ranks (docs/knowledge.md "Fusion"): the weights of reciprocal rank
 * fusion, the candidate pools, the similarity floor, what the model embeds for an item and a
 * query, and the full-text query built from literal text. The numbers are measured in
 * bench/knowledge.mjs. Pure: no table, no state.
 */
import { createHash } from 'node:crypto';
import { codeWords, queryWords } from './code-words.js';

/**
 * Reciprocal rank fusion: score = sum of weight / (RRF_K + rank). Tuned on the labelled queries of
 * bench/knowledge.mjs (docs/knowledge.md): a smaller constant than the customary 60 lets a first
 * place count, and the semantic list weighs more because paraphrased questions seldom share the
 * words of the note they look for, while any shared word makes a lexical hit.
 */
export const RRF_K = 10;
export const LEXICAL_WEIGHT = 1;
export const SEMANTIC_WEIGHT = 1.5;
/**
 * The third list (issue #36, session 13): the query with its WordNet expansions over the
 * Porter-stemmed full-text table, fused with this weight (chosen in bench/knowledge.mjs
 * --expansion; docs/knowledge.md "Query expansion"). Runs in hybrid answers only.
 */
export const EXPANDED_WEIGHT = 2;
/** Best BM25 matches ranked before the visibility filters apply (then CANDIDATES of them are kept). */
export const LEXICAL_POOL = 2000;
/** Candidates each ranking contributes to the fusion. */
export const CANDIDATES = 200;
/** A semantic candidate below this cosine similarity is not a match (measured in bench/knowledge.mjs). */
export const MIN_SIMILARITY = 0.2;
/**
 * How a search ranks, an option of the service (KnowledgeServiceDeps.ranking, then its `ranking`
 * field, which the benchmark changes between its runs; the service never does).
 */
export interface RankingOptions {
  /** Run the expanded list in hybrid answers (true) or answer as before it (false: bench/knowledge.mjs "hybrid-before"). */
  expansion: boolean;
  /**
   * Pseudo-relevance feedback on the semantic half (measured in bench/knowledge.mjs --tune; see
   * docs/knowledge.md "Fusion"): `docs` best hits pulled into the query with `weight`; 0 docs is off.
   */
  feedback: { docs: number; weight: number };
}
export const DEFAULT_RANKING: Readonly<RankingOptions> = Object.freeze({ expansion: true, feedback: Object.freeze({ docs: 0, weight: 0 }) });
export function dot(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * b[i]!;
  return s;
}
/** Query vectors kept (least recently used dropped first). */
export const QUERY_CACHE = 4096;
/** Characters of an item fed to the model (title, then the start of the content). */
export const EMBED_CHARS = 2000;

/** What the model embeds for an item: title, the start of the content, then its identifiers' words. */
export function embedText(title: string, content: string): string {
  const text = `${title}\n${content}`.slice(0, EMBED_CHARS);
  const words = codeWords(text);
  return words ? `${text}\n${words}` : text;
}
/** What the model embeds for a query: the query, then its identifiers' words. */
export function embedQueryText(query: string): string {
  const words = codeWords(query);
  return words ? `${query}\n${words}` : query;
}
/** Version of the full-text rows' recipe (ftsText); rows of an older one are re-indexed at start. */
export const FTS_RECIPE = '3';
/** The hash an item's vector is stored under (storeEmbedding's textSha). */
export function embeddingTextSha(title: string, content: string): string {
  return sha(embedText(title, content));
}
export function sha(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

/** FTS5 query from literal text: every word quoted (no operators), any word may match; BM25 ranks. */
export function ftsQuery(text: string): string | null {
  // Identifiers stand for their words too (fooBarBaz, foo_bar_baz: src/services/knowledge/code-words.ts).
  const words = queryWords(text);
  if (words.length === 0) return null;
  // Function words carry no topic; dropped unless the query has nothing else.
  const content = words.filter((w) => !STOPWORDS.has(w));
  return [...new Set(content.length > 0 ? content : words)].slice(0, 64).map((w) => `"${w}"`).join(' OR ');
}

/** English function words left out of the lexical query (they would tie semantic hits in the fusion). */
export const STOPWORDS = new Set(
  ('a an and are as at be been but by can could did do does doing for from had has have how i if in into is it its me my no not of on or our ' +
    'should so than that the their them then there these they this those to too us was we were what when where which who whom why will with would you your')
    .split(' '),
);
