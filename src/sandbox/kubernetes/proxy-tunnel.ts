/**
 * dependency-access for workspace Pods: the runner's per-workspace egress proxy (the same one a
 * bubblewrap workspace uses: src/sandbox/egress/workspace.ts, its allow list, its decisions and
 * audit per workspace) reached through a long-lived socket tunnel (tunnel.ts) into the workspace's
 * Pod, listening there on 127.0.0.1:3128, the address the Pod's proxy variables name
 * (TUNNEL_PROXY_ENV). The tunnel's one listener is tagged `proxy` and the runner end connects it
 * only to this workspace's proxy socket: nothing else of the runner is reachable through it, and
 * the Pod's NetworkPolicy stays deny-all.
 *
 * The exec stream can drop (the API server closing a long-lived stream, a node or network hiccup,
 * the Pod end killed): the tunnel is then opened again at once, and with back-off (1 s doubling to 30 s) while
 * attempts fail or opened tunnels keep dropping within 10 s, each drop and each failed attempt said through `note`. It is closed for good by
 * close() (the workspace stopped or destroyed, its network changed to none, the runner stopping).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { ExecApi as Exec } from './exec-stream.js';
import { openTunnel, planTunnel, TUNNEL_PROXY_PORT, type TunnelEnd } from './tunnel.js';

const FIRST_RETRY_MS = 1_000;
const MAX_RETRY_MS = 30_000;
/** A tunnel that lived this long before it dropped is reopened at once. */
const STABLE_MS = 10_000;

export class ProxyTunnel {
  private end: TunnelEnd | undefined;
  private closed = false;
  private retrying = false;
  private openedAt = 0;
  /** The wait before reopening: 0 after a tunnel that lived a while, growing while they keep dropping fast. */
  private backoff = 0;
  /** How many times the tunnel has been opened (the first open included). */
  opens = 0;

  private constructor(
    private readonly exec: Exec,
    private readonly namespace: string,
    readonly pod: string,
    readonly proxySocket: string,
    private readonly note: (message: string) => void,
  ) {}

  /**
   * Opens the tunnel and keeps it open until close(). A first open that fails does not fail the
   * workspace (its create or recover: the daemon is reached all the same, and a recover that
   * failed would make the Pod again): it is said and retried with back-off, as after a drop (a
   * previous runner's tunnel program may still hold 3128 for a moment).
   */
  static async open(exec: Exec, namespace: string, pod: string, proxySocket: string, note: (message: string) => void): Promise<ProxyTunnel> {
    const t = new ProxyTunnel(exec, namespace, pod, proxySocket, note);
    try {
      await t.openOnce();
    } catch (err) {
      note(`kubernetes executor: the egress proxy tunnel of pod ${pod} could not be opened (${err instanceof Error ? err.message : String(err)}); trying again`);
      t.backoff = FIRST_RETRY_MS;
      void t.reopen();
    }
    return t;
  }

  /** The live tunnel's runner end (its counters), if one is open now. */
  get current(): TunnelEnd | undefined {
    return this.end && !this.end.ended ? this.end : undefined;
  }

  private async openOnce(): Promise<void> {
    const plan = await planTunnel({ sockets: [], files: [], proxy: { socket: this.proxySocket, port: TUNNEL_PROXY_PORT } });
    const end = await openTunnel(this.exec, this.namespace, this.pod, plan, (e) => this.dropped(e));
    this.opens++;
    this.openedAt = Date.now();
    if (this.closed) return end.close();
    this.end = end;
  }

  private dropped(e: TunnelEnd): void {
    if (this.closed || e !== this.end) return;
    this.end = undefined;
    // A tunnel that drops soon after it opened (its Pod end failing) is not reopened at once again and again.
    this.backoff = Date.now() - this.openedAt < STABLE_MS ? Math.min(Math.max(this.backoff * 2, FIRST_RETRY_MS), MAX_RETRY_MS) : 0;
    this.note(`kubernetes executor: the egress proxy tunnel of pod ${this.pod} ended (${e.counters.failure ?? 'closed'}); opening it again`);
    void this.reopen();
  }

  private async reopen(): Promise<void> {
    if (this.retrying) return;
    this.retrying = true;
    try {
      if (this.backoff > 0) await sleep(this.backoff);
      for (let delay = FIRST_RETRY_MS; !this.closed; delay = Math.min(delay * 2, MAX_RETRY_MS)) {
        try {
          await this.openOnce();
          if (!this.closed) this.note(`kubernetes executor: the egress proxy tunnel of pod ${this.pod} is open again`);
          return;
        } catch (err) {
          if (this.closed) return;
          this.note(`kubernetes executor: the egress proxy tunnel of pod ${this.pod} could not be opened (${err instanceof Error ? err.message : String(err)}); trying again in ${delay / 1000} s`);
          await sleep(delay);
        }
      }
    } finally {
      this.retrying = false;
    }
  }

  /** Closes the tunnel for good: the Pod's 127.0.0.1:3128 stops listening (its tunnel program ends with its stdin). */
  close(): void {
    this.closed = true;
    this.end?.close();
    this.end = undefined;
  }
}
