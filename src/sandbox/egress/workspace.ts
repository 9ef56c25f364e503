/**
 * The egress a workspace needs, for WorkspaceService: the operator's allow list (read from the
 * config file each time a proxy starts), one `dependency-access` proxy per workspace on a socket
 * under <dataDir>/run that only the workspace's uid may use, and the one-host proxy of a network
 * git operation (only the approved repository host:port, private addresses allowed there alone).
 */
import { readFileSync } from 'node:fs';
import { chown, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError, validateSections } from '../../core/config.js';
import { DEFAULT_REGISTRY_RULES, type EgressRule } from './policy.js';
import { startEgressProxy, type EgressDecision, type EgressProxy } from './server.js';

/**
 * The egress allow list in the config file. No file, or no "egress" section: the defaults. A file
 * edited while running into something malformed is a ConfigError naming the setting
 * (FAILED_PRECONDITION to the caller), never a silent fall back to the defaults.
 */
export function loadEgressRules(configPath: string): EgressRule[] {
  let text: string;
  try {
    text = readFileSync(configPath, 'utf8');
  } catch {
    return DEFAULT_REGISTRY_RULES;
  }
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(text) as Record<string, unknown>;
  } catch (e) {
    throw new ConfigError(`config file ${configPath}: not valid JSON (${(e as Error).message})`, 'egress');
  }
  validateSections({ egress: raw.egress ?? {} }, configPath);
  return (raw.egress as { allow?: EgressRule[] } | undefined)?.allow ?? DEFAULT_REGISTRY_RULES;
}

export interface WorkspaceEgressOptions {
  /** Where the per-workspace sockets live (<dataDir>/run). */
  runDir: string;
  /** The sandbox user: the only one that may connect to a proxy socket (the in-sandbox bridge runs as it). */
  uid: number;
  gid: number;
  /** The allow list of dependency-access proxies, read when one starts. */
  rules: () => EgressRule[];
  onDecision: (d: EgressDecision) => void;
}

export class WorkspaceEgress {
  private readonly proxies = new Map<string, EgressProxy>();

  constructor(private readonly opts: WorkspaceEgressOptions) {}

  /** The socket of a workspace's dependency-access proxy. */
  socketPath(workspaceId: string): string {
    return join(this.opts.runDir, `eg-${workspaceId.slice(3, 15)}.sock`);
  }

  /** (Re)starts a workspace's dependency-access proxy with the current allow list; returns its socket. */
  async start(workspaceId: string): Promise<string> {
    const socketPath = this.socketPath(workspaceId);
    await this.proxies.get(workspaceId)?.close();
    await rm(socketPath, { force: true });
    const proxy = await startEgressProxy({ socketPath, workspaceId, rules: this.opts.rules(), onDecision: this.opts.onDecision, socketMode: 0o600 });
    // Only the workspace's own uid may connect (the bridge inside runs as that uid).
    await chown(socketPath, this.opts.uid, this.opts.gid);
    this.proxies.set(workspaceId, proxy);
    return socketPath;
  }

  /** Stops a workspace's proxy, if it has one. */
  async stop(workspaceId: string): Promise<void> {
    await this.proxies.get(workspaceId)?.close();
    this.proxies.delete(workspaceId);
  }

  /** On shutdown: every proxy, errors ignored. */
  async stopAll(): Promise<void> {
    for (const p of this.proxies.values()) await p.close().catch(() => undefined);
    this.proxies.clear();
  }

  /**
   * A proxy for one network git operation on `socketPath` (in a root-owned directory the caller
   * removes): only host:port, which the operator approved as the repository host, so the one place
   * a private address may be reached. The caller closes it.
   */
  async startRepositoryHostOnly(socketPath: string, workspaceId: string, host: string, port: number): Promise<EgressProxy> {
    const proxy = await startEgressProxy({
      socketPath,
      workspaceId,
      rules: [{ host, ports: [port], allowPrivate: true }],
      onDecision: this.opts.onDecision,
      socketMode: 0o600,
    });
    try {
      await chown(socketPath, this.opts.uid, this.opts.gid);
    } catch (e) {
      await proxy.close();
      throw e;
    }
    return proxy;
  }
}
