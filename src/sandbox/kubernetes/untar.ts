/**
 * The runner's reader of a tar stream a Pod sends back (a package build's installed tree:
 * EphemeralBind.collect; docs/packages.md "Builds on Kubernetes"). The stream is the Pod's and
 * so untrusted: this parser, not a tar program, decides what is written, and only under `dest`:
 *
 *   - ustar headers with their checksums; GNU long names (L, K) and pax headers (x: path,
 *     linkpath, size) are understood; a pax size is the member's size (its data and so its
 *     padding, whatever the ustar field says), decimal digits only and within `maxBytes`, and a
 *     pax record is `<decimal length> <key>=<value>\n` exactly; anything else (hard links, devices, fifos, sparse files,
 *     global pax headers, volume labels) refuses the whole stream;
 *   - every name is relative, without `..`, `.` inside or empty components, and starts with the
 *     one directory asked for (`top`); each path appears once;
 *   - nothing is written through a link: a member whose parent is a symbolic link or a file this
 *     stream made is refused; files are created O_EXCL|O_NOFOLLOW, directories by mkdir (never
 *     an existing one), symbolic links are recreated as links and never followed (as on one host,
 *     packages/tree.ts), modes keep only the permission bits (no setuid, setgid or sticky);
 *   - at most `maxBytes` of stream and MAX_ENTRIES members.
 * A refusal rejects with TarRefusal naming the member and the rule; what was written stays under
 * `dest` for the caller to remove.
 *
 * Memory: the parser stops reading past 8 MiB buffered; its caller (release-volumes.ts
 * collectFrom) pauses the exec WebSocket's socket while the stream is that far behind.
 */
import { constants as C } from 'node:fs';
import { lstat, mkdir, open, symlink, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';

export const MAX_ENTRIES = 500_000;

export class TarRefusal extends Error {}

interface Header {
  name: string;
  type: string;
  size: number;
  mode: number;
  linkname: string;
}

/** Reads the stream into `dest/<top>` (dest must exist; dest/<top> must not). Resolves with the bytes read. */
export async function extractTar(stream: Readable, dest: string, top: string, maxBytes: number): Promise<number> {
  if (!/^[A-Za-z0-9._+@-]+$/.test(top) || top === '.' || top === '..') throw new TarRefusal(`${top}: not a plain directory name`);
  const kinds = new Map<string, 'dir' | 'file' | 'symlink'>();
  let buf: Buffer = Buffer.alloc(0);
  let total = 0;
  let ended = false;
  let entries = 0;
  let longName: string | undefined;
  let longLink: string | undefined;
  let pax: Record<string, string> = {};
  let zeroBlocks = 0;
  const waiters: Array<() => void> = [];
  let streamError: Error | undefined;
  stream.on('data', (d: Buffer) => {
    total += d.length;
    buf = buf.length ? Buffer.concat([buf, d]) : d;
    if (total > maxBytes) {
      streamError = new TarRefusal(`the tree is more than ${maxBytes} bytes of tar`);
      stream.destroy();
    }
    if (buf.length > 8 << 20) stream.pause();
    waiters.splice(0).forEach((w) => w());
  });
  stream.on('end', () => ((ended = true), waiters.splice(0).forEach((w) => w())));
  stream.on('close', () => ((ended = true), waiters.splice(0).forEach((w) => w())));
  stream.on('error', (e) => ((streamError ??= e), (ended = true), waiters.splice(0).forEach((w) => w())));

  /** The next n bytes, or null at the end of the stream. */
  const take = async (n: number): Promise<Buffer | null> => {
    while (buf.length < n) {
      if (streamError) throw streamError;
      if (ended) return null;
      stream.resume();
      await new Promise<void>((r) => waiters.push(r));
    }
    if (streamError) throw streamError;
    const out = buf.subarray(0, n);
    buf = buf.subarray(n);
    if (buf.length < 4 << 20) stream.resume();
    return out;
  };
  const takeExact = async (n: number, what: string): Promise<Buffer> => {
    const b = await take(n);
    if (!b) throw new TarRefusal(`${what}: the stream ended inside it`);
    return b;
  };

  const root = path.join(dest, top);
  for (;;) {
    const block = await take(512);
    if (!block) {
      if (streamError) throw streamError;
      throw new TarRefusal('the stream ended without the end-of-archive blocks');
    }
    if (block.every((b) => b === 0)) {
      if (++zeroBlocks === 2) break;
      continue;
    }
    if (zeroBlocks) throw new TarRefusal('a member after an end-of-archive block');
    const h = parseHeader(block);
    if (h.type === 'L' || h.type === 'K' || h.type === 'x') {
      if (h.size > 1 << 20) throw new TarRefusal(`a ${h.type} header of ${h.size} bytes`);
      const data = (await takeExact(blocks(h.size), 'an extended header')).subarray(0, h.size);
      if (h.type === 'L') longName = cString(data);
      else if (h.type === 'K') longLink = cString(data);
      else pax = { ...pax, ...parsePax(data) };
      continue;
    }
    if (++entries > MAX_ENTRIES) throw new TarRefusal(`more than ${MAX_ENTRIES} members`);
    const rawName = pax.path ?? longName ?? h.name;
    const link = pax.linkpath ?? longLink ?? h.linkname;
    let size = h.size;
    if (pax.size !== undefined) {
      // The pax size replaces the ustar one: the member's data, and so its padding, follow it.
      if (!/^[0-9]{1,16}$/.test(pax.size)) throw new TarRefusal(`${rawName}: a pax size ${JSON.stringify(pax.size.slice(0, 40))} (decimal digits only)`);
      size = Number(pax.size);
    }
    if (!Number.isSafeInteger(size) || size < 0) throw new TarRefusal(`${rawName}: a bad size`);
    if (size > maxBytes) throw new TarRefusal(`${rawName}: a size of ${size} bytes, more than the ${maxBytes} the whole tree may have`);
    const padded = blocks(size);
    longName = longLink = undefined;
    pax = {};
    const name = normalise(rawName);
    if (name !== top && !name.startsWith(top + '/')) throw new TarRefusal(`${rawName}: outside ${top}/`);
    if (kinds.has(name)) throw new TarRefusal(`${name}: appears twice`);
    const parent = path.posix.dirname(name);
    if (name !== top) {
      const pk = kinds.get(parent);
      if (pk !== 'dir') throw new TarRefusal(`${name}: its parent ${parent} is ${pk === undefined ? 'not in the archive before it' : `a ${pk === 'symlink' ? 'symbolic link' : pk} (never written through)`}`);
    } else if (h.type !== '5') {
      throw new TarRefusal(`${name}: the top must be a directory`);
    }
    const to = path.join(dest, name);
    if (to !== root && !to.startsWith(root + '/')) throw new TarRefusal(`${rawName}: outside ${top}/`);
    const mode = h.mode & 0o777;
    switch (h.type) {
      case '5':
        if (size !== 0) throw new TarRefusal(`${name}: a directory with data`);
        await mkdir(to, { mode: 0o700 }).catch((e: NodeJS.ErrnoException) => {
          throw new TarRefusal(`${name}: cannot be made (${e.code})`);
        });
        kinds.set(name, 'dir');
        break;
      case '0':
      case '\0':
      case '7': {
        let fh: FileHandle;
        try {
          fh = await open(to, C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW, 0o600);
        } catch (e) {
          throw new TarRefusal(`${name}: cannot be made (${(e as NodeJS.ErrnoException).code})`);
        }
        try {
          let left = size;
          while (left > 0) {
            const chunk = await takeExact(Math.min(left, 1 << 20), name);
            await fh.write(chunk);
            left -= chunk.length;
          }
          await fh.chmod(mode & 0o755);
        } finally {
          await fh.close();
        }
        const pad = padded - size;
        if (pad) await takeExact(pad, name);
        kinds.set(name, 'file');
        continue;
      }
      case '2':
        if (size !== 0 || !link || link.includes('\0')) throw new TarRefusal(`${name}: a bad symbolic link`);
        await symlink(link, to).catch((e: NodeJS.ErrnoException) => {
          throw new TarRefusal(`${name}: cannot be made (${e.code})`);
        });
        kinds.set(name, 'symlink');
        break;
      case '1':
        throw new TarRefusal(`${name}: a hard link (to ${link}); the tree may hold files, directories and symbolic links only`);
      case '3':
      case '4':
      case '6':
        throw new TarRefusal(`${name}: a special file (device or fifo); the tree may hold files, directories and symbolic links only`);
      default:
        throw new TarRefusal(`${name}: a member of type ${JSON.stringify(h.type)} is not taken`);
    }
    if (padded) await takeExact(padded, name);
  }
  // Whatever follows the end blocks is padding; nothing more is written.
  stream.resume();
  if (!kinds.has(top)) throw new TarRefusal(`${top}: missing from the archive`);
  const st = await lstat(root);
  if (!st.isDirectory()) throw new TarRefusal(`${top}: not a directory`);
  return total;
}

/** n bytes rounded up to whole 512-byte blocks. */
function blocks(n: number): number {
  return Math.ceil(n / 512) * 512;
}

function normalise(raw: string): string {
  let n = raw;
  while (n.startsWith('./')) n = n.slice(2);
  if (n.endsWith('/')) n = n.slice(0, -1);
  if (!n || n.startsWith('/') || n.includes('\0')) throw new TarRefusal(`${JSON.stringify(raw)}: not a relative name`);
  for (const part of n.split('/')) if (part === '' || part === '.' || part === '..') throw new TarRefusal(`${JSON.stringify(raw)}: a name with ${part === '..' ? '..' : 'an empty or . component'}`);
  return n;
}

function cString(b: Buffer): string {
  const z = b.indexOf(0);
  return b.subarray(0, z < 0 ? b.length : z).toString('utf8');
}

function octal(b: Buffer, what: string): number {
  // GNU base-256 for large numbers (first byte 0x80).
  if (b[0]! & 0x80) {
    let v = 0;
    for (let i = 1; i < b.length; i++) v = v * 256 + b[i]!;
    if (!Number.isSafeInteger(v)) throw new TarRefusal(`a header ${what} too large`);
    return v;
  }
  const s = cString(b).trim();
  if (s === '') return 0;
  if (!/^[0-7]+$/.test(s)) throw new TarRefusal(`a header ${what} that is not octal`);
  return parseInt(s, 8);
}

function parseHeader(b: Buffer): Header {
  const sum = octal(b.subarray(148, 156), 'checksum');
  let calc = 0;
  for (let i = 0; i < 512; i++) calc += i >= 148 && i < 156 ? 32 : b[i]!;
  if (sum !== calc) throw new TarRefusal('a header with a bad checksum');
  const magic = b.subarray(257, 263).toString('latin1');
  let name = cString(b.subarray(0, 100));
  if (magic.startsWith('ustar')) {
    const prefix = cString(b.subarray(345, 500));
    if (prefix && magic === 'ustar\0') name = `${prefix}/${name}`;
  }
  return { name, type: String.fromCharCode(b[156]!), size: octal(b.subarray(124, 136), 'size'), mode: octal(b.subarray(100, 108), 'mode'), linkname: cString(b.subarray(157, 257)) };
}

function parsePax(data: Buffer): Record<string, string> {
  const out: Record<string, string> = {};
  let i = 0;
  while (i < data.length) {
    const sp = data.indexOf(0x20, i);
    if (sp < 0) break;
    const digits = data.subarray(i, sp).toString('latin1');
    const len = /^[1-9][0-9]{0,7}$/.test(digits) ? Number(digits) : NaN;
    if (!Number.isSafeInteger(len) || i + len > data.length || len < sp - i + 3 || data[i + len - 1] !== 0x0a) throw new TarRefusal('a bad pax record');
    const rec = data.subarray(sp + 1, i + len - 1).toString('utf8');
    const eq = rec.indexOf('=');
    if (eq > 0) {
      const k = rec.slice(0, eq);
      if (k === 'path' || k === 'linkpath' || k === 'size') out[k] = rec.slice(eq + 1);
    }
    i += len;
  }
  return out;
}
