/**
 * Launching bubblewrap as the runner does for every sandbox: a root /bin/sh that joins the
 * sandbox's cgroups, sets oom_score_adj and RLIMIT_CORE=0, then setpriv dropping to the sandbox
 * uid, an optional keeper (long-lived sandboxes: bwrap's parent), and bwrap with its options read
 * from a descriptor, the seccomp program on another and every --ro-bind-data file opened and
 * passed as one. Owns the host artifacts this needs, made once: the native programs (native.ts)
 * and the locale archive (locale.ts).
 */
import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { constants as fsConstants, writeFileSync } from 'node:fs';
import { open, rm, writeFile, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type { SandboxCgroup } from '../cgroups.js';
import { HOST_LOCALE_DIR, localeArchive, type LocaleArchive } from '../locale.js';
import { nativeArtifacts, type NativeArtifacts } from '../native.js';
import type { SandboxIds } from '../rootdir.js';
import { CREDHELPER_SOURCE, DATA_MARK, DATA_NOFOLLOW_MARK, EGRESS_RUN_SOURCE, EXEC_STARTER_SOURCE, LOCALE_MARK, NODUMP_SOURCE } from './layout.js';

/**
 * Runs as root: joins the cgroups named in its arguments, then execs the rest.
 * Arguments: <oom_score_adj or -> <n> <n cgroup.procs files> <command...>
 */
const LAUNCH_SCRIPT = `oom=$1; n=$2; shift 2
while [ "$n" -gt 0 ]; do
  echo $$ > "$1" || { echo "atelier: cannot join cgroup $1" >&2; exit 121; }
  shift; n=$((n - 1))
done
[ "$oom" = - ] || echo "$oom" 2>/dev/null > /proc/self/oom_score_adj || true
ulimit -c 0
exec "$@"`;
/** Keeps running as bwrap's parent (not exec'd away: a command follows). */
const KEEPER_SCRIPT = '"$@"; exit $?';

export interface LauncherSettings {
  runDir: string;
  ids: SandboxIds;
  bwrapPath: string;
  setprivPath: string;
}

export class Launcher {
  private locale: Promise<LocaleArchive | undefined> | undefined;
  private native: Promise<NativeArtifacts> | undefined;

  constructor(
    private readonly settings: LauncherSettings,
    private readonly onNote: ((message: string) => void) | undefined,
  ) {}

  /** The sandboxes' locale archive (src/sandbox/locale.ts), made once; undefined when there is none. */
  private localeArchive(): Promise<LocaleArchive | undefined> {
    this.locale ??= localeArchive(this.settings.runDir, HOST_LOCALE_DIR, (why) => this.onNote?.(why));
    return this.locale;
  }

  private nativeArtifacts(): Promise<NativeArtifacts> {
    this.native ??= nativeArtifacts(this.settings.runDir).catch((err) => {
      this.native = undefined;
      throw err;
    });
    return this.native;
  }

  /**
   * launch() with bubblewrap's arguments passed through a descriptor (`bwrap --args FD`, so the
   * sandbox's pid 1 shows no host path in its command line), the seccomp program on descriptor
   * SECCOMP_FD (`--seccomp`), and every --ro-bind-data file opened and passed as a descriptor.
   *
   * `attach` gets the child in the same tick as the spawn, before this function's own clean-up
   * awaits anything: a child that ends within those awaits would otherwise have its output
   * drained and discarded by Node (an unread pipe is flushed at exit) and its 'close' emitted
   * before anyone listens, which is how a short-lived sandbox came back empty or never answered.
   */
  async launchWithSeccomp<T>(
    cg: SandboxCgroup | undefined,
    oomScoreAdj: number | undefined,
    keeper: boolean,
    bwrapArgv: string[],
    stdio: StdioOptions,
    attach: (child: ChildProcess) => T,
    /** SandboxSpec.rootUserNamespace's id map: written for bubblewrap's user namespace before it goes on (--userns-block-fd). */
    idMap?: string,
  ): Promise<T> {
    const native = await this.nativeArtifacts();
    const open_: FileHandle[] = [];
    const fds: number[] = [];
    const fdFor = async (file: string, noFollow = false): Promise<number> => {
      const fh = await open(file, noFollow ? fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW : 'r');
      open_.push(fh);
      fds.push(fh.fd);
      return 2 + fds.length; // stdio slot in the child
    };
    try {
      const seccompSlot = await fdFor(native.seccompBpf);
      const argv = ['--seccomp', String(seccompSlot)];
      // Options go through the file; bwrap takes the command (after --) from its real command line.
      const sep = bwrapArgv.indexOf('--');
      const options = sep < 0 ? bwrapArgv : bwrapArgv.slice(0, sep);
      const command = sep < 0 ? [] : bwrapArgv.slice(sep);
      for (const arg of options) {
        if (arg === LOCALE_MARK) {
          // A tmpfs over /usr/lib/locale holding the archive (a copy: no runner path shows inside)
          // and the host's compiled locales (read-only binds), then made read-only.
          const loc = await this.localeArchive();
          if (!loc) continue;
          argv.push('--tmpfs', HOST_LOCALE_DIR);
          for (const l of loc.locales) argv.push('--ro-bind', path.join(loc.hostDir, l), path.posix.join(HOST_LOCALE_DIR, l));
          argv.push('--perms', '0444', '--ro-bind-data', String(await fdFor(loc.archive)), path.posix.join(HOST_LOCALE_DIR, 'locale-archive'), '--remount-ro', HOST_LOCALE_DIR);
          continue;
        }
        if (arg.startsWith(DATA_NOFOLLOW_MARK)) {
          argv.push(String(await fdFor(arg.slice(DATA_NOFOLLOW_MARK.length), true)));
          continue;
        }
        if (!arg.startsWith(DATA_MARK)) {
          argv.push(arg);
          continue;
        }
        const source = arg.slice(DATA_MARK.length);
        const nativeFile: Record<string, string> = {
          [NODUMP_SOURCE]: native.nodumpSo,
          [EXEC_STARTER_SOURCE]: native.execStarter,
          [EGRESS_RUN_SOURCE]: native.egressRun,
          [CREDHELPER_SOURCE]: native.credHelper,
        };
        argv.push(String(await fdFor(nativeFile[source] ?? source)));
      }
      const argsFile = path.join(this.settings.runDir, `args-${process.pid}-${randomBytes(6).toString('hex')}`);
      await writeFile(argsFile, argv.map((x) => `${x}\0`).join(''), { mode: 0o600 });
      try {
        const argsSlot = await fdFor(argsFile);
        // bubblewrap says its child's pid on the info descriptor and waits on the block one until the map is written.
        const infoSlot = 3 + fds.length;
        const mapArgs = idMap === undefined ? [] : ['--userns-block-fd', String(infoSlot + 1), '--info-fd', String(infoSlot)];
        const child = this.launch(cg, oomScoreAdj, keeper, ['--args', String(argsSlot), ...mapArgs, ...command], [...(stdio as unknown[]).slice(0, 3), ...fds, ...(idMap === undefined ? [] : ['pipe', 'pipe'])] as StdioOptions);
        if (idMap !== undefined) writeIdMap(child, infoSlot, idMap);
        return attach(child);
      } finally {
        await rm(argsFile, { force: true });
      }
    } finally {
      for (const fh of open_) await fh.close();
    }
  }

  private launch(
    cg: SandboxCgroup | undefined,
    oomScoreAdj: number | undefined,
    keeper: boolean,
    bwrapArgv: string[],
    stdio: StdioOptions,
  ): ChildProcess {
    const procs = cg?.procsFiles() ?? [];
    const setpriv = [
      this.settings.setprivPath, `--reuid=${this.settings.ids.uid}`, `--regid=${this.settings.ids.gid}`, '--clear-groups',
      '--no-new-privs', '--inh-caps=-all', '--bounding-set=-all', '--',
    ];
    const argv = [
      '-c', LAUNCH_SCRIPT, 'atelier-launch', oomScoreAdj === undefined ? '-' : String(oomScoreAdj), String(procs.length),
      ...procs, ...setpriv, ...(keeper ? ['/bin/sh', '-c', KEEPER_SCRIPT, 'atelier-keeper'] : []),
      this.settings.bwrapPath, ...bwrapArgv,
    ];
    return spawn('/bin/sh', argv, { detached: true, stdio, env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' } });
  }
}

/**
 * Writes `idMap` as the uid and gid map of the user namespace bubblewrap made (its child's pid
 * read from the info descriptor), then lets it go on. Root writes a map of many ids, which an
 * unprivileged bubblewrap cannot. A failure leaves the namespace unmapped: bubblewrap then fails
 * to set up its root and the sandbox does not start.
 */
function writeIdMap(child: ChildProcess, infoSlot: number, idMap: string): void {
  // The info descriptor is read to its end, never closed first: bubblewrap writes its JSON in
  // more than one write, and a write to a closed socket would end it with SIGPIPE. Its copies in
  // the keeper keep it open for the sandbox's life, so it does not hold the runner's loop.
  const info = child.stdio[infoSlot] as import('node:net').Socket;
  const block = child.stdio[infoSlot + 1] as import('node:net').Socket;
  let text = '';
  let settled = false;
  const finish = (go: boolean): void => {
    if (settled) return;
    settled = true;
    if (go) block.end('1', () => block.destroy());
    else block.destroy();
  };
  info.unref?.();
  block.unref?.();
  info.on('error', () => finish(false));
  block.on('error', () => undefined);
  info.on('end', () => {
    finish(false);
    info.destroy();
  });
  info.on('data', (d: Buffer) => {
    if (settled) return;
    text += d.toString('utf8');
    const m = /"child-pid":\s*(\d+)/.exec(text);
    if (!m) return;
    try {
      writeFileSync(`/proc/${m[1]}/uid_map`, idMap);
      writeFileSync(`/proc/${m[1]}/gid_map`, idMap);
      finish(true);
    } catch {
      finish(false);
    }
  });
}
