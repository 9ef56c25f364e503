/**
 * The egress proxy inside a long-lived sandbox: /run/egress/proxy.sock is a relay, listening in
 * the sandbox's tmpfs (runfs.ts), to the runner's proxy socket; a restarted runner listens there
 * again. One relay set per sandbox.
 */
import { stat } from 'node:fs/promises';
import type { Server } from 'node:net';
import path from 'node:path';
import { ServiceError } from '../../core/errors.js';
import type { SandboxNetwork } from '../executor.js';
import { assertTraversable, type SandboxIds } from '../rootdir.js';
import { closeRelays, relaySocket } from '../runfs.js';
import { IN_PROXY_SOCKET } from './layout.js';
import type { RunPaths, RunState } from './rundir.js';

/** How the egress proxy socket reaches the sandbox: relayed from its tmpfs (see ProxyRelays.attach). */
export type ProxyState = { mode: 'relay'; source: string };

export class ProxyRelays {
  /** Per long-lived sandbox: the relay of its egress proxy socket (runfs.ts). */
  private readonly relays = new Map<string, Server[]>();

  constructor(private readonly ids: SandboxIds) {}

  /**
   * Makes /run/egress/proxy.sock inside the sandbox reach `proxySocket`: a relay listening in the
   * sandbox's tmpfs (runfs.ts). The tmpfs outlives a runner restart, so a restarted runner, whose
   * proxy listens on a new socket file, listens there again (reattach).
   */
  async attach(id: string, p: RunPaths, proxySocket: string): Promise<ProxyState> {
    await closeRelays(this.relays.get(id) ?? []);
    this.relays.set(id, [await relaySocket(path.join(p.egress, path.basename(IN_PROXY_SOCKET)), () => proxySocket, this.ids)]);
    return { mode: 'relay', source: proxySocket };
  }

  /** recover(): true when the sandbox's egress matches `network` (relaying the proxy socket again if needed). */
  async reattach(id: string, p: RunPaths, state: RunState, network: SandboxNetwork): Promise<boolean> {
    if (network === 'none' || state.proxy === null) return network === 'none' && state.proxy === null;
    // A sandbox started before the relays (its proxy socket hard-linked or bound) is started again.
    if (state.proxy.mode !== 'relay' || state.proxy.source !== network.proxySocket) return false;
    await checkProxySocket(network.proxySocket, this.ids);
    await this.attach(id, p, network.proxySocket);
    return true;
  }

  /** Closes the sandbox's relays (it stopped, or did not start). */
  async close(id: string): Promise<void> {
    await closeRelays(this.relays.get(id) ?? []);
    this.relays.delete(id);
  }
}

export async function checkProxySocket(socket: string, ids: SandboxIds): Promise<void> {
  let st;
  try {
    st = await stat(socket);
  } catch {
    throw new ServiceError('FAILED_PRECONDITION', `egress proxy socket does not exist: ${socket}`);
  }
  if (!st.isSocket()) throw new ServiceError('FAILED_PRECONDITION', `egress proxy path is not a socket: ${socket}`);
  await assertTraversable(socket, ids);
}
