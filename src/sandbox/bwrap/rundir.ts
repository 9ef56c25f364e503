/**
 * A sandbox's runtime directory on the host, <runDir>/<hash of its id>/: its layout (state file,
 * daemon log, generated /etc, /opt/atelier's files, the private tmpfs holding the daemon's socket
 * and the egress socket) and how it is made afresh before a start.
 */
import { createHash } from 'node:crypto';
import { chown, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { ServiceError } from '../../core/errors.js';
import { assertTraversable, removeTreeNoFollow, type SandboxIds } from '../rootdir.js';
import { mountRunFs, unmountRunFs } from '../runfs.js';
import { etcContent } from './args.js';
import type { ProxyState } from './proxy.js';

const SOCKET_PATH_MAX = 107;

export interface RunPaths {
  dir: string;
  state: string;
  log: string;
  etc: string;
  opt: string;
  /** The sandbox's private tmpfs (runfs.ts): the socket directory and the egress directory are in it. */
  mnt: string;
  egress: string;
  sockDir: string;
  socket: string;
}

/** <runDir>/<key>/state.json, written when a sandbox has started; read by recover(). */
export interface RunState {
  id: string;
  pid: number;
  startedAt: string;
  proxy: ProxyState | null;
}

export function runPaths(runDir: string, id: string): RunPaths {
  // A hash keeps the socket path short whatever the id's length.
  const dir = path.join(runDir, createHash('sha256').update(id).digest('hex').slice(0, 16));
  return {
    dir,
    state: path.join(dir, 'state.json'),
    log: path.join(dir, 'daemon.log'),
    etc: path.join(dir, 'etc'),
    opt: path.join(dir, 'opt'),
    mnt: path.join(dir, 'm'),
    egress: path.join(dir, 'm', 'egress'),
    sockDir: path.join(dir, 'm', 's'),
    socket: path.join(dir, 'm', 's', 'd.sock'),
  };
}

/**
 * Fresh per-sandbox runtime directory with the generated /etc and /opt/atelier (env file) and,
 * for a sandbox that shares sockets with the host, its private tmpfs (runfs.ts) at p.mnt.
 */
export async function prepareRunDir(runDir: string, ids: SandboxIds, p: RunPaths, env: Record<string, string>, withSockets: boolean): Promise<void> {
  await mkdir(runDir, { recursive: true, mode: 0o711 });
  await unmountRunFs(p.mnt);
  await removeTreeNoFollow(p.dir);
  await mkdir(p.dir, { mode: 0o711 });
  if (withSockets) await mountRunFs(p.mnt);
  await mkdir(p.etc, { mode: 0o755 });
  for (const [name, content] of Object.entries(etcContent())) {
    await writeFile(path.join(p.etc, name), content, { mode: 0o644 });
  }
  await mkdir(p.opt, { mode: 0o755 });
  // Without it node would load the ES modules of /opt/atelier/daemon as CommonJS.
  await writeFile(path.join(p.opt, 'package.json'), '{"type":"module"}\n', { mode: 0o644 });
  const envFile = path.join(p.opt, 'env.json');
  await writeFile(envFile, JSON.stringify(env), { mode: 0o400 });
  await chown(envFile, ids.uid, ids.gid);
  await assertTraversable(p.etc, ids);
  if (p.socket.length > SOCKET_PATH_MAX) {
    throw new ServiceError('FAILED_PRECONDITION', `socket path too long for a Unix socket; use a shorter runDir: ${p.socket}`);
  }
}
