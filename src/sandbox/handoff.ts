/**
 * files_read's descriptor handoff (docs/architecture.md, "Results"; docs/sandbox.md). For a range of
 * 64 KiB or more the daemon opens and checks the file exactly as for any read (its confinement,
 * the cursor's hash guard), but instead of sending the bytes over its socket it keeps the
 * descriptor open and names its number. The runner duplicates that descriptor out of the daemon
 * with pidfd_getfd(2) and reads the range itself, straight into the pooled block the answer is
 * escaped from; the daemon closes its own copy when the next read's request says so (`release`),
 * or on fs.release when no read follows within a second. The content then crosses one process
 * boundary instead of two: a MiB is read once, not read, sent, received and reassembled.
 *
 * What root does here, and why it is safe:
 *  - it never opens a path: the daemon opened the file, inside the sandbox, with the sandbox's own
 *    access, and root only duplicates that open file description (reads through it need no further
 *    permission and can reach nothing the daemon could not read itself);
 *  - it reads only from a regular file on the workspace's own filesystem, the inode the daemon
 *    named: fstat of the copy must say S_IFREG, the device of the workspace's disk image (mounted
 *    on its root directory, which no workspace process sees) and that inode. A descriptor that is anything else (a fifo, a
 *    device, a socket, a /proc file, another filesystem, whatever a subverted daemon might name)
 *    is closed unread, the handoff is switched off for that sandbox and the read is asked again
 *    the ordinary way; a workspace without its own disk image never hands off;
 *  - the daemon's pid comes from the kernel (SO_PEERCRED of the runner's connection: the process
 *    that listened on the socket, which only the daemon can have done, the socket and its
 *    directory being root's from before any workspace process exists), and is held as a pidfd,
 *    checked to be a member of the sandbox's cgroup once it is open, so a recycled pid is never
 *    asked for a descriptor.
 * Anything the handoff needs but lacks (the native addon not loaded, an old daemon, no pidfd
 * support) leaves reads on the ordinary path.
 */
import { closeSync, fstatSync, lstatSync, readSync } from 'node:fs';
import path from 'node:path';
import { defineRawText, giveBackBlock, leaseBytes } from '../core/raw-text.js';
import type { DaemonClient } from './client.js';
import { FILE_LIMITS } from './daemon/files/common.js';
import { shapeRange } from './daemon/files/content.js';
import type { FsReadReply } from './daemon/protocol.js';

/** The system calls Node lacks, from the runner's native addon (src/mcp/wire-native.ts, given by the composition root). */
export interface DescriptorCalls {
  /** The pid (in the runner's namespace) of the process at the other end of a connected Unix socket; -errno on failure. */
  peerPid(fd: number): number;
  /** pidfd_open(2): a pidfd (close-on-exec), or -errno. */
  pidfdOpen(pid: number): number;
  /** pidfd_getfd(2): a duplicate (close-on-exec) of that process's descriptor, or -errno. */
  pidfdGetfd(pidfd: number, fd: number): number;
}

/** Taken descriptors wait this long for a read to carry their release before fs.release goes alone. */
const RELEASE_AFTER_MS = 1_000;

/** A sandbox the runner takes descriptors from. */
interface Source {
  pidfd: number;
  /** st_dev of the workspace's disk image. */
  dev: number;
}

export class FileHandoff {
  /** Per sandbox: its source; null when this sandbox reads the ordinary way. */
  private readonly sources = new Map<string, Source | null>();
  /** Reads answered through a handed-off descriptor, and handoffs refused or failed (then read the ordinary way), since start. */
  readonly counts = { taken: 0, refused: 0 };
  /** Per sandbox: descriptors taken whose daemon copies are still to be released, and the timer that sends them. */
  private readonly pending = new Map<string, { fds: number[]; client: DaemonClient; timer: NodeJS.Timeout }>();
  /** Per sandbox: the prepare() in progress (a later forget() or prepare() makes its result void). */
  private readonly preparing = new Map<string, symbol>();

  constructor(
    /** The calls, once available (null until the addon is loaded, or when it cannot be). */
    readonly calls: () => DescriptorCalls | null,
    private readonly onNote?: (message: string) => void,
  ) {}

  /** Whether reads of sandbox `id` may ask for the descriptor (prepare() succeeded for it). */
  enabled(id: string): boolean {
    return !!this.sources.get(id);
  }

  /** Whether prepare() was tried for this sandbox since it (re)started. */
  known(id: string): boolean {
    return this.sources.has(id);
  }

  /**
   * Sets the handoff up for sandbox `id`, whose daemon `client` is connected to now: the daemon's
   * pidfd and the device of `rootDir`, the disk image's mount point. `cgroupMembers` lists the pids
   * of the sandbox's cgroup (undefined without cgroups: then no handoff).
   */
  async prepare(id: string, client: DaemonClient, rootDir: string, cgroupMembers: (() => Promise<number[]>) | undefined): Promise<void> {
    this.forget(id);
    this.sources.set(id, null); // while being prepared: the ordinary way
    const token = Symbol(id);
    this.preparing.set(id, token);
    const s = await this.source(client, rootDir, cgroupMembers);
    if (this.preparing.get(id) === token) {
      this.preparing.delete(id);
      this.sources.set(id, s);
    } else if (s) closeSync(s.pidfd); // forgotten (or prepared again) meanwhile
  }

  private async source(client: DaemonClient, rootDir: string, cgroupMembers: (() => Promise<number[]>) | undefined): Promise<Source | null> {
    const native = this.calls();
    const fd = client.socketFd();
    if (!native || fd === undefined || !cgroupMembers) return null;
    let dev: number;
    try {
      const root = lstatSync(rootDir);
      // Not its own filesystem (no disk image): nothing would tell the workspace's files from the host's.
      if (!root.isDirectory() || root.dev === lstatSync(path.dirname(rootDir)).dev) return null;
      dev = root.dev;
    } catch {
      return null;
    }
    const pid = native.peerPid(fd);
    if (pid <= 0) return null;
    const pidfd = native.pidfdOpen(pid);
    if (pidfd < 0) return null;
    // The pidfd pins this very process from now on; it must be the sandbox's (a member of its cgroup).
    const member = await cgroupMembers().then((pids) => pids.includes(pid), () => false);
    if (!member) {
      closeSync(pidfd);
      return null;
    }
    return { pidfd, dev };
  }

  /** The sandbox stopped (or restarts): its pidfd is closed. */
  forget(id: string): void {
    const s = this.sources.get(id);
    this.sources.delete(id);
    this.preparing.delete(id);
    // Its daemon is gone or being replaced: what it still holds ends with it (or after its 30 s).
    const p = this.pending.get(id);
    if (p) clearTimeout(p.timer);
    this.pending.delete(id);
    if (s) closeSync(s.pidfd);
  }

  /**
   * Turns a handed-off reply into the ordinary one (the content as a raw field, cut and encoded as
   * the daemon would have). Throws when the descriptor cannot be taken or is not what it must be;
   * the caller then switches the handoff off (off()) and reads the ordinary way.
   */
  take(id: string, client: DaemonClient, reply: FsReadReply): FsReadReply {
    const handed = reply.handOff!;
    delete reply.handOff;
    const s = this.sources.get(id);
    let local = -1;
    try {
      if (!s) throw new Error('no handoff for this sandbox');
      // The daemon's numbers are checked before anything is sized by them.
      const { offset, length, size } = reply;
      const whole = (n: unknown): boolean => Number.isSafeInteger(n) && (n as number) >= 0;
      if (!whole(offset) || !whole(length) || !whole(size) || length > FILE_LIMITS.readBytes || offset + length > size) {
        throw new Error(`the handed-off range is out of bounds (offset ${offset}, length ${length}, size ${size})`);
      }
      local = this.calls()!.pidfdGetfd(s.pidfd, handed.fd);
    } finally {
      // The daemon's copy goes whatever happened here: with the next read's request, or within a second.
      this.release(id, client, handed.fd);
    }
    if (local < 0) throw new Error(`pidfd_getfd failed (errno ${-local})`);
    let block: Buffer | undefined;
    try {
      const st = fstatSync(local);
      if (!st.isFile() || st.dev !== s.dev || String(st.ino) !== handed.ino) {
        throw new Error(`the handed-off descriptor is not the workspace file it should be (regular: ${st.isFile()}, device ${st.dev} vs ${s.dev})`);
      }
      block = leaseBytes(reply.length);
      // At most 1 MiB (the read limit), as artifacts_read reads its chunks: at once, without a trip
      // through the thread pool (0.1 ms of the 0.4 this step took), the file usually in the page
      // cache (the daemon has just opened and, at its first read, hashed it).
      let got = 0;
      while (got < reply.length) {
        const n = readSync(local, block, got, reply.length - got, reply.offset + got);
        if (n === 0) break; // shortened meanwhile: what there is
        got += n;
      }
      const shaped = shapeRange(block.subarray(0, got), reply.offset, reply.size);
      reply.length = shaped.buf.length;
      reply.encoding = shaped.encoding;
      reply.eof = shaped.end >= reply.size;
      reply.nextOffset = shaped.end;
      defineRawText(reply as unknown as Record<string, unknown>, 'content', shaped.buf, shaped.encoding);
      block = undefined;
      this.counts.taken++;
      return reply;
    } finally {
      closeSync(local);
      if (block) giveBackBlock(block);
    }
  }

  /**
   * Descriptors of sandbox `id` to release, given to its next fs.read (`release`): one message
   * fewer per read (each costs the runner a write and the daemon a wake-up).
   */
  releases(id: string): number[] | undefined {
    const p = this.pending.get(id);
    if (!p) return undefined;
    clearTimeout(p.timer);
    this.pending.delete(id);
    return p.fds;
  }

  private release(id: string, client: DaemonClient, fd: number): void {
    let p = this.pending.get(id);
    if (!p) {
      const timer = setTimeout(() => this.flush(id), RELEASE_AFTER_MS).unref();
      p = { fds: [], client, timer };
      this.pending.set(id, p);
    }
    p.fds.push(fd);
  }

  /** Sends what waits for release now (no read came to carry it). */
  private flush(id: string): void {
    const p = this.pending.get(id);
    const fds = this.releases(id);
    if (p && fds?.length) p.client.request('fs.release', { fds }).catch(() => undefined);
  }

  /** The handoff failed for this sandbox: it reads the ordinary way until it restarts. */
  off(id: string, why: string): void {
    this.counts.refused++;
    this.flush(id);
    this.forget(id);
    this.sources.set(id, null);
    this.onNote?.(`files_read handoff switched off for sandbox ${id}: ${why}`);
  }
}
