/**
 * Starting a long-lived sandbox: its cgroups, root and runtime directories, the egress relay,
 * bwrap launched under a keeper with the in-sandbox daemon as its command, the wait for the
 * daemon's first ping, the daemon's socket locked to root, and the state file recover() reads.
 * Anything that fails on the way undoes what was started.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chown, mkdir, open, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { ServiceError } from '../../core/errors.js';
import { testPause } from '../../core/test-pause.js';
import { DaemonClient } from '../client.js';
import { DAEMON_VERSION } from '../daemon/protocol.js';
import type { SandboxHandle, SandboxSpec } from '../executor.js';
import { assertTraversable, lockDaemonSocket, prepareRootDir, type SandboxIds } from '../rootdir.js';
import { unmountRunFs } from '../runfs.js';
import { bwrapArgs, optData, type DaemonCode, type Mount } from './args.js';
import type { CgroupAccess } from './cgroup-access.js';
import type { KeeperExit } from './death.js';
import { commandEnv, daemonEnv } from './env.js';
import { killKeeper } from './keeper.js';
import type { Launcher } from './launch.js';
import { IN_NODUMP, IN_EXEC_STARTER, IN_OPT, IN_PROXY_SOCKET, IN_SOCKET, IN_SOCKET_DIR, PROXY_PORT, SANDBOX_USER } from './layout.js';
import type { BwrapSettings } from './options.js';
import { checkProxySocket, type ProxyRelays } from './proxy.js';
import { prepareRunDir, runPaths, type RunPaths, type RunState } from './rundir.js';
import type { Spares } from './spares.js';
import type { LanguageServerHold, LanguageServerMounts } from './lsp-image.js';
import { validateBind } from './validate.js';

/**
 * Keeps the daemon out of the OOM killer's way (best effort: lowering it needs CAP_SYS_RESOURCE).
 * The daemon resets it to 0 for every exec.
 */
const DAEMON_OOM_SCORE_ADJ = -900;
/**
 * Node flags of the in-sandbox daemon. Its V8 heap is capped at 96 MiB (its resident set under
 * sustained mixed load is about 50 MiB: bench/soak): a runaway inside the daemon ends the daemon
 * (with "Reached heap limit" in its log, see daemonDeath) long before the workspace's memory
 * cgroup (64 MiB to 1 TiB, default 2 GiB) has to kill anything else. Everything it keeps per
 * terminal, exec and request is bounded in bytes and in objects (docs/sandbox.md, "Daemon memory").
 */
export const DAEMON_NODE_FLAGS = ['--max-old-space-size=96', '--v8-pool-size=2'];

/** What a start uses of the executor. */
export interface StartContext {
  settings: BwrapSettings;
  daemon: DaemonCode;
  launcher: Launcher;
  cgroups: CgroupAccess;
  proxies: ProxyRelays;
  spares: Spares;
  /** The language servers' image, mounted while daemon sandboxes start (lsp-image.ts). */
  languageServers: LanguageServerMounts;
  /** Told how the sandbox's keeper ended (for daemonDeath). */
  onExit(id: string, exit: KeeperExit): void;
  /** The daemon answered: the executor keeps this connection as the sandbox's, with its keeper. */
  adopt(id: string, client: DaemonClient, pid: number): void;
}

export async function startSandbox(ctx: StartContext, spec: SandboxSpec): Promise<SandboxHandle> {
  const { settings } = ctx;
  const p = runPaths(settings.runDir, spec.id);
  await checkDaemon(settings.daemonDir, settings.ids);
  const proxy = spec.network === 'none' ? undefined : spec.network.proxySocket;
  if (proxy) await checkProxySocket(proxy, settings.ids);
  // Leftover processes are killed first: nothing of the sandbox may run while root walks its tree.
  const cg = await ctx.cgroups.create(spec.id, spec.limits);
  let pid: number | undefined;
  let lsp: LanguageServerHold | null = null;
  try {
    await prepareRootDir(spec.rootDir, settings.ids);
    await assertTraversable(path.join(spec.rootDir, 'repo'), settings.ids);
    await prepareRunDir(settings.runDir, settings.ids, p, commandEnv(spec.env, spec.network), true);
    await mkdir(p.sockDir, { mode: 0o700 });
    await chown(p.sockDir, settings.ids.uid, settings.ids.gid);
    await mkdir(p.egress, { mode: 0o755 });
    const proxyState = proxy ? await ctx.proxies.attach(spec.id, p, proxy) : null;
    await testPause('sandbox:runfs'); // test-only (core/test-pause.ts): the socket filesystem is mounted, nothing runs yet
    const mounts: Mount[] = [
      { source: path.join(spec.rootDir, 'repo'), target: '/workspace', readOnly: false },
      { source: path.join(spec.rootDir, 'home'), target: SANDBOX_USER.home, readOnly: false },
      { source: path.join(spec.rootDir, 'tmp'), target: '/tmp', readOnly: false },
      { source: p.sockDir, target: IN_SOCKET_DIR, readOnly: false },
      { source: p.egress, target: path.dirname(IN_PROXY_SOCKET), readOnly: true },
    ];
    // Managed-package releases: always read-only.
    for (const m of spec.mounts ?? []) mounts.push({ ...validateBind(m), readOnly: true });
    // The daemon alone preloads nodump.so (PR_SET_DUMPABLE 0); commands get the env file's environment.
    const mapped = spec.rootUserNamespace;
    // Held until the daemon answers: by then bubblewrap has made the sandbox's binds of it.
    lsp = await ctx.languageServers.acquire();
    const args = bwrapArgs(settings, { mounts, tmpfs: [], etcDir: p.etc, data: optData(p, true, ctx.daemon), env: { ...daemonEnv(), LD_PRELOAD: IN_NODUMP }, cwd: '/workspace', ...(mapped ? { mappedRoot: { capabilities: mapped.capabilities } } : {}), ...(lsp ? { languageServers: lsp.binds } : {}) });
    const daemon = [
      // In a namespace mapped by the launcher bubblewrap keeps the runner's own id (the map's 1000): the daemon becomes uid 0 there.
      ...(mapped ? ['/usr/bin/setpriv', '--reuid=0', '--regid=0', '--clear-groups', '--'] : []),
      settings.nodePath, ...DAEMON_NODE_FLAGS, `${IN_OPT}/daemon/main.js`,
      '--socket', IN_SOCKET, '--workspace', '/workspace', '--env-file', `${IN_OPT}/env.json`, '--orphan-grace-ms', String(settings.orphanGraceMs),
      '--exec-starter', IN_EXEC_STARTER,
      ...(proxy ? ['--egress-socket', IN_PROXY_SOCKET, '--egress-port', String(PROXY_PORT)] : []),
    ];
    const log = await open(p.log, 'a', 0o600);
    let child: ChildProcess;
    // An early end is seen however soon it comes (launchWithSeccomp's `attach` runs at the spawn).
    let exited: string | undefined;
    try {
      child = await ctx.launcher.launchWithSeccomp(cg, DAEMON_OOM_SCORE_ADJ, true, [...args, '--', ...daemon], ['ignore', log.fd, log.fd], (c) => {
        c.once('exit', (code, sig) => {
          exited = sig ?? `exit ${code}`;
          // The keeper's status is bwrap's, which is the daemon's (128+n when a signal ended it).
          ctx.onExit(spec.id, { pid: c.pid, code, signal: sig });
        });
        c.once('error', (err) => {
          exited = `cannot start: ${err.message}`;
        });
        return c;
      }, mapped?.idMap);
    } finally {
      await log.close();
    }
    // The sandbox outlives the runner (recover() reattaches), so the runner does not wait for it.
    child.unref();
    pid = child.pid!;
    const client = await waitReady(p, () => exited, settings.startTimeoutMs);
    await lsp?.release();
    // Listening now, and no workspace process exists yet: the socket and its directory become
    // root's, so no workspace process can connect to, replace or remove them (docs/sandbox.md).
    await lockDaemonSocket(p.sockDir, path.basename(p.socket));
    ctx.adopt(spec.id, client, pid);
    await testPause('sandbox:ready'); // test-only: the daemon answers, no state file yet
    const state: RunState = { id: spec.id, pid, startedAt: new Date().toISOString(), proxy: proxyState };
    await writeFile(p.state, JSON.stringify(state), { mode: 0o600 });
    const handle = { id: spec.id, socketPath: p.socket, pid };
    // Spares ready before the first exec (an open's first command included).
    ctx.spares.reset(spec.id);
    if (cg) ctx.spares.fill(handle, cg);
    return handle;
  } catch (err) {
    await lsp?.release();
    if (cg) {
      await cg.killAll();
      await cg.remove();
    } else if (pid !== undefined) {
      await killKeeper(pid);
    }
    await ctx.proxies.close(spec.id);
    await unmountRunFs(p.mnt).catch(() => undefined);
    throw err;
  }
}

async function waitReady(p: RunPaths, exitedHow: () => string | undefined, startTimeoutMs: number): Promise<DaemonClient> {
  const client = new DaemonClient(p.socket, { connectTimeoutMs: 1_000 });
  const deadline = Date.now() + startTimeoutMs;
  for (;;) {
    const exited = exitedHow();
    if (exited !== undefined) {
      throw new ServiceError('FAILED_PRECONDITION', `sandbox ended during start-up (${exited})`, { log: await tail(p.log) });
    }
    try {
      const pong = await client.ping(1_000);
      if (pong.version !== DAEMON_VERSION) {
        throw new ServiceError('FAILED_PRECONDITION', `sandbox daemon version ${pong.version}, expected ${DAEMON_VERSION}`);
      }
      return client;
    } catch (err) {
      if (err instanceof ServiceError && err.code === 'FAILED_PRECONDITION') throw err;
    }
    if (Date.now() > deadline) {
      client.close();
      throw new ServiceError('UNAVAILABLE', `sandbox daemon did not answer within ${startTimeoutMs} ms`, {
        log: await tail(p.log),
      });
    }
    await sleep(25);
  }
}

async function checkDaemon(daemonDir: string, ids: SandboxIds): Promise<void> {
  const main = path.join(daemonDir, 'main.js');
  if (!existsSync(main)) {
    throw new ServiceError('FAILED_PRECONDITION', `compiled sandbox daemon not found at ${main} (build with npx tsc -p .)`);
  }
  await assertTraversable(main, ids);
}

async function tail(file: string, bytes = 2048): Promise<string> {
  try {
    const text = await readFile(file, 'utf8');
    return text.slice(-bytes);
  } catch {
    return '';
  }
}
