/**
 * A sandbox's private socket filesystem (issue #31 item 7; docs/sandbox.md "Host paths").
 *
 * /proc/self/mountinfo shows, for every mount, the path of its root inside the filesystem it comes
 * from. A directory of the data directory bound into a sandbox therefore names its host path
 * there, whatever way it is bound (a path and bwrap's --bind-fd measured; open_tree binds the same
 * dentry: the kernel prints a mount's root as its path from the superblock's root). What hides it is a filesystem of its own: each sandbox
 * that needs Unix sockets shared with the host gets a small tmpfs mounted on the host at
 * `<runDir>/<hash>/m` (root-owned, 0711, nosuid, nodev, noexec), and everything bound from it
 * shows as `/s`, `/egress`, `/x0` ... of a `tmpfs`.
 *
 * Sockets the runner serves elsewhere (an egress proxy, the credential broker, an agent's control
 * and gateway sockets) cannot be linked into it (a hard link cannot cross filesystems, and a bind
 * of the socket file would show its path again), so the runner relays them: a listening socket in
 * the tmpfs, owned by the sandbox user and 0600, whose every connection is joined to a new
 * connection to the real socket, bytes both ways, half-closes kept. The relay is in the runner's
 * process, which serves those sockets anyway.
 */
import { execFile } from 'node:child_process';
import { chmod, chown, mkdir, unlink } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { promisify } from 'node:util';
import { isMountPoint, mountinfoPath } from './host-fs.js';

// isMountPoint lives in host-fs.ts (driver-neutral); re-exported for this driver's modules.
export { isMountPoint };

const run = promisify(execFile);

/** Sockets and directories only: a few inodes, no data. */
const MOUNT_OPTIONS = 'size=64k,nr_inodes=256,mode=0711,nosuid,nodev,noexec';


/** The mount whose mount point is `dir` exactly (no symlinks resolved), from /proc/self/mountinfo: its filesystem type and source. */
export function mountAt(dir: string): { fstype: string; source: string } | undefined {
  const target = mountinfoPath(dir);
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const f = line.split(' ');
    const sep = f.indexOf('-');
    if (sep >= 0 && f[4] === target) return { fstype: f[sep + 1]!, source: f[sep + 2]! };
  }
  return undefined;
}


/** Makes dir (root's, 0711) the mount point of a fresh private tmpfs. */
export async function mountRunFs(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o711 });
  if (await isMountPoint(dir)) await unmountRunFs(dir);
  try {
    await run('mount', ['-t', 'tmpfs', '-o', MOUNT_OPTIONS, 'tmpfs', dir]);
  } catch (e) {
    throw new Error(`cannot mount the sandbox's socket filesystem on ${dir}: ${(e as { stderr?: string }).stderr?.trim() || (e as Error).message}`);
  }
  await chmod(dir, 0o711);
}

/**
 * Detaches the tmpfs at dir, if one is mounted there. Lazily: a relay connection still closing
 * holds the mount (an accepted Unix socket keeps its listener's path), and the kernel frees it
 * when the last one goes; the directory is gone from the host at once either way.
 */
export async function unmountRunFs(dir: string): Promise<void> {
  if (!(await isMountPoint(dir))) return;
  await run('umount', ['-l', dir]);
}

/** The open connections of each relay server (closeRelays ends them). */
const relayed = new WeakMap<Server, Set<Socket>>();

/**
 * Listens on `listenPath` (in a sandbox's tmpfs; owned by uid:gid, 0600) and joins every
 * connection to a new connection to `upstream()` (read at each connection, so a socket given as
 * /proc/self/fd/<dir>/<name> follows its directory through a rename).
 */
export async function relaySocket(listenPath: string, upstream: () => string, ids: { uid: number; gid: number }): Promise<Server> {
  await unlink(listenPath).catch(() => undefined);
  const conns = new Set<Socket>();
  const server = createServer({ allowHalfOpen: true }, (down) => {
    conns.add(down);
    down.once('close', () => conns.delete(down));
    join(down, connect({ path: upstream(), allowHalfOpen: true }));
  });
  relayed.set(server, conns);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(listenPath, () => {
      server.off('error', reject);
      resolve();
    });
  });
  server.on('error', () => undefined);
  try {
    await chown(listenPath, ids.uid, ids.gid);
    await chmod(listenPath, 0o600);
  } catch (e) {
    server.close();
    throw e;
  }
  return server;
}

/** Closes relay servers and ends their connections. */
export async function closeRelays(servers: Server[]): Promise<void> {
  await Promise.all(
    servers.map(
      (s) =>
        new Promise<void>((resolve) => {
          s.close(() => resolve());
          for (const c of relayed.get(s) ?? []) c.destroy();
        }),
    ),
  );
}

/** Bytes both ways; an end is passed on as a half-close (pipe); an error ends both; a side fully closed lets the other flush, then ends it. */
function join(a: Socket, b: Socket): void {
  const teardown = (): void => {
    a.destroy();
    b.destroy();
  };
  a.on('error', teardown);
  b.on('error', teardown);
  a.once('close', () => b.destroySoon());
  b.once('close', () => a.destroySoon());
  a.pipe(b);
  b.pipe(a);
}
