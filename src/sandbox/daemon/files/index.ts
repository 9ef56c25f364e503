/**
 * File methods of the daemon (fs.list, fs.read and fs.release, fs.write, fs.writeBatch, fs.patch, fs.delete,
 * fs.move, fs.mkdir) and the confinement every file and search method goes through. One module per
 * method group: list.ts, read.ts, write.ts, edit.ts (fs.patch), manage.ts (delete, move, mkdir);
 * confinement.ts walks paths, context.ts holds the shared state and the write staging steps.
 *
 * Runs inside the sandbox as the workspace user, so the kernel already confines it; the checks here
 * hold on their own anyway (tests run the daemon on the host). The rules, see docs/files.md:
 *
 *  - a path is relative to the workspace root: absolute paths and any `..` segment are refused up
 *    front with PERMISSION_DENIED naming the path;
 *  - a path is walked one component at a time from an open directory descriptor of the root. Each
 *    step opens `/proc/self/fd/<parent>/<name>` with O_NOFOLLOW, which behaves like openat(2): the
 *    step is relative to the directory already verified, so swapping an earlier component for a
 *    symlink while a call runs changes nothing;
 *  - a symlink met on the way is followed only when its realpath stays under the root, and the
 *    descriptor opened on its target is verified again through readlink(/proc/self/fd/<fd>);
 *  - files are opened with O_NOFOLLOW | O_NONBLOCK and checked with fstat: directories, devices,
 *    fifos and sockets are refused for reads and writes (and a fifo never blocks the daemon);
 *  - writes go to a temporary file in the target's directory (`.atelier-tmp-<random>`), which is
 *    written, fsynced, given the mode of the file it replaces (new files 0644) and renamed over the
 *    target; with an expected SHA-256 the current file is hashed just before the rename, under the
 *    daemon's mutation lock, and a mismatch changes nothing (CONFLICT with the current hash);
 *  - content is never transformed: bytes in, bytes out (line endings included).
 *
 * Imports node built-ins and sibling daemon files only.
 */
import type { Handlers } from '../server.js';
import type { Confinement } from './confinement.js';
import { fileContext, type FileMethodOptions } from './context.js';
import { editMethods } from './edit.js';
import { listMethods } from './list.js';
import { manageMethods } from './manage.js';
import { readMethods } from './read.js';
import { writeMethods } from './write.js';

export { FILE_LIMITS } from './common.js';
export { Confinement, fdPath, joinRel, parentRel } from './confinement.js';
export type { FileMethodOptions } from './context.js';

/** The file methods. */
export type FileMethod = 'fs.list' | 'fs.read' | 'fs.release' | 'fs.write' | 'fs.writeBatch' | 'fs.patch' | 'fs.delete' | 'fs.move' | 'fs.mkdir';

export function fileMethods(opts: FileMethodOptions): { methods: Handlers<FileMethod>; confinement: Confinement } {
  const fc = fileContext(opts);
  return {
    methods: { ...listMethods(fc), ...readMethods(fc), ...writeMethods(fc), ...editMethods(fc), ...manageMethods(fc) },
    confinement: fc.c,
  };
}
