/**
 * files_read's descriptor handoff (src/sandbox/handoff.ts) against a hostile daemon: this process
 * plays the daemon (its socket's peer is this process, the descriptors named are its own), so every
 * reply can lie. Only a regular file on the workspace's filesystem, with the inode named, is ever
 * read; anything else (a fifo, a socket, a /proc file, a file elsewhere, a wrong inode, a closed
 * number) is refused without blocking, and the daemon is always told to release its descriptor.
 * The workspace's filesystem here is /dev/shm (a tmpfs mount, as the disk image is a mount).
 * Built with gcc and Node's headers (the addon); skipped without them or without /dev/shm.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, constants, existsSync, fstatSync, lstatSync, mkdtempSync, openSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildWireNative, loadWireNativeFile, type WireNative } from '../../src/mcp/wire-native.js';
import { FileHandoff } from '../../src/sandbox/handoff.js';
import type { DaemonClient } from '../../src/sandbox/client.js';
import type { FsReadReply } from '../../src/sandbox/daemon/protocol.js';

const SHM = '/dev/shm';
const usable = (() => {
  try {
    execFileSync('gcc', ['--version'], { stdio: 'ignore' });
    const headers = [path.resolve(path.dirname(process.execPath), '../include/node'), '/usr/include/node'].some((d) => existsSync(path.join(d, 'node_api.h')));
    return headers && lstatSync(SHM).dev !== lstatSync('/dev').dev;
  } catch {
    return false;
  }
})();

let buildDir: string;
let work: string;
let addon: WireNative;
let server: Server;
let socket: Socket;
const released: number[] = [];

/** The runner's DaemonClient as the handoff uses it: its connection's descriptor, and requests (fs.release recorded). */
const client = {
  socketFd: () => (socket as unknown as { _handle: { fd: number } })._handle.fd,
  request: async (method: string, params: { fds: number[] }) => {
    if (method === 'fs.release') released.push(...params.fds);
    return { released: params.fds.length };
  },
} as unknown as DaemonClient;

function reply(fd: number, ino: string, size: number, length = size, offset = 0): FsReadReply {
  return { path: 'f', realPath: 'f', size, sha256: '0'.repeat(64), mode: '0644', offset, length, encoding: 'utf-8', content: '', eof: offset + length >= size, nextOffset: offset + length, handOff: { fd, ino } };
}

const openFds = () => readdirSync('/proc/self/fd').length;

async function prepared(): Promise<FileHandoff> {
  const h = new FileHandoff(() => addon);
  await h.prepare('ws_x', client, SHM, async () => [process.pid]);
  expect(h.enabled('ws_x')).toBe(true);
  return h;
}

describe.skipIf(!usable)('the files_read descriptor handoff', () => {
  beforeAll(async () => {
    buildDir = mkdtempSync(path.join(tmpdir(), 'atelier-handoff-addon-'));
    addon = loadWireNativeFile(await buildWireNative(buildDir))!;
    expect(addon).not.toBeNull();
    work = mkdtempSync(path.join(SHM, 'atelier-handoff-'));
    const sock = path.join(work, 'd.sock');
    server = createServer(() => undefined);
    await new Promise<void>((r) => server.listen(sock, r));
    socket = connect(sock);
    await new Promise<void>((r) => socket.once('connect', () => r()));
  }, 60_000);

  afterAll(() => {
    socket?.destroy();
    server?.close();
    if (work) rmSync(work, { recursive: true, force: true });
    if (buildDir) rmSync(buildDir, { recursive: true, force: true });
  });

  it('reads the named range of a workspace file, cut on a character boundary, and releases the daemon\'s descriptor', async () => {
    const h = await prepared();
    const file = path.join(work, 'text.txt');
    writeFileSync(file, 'a'.repeat(65_535) + '€' + 'tail');
    const fd = openSync(file, 'r');
    const before = openFds();
    released.length = 0;
    const r = await h.take('ws_x', client, reply(fd, String(fstatSync(fd).ino), 65_535 + 3 + 4, 65_536));
    expect(r).toMatchObject({ length: 65_535, encoding: 'utf-8', eof: false, nextOffset: 65_535 });
    expect(r.content).toBe('a'.repeat(65_535));
    expect('handOff' in r).toBe(false);
    expect(openFds()).toBe(before); // the runner's copy is closed
    // The daemon's copy is released by the next read's request ...
    expect(h.releases('ws_x')).toEqual([fd]);
    expect(h.releases('ws_x')).toBeUndefined();
    // An offset into binary content: the bytes as they are, base64.
    const bin = path.join(work, 'bin');
    writeFileSync(bin, Buffer.from([0, 1, 2, 255, 254, 0, 7, 8]));
    const bfd = openSync(bin, 'r');
    const b = await h.take('ws_x', client, reply(bfd, String(fstatSync(bfd).ino), 8, 5, 2));
    expect(b).toMatchObject({ encoding: 'base64', length: 5, eof: false, nextOffset: 7 });
    expect(Buffer.from(b.content, 'base64')).toEqual(Buffer.from([2, 255, 254, 0, 7]));
    // ... or, when none comes within a second, by fs.release of its own.
    expect(released).toEqual([]);
    for (let i = 0; i < 250 && released.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    expect(released).toEqual([bfd]);
    expect(h.releases('ws_x')).toBeUndefined();
    closeSync(fd);
    closeSync(bfd);
    expect(h.counts).toEqual({ taken: 2, refused: 0 });
  });

  it('refuses, without blocking or reading, whatever is not a regular file of the workspace with the inode named', async () => {
    const fifo = path.join(work, 'fifo');
    execFileSync('mkfifo', [fifo]);
    const elsewhere = mkdtempSync(path.join('/var/tmp', 'atelier-handoff-'));
    writeFileSync(path.join(elsewhere, 'host.txt'), 'host file');
    const regular = path.join(work, 'regular.txt');
    writeFileSync(regular, 'x'.repeat(100));
    const named: Array<[string, number, string]> = [];
    const fifoFd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    named.push(['a fifo', fifoFd, String(fstatSync(fifoFd).ino)]);
    const sockFd = client.socketFd()!;
    named.push(['a socket', sockFd, String(fstatSync(sockFd).ino)]);
    const procFd = openSync('/proc/self/status', 'r');
    named.push(['a /proc file', procFd, String(fstatSync(procFd).ino)]);
    const hostFd = openSync(path.join(elsewhere, 'host.txt'), 'r');
    named.push(['a file on another filesystem', hostFd, String(fstatSync(hostFd).ino)]);
    const regFd = openSync(regular, 'r');
    named.push(['another inode than the one named', regFd, String(fstatSync(regFd).ino + 1)]);
    named.push(['a descriptor the daemon does not have', 987_654, '1']);
    // A range no read can ask for (more than 1 MiB, past the size, negative, not a number): refused before anything is allocated for it.
    const okFd = openSync(regular, 'r');
    const okIno = String(fstatSync(okFd).ino);
    try {
      for (const [what, fd, ino] of named) {
        const h = await prepared();
        released.length = 0;
        const before = openFds();
        expect(() => h.take('ws_x', client, reply(fd, ino, 100)), what).toThrow();
        expect(openFds(), what).toBe(before);
        // Switched off (as the executor does on any failure): what the daemon holds is released at once.
        h.off('ws_x', 'test');
        expect(released, what).toEqual([fd]);
        expect(h.enabled('ws_x')).toBe(false);
        expect(h.counts.refused).toBe(1);
      }
      for (const [what, r] of [
        ['10 GB', reply(okFd, okIno, 10e9)],
        ['past the size', reply(okFd, okIno, 100, 100, 50)],
        ['a negative offset', reply(okFd, okIno, 100, 10, -5)],
        ['a length that is not a number', { ...reply(okFd, okIno, 100), length: '100' as unknown as number }],
      ] as const) {
        const h = await prepared();
        released.length = 0;
        const before = openFds();
        expect(() => h.take('ws_x', client, r), what).toThrow(/out of bounds/);
        expect(openFds(), what).toBe(before);
        h.off('ws_x', 'test');
        expect(released, what).toEqual([okFd]);
      }
    } finally {
      closeSync(okFd);
      for (const [, fd] of named.slice(0, -1)) if (fd !== sockFd) closeSync(fd);
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  it('is not set up for a workspace without its own filesystem, nor for a peer outside the sandbox\'s cgroup', async () => {
    const before = openFds();
    const notMount = new FileHandoff(() => addon);
    await notMount.prepare('ws_a', client, work, async () => [process.pid]);
    expect(notMount.enabled('ws_a')).toBe(false);
    expect(notMount.known('ws_a')).toBe(true);
    const stranger = new FileHandoff(() => addon);
    await stranger.prepare('ws_b', client, SHM, async () => [process.pid + 1]);
    expect(stranger.enabled('ws_b')).toBe(false);
    const noAddon = new FileHandoff(() => null);
    await noAddon.prepare('ws_c', client, SHM, async () => [process.pid]);
    expect(noAddon.enabled('ws_c')).toBe(false);
    expect(openFds()).toBe(before); // no pidfd left open
    const h = await prepared();
    h.forget('ws_x');
    expect(h.enabled('ws_x')).toBe(false);
    expect(openFds()).toBe(before);
  });
});
