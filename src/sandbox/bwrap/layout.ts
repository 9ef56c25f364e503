/**
 * What every sandbox looks like from inside: its user and host name, where the daemon's socket,
 * the egress proxy socket and /opt/atelier's files are, the proxy's port; and the marks the
 * argument builder (args.ts) leaves for the launcher (launch.ts) to replace with descriptors.
 */
import { EPHEMERAL_CREDHELPER } from '../executor.js';

/** Inside every sandbox. */
export const SANDBOX_USER = { name: 'user', uid: 1000, gid: 1000, home: '/home/user' } as const;
export const HOSTNAME = 'workspace';
export const IN_SOCKET_DIR = '/run/atelier';
export const IN_SOCKET = `${IN_SOCKET_DIR}/d.sock`;
export const IN_PROXY_SOCKET = '/run/egress/proxy.sock';
export { SANDBOX_PROXY_PORT as PROXY_PORT } from '../proxy-env.js';
export const IN_OPT = '/opt/atelier';
export const IN_NODUMP = `${IN_OPT}/lib/nodump.so`;
export const IN_EXEC_STARTER = `${IN_OPT}/lib/exec-starter`;
/**
 * Beside the exec starter, a link named `bash` to Debian's bash-static: a command line started
 * through it reads as bash in every name the kernel keeps (comm, `ps`, `pgrep -x bash`) while
 * skipping the dynamic loader (daemon/exec.ts). Dangling when bash-static is not installed, and the
 * daemon then starts /bin/bash.
 */
export const IN_STATIC_BASH = `${IN_OPT}/lib/bash`;
export const HOST_STATIC_BASH = '/usr/bin/bash-static';
export const IN_EGRESS_RUN = `${IN_OPT}/lib/egress-run`;
/** git's credential helper in short-lived git sandboxes (native.ts CREDHELPER_C). */
export const IN_CREDHELPER = EPHEMERAL_CREDHELPER;
/** bwrap reads the seccomp program from this descriptor (stdio slot 3 of the launcher). */
export const SECCOMP_FD = 3;
/** Marks a --ro-bind-data argument that names a host file; launch() replaces it with a descriptor. */
export const DATA_MARK = '\0data:';
/** The same for a caller's file (EphemeralBind): opened O_NOFOLLOW. */
export const DATA_NOFOLLOW_MARK = '\0data-nofollow:';
/** Stands for the locale archive and its mounts (src/sandbox/locale.ts; expanded, or dropped, in launchWithSeccomp()). */
export const LOCALE_MARK = '\0locale';
/** Stands for the native nodump.so (resolved in launch()). */
export const NODUMP_SOURCE = '\0nodump';
/** Stand for the native programs (resolved in launchWithSeccomp()). */
export const EXEC_STARTER_SOURCE = '\0exec-starter';
export const EGRESS_RUN_SOURCE = '\0egress-run';
export const CREDHELPER_SOURCE = '\0credhelper';
