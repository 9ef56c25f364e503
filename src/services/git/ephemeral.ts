/**
 * Ephemeral git: a git command (or a short script) on a workspace's repository in a short-lived
 * sandbox. Without a repository it has no network. With one (clone, fetch, pull, push, recover
 * export) it gets, for this operation only: an egress proxy that reaches only the repository
 * host:port (WorkspaceEgress.startRepositoryHostOnly), the credential broker's socket (the
 * temporary credential goes from the runner's memory to git's, never to a file or the
 * workspace), the operator's extra CA bundle, and git config pointing at both. Everything is
 * removed when the command ends. Used by WorkspaceService (clone, recover) and GitService
 * (fetch, pull, push) through WorkspaceService.ephemeralGit. Also: classifying a failed git
 * network command into an error code (gitFailure).
 */
import { readFileSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ServiceError } from '../../core/errors.js';
import type { WorkspaceEgress } from '../../sandbox/egress/workspace.js';
import type { EgressProxy } from '../../sandbox/egress.js';
import { EPHEMERAL_CREDHELPER, type EphemeralBind, type Executor, type ExecResult, type SandboxLimits, type SandboxNetwork } from '../../sandbox/executor.js';
import { CRED_SOCKET_DIR, CRED_SOCKET_NAME, startCredentialBroker } from '../repos/index.js';
import { gitConfigEnv, NEUTRALISE_REPO_DRIVERS } from './safety.js';
import type { RepoCredentialStore } from '../repos/index.js';
import type { ParsedRepoUrl, RepositoryPolicy } from '../repos/index.js';

export interface EphemeralGitOptions {
  /** The approved repository: gives the sandbox its one-host network and credential. */
  repo?: ParsedRepoUrl;
  env?: Record<string, string>;
  timeoutMs?: number;
  onOutput?: (s: 'stdout' | 'stderr', c: Buffer) => void;
  signal?: AbortSignal;
  /**
   * Prefix the command with NEUTRALISE_REPO_DRIVERS (default). Only a command that runs before any
   * repository config exists (the clone, which makes it from the runner's arguments) may skip it.
   */
  neutralise?: boolean;
}

export interface EphemeralGitDeps {
  executor: Executor;
  egress: WorkspaceEgress;
  repoCredentials: RepoCredentialStore;
  repos: Pick<RepositoryPolicy, 'extraCaPem'>;
  /** <dataDir>/run: the operation's root-owned temporary directory is made here. */
  runDir: string;
  /** The sandbox user (the broker's socket belongs to it). */
  uid: number;
  gid: number;
}

/** Where the extra CA bundle is mounted in the short-lived sandbox. */
const CA_IN_SANDBOX = '/run/atelier-ca.pem';
const SYSTEM_CA = '/etc/ssl/certs/ca-certificates.crt';
/** The system bundle, read once (the operator's extra CAs are read on every operation). */
let systemCa: string | undefined;

/**
 * Runs `command` (prefixed with the repository-driver neutralisation) in /workspace = `repoDir`,
 * with the runner's safe git config and, given a repository, its one-host network and credential.
 */
export async function runEphemeralGit(
  deps: EphemeralGitDeps,
  workspace: { id: string; repoDir: string; limits: SandboxLimits },
  command: string,
  opts: EphemeralGitOptions = {},
): Promise<ExecResult> {
  const binds: EphemeralBind[] = [{ source: workspace.repoDir, target: '/workspace' }];
  const extraConfig: Array<[string, string]> = [];
  let network: SandboxNetwork = 'none';
  let broker: Awaited<ReturnType<typeof startCredentialBroker>> | undefined;
  let proxy: EgressProxy | undefined;
  let tmp: string | undefined;
  try {
    if (opts.repo) {
      tmp = await mkdtemp(join(deps.runDir, 'g-'));
      // Root-owned (0711): the sandbox user may use the socket inside, never change the directory.
      await chmod(tmp, 0o711);
      const proxySocket = join(tmp, 'p.sock');
      const repo = opts.repo;
      // The proxy and the broker start side by side; whichever started is closed below if the other failed.
      const [p, b] = await Promise.allSettled([
        deps.egress.startRepositoryHostOnly(proxySocket, workspace.id, repo.host, repo.port),
        deps.repoCredentials.resolve(repo).then((credential) => startCredentialBroker({ runDir: deps.runDir, repo, credential, uid: deps.uid, gid: deps.gid })),
      ]);
      if (p.status === 'fulfilled') proxy = p.value;
      if (b.status === 'fulfilled') broker = b.value;
      if (p.status === 'rejected') throw p.reason;
      if (b.status === 'rejected') throw b.reason;
      network = { proxySocket };
      // Where this driver's short-lived sandbox takes them (a Kubernetes Pod: under its own /run/atelier).
      const layout = deps.executor.ephemeralLayout;
      const credDir = layout?.credSocketDir ?? CRED_SOCKET_DIR;
      const caFile = layout?.caFile ?? CA_IN_SANDBOX;
      binds.push({ source: broker!.dir, target: credDir, readOnly: true, sockets: true });
      const ca = deps.repos.extraCaPem();
      if (ca) {
        const bundle = join(tmp, 'ca.pem');
        systemCa ??= readFileSync(SYSTEM_CA, 'utf8');
        await writeFile(bundle, systemCa + '\n' + ca, { mode: 0o644 });
        binds.push({ source: bundle, target: caFile, readOnly: true });
        extraConfig.push(['http.sslCAInfo', caFile]);
      }
      const helper = layout ? layout.credentialHelper(`${credDir}/${CRED_SOCKET_NAME}`) : EPHEMERAL_CREDHELPER;
      extraConfig.push(['credential.helper', `!${helper}`], ['credential.useHttpPath', 'true'], ['http.proxy', 'http://127.0.0.1:3128']);
    }
    return await deps.executor.runEphemeral({
      id: `g-${workspace.id.slice(3, 15)}-${Math.random().toString(36).slice(2, 8)}`,
      binds,
      limits: workspace.limits,
      network,
      command: (opts.neutralise === false ? '' : NEUTRALISE_REPO_DRIVERS) + command,
      cwd: '/workspace',
      // With a repository host, every connection goes through its one-host proxy: no exceptions.
      env: { ...gitConfigEnv(extraConfig), ...(opts.repo ? { NO_PROXY: '', no_proxy: '' } : {}), ...opts.env },
      timeoutMs: opts.timeoutMs ?? 600_000,
      maxOutputBytes: 1_048_576,
      onOutput: opts.onOutput,
      signal: opts.signal,
    });
  } finally {
    // The credential and the network end with the command, then their directory goes.
    await Promise.all([broker?.close(), proxy?.close()]);
    if (tmp) await rm(tmp, { recursive: true, force: true });
  }
}

/** A failed git command as a ServiceError: the code from its stderr's tail (timeout, auth, not found, unreachable), naming the CA setting when TLS trust failed. */
export function gitFailure(step: string, result: ExecResult): ServiceError {
  const tail = `${result.stderr}`.trim().split('\n').slice(-6).join('\n');
  const unreachable = /Could not resolve|Failed to connect|Connection refused|timed out|Proxy CONNECT aborted|CONNECT tunnel failed|403 Forbidden/i.test(tail);
  const auth = /Authentication failed|could not read Username|401|terminal prompts disabled/i.test(tail);
  const notFound = /not found|Remote branch .* not found|couldn't find remote ref|does not appear to be a git repository/i.test(tail);
  const code = result.timedOut ? 'DEADLINE_EXCEEDED' : auth ? 'PERMISSION_DENIED' : notFound ? 'NOT_FOUND' : unreachable ? 'UNAVAILABLE' : 'FAILED_PRECONDITION';
  // An unknown CA: name the setting that fixes it (issue #16).
  const untrusted = /SSL certificate problem|server certificate verification failed|unable to get local issuer certificate|self[- ]signed certificate|certificate verify failed/i.test(tail);
  const hint = untrusted
    ? '\nThe repository host\'s TLS certificate is not trusted. The owner adds its CA certificate with `atelier repos ca add FILE` (the setting repositories.extraCaCertificates in the config file); a running service applies it at once.'
    : '';
  return new ServiceError(code, `${step} failed: ${tail || `exit ${result.exitCode}`}${hint}`, { step, exitCode: result.exitCode, timedOut: result.timedOut, ...(untrusted ? { setting: 'repositories.extraCaCertificates' } : {}) });
}
