/**
 * Issue #36 item 4 through the real `atelier serve` and the MCP v2 client: knowledge_* and
 * memories_* with scope owner work with no workspace open (none was ever opened, then after the
 * only workspace is closed); repository, project and workspace scopes, calls without a scope, and
 * reads or changes by id of an item of another scope still need a workspace and say so
 * (FAILED_PRECONDITION naming workspaceId). Hostile: a workspace item is not reachable by id, by
 * link, by graph root or by a list/search without scope while no workspace is given.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV2, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;
let repoUrl: string;
type R = Record<string, unknown>;

async function ok(name: string, args: R): Promise<R> {
  const r = await call(c, name, args);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
async function needsWorkspace(name: string, args: R): Promise<void> {
  const r = await call(c, name, args);
  if (r.ok) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(r.result).slice(0, 300)}`);
  expect(r.error.code, `${name} ${JSON.stringify(args)}`).toBe('FAILED_PRECONDITION');
  expect(r.error.details).toMatchObject({ field: 'workspaceId' });
  expect(r.error.message).toMatch(/workspaceId: not given and there is no active workspace/);
  expect(r.error.message).toMatch(/scope: owner/);
}

beforeAll(async () => {
  host = await startGitHost();
  repoUrl = (await host.createRepo('approved/knowledge-owner', REPO_FILES)).url;
  svc = await startWorkspaceService(host, { config: { knowledgeEmbeddings: 'off' } });
  c = await connectV2(svc);
}, 180_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('owner scope without a workspace (issue #36 item 4)', () => {
  it('knowledge_*: owner items are created, searched, listed, read, changed, linked, walked and deleted with no workspace', async () => {
    const a = await ok('knowledge_create', { scope: 'owner', title: 'Deploy freeze', content: 'No production deploys on Friday afternoons.', tags: ['ops'] });
    expect(a).toMatchObject({ scope: 'owner', created: true, workspaceId: null });
    const b = await ok('knowledge_create', { scope: 'owner', kind: 'journal', title: 'Freeze agreed', content: 'The team agreed on the Friday freeze.', idempotencyKey: 'owner-b' });
    const again = await ok('knowledge_create', { scope: 'owner', kind: 'journal', title: 'Freeze agreed', content: 'The team agreed on the Friday freeze.', idempotencyKey: 'owner-b' });
    expect(again).toMatchObject({ id: b.id, replayed: true });

    const found = await ok('knowledge_search', { query: 'friday deploys', scope: 'owner' });
    expect(found.mode).toBe('lexical');
    expect((found.results as R[]).map((r) => r.id)).toContain(a.id);
    expect(found.model).toMatchObject({ dimensions: expect.any(Number), version: expect.any(String), name: expect.any(String) });
    const listed = await ok('knowledge_list', { scope: 'owner' });
    expect((listed.items as R[]).map((r) => r.id).sort()).toEqual([a.id, b.id].sort());

    expect(await ok('knowledge_read', { id: a.id })).toMatchObject({ content: 'No production deploys on Friday afternoons.' });
    expect(await ok('knowledge_update', { id: a.id, content: 'No production deploys after Friday noon.', expectedGeneration: 1 })).toMatchObject({ generation: 2 });
    const link = await ok('knowledge_link', { sourceId: b.id, targetId: a.id, relation: 'supports' });
    const graph = await ok('knowledge_graph', { rootId: a.id, depth: 2 });
    expect(graph).toMatchObject({ nodeCount: 2, edgeCount: 1, scopes: ['owner'] });
    expect(await ok('knowledge_unlink', { linkId: link.linkId })).toMatchObject({ removed: true });
    expect(await ok('knowledge_delete', { id: b.id, expectedGeneration: 1 })).toMatchObject({ deleted: true });
  }, 60_000);

  it('code-aware search (issue #36 item 2): an identifier is found by its other forms and by its words', async () => {
    const code = await ok('knowledge_create', { scope: 'owner', title: 'Invoice sums', content: 'calculateInvoiceTotal() in src/billing.ts is the one place that adds the lines; MAX_LINE_COUNT caps them.' });
    for (const query of ['calculate_invoice_total', 'CalculateInvoiceTotal', 'calculate invoice total', 'maxLineCount', 'line count']) {
      const r = await ok('knowledge_search', { query, scope: 'owner' });
      expect((r.results as R[])[0], query).toMatchObject({ id: code.id, matchedBy: ['lexical'] });
    }
    expect(await ok('knowledge_delete', { id: code.id, expectedGeneration: 1 })).toMatchObject({ deleted: true });
  }, 60_000);

  it('knowledge_*: other scopes and calls without scope say a workspace is needed', async () => {
    await needsWorkspace('knowledge_create', { title: 't', content: 'c' }); // default scope: workspace
    await needsWorkspace('knowledge_create', { scope: 'workspace', title: 't', content: 'c' });
    await needsWorkspace('knowledge_create', { scope: 'project', projectId: 'prj_ownerTestProject0001', title: 't', content: 'c' });
    await needsWorkspace('knowledge_search', { query: 'friday' });
    await needsWorkspace('knowledge_search', { query: 'friday', scope: 'project' });
    await needsWorkspace('knowledge_list', {});
    await needsWorkspace('knowledge_list', { scope: 'workspace' });
    // Nothing was written by the refused creates.
    expect((await ok('knowledge_list', { scope: 'owner' })).count).toBe(1);
  }, 60_000);

  it('memories_*: owner notes work with no workspace; repository, workspace and unscoped calls need one', async () => {
    const w = await ok('memories_write', { scope: 'owner', name: 'style', content: 'Prefer small pull requests.', tags: ['review'] });
    expect(w).toMatchObject({ scope: 'owner', created: true, generation: 1 });
    expect(await ok('memories_read', { scope: 'owner', name: 'style' })).toMatchObject({ content: 'Prefer small pull requests.' });
    expect(await ok('memories_read', { memoryId: w.memoryId })).toMatchObject({ name: 'style' });
    expect((await ok('memories_list', { scope: 'owner' })).count).toBe(1);
    expect((await ok('memories_search', { query: 'pull requests', scope: 'owner' })).count).toBe(1);
    expect(await ok('memories_write', { scope: 'owner', name: 'style', content: 'Prefer small, reviewed pull requests.', expectedGeneration: 1 })).toMatchObject({ generation: 2 });

    await needsWorkspace('memories_write', { name: 'x', content: 'y' }); // default scope: workspace
    await needsWorkspace('memories_write', { scope: 'repository', name: 'x', content: 'y' });
    await needsWorkspace('memories_list', {});
    await needsWorkspace('memories_list', { scope: 'repository' });
    await needsWorkspace('memories_search', { query: 'pull' });
    await needsWorkspace('memories_read', { name: 'style' });
    await needsWorkspace('memories_delete', { name: 'style', scope: 'workspace', expectedGeneration: 1 });
    expect(await ok('memories_delete', { scope: 'owner', name: 'style', expectedGeneration: 2 })).toMatchObject({ deleted: true });
  }, 60_000);

  it('hostile: items of a workspace or project stay out of reach once no workspace is active', async () => {
    const open = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'owner-open-1' });
    if (!open.ok) throw new Error(open.text);
    const ws = open.result.workspaceId as string;
    // With the workspace active (no workspaceId given), every scope works as before.
    const wi = await ok('knowledge_create', { title: 'Workspace secret', content: 'Only for this workspace.' });
    expect(wi).toMatchObject({ scope: 'workspace', workspaceId: ws });
    const pi = await ok('knowledge_create', { scope: 'project', projectId: 'prj_ownerTestProject0001', title: 'Project note', content: 'Shared by the project.' });
    const oi = await ok('knowledge_create', { scope: 'owner', title: 'Owner note', content: 'Visible everywhere.' });
    await ok('knowledge_link', { sourceId: oi.id, targetId: wi.id });
    const note = await ok('memories_write', { scope: 'repository', name: 'repo-note', content: 'About this repository.' });
    expect((await ok('memories_list', {})).count).toBeGreaterThanOrEqual(1);

    const closed = await call(c, 'workspace_close', { workspaceId: ws });
    if (!closed.ok) throw new Error(closed.text);
    for (const id of [wi.id, pi.id]) {
      await needsWorkspace('knowledge_read', { id });
      await needsWorkspace('knowledge_update', { id, title: 'changed', expectedGeneration: 1 });
      await needsWorkspace('knowledge_delete', { id, expectedGeneration: 1 });
      await needsWorkspace('knowledge_graph', { rootId: id });
      await needsWorkspace('knowledge_link', { sourceId: oi.id, targetId: id, expectedGeneration: 0 });
    }
    await needsWorkspace('knowledge_unlink', { sourceId: oi.id, targetId: wi.id });
    await needsWorkspace('memories_read', { memoryId: note.memoryId });
    await needsWorkspace('memories_delete', { memoryId: note.memoryId, expectedGeneration: 1 });
    // The owner graph and owner search leave the workspace and project items out.
    const graph = await ok('knowledge_graph', { rootId: oi.id, depth: 3 });
    expect(graph).toMatchObject({ nodeCount: 1, edgeCount: 0, scopes: ['owner'] });
    const search = await ok('knowledge_search', { query: 'workspace project note secret', scope: 'owner' });
    expect((search.results as R[]).map((r) => r.id)).toEqual([oi.id]);
    // Nothing changed: with the workspace given again, the items are as they were.
    expect(await ok('knowledge_read', { id: wi.id, workspaceId: ws })).toMatchObject({ generation: 1, title: 'Workspace secret' });
    expect(await ok('knowledge_read', { id: pi.id, workspaceId: ws })).toMatchObject({ generation: 1 });
  }, 180_000);
});
