/**
 * Checks of what callers hand the bubblewrap driver (sandbox ids, limits, network, specs, the
 * binds of a short-lived sandbox), each failing with INVALID_ARGUMENT naming what is wrong.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { ServiceError } from '../../core/errors.js';
import { hostRootProblem } from '../id-map.js';
import type { EphemeralBind, SandboxLimits, SandboxNetwork, SandboxSpec } from '../executor.js';

export function validateId(id: string): void {
  if (!/^[A-Za-z0-9_-]{1,100}$/.test(id)) {
    throw new ServiceError('INVALID_ARGUMENT', 'sandbox id must be 1-100 characters of A-Z a-z 0-9 _ -', { id });
  }
}

export function validateLimits(l: SandboxLimits): void {
  const ok =
    Number.isSafeInteger(l.memoryBytes) && l.memoryBytes >= 16 * 1024 * 1024 &&
    Number.isSafeInteger(l.pidsMax) && l.pidsMax >= 8 &&
    Number.isFinite(l.cpuQuotaPercent) && l.cpuQuotaPercent >= 1 &&
    (l.cpus === undefined || /^\d+(-\d+)?(,\d+(-\d+)?)*$/.test(l.cpus));
  if (!ok) {
    throw new ServiceError('INVALID_ARGUMENT', 'invalid sandbox limits (memory >= 16 MiB, pids >= 8, cpu >= 1%, cpus a cpuset list)', {
      limits: l,
    });
  }
}

export function validateNetwork(n: SandboxNetwork): void {
  if (n !== 'none' && (typeof n !== 'object' || typeof n.proxySocket !== 'string' || !path.isAbsolute(n.proxySocket))) {
    throw new ServiceError('INVALID_ARGUMENT', "network must be 'none' or { proxySocket: <absolute path> }");
  }
}

export function validateSpec(spec: SandboxSpec): void {
  validateId(spec.id);
  validateLimits(spec.limits);
  validateNetwork(spec.network);
  if (!path.isAbsolute(spec.rootDir)) throw new ServiceError('INVALID_ARGUMENT', 'rootDir must be absolute');
  const mapped = spec.rootUserNamespace;
  if (mapped) {
    // The runner (root) writes this map: it must never reach the host's root.
    const problem = hostRootProblem(mapped.idMap);
    if (problem) throw new ServiceError('INVALID_ARGUMENT', `rootUserNamespace.idMap: ${problem}`, { field: 'rootUserNamespace.idMap' });
    if (!mapped.capabilities.every((c) => /^(CAP_)?[A-Z_]{2,32}$/.test(c))) throw new ServiceError('INVALID_ARGUMENT', 'rootUserNamespace.capabilities: capability names like CHOWN', { field: 'rootUserNamespace.capabilities' });
  }
}

export function validateBind(b: EphemeralBind): EphemeralBind {
  const target = path.posix.normalize(b.target);
  if (!path.isAbsolute(b.source) || !target.startsWith('/') || target === '/' || target !== b.target.replace(/\/+$/, '')) {
    throw new ServiceError('INVALID_ARGUMENT', 'bind source and target must be absolute, normalized and not /', { bind: b });
  }
  if (!existsSync(b.source)) throw new ServiceError('INVALID_ARGUMENT', 'bind source does not exist', { source: b.source });
  return { ...b, target };
}
