/**
 * Short-lived sandboxes (runEphemeral: a clone, a package build, a toolbox command): one command
 * in a fresh sandbox with the caller's binds (read-only files copied in from descriptors,
 * directories of sockets relayed from its tmpfs), the egress proxy through the native egress
 * runner, and nothing of it left when it ends.
 */
import { constants as fsConstants } from 'node:fs';
import { lstat, mkdir, open, readdir, type FileHandle } from 'node:fs/promises';
import type { Server } from 'node:net';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { ServiceError } from '../../core/errors.js';
import { testPause } from '../../core/test-pause.js';
import type { ExecResult } from '../daemon/protocol.js';
import type { EphemeralSpec } from '../executor.js';
import { assertTraversable, removeTreeNoFollow, type SandboxIds } from '../rootdir.js';
import { closeRelays, relaySocket, unmountRunFs } from '../runfs.js';
import { bwrapArgs, optData, type DaemonCode, type DataFile, type Mount } from './args.js';
import type { CgroupAccess } from './cgroup-access.js';
import { collect } from './collect.js';
import { commandEnv } from './env.js';
import { killGroup } from './keeper.js';
import type { Launcher } from './launch.js';
import { IN_EGRESS_RUN, IN_PROXY_SOCKET, PROXY_PORT, SANDBOX_USER } from './layout.js';
import type { BwrapSettings } from './options.js';
import { checkProxySocket } from './proxy.js';
import { prepareRunDir, runPaths, type RunPaths } from './rundir.js';
import { validateBind, validateId, validateLimits, validateNetwork } from './validate.js';

/** What a short-lived sandbox uses of the executor. */
export interface EphemeralContext {
  settings: BwrapSettings;
  daemon: DaemonCode;
  launcher: Launcher;
  cgroups: CgroupAccess;
}

export async function runEphemeral(ctx: EphemeralContext, spec: EphemeralSpec): Promise<ExecResult> {
  const { settings } = ctx;
  const id = spec.id ?? `eph-${randomBytes(8).toString('hex')}`;
  validateId(id);
  validateLimits(spec.limits);
  validateNetwork(spec.network);
  if ((spec.argv === undefined) === (spec.command === undefined)) {
    throw new ServiceError('INVALID_ARGUMENT', 'exactly one of argv and command is required');
  }
  if (spec.argv !== undefined && spec.argv.length === 0) throw new ServiceError('INVALID_ARGUMENT', 'argv must not be empty');
  const binds = spec.binds.map(validateBind);
  for (const b of binds) await assertTraversable(b.source, settings.ids);
  const proxy = spec.network === 'none' ? undefined : spec.network.proxySocket;
  if (proxy) await checkProxySocket(proxy, settings.ids);

  const p = runPaths(settings.runDir, id);
  const cg = await ctx.cgroups.create(id, spec.limits);
  const started = Date.now();
  const relays: Server[] = [];
  const dirs: FileHandle[] = [];
  try {
    const env = commandEnv(spec.env, spec.network);
    // Sockets shared with the host come from the sandbox's own tmpfs (runfs.ts), relayed.
    const withSockets = proxy !== undefined || binds.some((b) => b.sockets);
    await prepareRunDir(settings.runDir, settings.ids, p, env, withSockets);
    const mounts: Mount[] = [];
    const files: DataFile[] = [];
    for (const [i, b] of binds.entries()) {
      const st = b.sockets ? undefined : await lstat(b.source);
      if (b.sockets) {
        mounts.push({ source: await relayDirectory(settings.ids, p, i, b.source, relays, dirs), target: b.target, readOnly: true });
      } else if (b.readOnly && st!.isFile() && st!.mode & 0o004) {
        // A read-only file anyone may read (a CA bundle, a package.json) is copied in from a
        // descriptor (opened O_NOFOLLOW): no host path shows. Others stay binds (what the sandbox user may read of them is unchanged).
        files.push({ source: b.source, target: b.target, noFollow: true });
      } else {
        mounts.push({ source: b.source, target: b.target, readOnly: b.readOnly ?? false });
      }
    }
    if (proxy) {
      await mkdir(p.egress, { mode: 0o755 });
      relays.push(await relaySocket(path.join(p.egress, path.basename(IN_PROXY_SOCKET)), () => proxy, settings.ids));
      mounts.push({ source: p.egress, target: path.dirname(IN_PROXY_SOCKET), readOnly: true });
    }
    await testPause('ephemeral:runfs'); // test-only (core/test-pause.ts): its tmpfs and relays are up, the command not started
    const bound = new Set(binds.map((b) => b.target));
    const argv = spec.argv ?? ['/bin/bash', '-c', spec.command!];
    // With a proxy the native egress runner starts the bridge and execs the command (native.ts).
    const command = proxy ? [IN_EGRESS_RUN, String(PROXY_PORT), IN_PROXY_SOCKET, ...argv] : argv;
    const args = bwrapArgs(settings, {
      mounts,
      tmpfs: ['/tmp', SANDBOX_USER.home].filter((t) => !bound.has(t)),
      etcDir: p.etc,
      data: [...optData(p, false, ctx.daemon), ...files],
      env,
      cwd: spec.cwd ?? '/',
      asRoot: spec.privileged === true,
    });
    // collect() listens from the moment of the spawn (launchWithSeccomp's `attach`).
    const { done } = await ctx.launcher.launchWithSeccomp(cg, undefined, false, [...args, '--', ...command], ['pipe', 'pipe', 'pipe'], (child) => ({
      done: collect(child, spec, started, async () => {
        if (cg) await cg.killAll();
        else killGroup(child.pid);
      }),
    }));
    return await done;
  } finally {
    // Nothing of the sandbox may outlive it: its pid namespace ended with the command, so its
    // cgroup is normally empty and goes at once; anything left is killed first. Its runtime
    // files (its relays and tmpfs first) go at the same time.
    await Promise.all([
      (async () => {
        if (cg && !(await cg.removeIfEmpty())) {
          await cg.killAll();
          await cg.remove();
        }
      })(),
      (async () => {
        await closeRelays(relays);
        for (const d of dirs) await d.close();
        await unmountRunFs(p.mnt);
        await removeTreeNoFollow(p.dir);
      })(),
    ]);
  }
}

/**
 * A directory of sockets the runner serves (EphemeralBind.sockets), as a directory of relays in
 * the sandbox's tmpfs: `<mnt>/x<i>/<name>` for each socket in it now. The relays reach the
 * sockets through a descriptor of the directory (opened O_NOFOLLOW), so they follow it through a
 * rename (an agent's socket directory is renamed once assigned) and never resolve its path again.
 */
async function relayDirectory(ids: SandboxIds, p: RunPaths, i: number, source: string, relays: Server[], dirs: FileHandle[]): Promise<string> {
  const dir = await open(source, fsConstants.O_RDONLY | fsConstants.O_DIRECTORY | fsConstants.O_NOFOLLOW);
  dirs.push(dir);
  const via = `/proc/self/fd/${dir.fd}`;
  const into = path.join(p.mnt, `x${i}`);
  await mkdir(into, { mode: 0o755 });
  for (const name of await readdir(via)) {
    if (!(await lstat(path.join(via, name))).isSocket()) continue;
    relays.push(await relaySocket(path.join(into, name), () => path.join(via, name), ids));
  }
  return into;
}
