/**
 * Issue #35 item 1: the daemon died under sustained terminal use. A terminal's output ring kept
 * 1 MiB of bytes as a list of the chunks read off the pipe: bytes bounded, chunks not. A program
 * that writes a byte at a time filled it with a million 1-byte Buffers (about 200 bytes of V8 heap
 * each) and the daemon, whose heap is capped by --max-old-space-size (bwrap/start.ts DAEMON_NODE_FLAGS),
 * died of "Reached heap limit" (SIGABRT), taking every shell and session of the workspace with it.
 * The first test drives the real terminal methods (compiled, under the daemon's own heap flags)
 * with 2,000,000 one-byte chunks, deterministically; it failed with SIGABRT before the ring became
 * one circular buffer. An exec's kept output (HeadTailCapture) had the same shape (lists of the
 * chunks read): the test after it, 1-byte chunks into a 1 MiB capture, failed with SIGABRT too.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DAEMON_NODE_FLAGS } from '../../src/sandbox/bwrap/index.js';
import { PtyRing } from '../../src/sandbox/daemon/pty.js';
import { DAEMON_DIR, assertDaemonBuilt } from './helpers.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

describe('terminal output ring', () => {
  it('a terminal fed two million 1-byte chunks keeps the daemon alive under its heap limit, and reads back its last megabyte', { timeout: 120_000 }, () => {
    assertDaemonBuilt();
    const r = spawnSync(process.execPath, [...DAEMON_NODE_FLAGS, path.join(ROOT, 'test/fixtures/pty-flood.mjs'), path.join(DAEMON_DIR, 'pty.js'), '2000000'], { encoding: 'utf8', timeout: 110_000 });
    expect(r.signal, r.stderr.slice(-2000)).toBeNull();
    expect(r.status, r.stderr.slice(-2000)).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { kept: number; droppedBytes: number; cursor: number; bytes: number; matches: boolean };
    expect(out).toMatchObject({ kept: 1024 * 1024, cursor: 2_000_000, bytes: 2_000_000, matches: true });
  });

  it("an exec's output capture of 1 MiB fed a byte at a time (a test runner's dots) stays within the daemon's heap", { timeout: 120_000 }, () => {
    assertDaemonBuilt();
    const script = `
      const { HeadTailCapture } = await import(${JSON.stringify(path.join(DAEMON_DIR, 'output.js'))});
      const caps = [new HeadTailCapture(1048576), new HeadTailCapture(1048576)];
      const N = 1500000;
      for (let i = 0; i < N; i++) {
        const b = Buffer.from(new ArrayBuffer(1)); // a new ArrayBuffer per chunk, as a pipe read delivers it
        b[0] = 46;
        for (const c of caps) c.push(b);
      }
      const t = caps[0].text();
      console.log(JSON.stringify({ total: caps[0].totalBytes, kept: caps[0].keptBytes, truncated: caps[0].truncated, head: t.startsWith('.'.repeat(524288) + '\\n[... '), tail: t.endsWith(' bytes omitted ...]\\n' + '.'.repeat(524288)) }));
    `;
    const r = spawnSync(process.execPath, [...DAEMON_NODE_FLAGS, '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 110_000 });
    expect(r.signal, r.stderr.slice(-2000)).toBeNull();
    expect(r.status, r.stderr.slice(-2000)).toBe(0);
    expect(JSON.parse(r.stdout.trim())).toEqual({ total: 1500000, kept: 1048576, truncated: true, head: true, tail: true });
  });

  it('input a terminal does not take waits at most 1 MiB in the daemon: past it, shell input is refused (RESOURCE_EXHAUSTED, field input) and nothing of it written', () => {
    const r = spawnSync(process.execPath, [...DAEMON_NODE_FLAGS, path.join(ROOT, 'test/fixtures/pty-flood.mjs'), path.join(DAEMON_DIR, 'pty.js'), '0', 'stuck-input'], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status, r.stderr.slice(-2000)).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { refusedAt: number | null; code?: string; message?: string; details?: Record<string, unknown>; pending: number };
    expect(out.refusedAt).toBe(16); // 16 inputs of 64 KiB wait; the 17th is refused
    expect(out.code).toBe('RESOURCE_EXHAUSTED');
    expect(out.message).toMatch(/^input: the terminal has not taken 1048576 bytes of earlier input/);
    expect(out.details).toMatchObject({ field: 'input', pendingBytes: 1048576, limitBytes: 1048576 });
    expect(out.pending).toBe(1048576);
  });

  it('keeps exactly the last `capacity` bytes across wrap-arounds, chunks of any size', () => {
    const ring = new PtyRing(1000);
    let all = '';
    let seed = 7;
    for (let i = 0; i < 400; i++) {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      const n = i === 200 ? 2500 : seed % 97; // one chunk bigger than the ring
      const s = Array.from({ length: n }, (_, k) => String.fromCharCode(97 + ((i + k) % 26))).join('');
      ring.push(Buffer.from(s));
      all += s;
      expect(ring.end).toBe(all.length);
      expect(ring.start).toBe(Math.max(0, all.length - 1000));
      const from = ring.start + (seed % Math.max(1, ring.end - ring.start));
      expect(ring.read(from, 300).toString()).toBe(all.slice(from, from + 300));
    }
    expect(ring.read(ring.start, 5000).toString()).toBe(all.slice(-1000));
    expect(ring.read(ring.end, 10).length).toBe(0);
  });
});
