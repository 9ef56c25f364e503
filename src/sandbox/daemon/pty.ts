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

interface Terminal {
  id: string;
  child: ChildProcess;
  chunks: Buffer[];
  /** Absolute offset of the first byte kept in `chunks`. */
  start: number;
  /** Absolute offset after the last byte received. */
  end: number;
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
  t.chunks.push(data);
  t.end += data.length;
  let kept = t.end - t.start;
  while (kept > PTY_RING_BYTES && t.chunks.length > 1) {
    const first = t.chunks.shift()!;
    t.start += first.length;
    kept -= first.length;
  }
  if (kept > PTY_RING_BYTES) {
    const only = t.chunks[0]!;
    const cut = kept - PTY_RING_BYTES;
    t.chunks[0] = only.subarray(cut);
    t.start += cut;
  }
  wake(t);
}

/** Bytes from `from` (absolute) to the end, cut back to a UTF-8 character boundary. */
function readFrom(t: Terminal, from: number, max: number): { text: string; next: number } {
  const all = Buffer.concat(t.chunks);
  let slice = all.subarray(from - t.start, Math.min(all.length, from - t.start + max));
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
      const t: Terminal = { id, child, chunks: [], start: 0, end: 0, exited: false, exitCode: null, signal: null, waiters: new Set(), createdAt: new Date().toISOString() };
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
        t.child.stdin!.write(bytes);
      }
      const waitMs = Math.min(5000, Math.max(0, p.waitMs ?? 100));
      let from = p.cursor ?? t.start;
      const dropped = from < t.start ? t.start - from : 0;
      if (from < t.start) from = t.start;
      if (from > t.end) from = t.end;
      if (from === t.end && !t.exited && waitMs > 0) {
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
        if (t.end > from && !t.exited) await new Promise((r) => setTimeout(r, 15));
      }
      const { text, next } = readFrom(t, from, Math.min(p.maxBytes ?? 262144, 1048576));
      return { output: text, cursor: next, droppedBytes: dropped, exited: t.exited, exitCode: t.exitCode, signal: t.signal, more: next < t.end };
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
      terminals: [...terms.values()].map((t) => ({ ptyId: t.id, pid: t.child.pid, exited: t.exited, bytes: t.end, createdAt: t.createdAt })),
    }),
  };
}
