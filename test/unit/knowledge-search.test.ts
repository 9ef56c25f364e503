/**
 * The pure pieces of knowledge search: the exact vector index (SIMD kernel and JavaScript loop,
 * add / replace / remove / grow / filter) and the FTS5 query built from literal text, run against a
 * real FTS5 table with hostile input.
 */
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { ftsQuery } from '../../src/services/knowledge/index.js';
import { VectorIndex, simdAvailable } from '../../src/services/knowledge/vector-index.js';

let seed = 1;
const rnd = (): number => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5;
const vec = (dim: number): Float32Array => Float32Array.from({ length: dim }, rnd);
const unit = (v: Float32Array): Float32Array => {
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return v.map((x) => x / n);
};
const dot = (a: Float32Array, b: Float32Array): number => a.reduce((s, x, i) => s + x * b[i]!, 0);

const units = new WeakMap<Float32Array, Float32Array>();
const unitOf = (v: Float32Array): Float32Array => units.get(v) ?? (units.set(v, unit(v)), units.get(v)!);

/** The reference: cosine against every vector, best first, filtered, at least minScore. */
function brute(all: Map<string, { v: Float32Array; m: number }>, q: Float32Array, n: number, min: number, accept?: (m: number) => boolean): Array<[string, number]> {
  const qu = unit(q);
  return [...all]
    .map(([id, e]) => [id, dot(qu, unitOf(e.v)), e.m] as const)
    .filter(([, s, m]) => s >= min && (!accept || accept(m)))
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([id, s]) => [id, s]);
}

describe.each([
  ['SIMD kernel', true],
  ['JavaScript loop', false],
])('VectorIndex (%s)', (_name, simd) => {
  it('finds the same best rows as a brute-force scan, through growth, replacement and removal', () => {
    const dim = 64;
    const idx = new VectorIndex<number>(dim, { simd });
    if (simd) expect(idx.usesSimd).toBe(simdAvailable());
    else expect(idx.usesSimd).toBe(false);
    const all = new Map<string, { v: Float32Array; m: number }>();
    for (let i = 0; i < 300; i++) {
      const v = vec(dim);
      idx.upsert(`id${i}`, v, i);
      all.set(`id${i}`, { v, m: i });
    }
    expect(idx.size).toBe(300); // grew past the initial 16
    for (let i = 0; i < 300; i += 3) {
      expect(idx.remove(`id${i}`)).toBe(true);
      all.delete(`id${i}`);
    }
    expect(idx.remove('id0')).toBe(false);
    for (let i = 1; i < 300; i += 7) {
      const v = vec(dim);
      idx.upsert(`id${i}`, v, -i); // replaced: vector and meta
      all.set(`id${i}`, { v, m: -i });
    }
    expect(idx.size).toBe(all.size);
    for (let k = 0; k < 10; k++) {
      const q = vec(dim);
      const got = idx.search(q, 15, -1).map((h) => [h.id, h.score] as [string, number]);
      const want = brute(all, q, 15, -1);
      expect(got.map((g) => g[0])).toEqual(want.map((w) => w[0]));
      got.forEach((g, i) => expect(g[1]).toBeCloseTo(want[i]![1], 5));
      // Filtered and floored: the filter and the floor apply before the cut to n.
      const even = (m: number): boolean => m % 2 === 0;
      expect(idx.search(q, 5, 0.05, even).map((h) => h.id)).toEqual(brute(all, q, 5, 0.05, even).map((w) => w[0]));
      for (const h of idx.search(q, 300, 0.1)) {
        expect(h.score).toBeGreaterThanOrEqual(0.1);
        expect(h.meta).toBe(all.get(h.id)!.m);
      }
    }
  });

  it('stores vectors normalised, keeps metas with their rows, and refuses a wrong dimension', () => {
    const idx = new VectorIndex<{ tag: string }>(8, { simd });
    idx.upsert('a', Float32Array.from([3, 0, 0, 0, 0, 0, 0, 4]), { tag: 'x' });
    idx.upsert('b', Float32Array.from([0, 0, 0, 0, 0, 0, 0, 2]), { tag: 'y' });
    idx.upsert('zero', new Float32Array(8), { tag: 'z' });
    expect([...idx.vector('a')!].map((x) => Math.round(x * 1e6) / 1e6)).toEqual([0.6, 0, 0, 0, 0, 0, 0, 0.8]);
    const hits = idx.search(Float32Array.from([0, 0, 0, 0, 0, 0, 0, 10]), 10, -1);
    expect(hits.map((h) => [h.id, Math.round(h.score * 1000) / 1000, h.meta.tag])).toEqual([
      ['b', 1, 'y'],
      ['a', 0.8, 'x'],
      ['zero', 0, 'z'],
    ]);
    expect(idx.setMeta('a', { tag: 'x2' })).toBe(true);
    expect(idx.setMeta('nope', { tag: '?' })).toBe(false);
    expect(idx.meta('a')).toEqual({ tag: 'x2' });
    idx.remove('b'); // the last row ('zero') moves into b's slot
    expect(idx.meta('zero')).toEqual({ tag: 'z' });
    expect(idx.search(Float32Array.from([0, 0, 0, 0, 0, 0, 0, 1]), 10, 0.5).map((h) => h.id)).toEqual(['a']);
    expect([...idx.entries()].map(([id]) => id).sort()).toEqual(['a', 'zero']);
    expect(() => idx.upsert('c', new Float32Array(7), { tag: '' })).toThrow(/7 dimensions, index has 8/);
    expect(() => idx.search(new Float32Array(9), 1, 0)).toThrow(/9 dimensions/);
    expect(idx.search(new Float32Array(8), 0, -1)).toEqual([]);
    idx.clear();
    expect(idx.size).toBe(0);
    expect(idx.search(Float32Array.from([1, 0, 0, 0, 0, 0, 0, 0]), 3, -1)).toEqual([]);
  });

  it('handles a dimension that is not a multiple of 8 (JavaScript loop) and 512-dimension model vectors', () => {
    const odd = new VectorIndex<null>(13, { simd });
    expect(odd.usesSimd).toBe(false);
    const a = vec(13);
    odd.upsert('a', a, null);
    expect(odd.search(a, 1, 0)[0]!.score).toBeCloseTo(1, 5);
    const big = new VectorIndex<null>(512, { simd });
    const vs = Array.from({ length: 50 }, () => vec(512));
    vs.forEach((v, i) => big.upsert(String(i), v, null));
    for (let i = 0; i < 50; i += 10) {
      const [best] = big.search(vs[i]!, 1, 0);
      expect(best!.id).toBe(String(i));
      expect(best!.score).toBeCloseTo(1, 5);
    }
  });
});

it('the int16 scan loses nothing: near-ties among clustered vectors rank exactly as a float brute-force scan', () => {
  const dim = 512;
  const idx = new VectorIndex<number>(dim);
  expect(idx.usesSimd).toBe(true); // Node 20 has WebAssembly SIMD: the int16 path is the one tested here
  const base = vec(dim);
  const all = new Map<string, { v: Float32Array; m: number }>();
  for (let i = 0; i < 3000; i++) {
    // Every vector close to base: scores crowd into a narrow band, finer than int8 resolution.
    const v = base.map((x) => x + rnd() * 0.02);
    idx.upsert(`r${i}`, v, i);
    all.set(`r${i}`, { v, m: i });
  }
  for (let k = 0; k < 5; k++) {
    const q = base.map((x) => x + rnd() * 0.05);
    const odd = (m: number): boolean => m % 2 === 1;
    for (const [n, min, f] of [[200, 0.2, undefined], [10, 0.9, odd], [3000, -1, undefined]] as const) {
      const got = idx.search(q, n, min, f);
      const want = brute(all, q, n, min, f);
      expect(got.map((h) => h.id)).toEqual(want.map((w) => w[0]));
      got.forEach((g, i) => expect(Math.abs(g.score - want[i]![1])).toBeLessThan(1e-6));
    }
  }
});

it('the SIMD kernel and the JavaScript loop agree to float32 precision', () => {
  const a = new VectorIndex<null>(512, { simd: true });
  const b = new VectorIndex<null>(512, { simd: false });
  for (let i = 0; i < 200; i++) {
    const v = vec(512);
    a.upsert(String(i), v, null);
    b.upsert(String(i), v, null);
  }
  const q = vec(512);
  const ra = a.search(q, 200, -1);
  const rb = new Map(b.search(q, 200, -1).map((h) => [h.id, h.score]));
  expect(ra).toHaveLength(200);
  for (const h of ra) expect(Math.abs(h.score - rb.get(h.id)!)).toBeLessThan(1e-5);
});

describe('ftsQuery (literal text to an FTS5 query)', () => {
  const db = new Database(':memory:');
  db.exec("CREATE VIRTUAL TABLE t USING fts5(title, content, tags, tokenize = 'unicode61 remove_diacritics 2')");
  const ins = db.prepare('INSERT INTO t (rowid, title, content, tags) VALUES (?, ?, ?, ?)');
  ins.run(1, 'release NEAR tagging', 'we tag and publish AND then announce', 'ops');
  ins.run(2, 'title: column filter', 'quotes "inside" and stars* and carets ^ and (parens)', '');
  ins.run(3, 'Café déjà vu', 'naïve résumé', 'unicode');
  const run = (q: string | null): number[] => (q === null ? [] : (db.prepare('SELECT rowid FROM t WHERE t MATCH ? ORDER BY rowid').pluck().all(q) as number[]));

  it('quotes every word, so FTS5 operators and syntax in the text are plain words', () => {
    expect(ftsQuery('release NEAR tagging')).toBe('"release" OR "near" OR "tagging"');
    expect(ftsQuery('a AND b OR NOT c')).toBe('"b" OR "c"'); // and/or/not are function words; a too
    expect(ftsQuery('title: "column" filter*')).toBe('"title" OR "column" OR "filter"');
    expect(ftsQuery('NEAR(x y, 3)')).toBe('"near" OR "x" OR "y" OR "3"');
    expect(ftsQuery('^start + -minus {content}: x')).toBe('"start" OR "minus" OR "content" OR "x"');
    for (const hostile of ['"', '""', '" OR "', 'NEAR(', '*', '^', ')(', 'title:', '{title content}:', "'; DROP TABLE t; --", 'AND', 'OR OR OR', '\u0000\u0001', '"a" "b']) {
      const q = ftsQuery(hostile);
      expect(() => run(q), hostile).not.toThrow();
    }
    expect(run(ftsQuery('NEAR'))).toEqual([1]);
    expect(run(ftsQuery('"inside"'))).toEqual([2]);
    expect(run(ftsQuery('stars*'))).toEqual([2]);
    expect(run(ftsQuery('AND'))).toEqual([1, 2]); // only function words: kept, as words
    expect(run(ftsQuery("'; DROP TABLE t; --"))).toEqual([]);
    expect(db.prepare('SELECT count(*) FROM t').pluck().get()).toBe(3);
  });

  it('gives null for text without a word, folds case and diacritics through the tokenizer', () => {
    for (const empty of ['', '   ', '"" ** ^^ ()', '---', '\u200b']) expect(ftsQuery(empty)).toBeNull();
    expect(run(ftsQuery('CAFE'))).toEqual([3]);
    expect(run(ftsQuery('resume naive'))).toEqual([3]);
    expect(ftsQuery('Déjà')).toBe('"déjà"');
  });

  it('bounds a huge query to 64 distinct words', () => {
    const words = Array.from({ length: 5000 }, (_, i) => `w${i}`);
    const q = ftsQuery(words.join(' ') + ' ' + 'x'.repeat(200_000))!;
    expect(q.split(' OR ')).toHaveLength(64);
    expect(() => run(q)).not.toThrow();
    expect(ftsQuery('same '.repeat(100_000))).toBe('"same"');
    expect(() => run(ftsQuery('('.repeat(10_000) + 'tag' + ')'.repeat(10_000)))).not.toThrow();
    expect(run(ftsQuery('('.repeat(10_000) + 'tag' + ')'.repeat(10_000)))).toEqual([1]);
  });
});
