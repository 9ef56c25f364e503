/**
 * fs.read: a range of a regular file with the whole file's SHA-256 (cached), cut on a UTF-8
 * boundary, its bytes sent as a raw body; or, for a large range when the runner asks (`handOff`),
 * the open descriptor itself, which the runner duplicates and reads (src/sandbox/handoff.ts).
 */
import { closeSync } from 'node:fs';
import { FILE_LIMITS, conflict, intParam, invalid, modeString, obj } from './common.js';
import { hashFd, readRange, shapeRange } from './content.js';
import { ReplyWithBody } from '../protocol.js';
import type { Handlers } from '../server.js';
import type { FileContext } from './context.js';

/** Ranges this large or larger may be handed off; a smaller one costs less as a body frame. */
const HANDOFF_MIN_BYTES = 64 * 1024;
/** Descriptors held for the runner at most at once (beyond that, bytes are sent as before). */
const HANDOFF_MAX_HELD = 64;
/** A handed-off descriptor the runner never releases is closed after this long. */
const HANDOFF_HOLD_MS = 30_000;

export function readMethods(fc: FileContext): Handlers<'fs.read' | 'fs.release'> {
  const { c, hashes } = fc;
  /** Handed-off descriptors still open, with the timer that closes each. */
  const held = new Map<number, NodeJS.Timeout>();
  const release = (fd: number): boolean => {
    const timer = held.get(fd);
    if (timer === undefined) return false;
    clearTimeout(timer);
    held.delete(fd);
    closeSync(fd);
    return true;
  };
  /** Releases the held descriptors among `fds` (anything else in it is ignored); how many. */
  const releaseAll = (fds: unknown): number => {
    if (!Array.isArray(fds)) return 0;
    let n = 0;
    for (const fd of fds.slice(0, HANDOFF_MAX_HELD)) if (typeof fd === 'number' && release(fd)) n++;
    return n;
  };
  return {
    'fs.read': async (params) => {
      const p = obj(params);
      releaseAll(p.release);
      const offset = intParam(p.offset, 'offset', 0, Number.MAX_SAFE_INTEGER, 0);
      const limit = intParam(p.limit, 'limit', 1, FILE_LIMITS.readBytes, 65536);
      const expect = p.expectSha256Prefix;
      const shown = String(p.path);
      const f = c.openFile(p.path);
      let keep = false;
      try {
        const size = Number(f.st.size);
        let sha = hashes.get(f.st);
        if (!sha) {
          sha = (await hashFd(f.fd)).sha256;
          hashes.set(f.st, sha);
        }
        if (typeof expect === 'string' && !sha.startsWith(expect)) {
          throw conflict(`path: ${shown} changed since the cursor was issued (its SHA-256 is now ${sha}); read it again from offset 0`, { path: shown, currentSha256: sha });
        }
        if (offset > size) throw invalid(`offset: ${offset} is beyond the end of ${shown} (${size} bytes)`, { field: 'offset', path: shown, size });
        const want = Math.min(limit, size - offset);
        const head = { path: shown, realPath: f.rel, size, sha256: sha, mode: modeString(Number(f.st.mode)), offset };
        if (p.handOff === true && want >= HANDOFF_MIN_BYTES && held.size < HANDOFF_MAX_HELD) {
          // The runner reads [offset, offset + length) itself, then cuts and encodes it as below
          // (shapeRange); once it holds its own copy it releases ours (`release` of its next read,
          // or fs.release).
          keep = true;
          held.set(f.fd, setTimeout(() => release(f.fd), HANDOFF_HOLD_MS).unref());
          return { ...head, length: want, encoding: 'utf-8', content: '', eof: offset + want >= size, nextOffset: offset + want, handOff: { fd: f.fd, ino: String(f.st.ino) } };
        }
        const { buf, end, encoding } = shapeRange(await readRange(f.fd, offset, want), offset, size);
        // The bytes go to the runner as a raw body frame (protocol.ts): never escaped into JSON
        // here nor parsed there; the runner decodes them once, as `encoding` says.
        return new ReplyWithBody({ ...head, length: buf.length, encoding, content: '', eof: end >= size, nextOffset: end }, 'content', buf, encoding);
      } finally {
        if (!keep) closeSync(f.fd);
      }
    },

    // When no read follows soon; a descriptor that is not (or no longer) held changes nothing.
    'fs.release': (params) => ({ released: releaseAll(obj(params).fds) }),
  };
}
