/**
 * Approved privileged commands in a cluster (issue #34): the same promise as bubblewrap's (uid 0
 * inside, nothing of the node opens up) from a Kubernetes user namespace.
 *
 *   - The Pod: `hostUsers: false` (uid 0 inside is an unprivileged node uid; volumes idmapped),
 *     `runAsUser: 0`, only PRIVILEGED_CAPABILITIES, no privilege escalation, RuntimeDefault
 *     seccomp, the deny-all policy, the workspace claim's repo and home (manifests.ts).
 *   - Refused rather than run as the node's root: a stored Pod without `hostUsers: false` (an API
 *     server without UserNamespacesSupport drops the field silently) is deleted before anything
 *     runs in it (hostUsersProblem); inside, /proc/self/uid_map must not reach the node's uid 0
 *     (../id-map.ts hostRootProblem) before the command runs.
 *   - Ownership: with idmapped volumes what uid 0 writes is uid 0 on the volume, which the
 *     workspace user (1000) could not edit. After the command, in the same Pod, as its root,
 *     HAND_BACK gives whatever is owned by uid or gid 0 under /workspace and /home/user to
 *     1000:1000 (on one host the same files are the workspace uid on disk already).
 */
import type { V1Pod } from '@kubernetes/client-node';
import { ServiceError } from '../../core/errors.js';

/**
 * What a root user normally uses on files and processes: ownership and modes (CHOWN, FOWNER,
 * FSETID), reading and writing past modes (DAC_OVERRIDE), signalling processes of other ids
 * (KILL), switching ids (SETUID, SETGID: su, setpriv, package scripts dropping to a user). Not
 * NET_BIND_SERVICE (no network anyway), not SYS_ADMIN (mounts), not SYS_CHROOT, MKNOD, SETPCAP,
 * NET_RAW or AUDIT_WRITE (Docker's default adds these; none is needed to own and edit files).
 */
export const PRIVILEGED_CAPABILITIES = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'SETGID', 'SETUID'] as const;

/** The workspace user the files go back to (the workspace image's user). */
export const WORKSPACE_UID = 1000;

/** The two places of the workspace claim a privileged Pod mounts (runPrivileged's binds). */
export const HAND_BACK_ROOTS = ['/workspace', '/home/user'] as const;

/**
 * The hand-back, run by /bin/sh as the Pod's root after the command. First the processes the
 * command left behind (a `setsid` child escapes the daemon's process-group kill) are ended, so
 * none writes as uid 0 after the hand-back or swaps a directory under it: every process but pid 1,
 * this shell and its ancestors (the daemon) and those with parent 0 (sessions the container
 * runtime's exec started from outside the Pod's pid namespace: the daemon's relay), in rounds
 * until none is left (at most 20). Then entries owned by uid or gid 0 under the claim's two mounts
 * go to 1000:1000: find never follows a link (-P) nor leaves the mount it starts on (-xdev: the
 * claim's sub-paths, nothing of the image); `chown -h` changes a link itself, never its target.
 * The Pod's user namespace bounds the rest: only ids mapped in it can be touched, none of them
 * the node's. Only shell builtins in the loop (no process of its own to mistake for a survivor).
 */
export const HAND_BACK_SCRIPT = [
  'keep=" 1 $$ "; p=$$',
  'ppid() { pp=; while read -r k v; do [ "$k" = PPid: ] && pp=$v && break; done < "/proc/$1/status"; } 2>/dev/null',
  'while [ "$p" -gt 1 ]; do ppid "$p" || break; [ -n "$pp" ] || break; keep="$keep$pp "; p=$pp; done',
  'round=0',
  'while [ $round -lt 20 ]; do',
  '  n=0',
  '  for d in /proc/[0-9]*; do',
  '    pid=${d#/proc/}',
  '    case $keep in *" $pid "*) continue ;; esac',
  '    ppid "$pid" || continue',
  '    [ -n "$pp" ] && [ "$pp" != 0 ] && [ "$pp" != $$ ] || continue',
  '    kill -9 "$pid" 2>/dev/null && n=$((n + 1))',
  '  done',
  '  [ $n = 0 ] && break',
  '  round=$((round + 1))',
  'done',
  `exec find -P ${HAND_BACK_ROOTS.join(' ')} -xdev \\( -uid 0 -o -gid 0 \\) -exec chown -h ${WORKSPACE_UID}:${WORKSPACE_UID} {} +`,
].join('\n');

export const HAND_BACK = ['/bin/sh', '-c', HAND_BACK_SCRIPT];

/** Why the Pod as the API server answered it (a dry run's, or the stored one) could run as the node's root, or null: it must say `hostUsers: false`. */
export function hostUsersProblem(stored: V1Pod): string | null {
  const v = stored.spec?.hostUsers;
  if (v === false) return null;
  return `the API server answered with the Pod's hostUsers ${v === undefined ? 'absent' : String(v)}, not false`;
}

/** The error's words for a cluster that cannot give a privileged Pod a user namespace. */
export const USER_NAMESPACES_NEEDED =
  'approved privileged commands need Kubernetes user namespaces (Pod spec.hostUsers: false): Kubernetes 1.33 or later, or 1.30-1.32 with the UserNamespacesSupport feature gate on the API server and kubelets, a container runtime that supports them (containerd 2.0+ or CRI-O 1.25+) and node filesystems with idmapped mounts (Linux 6.3+ for most); refused rather than run as the node\'s root';

/**
 * A privileged Pod's create refused by Pod Security admission (the namespace enforces
 * `restricted`, whose only addable capability is NET_BIND_SERVICE): said as what the operator
 * changes. `created` is the create's error as asServiceError made it; null when it is another.
 */
export function podSecurityRefusal(created: ServiceError, namespace: string): ServiceError | null {
  if ((created.details as { kubernetesStatus?: number } | undefined)?.kubernetesStatus !== 403 || !/PodSecurity/.test(created.message)) return null;
  return new ServiceError(
    'FAILED_PRECONDITION',
    `privileged: Pod Security admission refused the privileged Pod (${created.message}); approved privileged commands need namespace ${namespace} at the baseline level, which allows a root user's file capabilities in a user namespace (the restricted level allows adding none): kubectl label namespace ${namespace} pod-security.kubernetes.io/enforce=baseline pod-security.kubernetes.io/warn=restricted --overwrite (docs/scaling.md)`,
    { field: 'privileged', namespace, driver: 'kubernetes' },
  );
}
