/**
 * Read-only directories of the runner in a Pod (managed-package releases, docs/packages.md
 * "Releases on Kubernetes"). Under bubblewrap a release is its verified image mounted on the host
 * and bound read-only; a cluster node has no such mount. Here the runner copies the verified,
 * mounted release into the Pod as it starts:
 *
 *   - the Pod has an emptyDir volume `releases` and an init container of the workspace image that
 *     mounts it read-write at /releases and waits (no network, no claim, no runner socket) until
 *     the runner has filled it;
 *   - the runner streams each release as a tar over one exec stream into that init container
 *     (`tar -x` into /releases/r<i>), then marks it loaded; the init container ends, the main
 *     container starts with each r<i> mounted read-only (subPath) at the bind's target;
 *   - nothing of the workspace runs before the copy is complete: the workspace's own code starts
 *     only with the main container, which sees the copies read-only.
 *
 * The runner reads the source through a descriptor opened O_DIRECTORY|O_NOFOLLOW (the release's
 * own mount, root's and verified when mounted: packages/image.ts); GNU tar archives what it finds
 * there and never follows a symbolic link. At most MAX_COPY_BYTES cross per Pod.
 */
import { spawn } from 'node:child_process';
import { constants as C } from 'node:fs';
import { lstat, open } from 'node:fs/promises';
import path from 'node:path';
import { PassThrough, Transform } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ExecApi as Exec } from './exec-stream.js';
import type { CoreV1Api, V1Container, V1Pod, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import { ServiceError } from '../../core/errors.js';
import type { EphemeralBind } from '../executor.js';
import type { KubernetesExecutorOptions } from './options.js';
import { extractTar, TarRefusal } from './untar.js';

export const RELEASES_CONTAINER = 'releases';
export const RELEASES_VOLUME = 'releases';
const LOAD_DIR = '/releases';
const LOADED_MARK = `${LOAD_DIR}/.loaded`;
/** Most bytes (of tar stream) copied into one Pod. */
export const MAX_COPY_BYTES = 2 * 1024 ** 3;
/** Most bytes queued on a copy's WebSocket before the runner waits. */
const PACE_BYTES = 4 * 1024 * 1024;
/** Targets a copied directory may not take (the Pod's own layout, the runner's files, the image's code). */
const RESERVED = ['/workspace', '/home/user', '/tmp', '/dev', '/proc', '/sys', '/run', '/opt/atelier', '/opt/agent', '/etc', '/usr', '/bin', '/lib'];

/** A read-only directory of the runner copied into the Pod at `target`. */
export interface CopyIn {
  source: string;
  target: string;
}

/**
 * Whether a bind is one this module carries: read-only, a directory (not a link) on the runner,
 * at a normalised absolute target outside the Pod's own layout. Otherwise undefined (the caller
 * refuses it by name).
 */
export async function asCopyIn(b: EphemeralBind): Promise<CopyIn | undefined> {
  if (!b.readOnly || b.sockets) return undefined;
  if (!plainTarget(b.target)) return undefined;
  const t = b.target;
  const st = await lstat(b.source).catch(() => undefined);
  if (!st?.isDirectory()) return undefined;
  return { source: b.source, target: t };
}

/** A normalised absolute path outside the Pod's own layout (where a copied or collected directory may go). */
export function plainTarget(t: string): boolean {
  if (!path.posix.isAbsolute(t) || path.posix.normalize(t) !== t || t === '/' || t.endsWith('/')) return false;
  return !RESERVED.some((r) => t === r || t.startsWith(r + '/') || r.startsWith(t + '/'));
}

/** Checks that no two targets overlap (a subPath mount inside another is not what was asked). */
export function checkTargets(copies: CopyIn[], field: string): void {
  for (const a of copies)
    for (const b of copies)
      if (a !== b && (a.target === b.target || a.target.startsWith(b.target + '/')))
        throw new ServiceError('INVALID_ARGUMENT', `${field}: ${a.target} and ${b.target} overlap`, { field, target: a.target });
}

/** What a Pod needs for its copies: the volume, the init container, the main container's read-only mounts. */
export function releaseVolumeParts(copies: CopyIn[], o: KubernetesExecutorOptions): { volumes: V1Volume[]; initContainers: V1Container[]; mounts: V1VolumeMount[] } {
  if (copies.length === 0) return { volumes: [], initContainers: [], mounts: [] };
  return {
    volumes: [{ name: RELEASES_VOLUME, emptyDir: {} }],
    initContainers: [
      {
        name: RELEASES_CONTAINER,
        image: o.workspaceImage,
        // Waits for the runner (a bounded wait: a runner gone before the copy fails the Pod).
        command: ['sh', '-c', `i=0; until [ -e ${LOADED_MARK} ]; do i=$((i+1)); [ $i -gt 6000 ] && exit 1; sleep 0.1; done`],
        resources: { limits: { memory: '128Mi', cpu: '500m' }, requests: { memory: '16Mi', cpu: '10m' } },
        securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] }, readOnlyRootFilesystem: false },
        volumeMounts: [{ name: RELEASES_VOLUME, mountPath: LOAD_DIR }],
      },
    ],
    mounts: copies.map((c, i) => ({ name: RELEASES_VOLUME, mountPath: c.target, subPath: `r${i}`, readOnly: true })),
  };
}

export interface CopyStats {
  bytes: number;
  ms: number;
}

/**
 * Fills the Pod's releases volume: waits for its init container to run, streams each copy in
 * (one exec stream each), marks it loaded. Resolves with what crossed; rejects naming the copy
 * that failed (the Pod is the caller's to delete).
 */
export async function loadCopies(core: CoreV1Api, exec: Exec, ns: string, pod: string, copies: CopyIn[], deadline: number): Promise<CopyStats> {
  const started = Date.now();
  await waitInitRunning(core, ns, pod, deadline);
  let bytes = 0;
  for (const [i, c] of copies.entries()) {
    bytes += await copyInto(exec, ns, pod, RELEASES_CONTAINER, c, `${LOAD_DIR}/r${i}`, MAX_COPY_BYTES - bytes);
  }
  await execIn(exec, ns, pod, RELEASES_CONTAINER, ['touch', LOADED_MARK], undefined, 'mark the releases loaded');
  return { bytes, ms: Date.now() - started };
}

async function waitInitRunning(core: CoreV1Api, ns: string, pod: string, deadline: number): Promise<void> {
  for (let delay = 100; ; delay = Math.min(delay * 2, 2_000)) {
    let p: V1Pod | undefined;
    try {
      p = await core.readNamespacedPod({ name: pod, namespace: ns });
    } catch {
      p = undefined;
    }
    const st = p?.status?.initContainerStatuses?.find((s) => s.name === RELEASES_CONTAINER);
    if (st?.state?.running) return;
    if (st?.state?.terminated || p?.status?.phase === 'Failed' || p?.status?.phase === 'Succeeded')
      throw new ServiceError('FAILED_PRECONDITION', `pod ${pod}: its ${RELEASES_CONTAINER} init container ended before the runner filled it`, { pod });
    if (!p) throw new ServiceError('UNAVAILABLE', `pod ${pod} is gone`, { pod });
    if (Date.now() > deadline) throw new ServiceError('DEADLINE_EXCEEDED', `pod ${pod}: its ${RELEASES_CONTAINER} init container was not running in time`, { pod });
    await sleep(delay);
  }
}

/** Streams one directory as a tar (GNU tar on the runner, from a descriptor) into `dir` of `container`. */
export async function copyInto(exec: Exec, ns: string, pod: string, container: string, c: CopyIn, dir: string, budget: number): Promise<number> {
  const fh = await open(c.source, C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW);
  try {
    // fd 3 of tar is the directory: it archives from there and never resolves the path again.
    const tar = spawn('tar', ['-c', '-f', '-', '--numeric-owner', '--owner=0', '--group=0', '-C', '/proc/self/fd/3', '.'], { stdio: ['ignore', 'pipe', 'pipe', fh.fd] });
    let err = '';
    tar.stderr!.on('data', (d: Buffer) => void (err.length < 2048 && (err += d.toString())));
    let bytes = 0;
    let over = false;
    // The client library sends stdin as it comes (no backpressure): the stream waits while more
    // than PACE_BYTES are queued on the WebSocket, so the runner never holds a release in memory.
    let sock: { bufferedAmount: number; readyState: number } | undefined;
    const counted = new Transform({
      transform(chunk: Buffer, _e, cb) {
        bytes += chunk.length;
        if (bytes > budget) {
          over = true;
          tar.kill('SIGKILL');
          return cb(new Error('over the limit'));
        }
        void (async () => {
          while (sock && sock.readyState === 1 && sock.bufferedAmount > PACE_BYTES) await sleep(5);
          cb(null, chunk);
        })();
      },
    });
    tar.stdout!.pipe(counted);
    const tarDone = new Promise<number | null>((resolve) => tar.on('close', (code) => resolve(code)));
    try {
      await execIn(exec, ns, pod, container, ['sh', '-c', 'mkdir -p -- "$0" && exec tar -x -f - --no-same-owner -C "$0"', dir], counted, `copy ${c.target} into the pod`, (ws) => (sock = ws));
    } catch (e) {
      if (over) throw new ServiceError('RESOURCE_EXHAUSTED', `binds: ${c.target}: more than ${budget} bytes to copy into a pod`, { field: 'binds', target: c.target, limit: budget });
      throw e;
    }
    const code = await tarDone;
    if (code !== 0) throw new ServiceError('INTERNAL', `binds: ${c.target}: the runner could not archive it (tar exited ${code}: ${err.trim().slice(0, 300)})`, { field: 'binds', target: c.target });
    return bytes;
  } finally {
    await fh.close();
  }
}

/** One command in `container`; stdin from `input` when given. Rejects unless it exits 0. */
async function execIn(exec: Exec, ns: string, pod: string, container: string, argv: string[], input: NodeJS.ReadableStream | undefined, what: string, onSocket: (ws: { bufferedAmount: number; readyState: number }) => void = () => undefined): Promise<void> {
  const out = new PassThrough();
  const errs = new PassThrough();
  let text = '';
  out.resume();
  errs.on('data', (d: Buffer) => void (text.length < 2048 && (text += d.toString())));
  await new Promise<void>((resolve, reject) => {
    let settled = false;
    const done = (e?: Error): void => {
      if (settled) return;
      settled = true;
      if (e) reject(e);
      else resolve();
    };
    input?.on('error', (e: Error) => done(e));
    exec
      .exec(ns, pod, container, argv, out, errs, (input as import('node:stream').Readable | undefined) ?? null, false, (status) => {
        if (status?.status === 'Success') done();
        else done(new ServiceError('UNAVAILABLE', `pod ${pod}: could not ${what}: ${status?.message ?? 'failed'} ${text.trim().slice(0, 300)}`.trim(), { pod }));
      })
      .then((ws) => (onSocket(ws), ws).on('close', () => setTimeout(() => done(new ServiceError('UNAVAILABLE', `pod ${pod}: the stream to ${what} closed early ${text.trim().slice(0, 300)}`.trim(), { pod })), 1_000)))
      .catch((e: unknown) => done(new ServiceError('UNAVAILABLE', `pod ${pod}: cannot ${what}: ${e instanceof Error ? e.message : String(e)}`, { pod })));
  });
}

/**
 * Brings `dir/name` of the Pod's main container back into `dest/name` on the runner: GNU tar in
 * the Pod writes the stream, the runner's own parser (untar.ts) decides what is written. Rejects
 * with ServiceError (details.reason 'tree_refused') when the stream is refused or tar in the Pod
 * fails (the tree changed while read, for one).
 */
export async function collectFrom(exec: Exec, ns: string, pod: string, dir: string, name: string, dest: string, maxBytes: number, field: string): Promise<number> {
  const out = new PassThrough({ highWaterMark: PACE_BYTES });
  const errs = new PassThrough();
  let text = '';
  errs.on('data', (d: Buffer) => void (text.length < 2048 && (text += d.toString())));
  let ws: { close(): void } | undefined;
  let statusOk: boolean | undefined;
  // The exec stream (exec-stream.ts) pauses its WebSocket's socket while `out` is behind (the
  // parser more than PACE_BYTES behind), so the Pod waits, not the runner's memory.
  out.on('error', () => undefined);
  const status = new Promise<void>((resolve) => {
    exec
      .exec(ns, pod, 'main', ['tar', '-c', '-f', '-', '--format=gnu', '-C', dir, '--', name], out, errs, null, false, (st) => {
        statusOk = st?.status === 'Success';
        out.end();
        resolve();
      })
      .then((sock) => {
        ws = sock as typeof ws;
        sock.on('close', () => setTimeout(() => (out.end(), resolve()), 1_000));
      })
      .catch((e: unknown) => {
        out.destroy(e instanceof Error ? e : new Error(String(e)));
        resolve();
      });
  });
  const refuse = (why: string): ServiceError => new ServiceError('FAILED_PRECONDITION', `${field}: the tree the pod sent back was refused: ${why}; nothing of it is used`, { field, reason: 'tree_refused', refusal: why });
  let bytes: number;
  try {
    bytes = await extractTar(out, dest, name, maxBytes);
  } catch (e) {
    ws?.close();
    out.destroy();
    if (e instanceof TarRefusal) throw refuse(e.message);
    throw refuse(e instanceof Error ? e.message : String(e));
  }
  await status;
  if (statusOk !== true) throw refuse(`tar in the pod did not succeed (${text.trim().slice(0, 300) || 'no status'})`);
  return bytes;
}
