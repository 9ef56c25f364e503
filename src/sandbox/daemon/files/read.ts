/** fs.read: a range of a regular file with the whole file's SHA-256 (cached), cut on a UTF-8 boundary, its bytes sent as a raw body. */
import { isUtf8 } from 'node:buffer';
import { closeSync } from 'node:fs';
import { FILE_LIMITS, conflict, intParam, invalid, modeString, obj } from './common.js';
import { encodingOf, hashFd, readRange, utf8Boundary } from './content.js';
import { ReplyWithBody } from '../protocol.js';
import type { Handlers } from '../server.js';
import type { FileContext } from './context.js';

export function readMethods(fc: FileContext): Handlers<'fs.read'> {
  const { c, hashes } = fc;
  return {
    'fs.read': async (params) => {
      const p = obj(params);
      const offset = intParam(p.offset, 'offset', 0, Number.MAX_SAFE_INTEGER, 0);
      const limit = intParam(p.limit, 'limit', 1, FILE_LIMITS.readBytes, 65536);
      const expect = p.expectSha256Prefix;
      const shown = String(p.path);
      const f = c.openFile(p.path);
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
        let buf = await readRange(f.fd, offset, Math.min(limit, size - offset));
        let end = offset + buf.length;
        if (end < size) {
          const cut = utf8Boundary(buf);
          if (cut > 0 && cut < buf.length && buf.indexOf(0) === -1 && isUtf8(buf.subarray(0, cut))) {
            buf = buf.subarray(0, cut);
            end = offset + cut;
          }
        }
        // The bytes go to the runner as a raw body frame (protocol.ts): never escaped into JSON
        // here nor parsed there; the runner decodes them once, as `encoding` says.
        const encoding = encodingOf(buf);
        return new ReplyWithBody({
          path: shown,
          realPath: f.rel,
          size,
          sha256: sha,
          mode: modeString(Number(f.st.mode)),
          offset,
          length: buf.length,
          encoding,
          content: '',
          eof: end >= size,
          nextOffset: end,
        }, 'content', buf, encoding);
      } finally {
        closeSync(f.fd);
      }
    },

  };
}
