/**
 * Files and code intelligence (issue #4) through the MCP v2 client on a real workspace: real
 * bubblewrap sandbox, the in-sandbox daemon, ripgrep and Universal Ctags.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@modelcontextprotocol/client';
import { call, connectV1, connectV2, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

let host: GitHost;
let svc: Service;
let c: Client;
let ws: string;

const FIXTURE: Record<string, string> = {
  ...REPO_FILES,
  '.gitignore': 'ignored/\n*.log\n',
  'src/shapes.py': 'class Shape:\n    def area(self):\n        return 0\n\n\ndef total_area(shapes):\n    return sum(s.area() for s in shapes)\n',
  'lib/geo.go': 'package geo\n\nfunc Distance(a, b float64) float64 {\n\treturn b - a\n}\n\ntype Point struct{ X, Y float64 }\n',
  'native/vec.rs': 'pub struct Vec3 { x: f64 }\n\npub fn dot_product(a: &Vec3, b: &Vec3) -> f64 { a.x * b.x }\n',
  'web/app.js': 'function renderApp(root) {\n  return root;\n}\nconst areas = [];\n',
  'docs/notes.txt': 'area is mentioned here, and areas too\n',
};

const sha = (b: Buffer | string): string => createHash('sha256').update(b).digest('hex');

async function ok(name: string, args: Record<string, unknown>): Promise<Record<string, unknown>> {
  const r = await call(c, name, { workspaceId: ws, ...args });
  if (!r.ok) throw new Error(`${name} failed: ${r.text}`);
  return r.result;
}

async function fail(name: string, args: Record<string, unknown>): Promise<{ code: string; message: string; details: Record<string, unknown> }> {
  const r = await call(c, name, { workspaceId: ws, ...args });
  if (r.ok) throw new Error(`${name} unexpectedly succeeded: ${JSON.stringify(r.result).slice(0, 300)}`);
  return r.error;
}

async function sh(command: string, timeoutMs = 30_000): Promise<{ exitCode: number | null; stdout: string; stderr: string }> {
  return (await ok('exec_run', { command, timeoutMs })) as never;
}

beforeAll(async () => {
  host = await startGitHost();
  const repoUrl = (await host.createRepo('approved/files', FIXTURE)).url;
  svc = await startWorkspaceService(host);
  c = await connectV2(svc);
  const r = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'open-files-1' });
  if (!r.ok) throw new Error(r.text);
  ws = r.result.workspaceId as string;
}, 120_000);

afterAll(async () => {
  await c?.close();
  await svc?.dispose();
  await host?.close();
});

describe('reads and writes', () => {
  it('round-trips text byte for byte, line endings and unicode included, with the SHA-256', async () => {
    const content = 'line one\r\nzwei – drei 🙂\n\ttab\rlone CR\n';
    const w = await ok('files_write', { path: 'notes/round.txt', content });
    expect(w).toMatchObject({ created: true, size: Buffer.byteLength(content), sha256: sha(content), mode: '0644' });
    const r = await ok('files_read', { path: 'notes/round.txt' });
    expect(r).toMatchObject({ encoding: 'utf-8', content, size: Buffer.byteLength(content), sha256: sha(content), eof: true, nextCursor: null });
    expect((await sh('sha256sum notes/round.txt')).stdout.split(' ')[0]).toBe(sha(content));
  });

  it('round-trips binary content as base64 and keeps the file mode on replace', async () => {
    await sh("printf 'GIF89a\\000\\001\\377\\376' > logo.bin && head -c 70000 /dev/urandom >> logo.bin && chmod 0750 logo.bin");
    const want = (await sh('sha256sum logo.bin')).stdout.split(' ')[0];
    // One call, and the same bytes through cursors in pages.
    const whole = await ok('files_read', { path: 'logo.bin', limit: 1048576 });
    expect(whole.encoding).toBe('base64');
    const bytes = Buffer.from(whole.content as string, 'base64');
    expect(sha(bytes)).toBe(want);
    expect(whole.sha256).toBe(want);
    expect(whole.mode).toBe('0750');
    const parts: Buffer[] = [];
    let cursor: string | undefined;
    let pages = 0;
    do {
      const r = await ok('files_read', { path: 'logo.bin', limit: 16384, ...(cursor ? { cursor } : {}) });
      parts.push(Buffer.from(r.content as string, r.encoding === 'base64' ? 'base64' : 'utf8'));
      cursor = (r.nextCursor as string | null) ?? undefined;
      pages++;
    } while (cursor);
    expect(pages).toBe(Math.ceil(bytes.length / 16384));
    expect(Buffer.concat(parts).equals(bytes)).toBe(true);
    // files_write keeps the mode of the file it replaces; line endings are not touched.
    await sh('printf "#!/bin/sh\\r\\necho hi\\r\\n" > run.sh && chmod 0755 run.sh');
    const w = await ok('files_write', { path: 'run.sh', content: '#!/bin/sh\r\necho bye\r\n' });
    expect(w).toMatchObject({ created: false, mode: '0755' });
    expect((await sh('stat -c %a run.sh && od -c run.sh | head -1')).stdout).toMatch(/^755\n.*\\r +\\n/);
  });

  it('a large read of hostile text reaches both official clients byte for byte (its text block written from pieces)', async () => {
    // Every ASCII character but NUL (which makes a read base64), so controls, quotes, backslashes and
    // DEL; escape sequences spelled out, JSON that looks like the answer's own, the transport's
    // stand-in prefix; over 64 KiB, so the text block only.
    const every = Array.from({ length: 0x7f }, (_, i) => String.fromCharCode(i + 1)).join('');
    const unit = `${every}\\u0000 \\" \\\\n "text":"atelier-wire-text-00" }]} ]}\n`;
    const content = unit.repeat(Math.ceil(200_000 / unit.length));
    await ok('files_write', { path: 'big/hostile.txt', content });
    const v1 = await connectV1(svc);
    try {
      for (const client of [c, v1] as unknown as Client[]) {
        const r = await client.callTool({ name: 'files_read', arguments: { workspaceId: ws, path: 'big/hostile.txt', readAll: true } });
        expect(r.structuredContent).toBeUndefined();
        const blocks = r.content as Array<{ type: string; text: string }>;
        expect(blocks).toHaveLength(1);
        const read = JSON.parse(blocks[0]!.text) as Record<string, unknown>;
        expect(read).toMatchObject({ encoding: 'utf-8', content, sha256: sha(content), complete: true });
      }
    } finally {
      await v1.close();
    }
  });

  it('1 MiB reads (the most one call returns) of hostile text and of binary, one after another, reach both official clients byte for byte', async () => {
    // Escaped from the daemon's bytes by the native addon when it is loaded (src/mcp/wire-native.ts),
    // into output memory reused from one read to the next: each read must be exactly its own file.
    const every = Array.from({ length: 0x7f }, (_, i) => String.fromCharCode(i + 1)).join('');
    const text = (every + '"'.repeat(50) + '\\'.repeat(50) + '\n').repeat(Math.ceil(1048576 / 228)).slice(0, 1048576);
    const other = text.replaceAll('"', "'").slice(0, 1000_000);
    const binary = Buffer.from(Array.from({ length: 1048576 }, (_, i) => (i * 7 + (i >> 9)) & 255));
    await ok('files_write', { path: 'big/one-mib.txt', content: text });
    await ok('files_write', { path: 'big/other.txt', content: other });
    await ok('files_write', { path: 'big/a.b64', content: binary.subarray(0, 524286).toString('base64') });
    await ok('files_write', { path: 'big/b.b64', content: binary.subarray(524286).toString('base64') });
    expect((await sh('base64 -d big/a.b64 > big/one-mib.bin && base64 -d big/b.b64 >> big/one-mib.bin')).exitCode).toBe(0);
    const v1 = await connectV1(svc);
    try {
      for (const client of [c, v1, c] as unknown as Client[]) {
        for (const [p, want] of [['big/one-mib.txt', text], ['big/one-mib.bin', binary], ['big/other.txt', other]] as const) {
          const r = await client.callTool({ name: 'files_read', arguments: { workspaceId: ws, path: p, readAll: true } });
          const read = JSON.parse((r.content as Array<{ text: string }>)[0]!.text) as Record<string, unknown>;
          if (typeof want === 'string') expect(read).toMatchObject({ encoding: 'utf-8', content: want, sha256: sha(want), complete: true });
          else {
            expect(read).toMatchObject({ encoding: 'base64', sha256: sha(want), complete: true });
            expect(Buffer.from(read.content as string, 'base64').equals(want)).toBe(true);
          }
        }
      }
    } finally {
      await v1.close();
    }
  });

  it('ranges of 64 KiB or more are read through the daemon\'s handed-off descriptor (counted in /metrics): pages still end on character boundaries, binary stays exact', async () => {
    const handoffs = async (): Promise<{ taken: number; refused: number }> => {
      const text = await (await fetch(`${svc.url}/metrics`, { headers: { authorization: `Bearer ${svc.token}` } })).text();
      const n = (outcome: string) => Number(new RegExp(`^atelier_file_handoffs_total\\{outcome="${outcome}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? NaN);
      return { taken: n('taken'), refused: n('refused') };
    };
    // Four-, three- and two-byte characters, so that a 100,001-byte page ends inside one.
    const unit = '🙂αβγ-€ handed off\n';
    const content = unit.repeat(Math.ceil(400_000 / Buffer.byteLength(unit)));
    await ok('files_write', { path: 'big/handoff.txt', content });
    await ok('files_read', { path: 'big/handoff.txt', limit: 70_000 }); // the sandbox's first read sets the handoff up
    const before = await handoffs();
    let text = '';
    let cursor: string | undefined;
    let pages = 0;
    let large = 0;
    do {
      const r = await ok('files_read', { path: 'big/handoff.txt', limit: 100_001, ...(cursor ? { cursor } : {}) });
      expect(r.encoding).toBe('utf-8');
      expect(r.length).toBeLessThanOrEqual(100_001);
      // The daemon hands off a range of 64 KiB or more (the last page here is smaller).
      if (Math.min(100_001, (r.size as number) - (r.offset as number)) >= 65_536) large++;
      text += r.content as string;
      cursor = (r.nextCursor as string | null) ?? undefined;
      pages++;
    } while (cursor);
    expect(text).toBe(content);
    expect(pages).toBeGreaterThanOrEqual(4);
    const bin = Buffer.from(Array.from({ length: 200_000 }, (_, i) => (i * 13 + (i >> 7)) & 255));
    await ok('files_write', { path: 'big/handoff.b64', content: bin.toString('base64') });
    expect((await sh('base64 -d big/handoff.b64 > big/handoff.bin')).exitCode).toBe(0);
    const b = await ok('files_read', { path: 'big/handoff.bin', offset: 1000, limit: 150_000 });
    expect(b).toMatchObject({ encoding: 'base64', offset: 1000, length: 150_000, eof: false, nextOffset: 151_000, sha256: sha(bin) });
    expect(Buffer.from(b.content as string, 'base64').equals(bin.subarray(1000, 151_000))).toBe(true);
    // Below 64 KiB the bytes still come over the daemon's socket.
    const small = await ok('files_read', { path: 'big/handoff.bin', offset: 0, limit: 1000 });
    expect(Buffer.from(small.content as string, 'base64').equals(bin.subarray(0, 1000))).toBe(true);
    const after = await handoffs();
    expect(large).toBe(4);
    expect(after.taken - before.taken).toBe(large + 1);
    expect(after.refused).toBe(before.refused);
    expect(before.refused).toBe(0);
  });

  it('pages a text file with cursors on character boundaries, and readAll reads to the end within 1 MiB', async () => {
    const unit = 'αβγ-€-🙂 line of text\n';
    const content = unit.repeat(Math.ceil(150_000 / Buffer.byteLength(unit)));
    await ok('files_write', { path: 'big/utf8.txt', content });
    let text = '';
    let cursor: string | undefined;
    let pages = 0;
    do {
      const r = await ok('files_read', { path: 'big/utf8.txt', limit: 40_001, ...(cursor ? { cursor } : {}) });
      expect(r.encoding).toBe('utf-8'); // a page never ends inside a character
      text += r.content as string;
      cursor = (r.nextCursor as string | null) ?? undefined;
      pages++;
    } while (cursor);
    expect(pages).toBeGreaterThanOrEqual(4);
    expect(text).toBe(content);

    const all = await ok('files_read', { path: 'big/utf8.txt', readAll: true });
    expect(all).toMatchObject({ complete: true, eof: true, content });
    // Larger than the 1 MiB limit: readAll returns the first 1 MiB and a cursor for the rest.
    await sh('head -c 1500000 /dev/zero | tr "\\0" "x" > big/huge.txt');
    const first = await ok('files_read', { path: 'big/huge.txt', readAll: true });
    expect(first).toMatchObject({ complete: false, length: 1048576, size: 1500000 });
    const rest = await ok('files_read', { path: 'big/huge.txt', readAll: true, cursor: first.nextCursor });
    expect(rest).toMatchObject({ complete: true, offset: 1048576, length: 1500000 - 1048576 });
  });

  it('refuses tampered, foreign and stale cursors', async () => {
    const r = await ok('files_read', { path: 'big/utf8.txt', limit: 1000 });
    const cur = r.nextCursor as string;
    expect((await fail('files_read', { path: 'big/utf8.txt', cursor: cur.slice(0, -2) + (cur.endsWith('AA') ? 'BB' : 'AA') })).code).toBe('INVALID_ARGUMENT');
    expect((await fail('files_read', { path: 'notes/round.txt', cursor: cur })).message).toMatch(/another file/);
    await sh('echo changed >> big/utf8.txt');
    const stale = await fail('files_read', { path: 'big/utf8.txt', cursor: cur });
    expect(stale.code).toBe('CONFLICT');
    expect(stale.details.currentSha256).toMatch(/^[0-9a-f]{64}$/);
  });

  it('lists a directory in pages with type, size and mode', async () => {
    await sh('mkdir -p many && for i in $(seq -w 1 25); do echo $i > many/f$i.txt; done && chmod 0644 many/f01.txt && mkdir many/sub && ln -s f01.txt many/link && mkfifo many/pipe');
    const names: string[] = [];
    let cursor: string | undefined;
    let pages = 0;
    let entries: Array<Record<string, unknown>> = [];
    do {
      const r = await ok('files_list', { path: 'many', limit: 10, ...(cursor ? { cursor } : {}) });
      expect(r.total).toBe(28);
      entries = entries.concat(r.entries as Array<Record<string, unknown>>);
      names.push(...(r.entries as Array<{ name: string }>).map((e) => e.name));
      cursor = (r.nextCursor as string | null) ?? undefined;
      pages++;
    } while (cursor);
    expect(pages).toBe(3);
    expect(names).toEqual([...names].sort());
    expect(new Set(names).size).toBe(28);
    const byName = Object.fromEntries(entries.map((e) => [e.name, e]));
    expect(byName['f01.txt']).toMatchObject({ type: 'file', size: 3, mode: '0644', path: 'many/f01.txt' });
    expect(byName.sub).toMatchObject({ type: 'directory' });
    expect(byName.link).toMatchObject({ type: 'symlink', linkTarget: 'f01.txt' });
    expect(byName.pipe).toMatchObject({ type: 'fifo' });
    // A fifo is never opened for reading (it would block): refused as not a regular file.
    expect(await fail('files_read', { path: 'many/pipe' })).toMatchObject({ code: 'PERMISSION_DENIED' });
  });

  it('guards writes, patches and deletes with expectedSha256 (CONFLICT names the current hash, nothing changes)', async () => {
    const first = await ok('files_write', { path: 'cas.txt', content: 'one\n' });
    const bad = await fail('files_write', { path: 'cas.txt', content: 'two\n', expectedSha256: sha('other') });
    expect(bad).toMatchObject({ code: 'CONFLICT', details: { currentSha256: first.sha256 } });
    expect((await ok('files_read', { path: 'cas.txt' })).content).toBe('one\n');
    const second = await ok('files_write', { path: 'cas.txt', content: 'two\n', expectedSha256: first.sha256 });
    expect((await fail('files_apply_patch', { path: 'cas.txt', oldText: 'two', newText: 'three', expectedSha256: first.sha256 })).code).toBe('CONFLICT');
    expect((await fail('files_delete', { path: 'cas.txt', expectedSha256: first.sha256 })).details.currentSha256).toBe(second.sha256);
    expect((await fail('files_write', { path: 'absent.txt', content: 'x', expectedSha256: first.sha256 })).code).toBe('CONFLICT');
    expect(await ok('files_delete', { path: 'cas.txt', expectedSha256: second.sha256 })).toMatchObject({ deleted: true, type: 'file' });
    expect((await fail('files_read', { path: 'cas.txt' })).code).toBe('NOT_FOUND');
  });

  it('applies a patch only on exactly one occurrence and says how many and where otherwise', async () => {
    await ok('files_write', { path: 'patch.txt', content: 'alpha\nbeta\nalpha\ngamma\r\ndelta\r\n' });
    const zero = await fail('files_apply_patch', { path: 'patch.txt', oldText: 'omega', newText: 'x' });
    expect(zero).toMatchObject({ code: 'FAILED_PRECONDITION', details: { matches: 0 } });
    expect(zero.message).toMatch(/occurs 0 times/);
    const two = await fail('files_apply_patch', { path: 'patch.txt', oldText: 'alpha\n', newText: 'x' });
    expect(two).toMatchObject({ code: 'FAILED_PRECONDITION', details: { matches: 2, locations: [{ line: 1 }, { line: 3 }] } });
    expect(two.message).toMatch(/occurs 2 times .*lines 1:1, 3:1/);
    const crlf = await fail('files_apply_patch', { path: 'patch.txt', oldText: 'gamma\ndelta', newText: 'x' });
    expect(crlf.message).toMatch(/CRLF/);
    const one = await ok('files_apply_patch', { path: 'patch.txt', oldText: 'beta\nalpha', newText: 'BETA\nALPHA' });
    expect(one).toMatchObject({ replacements: 1, line: 2 });
    expect((await ok('files_read', { path: 'patch.txt' })).content).toBe('alpha\nBETA\nALPHA\ngamma\r\ndelta\r\n');
    expect((await fail('files_apply_patch', { path: 'patch.txt', oldText: '', newText: 'x' })).code).toBe('INVALID_ARGUMENT');
  });

  it('writes a batch all or nothing, honours createParents, and replays an idempotency key', async () => {
    await ok('files_write', { path: 'batch/existing.txt', content: 'v1\n' });
    const conflict = await fail('files_write_batch', {
      files: [
        { path: 'batch/new/a.txt', content: 'a' },
        { path: 'batch/b.txt', content: 'b' },
        { path: 'batch/existing.txt', content: 'v2', expectedSha256: sha('not v1') },
      ],
    });
    expect(conflict.code).toBe('CONFLICT');
    expect(conflict.details).toMatchObject({ written: 0, failures: [{ index: 2, path: 'batch/existing.txt', code: 'CONFLICT' }] });
    const escape = await fail('files_write_batch', { files: [{ path: 'batch/c.txt', content: 'c' }, { path: '../outside.txt', content: 'x' }] });
    expect(escape.code).toBe('PERMISSION_DENIED');
    // Nothing of either batch exists: no file, no directory it would have created, no temporary file.
    expect((await sh('find batch | sort')).stdout).toBe('batch\nbatch/existing.txt\n');
    expect((await ok('files_read', { path: 'batch/existing.txt' })).content).toBe('v1\n');

    expect((await fail('files_write_batch', { files: [{ path: 'nope/x.txt', content: 'x' }], createParents: false })).code).toBe('NOT_FOUND');
    const args = { files: [{ path: 'batch/deep/one.txt', content: '1' }, { path: 'batch/existing.txt', content: 'v2\n', expectedSha256: sha('v1\n') }], idempotencyKey: 'batch-key-0001' };
    const done = await ok('files_write_batch', args);
    expect(done).toMatchObject({ atomic: true, written: 2 });
    const again = await ok('files_write_batch', args);
    expect(again).toMatchObject({ written: 2, replayed: true });
    expect((await fail('files_write_batch', { ...args, files: [{ path: 'batch/other.txt', content: '2' }] })).code).toBe('CONFLICT');

    const partial = await ok('files_write_batch', { atomic: false, files: [{ path: 'batch/p1.txt', content: '1' }, { path: '/etc/x', content: '2' }] });
    expect(partial).toMatchObject({ atomic: false, written: 1, failed: 1, files: [{ ok: true }, { ok: false, error: { code: 'PERMISSION_DENIED' } }] });
  });

  it('moves, deletes and makes directories', async () => {
    expect(await ok('files_mkdir', { path: 'tree/a/b' })).toMatchObject({ created: true, createdDirectories: ['tree', 'tree/a', 'tree/a/b'] });
    expect(await ok('files_mkdir', { path: 'tree/a/b' })).toMatchObject({ created: false });
    expect((await fail('files_mkdir', { path: 'tree/a/b', recursive: false })).code).toBe('FAILED_PRECONDITION');
    await ok('files_write', { path: 'tree/a/b/f.txt', content: 'f' });
    await ok('files_write', { path: 'tree/g.txt', content: 'g' });
    expect((await fail('files_move', { source: 'tree/g.txt', destination: 'tree/a/b/f.txt' })).code).toBe('CONFLICT');
    expect(await ok('files_move', { source: 'tree/g.txt', destination: 'tree/a/b/f.txt', overwrite: true })).toMatchObject({ overwritten: true });
    expect((await ok('files_read', { path: 'tree/a/b/f.txt' })).content).toBe('g');
    expect(await ok('files_move', { source: 'tree/a', destination: 'moved/a' })).toMatchObject({ type: 'directory' });
    expect((await fail('files_delete', { path: 'moved' })).message).toMatch(/not empty.*recursive/);
    expect(await ok('files_delete', { path: 'moved', recursive: true })).toMatchObject({ deleted: true, removedEntries: 4 });
    expect((await fail('files_delete', { path: '.', recursive: true })).code).toBe('PERMISSION_DENIED');
  });

  it('enforces the content and patch limits with clear errors', async () => {
    const big = await fail('files_write', { path: 'limit.txt', content: 'x'.repeat(1048577) });
    expect(big.code).toBe('INVALID_ARGUMENT');
    expect(big.message).toMatch(/content must have at most 1048576 characters/);
    const patch = await fail('files_apply_patch', { path: 'patch.txt', oldText: 'x'.repeat(262145), newText: '' });
    expect(patch.message).toMatch(/oldText must have at most 262144 characters/);
  });
});

describe('confinement', () => {
  beforeAll(async () => {
    await sh(
      'ln -s /etc/passwd pw && ln -s /proc/self/root/etc/passwd procpw && ln -s / rootdir && ln -s /proc/self/cwd cwdlink && ln -s ../../etc outdir && mkdir -p inner && ln -s ../src inner/srclink',
    );
  });

  it('refuses .., absolute paths, symlinks out of the workspace and /proc tricks, naming the path', async () => {
    // [tool, arguments, the path the refusal must name]
    const cases: Array<[string, Record<string, unknown>, string]> = [];
    for (const p of ['../etc/passwd', '/etc/passwd', 'src/../../etc/passwd', 'proc/../..', 'pw', 'procpw', 'rootdir/etc/passwd', 'outdir/passwd', 'rootdir', 'cwdlink/../etc/passwd']) {
      cases.push(['files_read', { path: p }, p], ['files_write', { path: p, content: 'owned' }, p], ['files_list', { path: p }, p]);
    }
    cases.push(
      ['grep_search', { pattern: 'root', path: 'rootdir' }, 'rootdir'],
      ['grep_search', { pattern: 'root', path: 'pw' }, 'pw'],
      ['symbols_search', { query: 'root', path: 'rootdir/etc' }, 'rootdir/etc'],
      ['symbols_references', { symbol: 'root', path: '/etc' }, '/etc'],
      ['files_move', { source: 'README.md', destination: 'rootdir/tmp/x' }, 'rootdir/tmp/x'],
      ['files_move', { source: '../etc/passwd', destination: 'stolen' }, '../etc/passwd'],
      ['files_mkdir', { path: 'rootdir/tmp/made' }, 'rootdir/tmp/made'],
      ['files_delete', { path: 'outdir/passwd' }, 'outdir/passwd'],
      ['files_apply_patch', { path: 'pw', oldText: 'root', newText: 'toor' }, 'pw'],
      ['files_write_batch', { files: [{ path: 'rootdir/tmp/x', content: 'x' }] }, 'rootdir/tmp/x'],
    );
    for (const [tool, args, named] of cases) {
      const e = await fail(tool, args);
      expect(e.code, `${tool} ${JSON.stringify(args)}: ${e.message}`).toBe('PERMISSION_DENIED');
      expect(e.message).toContain(named);
    }
    // A symlink that stays inside is followed.
    expect((await ok('files_read', { path: 'inner/srclink/index.ts' })).content).toBe(FIXTURE['src/index.ts']);
    // Nothing outside changed.
    expect((await sh('test -e /tmp/x || test -e /tmp/made || echo clean')).stdout).toBe('clean\n');
  });

  /**
   * Starts a loop in the workspace that swaps `path` between a symlink to `target` and a regular file
   * (`restore` writes it as `.good-<path>`), with atomic renames, until the returned stop() (or 30 s).
   * Async: a foreground command's background processes end with it (docs/workspaces.md).
   */
  async function swapLoop(path: string, target: string, restore: string): Promise<() => Promise<void>> {
    const stop = `.stop-${path}`;
    await sh(`rm -f ${stop}`);
    await ok('exec_run', {
      async: true,
      command: `(end=$(( $(date +%s) + 30 )); while [ ! -e ${stop} ] && [ $(date +%s) -lt $end ]; do ln -sfn ${target} .evil-${path} && mv -Tf .evil-${path} ${path}; ${restore} && mv -f .good-${path} ${path}; done; rm -f ${stop}) >/dev/null 2>&1 &`,
    });
    return async () => {
      await ok('files_write', { path: stop, content: '' });
      await sh(`for i in $(seq 1 40); do [ -e ${stop} ] || exit 0; sleep 0.25; done; exit 1`);
    };
  }

  /** One files_read during a swap: its answer checked by `check`, or a refusal; true when answered. */
  async function readDuringSwap(args: Record<string, unknown>, check: (result: Record<string, unknown>) => void): Promise<boolean> {
    const r = await call(c, 'files_read', { workspaceId: ws, ...args });
    if (r.ok) check(r.result);
    else expect(['PERMISSION_DENIED', 'NOT_FOUND']).toContain(r.error.code);
    return r.ok;
  }

  it('never returns outside content while a path is swapped between a file and a symlink (race)', async () => {
    await sh('echo "safe content" > race.txt');
    // race.txt is swapped between a regular file and a symlink to /etc/passwd.
    const stop = await swapLoop('race.txt', '/etc/passwd', 'echo "safe content" > .good-race.txt');
    let safe = 0;
    for (let i = 0; i < 100; i++) {
      if (await readDuringSwap({ path: 'race.txt' }, (r) => expect(r.content).toBe('safe content\n'))) safe++;
      if (i % 10 === 0) {
        const g = await ok('grep_search', { pattern: 'root|nobody|safe', glob: 'race.txt' });
        for (const m of g.matches as Array<{ text: string }>) expect(m.text).toBe('safe content');
      }
    }
    expect(safe).toBeLessThan(100); // the race was live
    await stop();
  }, 60_000);

  it('the same race on a range large enough to be handed off: the runner only ever reads the file the daemon opened', async () => {
    // Swapped between a 100 KB regular file and a symlink to a large host file the sandbox can see
    // (node's binary): a handed-off descriptor is always the workspace file, never the host's.
    const safe = 'safe large content\n'.repeat(6000);
    await ok('files_write', { path: 'big-race.good', content: safe });
    await sh('cp big-race.good big-race.txt');
    const stop = await swapLoop('big-race.txt', '/usr/bin/node', 'cp big-race.good .good-big-race.txt');
    let good = 0;
    for (let i = 0; i < 60; i++) {
      const answered = await readDuringSwap({ path: 'big-race.txt', limit: 100_000 }, (r) => {
        expect(r.encoding).toBe('utf-8');
        expect(r.content).toBe(safe.slice(0, 100_000));
      });
      if (answered) good++;
    }
    expect(good).toBeGreaterThan(0);
    await stop();
  }, 60_000);
});

describe('search', () => {
  beforeAll(async () => {
    await sh('mkdir -p ignored && echo "export function hiddenInIgnored() {}" > ignored/secret.ts && echo "renderApp in a log" > debug.log');
  });

  it('greps with a regex, path and glob, respects .gitignore and reports file, line, column and text', async () => {
    const r = await ok('grep_search', { pattern: 'render[A-Z]\\w+' });
    expect(r.matches).toEqual([{ file: 'web/app.js', line: 1, column: 10, text: 'function renderApp(root) {' }]);
    expect(r.truncated).toBe(false);
    const py = await ok('grep_search', { pattern: 'area', glob: '*.py' });
    expect((py.matches as Array<{ file: string }>).every((m) => m.file === 'src/shapes.py')).toBe(true);
    expect(py.count).toBe(3);
    const under = await ok('grep_search', { pattern: 'area', path: 'docs' });
    expect(under.matches).toEqual([{ file: 'docs/notes.txt', line: 1, column: 1, text: 'area is mentioned here, and areas too' }]);
    expect((await ok('grep_search', { pattern: 'hiddenInIgnored' })).count).toBe(0);
  });

  it('stops at maxResults and says the result was cut', async () => {
    const r = await ok('grep_search', { pattern: '\\d', path: 'many', maxResults: 5 });
    expect(r).toMatchObject({ count: 5, truncated: true });
  });

  it('gives INVALID_ARGUMENT with the parser message for a bad regex or glob', async () => {
    const e = await fail('grep_search', { pattern: 'foo(bar' });
    expect(e.code).toBe('INVALID_ARGUMENT');
    expect(e.message).toMatch(/regex parse error[\s\S]*unclosed group/);
    expect((await fail('grep_search', { pattern: 'x', glob: '[' })).message).toMatch(/glob/);
  });

  it('finds definitions across languages, case-insensitively, by language, and keeps the index fresh', async () => {
    const r = await ok('symbols_search', { query: 'AREA' });
    const names = (r.symbols as Array<{ name: string; language: string; kind: string; file: string; line: number }>).map((s) => `${s.name}@${s.file}:${s.line}`);
    // Exact match first, then names starting with the query, then the rest.
    expect(names).toEqual(['area@src/shapes.py:2', 'areas@web/app.js:4', 'total_area@src/shapes.py:6']);
    expect(r.symbols).toEqual(expect.arrayContaining([expect.objectContaining({ name: 'area', kind: 'member', language: 'Python', scope: 'Shape' })]));
    for (const [query, language, file] of [
      ['distance', 'go', 'lib/geo.go'],
      ['vec3', 'rust', 'native/vec.rs'],
      ['renderapp', 'javascript', 'web/app.js'],
      ['add', 'typescript', 'src/index.ts'],
      ['shape', 'python', 'src/shapes.py'],
    ]) {
      const s = await ok('symbols_search', { query, language });
      expect((s.symbols as Array<{ file: string }>)[0]?.file, `${query} in ${language}`).toBe(file);
    }
    expect((await ok('symbols_search', { query: 'distance', language: 'python' })).count).toBe(0);
    expect((await ok('symbols_search', { query: 'hiddenInIgnored' })).count).toBe(0);
    expect((await ok('symbols_search', { query: 'point', path: 'lib' })).symbols).toEqual([expect.objectContaining({ name: 'Point', kind: 'struct', file: 'lib/geo.go' })]);

    // An edit through files_write, one through a command, a new directory, and a deletion.
    await ok('files_apply_patch', { path: 'lib/geo.go', oldText: 'func Distance(', newText: 'func Manhattan(a, b float64) float64 { return a + b }\n\nfunc Distance(' });
    expect((await ok('symbols_search', { query: 'manhattan' })).symbols).toEqual([expect.objectContaining({ name: 'Manhattan', file: 'lib/geo.go', line: 3 })]);
    await sh("sed -i 's/renderApp/paintApp/' web/app.js && mkdir -p pkg/deep && printf 'def brand_new():\\n    pass\\n' > pkg/deep/mod.py");
    expect((await ok('symbols_search', { query: 'renderapp' })).count).toBe(0);
    expect((await ok('symbols_search', { query: 'paintapp' })).symbols).toEqual([expect.objectContaining({ file: 'web/app.js' })]);
    expect((await ok('symbols_search', { query: 'brand_new' })).symbols).toEqual([expect.objectContaining({ file: 'pkg/deep/mod.py', line: 1 })]);
    await ok('files_delete', { path: 'native', recursive: true });
    expect((await ok('symbols_search', { query: 'dot_product' })).count).toBe(0);
    const idx = (await ok('symbols_search', { query: 'x' })).index as { refresh: { full: boolean } };
    expect(idx.refresh.full).toBe(false); // incremental, not a rebuild
  });

  it('finds whole-word references', async () => {
    const r = await ok('symbols_references', { symbol: 'area' });
    const where = (r.references as Array<{ file: string; line: number }>).map((m) => `${m.file}:${m.line}`);
    expect(where).toEqual(['docs/notes.txt:1', 'src/shapes.py:2', 'src/shapes.py:7']);
    expect(r.references).toEqual(expect.arrayContaining([{ file: 'src/shapes.py', line: 2, column: 9, text: '    def area(self):' }]));
    const narrowed = await ok('symbols_references', { symbol: 'area', glob: '*.txt' });
    expect(narrowed.count).toBe(1);
  });
});
