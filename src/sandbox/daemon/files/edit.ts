/** fs.patch: replaces the one occurrence of oldText, compare-and-swap against the bytes read. */
import { closeSync, fstatSync } from 'node:fs';
import { DaemonError } from '../protocol.js';
import { FILE_LIMITS, conflict, invalid, obj, parseSha, precondition } from './common.js';
import { readRange, sha256 } from './content.js';
import { DirPool, type PreparedWrite } from './context.js';
import type { Handlers } from '../server.js';
import type { FileContext } from './context.js';

export function editMethods(fc: FileContext): Handlers<'fs.patch'> {
  const { c, exclusive, changed } = fc;
  const { writeTemp, check, commit, discard, writeResult } = fc.staging;
  return {
    'fs.patch': (params) =>
      exclusive(async () => {
        const p = obj(params);
        const oldText = p.oldText;
        const newText = p.newText;
        if (typeof oldText !== 'string' || typeof newText !== 'string') throw invalid('oldText and newText must be strings');
        if (oldText.length === 0) throw invalid('oldText must not be empty: give the exact text to replace', { field: 'oldText' });
        for (const [k, v] of [['oldText', oldText], ['newText', newText]] as const) {
          if (v.length > FILE_LIMITS.patchChars) throw invalid(`${k} has ${v.length} characters; the limit is ${FILE_LIMITS.patchChars}`, { field: k, limit: FILE_LIMITS.patchChars });
        }
        const exp = parseSha(p.expectedSha256, 'expectedSha256');
        const shown = String(p.path);
        const f = c.openFile(p.path);
        let data: Buffer;
        try {
          const size = Number(f.st.size);
          if (size > FILE_LIMITS.patchFileBytes) {
            throw precondition(`path: ${shown} has ${size} bytes; files_apply_patch edits files up to ${FILE_LIMITS.patchFileBytes} bytes (use files_write or a command)`, { path: shown, size });
          }
          data = await readRange(f.fd, 0, size);
          const after = fstatSync(f.fd, { bigint: true });
          if (after.size !== f.st.size || after.mtimeNs !== f.st.mtimeNs) throw conflict(`path: ${shown} changed while it was read; retry`, { path: shown });
        } finally {
          closeSync(f.fd);
        }
        const before = sha256(data);
        if (exp && exp !== before) {
          throw conflict(`path: ${shown} has SHA-256 ${before}, not the expected ${exp}; nothing was changed (read it again and retry)`, { path: shown, expectedSha256: exp, currentSha256: before });
        }
        const needle = Buffer.from(oldText, 'utf8');
        const found = occurrences(data, needle, FILE_LIMITS.patchLocations);
        if (found.count !== 1) throw patchMismatch(shown, data, oldText, found);
        const at = found.locations[0]!;
        const next = Buffer.concat([data.subarray(0, at.offset), Buffer.from(newText, 'utf8'), data.subarray(at.offset + needle.length)]);
        const pool = new DirPool();
        const entry = pool.adopt(c.resolve(f.rel, { follow: true }));
        let w: PreparedWrite | undefined;
        try {
          if (!entry.st) throw conflict(`path: ${shown} was removed while it was patched`, { path: shown });
          const mode = entry.st.mode & 0o7777;
          const tmp = await writeTemp(entry, next, mode, shown, 'path');
          // Compare against what was read: a change by anyone else in between is a CONFLICT.
          w = { index: 0, shown, entry, tmp, expected: before, created: false, size: next.length, sha256: sha256(next), mode };
          await check(w, 'path');
          commit(w, 'path');
        } catch (e) {
          if (w) discard(w);
          pool.closeAll(false);
          throw e;
        }
        pool.closeAll(true);
        changed([entry.rel]);
        return { ...writeResult(w), previousSha256: before, replacements: 1, line: at.line, column: at.column };
      }),

  };
}

interface Found {
  count: number;
  locations: Array<{ offset: number; line: number; column: number }>;
}

/** Every occurrence (overlapping ones too), with line and column of the first few. */
function occurrences(hay: Buffer, needle: Buffer, keep: number): Found {
  const locations: Found['locations'] = [];
  let count = 0;
  let line = 1;
  let lineStart = 0;
  let scanned = 0;
  for (let at = hay.indexOf(needle); at !== -1; at = hay.indexOf(needle, at + 1)) {
    count++;
    if (locations.length < keep) {
      for (let nl = hay.indexOf(10, scanned); nl !== -1 && nl < at; nl = hay.indexOf(10, nl + 1)) {
        line++;
        lineStart = nl + 1;
      }
      scanned = at;
      locations.push({ offset: at, line, column: hay.subarray(lineStart, at).toString('utf8').length + 1 });
    }
  }
  return { count, locations };
}

function patchMismatch(shown: string, data: Buffer, oldText: string, found: Found): DaemonError {
  if (found.count === 0) {
    const hints: string[] = [];
    if (!oldText.includes('\r\n') && oldText.includes('\n') && data.includes('\r\n')) {
      const crlf = occurrences(data, Buffer.from(oldText.replace(/\n/g, '\r\n')), 1).count;
      if (crlf > 0) hints.push(`the file uses CRLF line endings and oldText with CRLF occurs ${crlf} time${crlf === 1 ? '' : 's'}`);
    }
    const trimmed = oldText.trim();
    if (hints.length === 0 && trimmed.length > 0 && trimmed !== oldText) {
      const t = occurrences(data, Buffer.from(trimmed), 1).count;
      if (t > 0) hints.push(`oldText without its leading and trailing whitespace occurs ${t} time${t === 1 ? '' : 's'}`);
    }
    return new DaemonError('FAILED_PRECONDITION', `oldText occurs 0 times in ${shown}; it must occur exactly once (copy it exactly from files_read${hints.length ? `; note: ${hints.join('; ')}` : ''}); nothing was changed`, {
      path: shown,
      matches: 0,
      hints,
    });
  }
  const where = found.locations.map((l) => `${l.line}:${l.column}`);
  return new DaemonError(
    'FAILED_PRECONDITION',
    `oldText occurs ${found.count} times in ${shown} (at lines ${where.join(', ')}${found.count > where.length ? ', ...' : ''}); it must occur exactly once: include more surrounding text to make it unique; nothing was changed`,
    { path: shown, matches: found.count, locations: found.locations.map(({ line, column }) => ({ line, column })) },
  );
}
