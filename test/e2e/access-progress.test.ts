/**
 * Progress notifications on a catalog refill (issue #16): model_catalog_search with a progress
 * token reports the refill from the provider's catalog (a fake catalog speaking the real wire
 * format); a fresh cache answers without a refill and without progress.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeProvider, type FakeProvider } from '../fixtures/fake-provider.js';
import { startFakeCatalog, type FakeCatalog } from '../fixtures/fake-catalog.js';
import { connectV2, startService, type Service } from './harness.js';

let fake: FakeProvider;
let cat: FakeCatalog;
let svc: Service;

beforeAll(async () => {
  fake = await startFakeProvider();
  cat = await startFakeCatalog(fake.url);
  cat.models = [{ id: 'alpha-large' }, { id: 'alpha-small' }] as never;
  const dataDir = mkdtempSync(join(tmpdir(), 'atelier-progress-'));
  writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ providers: { provider_c: { baseUrl: cat.url + '/pub/v1' } } }));
  svc = await startService({ dataDir, args: ['--unsafe-dev-no-sandbox'] });
}, 60_000);
afterAll(async () => {
  await svc?.dispose();
  await cat?.close();
  await fake?.close();
});

describe('catalog refill progress', () => {
  it('reports the refill to a call with a progress token, and nothing when the cache is fresh', async () => {
    const c = await connectV2(svc);
    const progress: Array<{ progress: number; total?: number; message?: string }> = [];
    const r = await c.callTool({ name: 'model_catalog_search', arguments: { provider: 'provider_c' } }, { onprogress: (p) => void progress.push(p) });
    expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
    expect(progress.map((p) => p.progress)).toEqual([0, 1, 2]);
    expect(progress.at(-1)!.message).toMatch(/provider_c catalog is refilled: 2 models/);
    const again: unknown[] = [];
    const r2 = await c.callTool({ name: 'model_catalog_search', arguments: { provider: 'provider_c' } }, { onprogress: (p) => void again.push(p) });
    expect(r2.isError).toBeFalsy();
    expect(again.length).toBe(0);
    await c.close();
  }, 60_000);
});
