/**
 * Code-aware text for knowledge search (issue #36 item 2): an identifier such as `fooBarBaz`,
 * `FooBarBaz`, `foo_bar_baz` or `FOO_BAR_BAZ` also stands for its words (foo, bar, baz) and for
 * its words run together (foobarbaz), both when an item is indexed and when a query is read, so
 * each form finds the others and the plain words find the identifier.
 *
 * FTS5's unicode61 tokenizer already splits `foo_bar_baz` at the underscores but keeps
 * `fooBarBaz` as one token `foobarbaz`; the index therefore gets, after the text, the words and
 * the joined form of every identifier in it (the stored item is unchanged: only the FTS row).
 */

/**
 * An identifier with at least two words: camelCase / PascalCase (an upper-case letter after the
 * first) or snake_case. Tested per word-character run with linear checks: the single regular
 * expression used before backtracked quadratically on a long run of lower-case letters (a
 * 100,000-letter word took about a minute), which a note's content or a query could hold.
 */
const RUN = /[A-Za-z0-9_]+/g;
const SNAKE = /^[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+$/;
const ALNUM = /^[A-Za-z][A-Za-z0-9]*$/;
/** Longer runs are not identifiers anyone writes (and would make the splitting below slow). */
const MAX_IDENTIFIER = 128;

/** The words of one identifier, lower case (`parseHTTPRequest` -> parse, http, request). */
export function identifierWords(identifier: string): string[] {
  if (identifier.length > MAX_IDENTIFIER) return [identifier.toLowerCase()];
  return identifier
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1 $2')
    .split(/[\s_]+/)
    .map((w) => w.toLowerCase())
    .filter((w) => w.length > 0);
}

/** Identifiers of several words in a text (each once, in order of first appearance). */
export function identifiers(text: string): string[] {
  const out = new Set<string>();
  for (const m of text.matchAll(RUN)) {
    // Leading digits and underscores and trailing underscores are not part of the identifier.
    const run = m[0].replace(/^[0-9_]+/, '').replace(/_+$/, '');
    if (run.length < 2 || run.length > MAX_IDENTIFIER) continue;
    const snake = run.includes('_') && SNAKE.test(run.replace(/_+/g, '_'));
    const camel = !snake && ALNUM.test(run) && /[A-Z]/.test(run.slice(1));
    if ((snake || camel) && identifierWords(run).length > 1) out.add(run);
  }
  return [...out];
}

/**
 * The extra words the FTS row carries for the identifiers of a text: each one's words and its
 * words joined (at most 2,000 identifiers, so a huge generated file cannot blow up the index).
 */
export function codeWords(text: string): string {
  const extra: string[] = [];
  for (const id of identifiers(text).slice(0, 2000)) {
    const ws = identifierWords(id);
    extra.push(...ws, ws.join(''));
  }
  return extra.join(' ');
}

/** Text as the FTS row holds it: the text, then its identifiers' words. */
export function ftsText(text: string): string {
  const extra = codeWords(text);
  return extra ? `${text}\n${extra}` : text;
}

/**
 * Query words with identifiers expanded: each identifier's words and joined form come with it
 * (`fooBarBaz` -> foobarbaz, foo, bar, baz; `foo_bar_baz` -> foo, bar, baz, foobarbaz).
 */
export function queryWords(text: string): string[] {
  const out: string[] = [];
  const raw = text.match(/[\p{L}\p{N}_]+/gu) ?? [];
  for (const token of raw) {
    const ws = identifierWords(token);
    if (ws.length > 1 && /^[A-Za-z0-9_]+$/.test(token)) {
      out.push(ws.join(''), ...ws);
    } else {
      for (const w of token.split(/_+/)) if (w) out.push(w.toLowerCase());
    }
  }
  return out;
}
