/**
 * Memory notes (issue #18 item 1) through the real `atelier serve` and the MCP v2 client: scopes
 * (a repository note seen from a second workspace on the same repository, not from another
 * repository's), compare-and-swap, idempotency keys, retention with the test's short second,
 * literal search with tag filters, pagination and bad input on every field.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;
let wsA1: string;
let wsA2: string;
let wsB: string;
/** One retention second lasts 20 ms here: 60 s of retention is 1.2 s. */
const SECOND_MS = 20;

async function ok(name: string, args: Record<string, unknown>, ws = wsA1): Promise<Record<string, unknown>> {
  const r = await call(c, name, { workspaceId: ws, ...args });
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
async function fail(name: string, args: Record<string, unknown>, ws = wsA1): Promise<{ code: string; message: string; details: Record<string, unknown> }> {
  const r = await call(c, name, { workspaceId: ws, ...args });
  if (r.ok) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(r.result).slice(0, 300)}`);
  return r.error;
}
async function open(url: string, key: string): Promise<string> {
  const r = await call(c, 'workspace_open', { repositoryUrl: url, idempotencyKey: key });
  if (!r.ok) throw new Error(r.text);
  return r.result.workspaceId as string;
}

beforeAll(async () => {
  host = await startGitHost();
  const a = (await host.createRepo('approved/mem-a', REPO_FILES)).url;
  const b = (await host.createRepo('approved/mem-b', REPO_FILES)).url;
  svc = await startWorkspaceService(host, { config: { retentionSecondMs: SECOND_MS, knowledgeEmbeddings: 'off' } });
  c = await connectV2(svc);
  wsA1 = await open(a, 'open-mem-a1');
  // The same repository named slightly differently (".git", trailing slash) is the same repository key.
  wsA2 = await open(a.endsWith('.git') ? a.slice(0, -4) : `${a}.git`, 'open-mem-a2');
  wsB = await open(b, 'open-mem-b1');
}, 180_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('memory notes', () => {
  it('writes, reads and lists a note in each scope; a repository note follows the repository', async () => {
    const w = await ok('memories_write', { scope: 'repository', name: 'build.notes', content: 'Run make test before pushing.', tags: ['build', 'ci'] });
    expect(w).toMatchObject({ scope: 'repository', name: 'build.notes', generation: 1, created: true, tags: ['build', 'ci'] });
    expect(w.memoryId).toMatch(/^mem_[A-Za-z0-9_-]{10,80}$/);
    await ok('memories_write', { scope: 'owner', name: 'style', content: 'Prefer small commits.' });
    await ok('memories_write', { name: 'scratch', content: 'workspace only' }); // default scope: workspace

    // From the second workspace on the same repository: the repository and owner notes, not the workspace one.
    const fromA2 = await ok('memories_read', { scope: 'repository', name: 'build.notes' }, wsA2);
    expect(fromA2).toMatchObject({ memoryId: w.memoryId, content: 'Run make test before pushing.', generation: 1 });
    expect((await ok('memories_read', { memoryId: w.memoryId }, wsA2)).name).toBe('build.notes');
    const listA2 = await ok('memories_list', {}, wsA2);
    expect((listA2.notes as Array<{ name: string }>).map((n) => n.name).sort()).toEqual(['build.notes', 'style']);
    expect((await fail('memories_read', { name: 'scratch' }, wsA2)).code).toBe('NOT_FOUND');

    // From another repository's workspace: the owner note only.
    const listB = await ok('memories_list', {}, wsB);
    expect((listB.notes as Array<{ name: string }>).map((n) => n.name)).toEqual(['style']);
    expect((await fail('memories_read', { memoryId: w.memoryId }, wsB)).code).toBe('NOT_FOUND');
    expect((await fail('memories_read', { scope: 'repository', name: 'build.notes' }, wsB)).code).toBe('NOT_FOUND');

    const listA1 = await ok('memories_list', { scope: 'workspace' });
    expect((listA1.notes as Array<{ name: string }>).map((n) => n.name)).toEqual(['scratch']);
    expect((await ok('memories_list', { tags: ['ci'] })).count).toBe(1);
  });

  it('compare-and-swap: 0 creates, a moved generation is CONFLICT naming the current one', async () => {
    await ok('memories_write', { name: 'cas', content: 'v1' });
    const again = await fail('memories_write', { name: 'cas', content: 'v1b' });
    expect(again.code).toBe('CONFLICT');
    expect(again.details.currentGeneration).toBe(1);
    expect(again.message).toMatch(/generation 1/);
    expect(await ok('memories_write', { name: 'cas', content: 'v2', expectedGeneration: 1 })).toMatchObject({ generation: 2, created: false });
    const stale = await fail('memories_write', { name: 'cas', content: 'v3', expectedGeneration: 1 });
    expect(stale).toMatchObject({ code: 'CONFLICT', details: { currentGeneration: 2 } });
    expect((await fail('memories_write', { name: 'nothing-here', content: 'x', expectedGeneration: 3 })).details.currentGeneration).toBe(0);
    expect((await ok('memories_read', { name: 'cas' })).content).toBe('v2');

    const del = await fail('memories_delete', { name: 'cas' }); // default expectedGeneration 1
    expect(del).toMatchObject({ code: 'CONFLICT', details: { currentGeneration: 2 } });
    expect(await ok('memories_delete', { name: 'cas', scope: 'workspace', expectedGeneration: 2 })).toMatchObject({ deleted: true });
    expect((await fail('memories_read', { name: 'cas' })).code).toBe('NOT_FOUND');
    expect((await fail('memories_delete', { name: 'cas', expectedGeneration: 2 })).code).toBe('NOT_FOUND');
  });

  it('replays a write with the same idempotency key and refuses the key with other input', async () => {
    const first = await ok('memories_write', { name: 'idem', content: 'once', idempotencyKey: 'mem-idem-1' });
    const second = await ok('memories_write', { name: 'idem', content: 'once', idempotencyKey: 'mem-idem-1' });
    expect(second).toMatchObject({ memoryId: first.memoryId, generation: 1, replayed: true });
    expect((await ok('memories_read', { name: 'idem' })).generation).toBe(1);
    expect((await fail('memories_write', { name: 'idem', content: 'different', idempotencyKey: 'mem-idem-1' })).code).toBe('CONFLICT');
  });

  it('searches literal text case-insensitively with tag filters, ranked and paged', async () => {
    for (let i = 0; i < 7; i++) {
      await ok('memories_write', { name: `deploy-${i}`, content: `Step ${i}: the Deploy uses (a+b)* carefully. ${'deploy '.repeat(i)}`, tags: i % 2 ? ['ops', 'odd'] : ['ops'] });
    }
    await ok('memories_write', { name: 'regex-bait', content: 'aaaa bbbb', tags: ['ops'] });
    // Literal, not a regex: "(a+b)*" matches the text itself only.
    const lit = await ok('memories_search', { query: '(A+B)*' });
    expect((lit.results as unknown[]).length).toBe(7);
    const page1 = await ok('memories_search', { query: 'DEPLOY', limit: 3 });
    const r1 = page1.results as Array<{ name: string; rank: number }>;
    // A name hit first, then denser content: deploy-6 holds the word most often.
    expect(r1[0]!.name).toBe('deploy-6');
    expect(r1.map((r) => r.rank)).toEqual([1, 2, 3]);
    expect(page1.total).toBe(7);
    const seen = new Set(r1.map((r) => r.name));
    let cursor = page1.nextCursor as string | null;
    while (cursor) {
      const p = await ok('memories_search', { query: 'DEPLOY', limit: 3, cursor });
      for (const r of p.results as Array<{ name: string }>) seen.add(r.name);
      cursor = p.nextCursor as string | null;
    }
    expect(seen.size).toBe(7);
    expect((await ok('memories_search', { query: 'deploy', tags: ['ops', 'odd'] })).total).toBe(3);
    expect((await ok('memories_search', { query: 'deploy', tags: ['odd', 'missing'], tagMatch: 'any' })).total).toBe(3);
    expect((await ok('memories_search', { query: 'deploy', tags: ['odd', 'missing'] })).total).toBe(0);
    expect((await ok('memories_search', { query: 'deploy', scope: 'owner' })).total).toBe(0);
    // A cursor from another query is refused.
    expect((await fail('memories_search', { query: 'other', limit: 3, cursor: page1.nextCursor })).code).toBe('INVALID_ARGUMENT');
    // List pagination.
    const l1 = await ok('memories_list', { limit: 4 });
    const l2 = await ok('memories_list', { limit: 4, cursor: l1.nextCursor });
    const names = [...(l1.notes as Array<{ name: string }>), ...(l2.notes as Array<{ name: string }>)].map((n) => n.name);
    expect(new Set(names).size).toBe(names.length);
  });

  it('retention: a note is gone after its retention, on read and in the background', async () => {
    await ok('memories_write', { name: 'short', content: 'soon gone', retentionSeconds: 60 });
    expect((await ok('memories_read', { name: 'short' })).retentionSeconds).toBe(60);
    await new Promise((r) => setTimeout(r, 60 * SECOND_MS + 300));
    expect((await fail('memories_read', { name: 'short' })).code).toBe('NOT_FOUND');
    expect((await ok('memories_search', { query: 'soon gone' })).total).toBe(0);
    // The name is free again: expectedGeneration 0 creates.
    expect((await ok('memories_write', { name: 'short', content: 'again' })).generation).toBe(1);
  });

  it('refuses bad input on every field', async () => {
    const bad = async (name: string, args: Record<string, unknown>, field: string) => {
      const e = await fail(name, args);
      expect(e.code, `${name} ${JSON.stringify(args)}`).toBe('INVALID_ARGUMENT');
      expect(JSON.stringify(e)).toContain(field);
    };
    await bad('memories_write', { name: 'has space', content: 'x' }, 'name');
    await bad('memories_write', { name: 'x'.repeat(121), content: 'x' }, 'name');
    await bad('memories_write', { name: '../up', content: 'x' }, 'name');
    await bad('memories_write', { name: 'ok', content: 'x'.repeat(262145) }, 'content');
    await bad('memories_write', { name: 'ok', content: 5 }, 'content');
    await bad('memories_write', { name: 'ok', content: 'x', scope: 'global' }, 'scope');
    await bad('memories_write', { name: 'ok', content: 'x', tags: ['a'.repeat(65)] }, 'tags');
    await bad('memories_write', { name: 'ok', content: 'x', tags: Array.from({ length: 51 }, (_, i) => `t${i}`) }, 'tags');
    await bad('memories_write', { name: 'ok', content: 'x', retentionSeconds: 59 }, 'retentionSeconds');
    await bad('memories_write', { name: 'ok', content: 'x', retentionSeconds: 31536001 }, 'retentionSeconds');
    await bad('memories_write', { name: 'ok', content: 'x', expectedGeneration: -1 }, 'expectedGeneration');
    await bad('memories_write', { name: 'ok', content: 'x', idempotencyKey: 'k'.repeat(257) }, 'idempotencyKey');
    await bad('memories_write', { name: 'ok', content: 'x', workspaceId: 'nope' }, 'workspaceId');
    await bad('memories_write', { name: 'ok', content: 'x', extra: 1 }, 'extra');
    await bad('memories_read', {}, 'memoryId');
    await bad('memories_read', { memoryId: 'mem_short', name: 'x' }, 'memoryId');
    await bad('memories_read', { memoryId: 'note_1234567890' }, 'memoryId');
    await bad('memories_list', { limit: 0 }, 'limit');
    await bad('memories_list', { limit: 101 }, 'limit');
    await bad('memories_list', { cursor: 'x'.repeat(257) }, 'cursor');
    await bad('memories_list', { cursor: 'forged.cursor' }, 'cursor');
    await bad('memories_search', { query: '' }, 'query');
    await bad('memories_search', { query: 'q'.repeat(513) }, 'query');
    await bad('memories_search', { query: 'q', tagMatch: 'some' }, 'tagMatch');
    await bad('memories_search', { query: 'q', limit: 51 }, 'limit');
    await bad('memories_delete', {}, 'memoryId');
    await bad('memories_delete', { memoryId: 'mem_0123456789', expectedGeneration: 1.5 }, 'expectedGeneration');
  });
});
