/**
 * Interactive terminals inside the sandbox: a real PTY with job control, made by util-linux
 * `script` (no native addon), running bash as the session leader of its terminal. Output goes into
 * a bounded ring (oldest bytes dropped, counted), so output nobody reads never grows memory; input
 * is written to the terminal. Methods: pty.open, pty.io, pty.close, pty.list.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { DaemonError } from './protocol.js';
import type { Handlers } from './server.js';
import { resolveCwd } from './exec.js';
import { signalTree } from './proc.js';

/** Bytes of output kept per terminal. */
export const PTY_RING_BYTES = 1024 * 1024;
export const MAX_PTYS = 32;
export const MAX_INPUT_BYTES = 65536;
/**
 * Input written but not yet taken by the terminal, at most (bytes). A program in raw mode that
 * stops reading (the terminal's input queue full) would otherwise have every later input queued in
 * the daemon's memory, without end; past this the input is refused, and nothing of it is written.
 */
export const MAX_PENDING_INPUT_BYTES = 1024 * 1024;

/**
 * A terminal's kept output: the last `capacity` bytes in one circular buffer, allocated once.
 *
 * It used to be a list of the chunks as they came off the pipe, cut to 1 MiB of bytes. The bytes
 * were bounded, the chunks were not: a program that writes a byte at a time (a REPL echoing each
 * key, a spinner, a progress bar) filled the megabyte with up to a million 1-byte Buffers of about
 * 200 bytes of V8 heap each, and the daemon, started with --max-old-space-size=96, died of "Reached
 * heap limit" (SIGABRT) with every shell and session of the workspace (issue #35; test/unit/
 * pty-ring.test.ts). Here the memory is `capacity` bytes outside the heap and one object, however
 * the output is cut up; a read copies only the range it returns.
 */
export class PtyRing {
  private buf: Buffer | undefined;
  /** Absolute offset of the first byte kept. */
  start = 0;
  /** Absolute offset after the last byte received. */
  end = 0;

  constructor(readonly capacity: number = PTY_RING_BYTES) {}

  push(data: Buffer): void {
    if (data.length === 0) return;
    // Allocated at the first output, at full size: the ring never grows or reallocates after.
    const buf = (this.buf ??= Buffer.allocUnsafeSlow(this.capacity));
    const cap = this.capacity;
    const src = data.length > cap ? data.subarray(data.length - cap) : data;
    const skipped = data.length - src.length;
    const at = (this.end + skipped) % cap;
    const first = Math.min(src.length, cap - at);
    src.copy(buf, at, 0, first);
    if (first < src.length) src.copy(buf, 0, first);
    this.end += data.length;
    if (this.end - this.start > cap) this.start = this.end - cap;
  }

  /** Bytes from `from` (absolute, within [start, end]) on, at most `max`, copied out. */
  read(from: number, max: number): Buffer {
    const n = Math.max(0, Math.min(max, this.end - from));
    if (n === 0 || !this.buf) return Buffer.alloc(0);
    const out = Buffer.allocUnsafe(n);
    const at = from % this.capacity;
    const first = Math.min(n, this.capacity - at);
    this.buf.copy(out, 0, at, at + first);
    if (first < n) this.buf.copy(out, first, 0, n - first);
    return out;
  }
}

interface Terminal {
  id: string;
  child: ChildProcess;
  ring: PtyRing;
  exited: boolean;
  exitCode: number | null;
  signal: string | null;
  waiters: Set<() => void>;
  createdAt: string;
}

export interface PtyOptions {
  workspaceRoot: string;
  baseEnv: Record<string, string>;
}

function wake(t: Terminal): void {
  for (const w of t.waiters) w();
  t.waiters.clear();
}

function append(t: Terminal, data: Buffer): void {
  t.ring.push(data);
  wake(t);
}

/** Bytes from `from` (absolute) to the end, cut back to a UTF-8 character boundary. */
function readFrom(t: Terminal, from: number, max: number): { text: string; next: number } {
  let slice = t.ring.read(from, max);
  // Do not split a multi-byte character: drop an incomplete tail (it comes with the next read).
  let cut = slice.length;
  for (let i = Math.max(0, slice.length - 4); i < slice.length; i++) {
    const b = slice[i]!;
    const need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    if (need > 1 && i + need > slice.length) {
      cut = i;
      break;
    }
  }
  slice = slice.subarray(0, cut);
  return { text: slice.toString('utf8'), next: from + slice.length };
}

export function ptyMethods(opts: PtyOptions): Handlers<'pty.open' | 'pty.io' | 'pty.close' | 'pty.list'> {
  const terms = new Map<string, Terminal>();

  const get = (id: unknown): Terminal => {
    const t = typeof id === 'string' ? terms.get(id) : undefined;
    if (!t) throw new DaemonError('NOT_FOUND', `no terminal ${String(id)} in this sandbox (it ended with the sandbox, or was closed)`);
    return t;
  };

  return {
    'pty.open': async (params) => {
      const p = (params ?? {}) as { cwd?: string; cols?: number; rows?: number; env?: Record<string, string> };
      if (terms.size >= MAX_PTYS) throw new DaemonError('RESOURCE_EXHAUSTED', `at most ${MAX_PTYS} terminals per workspace; close one first`);
      const cwd = await resolveCwd(opts.workspaceRoot, p.cwd ?? '.');
      const cols = Math.min(500, Math.max(20, Math.floor(p.cols ?? 120)));
      const rows = Math.min(200, Math.max(5, Math.floor(p.rows ?? 40)));
      const id = randomBytes(9).toString('base64url');
      // script gives bash a real terminal; stty sets its size since our side is a pipe.
      const child = spawn('/usr/bin/script', ['-qfec', `stty cols ${cols} rows ${rows} 2>/dev/null; exec /bin/bash -i`, '/dev/null'], {
        cwd,
        env: { ...opts.baseEnv, ...p.env, TERM: 'xterm-256color', COLUMNS: String(cols), LINES: String(rows) },
        stdio: ['pipe', 'pipe', 'pipe'],
        detached: true,
      });
      const t: Terminal = { id, child, ring: new PtyRing(), exited: false, exitCode: null, signal: null, waiters: new Set(), createdAt: new Date().toISOString() };
      child.stdout!.on('data', (d: Buffer) => append(t, d));
      child.stderr!.on('data', (d: Buffer) => append(t, d));
      child.stdin!.on('error', () => undefined);
      child.on('exit', (code, signal) => {
        t.exited = true;
        t.exitCode = code;
        t.signal = signal;
        wake(t);
      });
      child.on('error', (err) => append(t, Buffer.from(`\r\n[terminal failed: ${err.message}]\r\n`)));
      terms.set(id, t);
      return { ptyId: id, pid: child.pid, cols, rows };
    },

    'pty.io': async (params, ctx) => {
      const p = (params ?? {}) as { ptyId?: string; input?: string; cursor?: number; waitMs?: number; maxBytes?: number };
      const t = get(p.ptyId);
      if (p.input !== undefined && p.input !== '') {
        const bytes = Buffer.from(p.input, 'utf8');
        if (bytes.length > MAX_INPUT_BYTES) throw new DaemonError('INVALID_ARGUMENT', `input: at most ${MAX_INPUT_BYTES} bytes`);
        if (t.exited) throw new DaemonError('FAILED_PRECONDITION', 'the terminal has ended; open a new one');
        const pending = t.child.stdin!.writableLength;
        if (pending + bytes.length > MAX_PENDING_INPUT_BYTES)
          throw new DaemonError(
            'RESOURCE_EXHAUSTED',
            `input: the terminal has not taken ${pending} bytes of earlier input (the program in it is not reading); at most ${MAX_PENDING_INPUT_BYTES} bytes may wait, so none of this input was written: read its output, wait, or close it`,
            { field: 'input', pendingBytes: pending, limitBytes: MAX_PENDING_INPUT_BYTES },
          );
        t.child.stdin!.write(bytes);
      }
      const waitMs = Math.min(5000, Math.max(0, p.waitMs ?? 100));
      let from = p.cursor ?? t.ring.start;
      const dropped = from < t.ring.start ? t.ring.start - from : 0;
      if (from < t.ring.start) from = t.ring.start;
      if (from > t.ring.end) from = t.ring.end;
      if (from === t.ring.end && !t.exited && waitMs > 0) {
        await new Promise<void>((resolve) => {
          const done = () => {
            clearTimeout(timer);
            t.waiters.delete(done);
            ctx.signal.removeEventListener('abort', done);
            resolve();
          };
          const timer = setTimeout(done, waitMs);
          t.waiters.add(done);
          ctx.signal.addEventListener('abort', done);
        });
        // Let a burst of output arrive together rather than one chunk per call.
        if (t.ring.end > from && !t.exited) await new Promise((r) => setTimeout(r, 15));
      }
      // Output dropped while this call waited is skipped too (and counted).
      const late = Math.max(0, t.ring.start - from);
      from += late;
      const { text, next } = readFrom(t, from, Math.min(p.maxBytes ?? 262144, 1048576));
      return { output: text, cursor: next, droppedBytes: dropped + late, exited: t.exited, exitCode: t.exitCode, signal: t.signal, more: next < t.ring.end };
    },

    'pty.close': async (params) => {
      const p = (params ?? {}) as { ptyId?: string };
      const t = terms.get(String(p.ptyId));
      if (!t) return { closed: true, alreadyClosed: true };
      if (!t.exited && t.child.pid) signalTree(t.child.pid, 'SIGKILL', new Set());
      terms.delete(t.id);
      wake(t);
      return { closed: true, alreadyClosed: false };
    },

    'pty.list': async () => ({
      terminals: [...terms.values()].map((t) => ({ ptyId: t.id, pid: t.child.pid, exited: t.exited, bytes: t.ring.end, createdAt: t.createdAt })),
    }),
  };
}
