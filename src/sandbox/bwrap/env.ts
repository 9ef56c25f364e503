/**
 * The environments inside a sandbox: the one commands start from (with the proxy variables when
 * the sandbox has egress) and the daemon's own, just enough for node.
 */
import { ServiceError } from '../../core/errors.js';
import type { SandboxNetwork } from '../executor.js';
import { SANDBOX_PROXY_ENV } from '../proxy-env.js';
import { SANDBOX_USER } from './layout.js';

const PROXY_ENV = SANDBOX_PROXY_ENV;

/** The environment commands start from. Proxy variables come last so the spec cannot bypass them by accident. */
export function commandEnv(extra: Record<string, string> | undefined, network: SandboxNetwork): Record<string, string> {
  const env: Record<string, string> = {
    PATH: '/usr/local/bin:/usr/bin:/bin',
    HOME: SANDBOX_USER.home,
    USER: SANDBOX_USER.name,
    LOGNAME: SANDBOX_USER.name,
    SHELL: '/bin/bash',
    LANG: 'C.UTF-8',
    TMPDIR: '/tmp',
    // As under a login shell; bash -c with SHLVL unset and a socket on stdin would source ~/.bashrc.
    SHLVL: '1',
  };
  // Proxy defaults first, so a caller's explicit variable (e.g. NO_PROXY for a one-host git proxy) wins.
  if (network !== 'none') Object.assign(env, PROXY_ENV);
  for (const [k, v] of Object.entries(extra ?? {})) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k) || typeof v !== 'string' || v.includes('\0')) {
      throw new ServiceError('INVALID_ARGUMENT', 'invalid environment variable', { name: k });
    }
    env[k] = v;
  }
  return env;
}

/** The daemon's (or the ephemeral wrapper's) own environment: just enough for node. */
export function daemonEnv(): Record<string, string> {
  return { PATH: '/usr/bin:/bin', HOME: SANDBOX_USER.home, LANG: 'C.UTF-8' };
}
