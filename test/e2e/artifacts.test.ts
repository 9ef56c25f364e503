/**
 * Retained artifacts (issue #18 item 4) through the real `atelier serve` and the MCP v2 client:
 * snapshots read through the workspace daemon, restore into another workspace through the
 * sandbox, chunked reads with every hash checked, dedupe and blob collection, generation guards,
 * retention, the size limit and the quota, symlinks and `..` refused, a 1 MiB and a 200 MiB
 * round trip, and bad input on every field.
 */
import { createHash } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV1, connectV2, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;
let ws1: string;
let ws2: string;
const SECOND_MS = 20;
const MiB = 1_048_576;
type R = Record<string, unknown>;

async function ok(name: string, args: R, ws = ws1, timeoutMs?: number): Promise<R> {
  const r = await call(c, name, { ...(name === 'artifacts_list' || name === 'artifacts_read' || name === 'artifacts_delete' ? {} : { workspaceId: ws }), ...args }, timeoutMs);
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}
async function fail(name: string, args: R, ws = ws1): Promise<{ code: string; message: string; details: R }> {
  const r = await call(c, name, { ...(name === 'artifacts_list' || name === 'artifacts_read' || name === 'artifacts_delete' ? {} : { workspaceId: ws }), ...args });
  if (r.ok) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(r.result).slice(0, 300)}`);
  return r.error;
}
async function sh(command: string, ws = ws1): Promise<string> {
  const r = await ok('exec_run', { command, timeoutMs: 120_000 }, ws);
  if (r.exitCode !== 0) throw new Error(`${command}: ${JSON.stringify(r).slice(0, 500)}`);
  return String(r.stdout);
}
const shaOf = async (path: string, ws = ws1) => (await sh(`sha256sum -- '${path}' | cut -d' ' -f1`, ws)).trim();
const blobCount = () => readdirSync(join(svc.dataDir, 'state/artifacts/blobs')).reduce((n, d) => n + readdirSync(join(svc.dataDir, 'state/artifacts/blobs', d)).length, 0);

/** Reads a whole artifact in chunks, checking every chunk hash, eof and the whole-file hash. */
async function readAll(artifactId: string, chunk: number): Promise<{ bytes: number; sha: string; calls: number }> {
  const whole = createHash('sha256');
  let offset = 0;
  let calls = 0;
  let size = -1;
  let sha = '';
  for (;;) {
    const r = await ok('artifacts_read', { artifactId, offset, limit: chunk });
    calls++;
    const buf = Buffer.from(String(r.content), 'base64');
    expect(r.encoding).toBe('base64');
    expect(r.length).toBe(buf.length);
    expect(createHash('sha256').update(buf).digest('hex')).toBe(r.chunkSha256);
    size = r.size as number;
    sha = r.sha256 as string;
    whole.update(buf);
    offset += buf.length;
    expect(r.eof).toBe(offset >= size);
    if (r.eof) {
      expect(r.nextOffset).toBeNull();
      break;
    }
    expect(r.nextOffset).toBe(offset);
  }
  const got = whole.digest('hex');
  expect(got).toBe(sha);
  expect(offset).toBe(size);
  return { bytes: offset, sha: got, calls };
}

beforeAll(async () => {
  host = await startGitHost();
  const a = (await host.createRepo('approved/art-a', REPO_FILES)).url;
  const b = (await host.createRepo('approved/art-b', REPO_FILES)).url;
  svc = await startWorkspaceService(host, {
    config: { retentionSecondMs: SECOND_MS, knowledgeEmbeddings: 'off', artifactMaxMb: 205, artifactQuotaMb: 215, sandboxDiskMb: 0, sandboxMemoryMb: 512 },
  });
  c = await connectV2(svc);
  for (const [url, key] of [[a, 'open-art-1'], [b, 'open-art-2']] as const) {
    const r = await call(c, 'workspace_open', { repositoryUrl: url, idempotencyKey: key });
    if (!r.ok) throw new Error(r.text);
    if (key === 'open-art-1') ws1 = r.result.workspaceId as string;
    else ws2 = r.result.workspaceId as string;
  }
}, 180_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('artifacts', () => {
  let oneId = '';
  let oneSha = '';

  it('snapshots a 1 MiB binary file, reads it in chunks with every hash checked, restores it into another workspace', async () => {
    await sh(`mkdir -p out && head -c ${MiB} /dev/urandom > out/one.bin`);
    oneSha = await shaOf('out/one.bin');
    const s = await ok('artifacts_snapshot', { path: 'out/one.bin', logicalName: 'one.bin' });
    expect(s).toMatchObject({ logicalName: 'one.bin', size: MiB, sha256: oneSha, generation: 1, retentionSeconds: 2592000, sourceWorkspaceId: ws1, sourcePath: 'out/one.bin' });
    expect(s.artifactId).toMatch(/^art_[A-Za-z0-9_-]{20,80}$/);
    oneId = s.artifactId as string;
    const r = await readAll(oneId, 300_000);
    expect(r).toMatchObject({ bytes: MiB, sha: oneSha, calls: 4 });
    // Reading at the end gives an empty last chunk; beyond it is refused.
    expect(await ok('artifacts_read', { artifactId: oneId, offset: MiB })).toMatchObject({ length: 0, eof: true });
    expect((await fail('artifacts_read', { artifactId: oneId, offset: MiB + 1 })).details.field).toBe('offset');

    const restored = await ok('artifacts_restore', { artifactId: oneId, path: 'restored/deep/one.bin' }, ws2);
    expect(restored).toMatchObject({ restored: true, sha256: oneSha, size: MiB, workspaceId: ws2 });
    expect(await shaOf('restored/deep/one.bin', ws2)).toBe(oneSha);
    expect((await sh('ls -A restored/deep', ws2)).trim()).toBe('one.bin'); // no temporary file left

    // overwrite and expectedSha256 guards.
    await sh(`echo other > restored/deep/two.txt`, ws2);
    const twoSha = await shaOf('restored/deep/two.txt', ws2);
    expect((await fail('artifacts_restore', { artifactId: oneId, path: 'restored/deep/two.txt' }, ws2)).code).toBe('CONFLICT');
    const wrong = await fail('artifacts_restore', { artifactId: oneId, path: 'restored/deep/two.txt', overwrite: true, expectedSha256: 'a'.repeat(64) }, ws2);
    expect(wrong).toMatchObject({ code: 'CONFLICT', details: { field: 'expectedSha256', currentSha256: twoSha } });
    expect(await shaOf('restored/deep/two.txt', ws2)).toBe(twoSha);
    await ok('artifacts_restore', { artifactId: oneId, path: 'restored/deep/two.txt', overwrite: true, expectedSha256: twoSha }, ws2);
    expect(await shaOf('restored/deep/two.txt', ws2)).toBe(oneSha);
    expect((await fail('artifacts_restore', { artifactId: oneId, path: 'restored/absent.bin', expectedSha256: twoSha }, ws2)).code).toBe('CONFLICT');
  }, 120_000);

  it('stores identical content once, bumps the generation on a new snapshot, guards delete, collects unreferenced blobs', async () => {
    const blobs = blobCount();
    const used = (await ok('artifacts_list', {})).usedBytes as number;
    const dup = await ok('artifacts_snapshot', { path: 'out/one.bin', logicalName: 'one-copy' });
    expect(dup).toMatchObject({ sha256: oneSha, deduplicated: true, generation: 1 });
    expect(blobCount()).toBe(blobs);
    expect((await ok('artifacts_list', {})).usedBytes).toBe(used);

    await sh('echo changed > out/one.bin');
    const v2 = await ok('artifacts_snapshot', { path: 'out/one.bin', logicalName: 'one-copy' });
    expect(v2).toMatchObject({ artifactId: dup.artifactId, generation: 2, replaced: true });
    expect(blobCount()).toBe(blobs + 1);
    const stale = await fail('artifacts_delete', { artifactId: dup.artifactId }); // default expectedGeneration 1
    expect(stale).toMatchObject({ code: 'CONFLICT', details: { currentGeneration: 2 } });
    expect(await ok('artifacts_delete', { artifactId: dup.artifactId, expectedGeneration: 2 })).toMatchObject({ deleted: true });
    expect(blobCount()).toBe(blobs); // the "changed" blob had no other reference
    expect((await fail('artifacts_read', { artifactId: dup.artifactId })).code).toBe('NOT_FOUND');
    // The 1 MiB blob is still referenced by one.bin.
    expect((await readAll(oneId, MiB)).sha).toBe(oneSha);
  }, 60_000);

  it('refuses symlinks and .. in snapshot paths, and restore paths that leave the workspace', async () => {
    await sh('ln -sf out/one.bin link.bin && ln -sfn out linkdir && ln -sfn /etc etc-link && ln -sfn /tmp tmp-link');
    for (const path of ['link.bin', 'linkdir/one.bin', 'etc-link/passwd']) {
      const e = await fail('artifacts_snapshot', { path, logicalName: 'x' });
      expect(['INVALID_ARGUMENT', 'PERMISSION_DENIED', 'NOT_FOUND'], `${path}: ${e.message}`).toContain(e.code);
      expect(e.details.field ?? 'path').toBe('path');
    }
    expect((await fail('artifacts_snapshot', { path: 'link.bin', logicalName: 'x' })).details.rule).toBe('no symlinks');
    for (const path of ['../etc/passwd', 'out/../out/one.bin', '/etc/passwd', '..']) {
      const e = await fail('artifacts_snapshot', { path, logicalName: 'x' });
      expect(e.code, path).toBe('INVALID_ARGUMENT');
      expect(e.details.field).toBe('path');
    }
    expect((await fail('artifacts_snapshot', { path: 'out', logicalName: 'x' })).code).not.toBe('OK');
    expect((await fail('artifacts_snapshot', { path: 'missing.bin', logicalName: 'x' })).code).toBe('NOT_FOUND');
    // Restore: not through a link out of the workspace, not onto a symlink, not with "..".
    expect((await fail('artifacts_restore', { artifactId: oneId, path: 'tmp-link/escape.bin' })).code).toBe('INVALID_ARGUMENT');
    expect((await fail('artifacts_restore', { artifactId: oneId, path: 'link.bin', overwrite: true })).code).toBe('INVALID_ARGUMENT');
    expect((await fail('artifacts_restore', { artifactId: oneId, path: '../escape.bin' })).code).toBe('INVALID_ARGUMENT');
    expect((await sh('ls -A /tmp')).includes('escape.bin')).toBe(false);
    expect((await sh('readlink link.bin')).trim()).toBe('out/one.bin');
  }, 60_000);

  it('round-trips a 200 MiB file (snapshot, chunked read with every hash, restore elsewhere)', async () => {
    await sh(`head -c ${200 * MiB} /dev/urandom > big.bin`);
    const bigSha = await shaOf('big.bin');
    const t0 = Date.now();
    const s = await ok('artifacts_snapshot', { path: 'big.bin', logicalName: 'big.bin' }, ws1, 300_000);
    const tSnap = Date.now() - t0;
    expect(s).toMatchObject({ size: 200 * MiB, sha256: bigSha });
    const t1 = Date.now();
    const r = await readAll(s.artifactId as string, MiB);
    const tRead = Date.now() - t1;
    expect(r).toMatchObject({ bytes: 200 * MiB, sha: bigSha, calls: 200 });
    const t2 = Date.now();
    await ok('artifacts_restore', { artifactId: s.artifactId, path: 'big-restored.bin' }, ws2, 300_000);
    const tRestore = Date.now() - t2;
    expect(await shaOf('big-restored.bin', ws2)).toBe(bigSha);
    console.log(`200 MiB: snapshot ${tSnap} ms, chunked read ${tRead} ms, restore ${tRestore} ms`);
    await sh('rm -f big-restored.bin', ws2);

    // Quota (215 MiB) and per-artifact limit (205 MiB).
    await sh(`head -c ${20 * MiB} /dev/urandom > twenty.bin && truncate -s 206M sparse.bin`);
    const q = await fail('artifacts_snapshot', { path: 'twenty.bin', logicalName: 'twenty' });
    expect(q.code).toBe('RESOURCE_EXHAUSTED');
    expect(q.message).toMatch(/quota/);
    const lim = await fail('artifacts_snapshot', { path: 'sparse.bin', logicalName: 'sparse' });
    expect(lim).toMatchObject({ code: 'FAILED_PRECONDITION', details: { field: 'path', limit: 205 * MiB } });
    expect(await ok('artifacts_delete', { artifactId: s.artifactId })).toMatchObject({ deleted: true });
    expect(await ok('artifacts_snapshot', { path: 'twenty.bin', logicalName: 'twenty' })).toMatchObject({ size: 20 * MiB });
    expect(readdirSync(join(svc.dataDir, 'state/artifacts/tmp'))).toEqual([]);
  }, 400_000);

  it('lists a page at a time and expires artifacts after their retention', async () => {
    await sh('for i in 1 2 3; do echo "file $i" > f$i.txt; done');
    const short = await ok('artifacts_snapshot', { path: 'f1.txt', logicalName: 'short-lived', retentionSeconds: 60 });
    await ok('artifacts_snapshot', { path: 'f2.txt', logicalName: 'f2' });
    await ok('artifacts_snapshot', { path: 'f3.txt', logicalName: 'f3' });
    const p1 = await ok('artifacts_list', { limit: 2 });
    const names = (p1.artifacts as R[]).map((x) => x.logicalName);
    let cur = p1.nextCursor as string | null;
    while (cur) {
      const p = await ok('artifacts_list', { limit: 2, cursor: cur });
      names.push(...(p.artifacts as R[]).map((x) => x.logicalName));
      cur = p.nextCursor as string | null;
    }
    expect(names).toEqual(['f3', 'f2', 'short-lived', 'twenty', 'one.bin']);
    const blobs = blobCount();
    await new Promise((r) => setTimeout(r, 60 * SECOND_MS + 300));
    expect((await fail('artifacts_read', { artifactId: short.artifactId })).code).toBe('NOT_FOUND');
    expect(((await ok('artifacts_list', {})).artifacts as R[]).map((x) => x.logicalName)).not.toContain('short-lived');
    expect(blobCount()).toBe(blobs - 1);
  }, 60_000);

  it('refuses bad input on every field', async () => {
    const bad = async (name: string, args: R, field: string) => {
      const e = await fail(name, args);
      expect(e.code, `${name} ${JSON.stringify(args).slice(0, 100)}`).toBe('INVALID_ARGUMENT');
      expect(JSON.stringify(e)).toContain(field);
    };
    await bad('artifacts_snapshot', { path: '', logicalName: 'x' }, 'path');
    await bad('artifacts_snapshot', { path: 'a'.repeat(1025), logicalName: 'x' }, 'path');
    await bad('artifacts_snapshot', { path: 'f2.txt', logicalName: '.hidden' }, 'logicalName');
    await bad('artifacts_snapshot', { path: 'f2.txt', logicalName: 'a/b' }, 'logicalName');
    await bad('artifacts_snapshot', { path: 'f2.txt', logicalName: 'a'.repeat(129) }, 'logicalName');
    await bad('artifacts_snapshot', { path: 'f2.txt' }, 'logicalName');
    await bad('artifacts_snapshot', { path: 'f2.txt', logicalName: 'x', retentionSeconds: 59 }, 'retentionSeconds');
    await bad('artifacts_snapshot', { path: 'f2.txt', logicalName: 'x', retentionSeconds: 2592001 }, 'retentionSeconds');
    await bad('artifacts_snapshot', { path: 'f2.txt', logicalName: 'x', workspaceId: 'ws_bad' }, 'workspaceId');
    await bad('artifacts_list', { limit: 0 }, 'limit');
    await bad('artifacts_list', { limit: 101 }, 'limit');
    await bad('artifacts_list', { cursor: 'nope.nope' }, 'cursor');
    await bad('artifacts_read', { artifactId: 'art_short' }, 'artifactId');
    await bad('artifacts_read', {}, 'artifactId');
    await bad('artifacts_read', { artifactId: oneId, offset: -1 }, 'offset');
    await bad('artifacts_read', { artifactId: oneId, limit: 0 }, 'limit');
    await bad('artifacts_read', { artifactId: oneId, limit: MiB + 1 }, 'limit');
    await bad('artifacts_restore', { artifactId: oneId }, 'path');
    await bad('artifacts_restore', { artifactId: oneId, path: 'x', overwrite: 'yes' }, 'overwrite');
    await bad('artifacts_restore', { artifactId: oneId, path: 'x', expectedSha256: 'abc' }, 'expectedSha256');
    await bad('artifacts_restore', { path: 'x' }, 'artifactId');
    await bad('artifacts_delete', { artifactId: oneId, expectedGeneration: -1 }, 'expectedGeneration');
    await bad('artifacts_delete', {}, 'artifactId');
    expect((await fail('artifacts_read', { artifactId: 'art_' + 'z'.repeat(24) })).code).toBe('NOT_FOUND');
  });

  // Last: the artifacts it makes would show in the listing test above.
  it('snapshots text and mixed files from the bytes the daemon sent, and 1 MiB chunks of two artifacts in turn reach both official clients exactly', async () => {
    // Text whose multi-byte characters straddle the 1 MiB chunk boundary, then a file whose first
    // chunk is text and whose second is binary: each chunk is written as the daemon's bytes.
    const text = Buffer.from('é漢😀 abc\n'.repeat(200_000));
    const mixed = Buffer.concat([Buffer.from('x'.repeat(MiB)), Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 13) & 255))]);
    const made: Array<[string, Buffer]> = [['out/text.txt', text], ['out/mixed.dat', mixed]];
    const ids: string[] = [];
    for (const [path, bytes] of made) {
      for (let at = 0, part = 0; at < bytes.length; at += 600_000, part++) {
        await ok('files_write', { path: `${path}.${part}.b64`, content: bytes.subarray(at, at + 600_000).toString('base64') });
      }
      await sh(`for f in $(ls ${path}.*.b64 | sort -t. -k3 -n); do base64 -d "$f"; done > ${path} && rm ${path}.*.b64`);
      const s = await ok('artifacts_snapshot', { path, logicalName: path.slice(4) });
      expect(s).toMatchObject({ size: bytes.length, sha256: createHash('sha256').update(bytes).digest('hex') });
      ids.push(s.artifactId as string);
    }
    // The chunks are read into reused memory and encoded onto the wire from it: alternate the two.
    const v1 = await connectV1(svc);
    try {
      for (const client of [c, v1, c] as unknown as Client[]) {
        for (const [i, [, bytes]] of made.entries()) {
          for (let offset = 0; offset < bytes.length; offset += MiB) {
            const r = await client.callTool({ name: 'artifacts_read', arguments: { artifactId: ids[i], offset, limit: MiB } });
            const got = JSON.parse((r.content as Array<{ text: string }>)[0]!.text) as R;
            const want = bytes.subarray(offset, offset + MiB);
            expect(Buffer.from(String(got.content), 'base64').equals(want)).toBe(true);
            expect(got.chunkSha256).toBe(createHash('sha256').update(want).digest('hex'));
          }
        }
      }
    } finally {
      await v1.close();
    }
  }, 120_000);
});
