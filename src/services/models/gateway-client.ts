/**
 * The runner's side of the model gateway: starts and supervises the embedded `atelier gateway`
 * child (unless --gateway-url names an external one), pushes snapshots, checks status, issues and
 * revokes agent leases with routing rule 8 (push again when the gateway restarted or lost its
 * profiles; UNAVAILABLE when it cannot be reached), and pulls usage events into the spend ledger.
 * See docs/gateway.md.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync, chmodSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Config } from '../../core/config.js';
import { ServiceError } from '../../core/errors.js';
import type { Logger } from '../../core/log.js';
import { readProviderOverrides, type ProviderOverrides } from '../../core/providers.js';
import type { CarveAnswer, CarveRequest, GatewayStatus, LeaseInfo, LeaseRequest, Snapshot, SnapshotRoute, UsageEvent } from '../../contracts/gateway.js';
import type { SpendService } from './spend.js';

/** How long the gateway child may take to say where it listens. */
const GATEWAY_START_MS = 60_000;

export interface PushState {
  lastAttemptAt: string | null;
  lastSuccessAt: string | null;
  lastError: string | null;
  generation: number;
  bootId: string | null;
}

const BIN = fileURLToPath(new URL('../../../bin/atelier', import.meta.url));

export class GatewayClient {
  private url: string | null;
  private secret: string | null = null;
  private child: ChildProcess | null = null;
  private stopping = false;
  private restarts = 0;
  private pollTimer: NodeJS.Timeout | null = null;
  private syncing: Promise<void> | null = null;
  readonly push_: PushState = { lastAttemptAt: null, lastSuccessAt: null, lastError: null, generation: 0, bootId: null };

  constructor(
    private readonly opts: {
      config: Config;
      spend: SpendService;
      log: Logger;
      /** Routes of the snapshot (the model control plane, issue #7); none when absent. */
      routeSource?: () => SnapshotRoute[];
    },
  ) {
    this.url = opts.config.gatewayUrl ? opts.config.gatewayUrl.replace(/\/+$/, '') : null;
  }

  get embedded(): boolean {
    return !this.opts.config.gatewayUrl;
  }

  get currentUrl(): string | null {
    return this.url;
  }

  private providers(): ProviderOverrides {
    try {
      return readProviderOverrides(this.opts.config.configPath);
    } catch (e) {
      this.opts.log.warn({ err: (e as Error).message }, 'config section "providers" is invalid; pushing the registry defaults');
      return {};
    }
  }

  private sessionHeader(): string | null {
    const c = this.opts.config as Config & { modelGatewaySessionHeader?: string };
    return c.modelGatewaySessionHeader || process.env.MODEL_GATEWAY_SESSION_HEADER || null;
  }

  /** Starts the embedded child (or reads the external gateway's secret) and the usage poller. */
  async start(): Promise<void> {
    this.stopping = false;
    if (this.embedded) await this.spawnChild();
    else {
      const f = (this.opts.config as Config & { gatewayAdminSecretFile?: string }).gatewayAdminSecretFile;
      if (f) this.secret = readFileSync(f, 'utf8').trim();
      else this.opts.log.warn('--gateway-url is set without --gateway-admin-secret-file: pushes and leases will fail');
      await this.push().catch(() => undefined);
    }
    this.pollTimer = setInterval(() => void this.syncUsage().catch(() => undefined), 2000);
    this.pollTimer.unref();
  }

  private async spawnChild(): Promise<void> {
    const file = join(this.opts.config.dataDir, 'state', 'gateway-admin.secret');
    const secret = randomBytes(32).toString('base64url');
    writeFileSync(file, secret + '\n', { mode: 0o600 });
    chmodSync(file, 0o600);
    const child = spawn(process.execPath, [BIN, 'gateway', '--host', '127.0.0.1', '--port', '0', '--admin-secret-file', file], {
      stdio: ['pipe', 'pipe', 'pipe'],
      // The OTLP endpoint goes down with it (the runner may have it from a flag): the child traces its requests too.
      env: { ...process.env, ATELIER_GATEWAY_PARENT_WATCH: '1', ATELIER_OTLP_TRACES_ENDPOINT: this.opts.config.otlpTracesEndpoint },
    });
    this.child = child;
    child.stderr!.on('data', (d: Buffer) => {
      for (const line of d.toString('utf8').split('\n')) if (line.trim()) this.opts.log.info({ gateway: line.slice(0, 2000) }, 'gateway log');
    });
    const url = await new Promise<string>((resolve, reject) => {
      let out = '';
      // Generous: a cold start of the child on a loaded 2-core machine took up to 20 s. One that
      // misses it is killed, so a failed start leaves no process behind.
      const timeout = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`the gateway child did not start within ${GATEWAY_START_MS / 1000} s`));
      }, GATEWAY_START_MS);
      child.stdout!.on('data', (buf: Buffer) => {
        out += buf;
        const m = /listening at (\S+) \((boot_\S+)\)/.exec(out);
        if (m) {
          clearTimeout(timeout);
          resolve(m[1]!);
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timeout);
        reject(new Error(`the gateway child exited (${code}) before it started`));
      });
    });
    this.url = url;
    this.secret = secret;
    child.once('exit', (code, signal) => {
      if (this.child === child) this.child = null;
      if (this.stopping) return;
      const delay = Math.min(30_000, 500 * 2 ** Math.min(this.restarts++, 6));
      this.opts.log.warn({ code, signal, restartInMs: delay }, 'gateway child exited; restarting');
      setTimeout(() => {
        if (this.stopping) return;
        this.spawnChild()
          .then(() => this.push())
          .then(() => (this.restarts = 0))
          .catch((e) => this.opts.log.error({ err: (e as Error).message }, 'gateway child restart failed'));
      }, delay).unref();
    });
    this.opts.log.info({ url }, 'gateway child started');
    await this.push().catch((e) => this.opts.log.warn({ err: (e as Error).message }, 'first gateway push failed'));
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    await this.syncUsage().catch(() => undefined);
    const childProcess = this.child;
    if (childProcess && childProcess.exitCode === null && childProcess.signalCode === null) {
      const exited = new Promise((r) => childProcess.once('exit', r));
      childProcess.kill('SIGTERM');
      await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
      if (childProcess.exitCode === null && childProcess.signalCode === null) childProcess.kill('SIGKILL');
    }
  }

  private async call<T>(method: string, path: string, body?: unknown, timeoutMs = 3000): Promise<{ status: number; body: T }> {
    if (!this.url || !this.secret) throw new ServiceError('UNAVAILABLE', 'the model gateway is not running or not configured', {});
    let response: Response;
    try {
      response = await fetch(this.url + path, {
        method,
        headers: { authorization: `Bearer ${this.secret}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(timeoutMs),
      });
    } catch (e) {
      throw new ServiceError('UNAVAILABLE', `the model gateway cannot be reached (${(e as Error).message})`, { gatewayUrl: this.url });
    }
    return { status: response.status, body: (await response.json().catch(() => ({}))) as T };
  }

  async status(): Promise<GatewayStatus> {
    const r = await this.call<GatewayStatus>('GET', '/admin/status');
    if (r.status !== 200) throw new ServiceError('UNAVAILABLE', `the model gateway answered ${r.status} to a status check`, {});
    return r.body;
  }

  /** Builds and pushes a whole snapshot (routing rule 7). Records the outcome for agent-model-config-status. */
  async push(): Promise<GatewayStatus> {
    this.push_.lastAttemptAt = new Date().toISOString();
    try {
      const st = await this.status();
      await this.syncUsage(st.bootId);
      const { updatedAt: _u, ...policies } = this.opts.spend.policies();
      const snapshot: Snapshot = {
        generation: ++this.push_.generation,
        routes: this.opts.routeSource?.() ?? [],
        providers: this.providers(),
        policies,
        windows: this.opts.spend.baselines(st.bootId),
        sessionHeader: this.sessionHeader(),
      };
      const result = await this.call<GatewayStatus & { error?: { message: string } }>('PUT', '/admin/snapshot', snapshot, 10_000);
      if (result.status !== 200) throw new ServiceError('UNAVAILABLE', `the gateway refused the snapshot: ${result.body.error?.message ?? result.status}`, {});
      this.push_.lastSuccessAt = new Date().toISOString();
      this.push_.lastError = null;
      this.push_.bootId = result.body.bootId;
      return result.body;
    } catch (e) {
      this.push_.lastError = (e as Error).message;
      throw e;
    }
  }

  /** Routing rule 8: push again when the gateway restarted or lost its profiles; UNAVAILABLE when unreachable. */
  async ensureReady(): Promise<GatewayStatus> {
    const st = await this.status();
    if (st.noProfilesSinceRestart || st.bootId !== this.push_.bootId) return this.push();
    return st;
  }

  /** Issues an agent lease after the rule 8 checks, and checks the gateway once more right before (agent states rule 2). */
  async issueLease(req: LeaseRequest): Promise<LeaseInfo & { token: string; gatewayUrl: string }> {
    await this.ensureReady();
    const r = await this.call<LeaseInfo & { token: string; error?: { code: string; message: string } }>('POST', '/admin/leases', req);
    if (r.status === 409) throw new ServiceError('FAILED_PRECONDITION', r.body.error?.message ?? 'the profile revision does not route', { profileId: req.profileId, revision: req.revision });
    if (r.status !== 201) throw new ServiceError(r.status >= 500 ? 'UNAVAILABLE' : 'INVALID_ARGUMENT', r.body.error?.message ?? `lease refused (${r.status})`, {});
    return { ...r.body, gatewayUrl: this.url! };
  }

  async revokeLease(leaseId: string): Promise<LeaseInfo | null> {
    const r = await this.call<LeaseInfo>('DELETE', `/admin/leases/${encodeURIComponent(leaseId)}`);
    return r.status === 200 ? r.body : null;
  }

  /** A lease's live figures (null when the gateway no longer knows it). */
  async leaseInfo(leaseId: string): Promise<LeaseInfo | null> {
    const r = await this.call<LeaseInfo>('GET', `/admin/leases/${encodeURIComponent(leaseId)}`);
    return r.status === 200 ? r.body : null;
  }

  /**
   * Agent trees: sets a child's budgets aside from its parent's live lease (all three at once).
   * Refused (ok: false) when one is more than the parent has left, naming its spawn field, or when
   * the parent lease is gone.
   */
  async carve(parentLeaseId: string, amounts: CarveRequest): Promise<{ ok: true; carveId: string; parentRemaining: CarveRequest } | { ok: false; field: string | null; parentRemaining: CarveRequest | null }> {
    const r = await this.call<CarveAnswer & { error?: { details?: { field?: string; parentRemaining?: CarveRequest } } }>('POST', `/admin/leases/${encodeURIComponent(parentLeaseId)}/carve`, amounts);
    if (r.status === 201) return { ok: true, carveId: r.body.carveId, parentRemaining: r.body.parentRemaining };
    if (r.status >= 500) throw new ServiceError('UNAVAILABLE', `the gateway could not carve the budget (${r.status})`, {});
    return { ok: false, field: r.body.error?.details?.field ?? null, parentRemaining: r.body.error?.details?.parentRemaining ?? null };
  }

  /** Gives back a carve whose child never got a lease (false when the gateway holds no such carve). */
  async releaseCarve(carveId: string): Promise<boolean> {
    const r = await this.call('DELETE', `/admin/carves/${encodeURIComponent(carveId)}`);
    return r.status === 200;
  }

  /** Host and port of the gateway's agent endpoint (the runner relays each agent's socket to it). */
  agentEndpoint(): { host: string; port: number } | null {
    if (!this.url) return null;
    const u = new URL(this.url);
    return { host: u.hostname.replace(/^\[|\]$/g, ''), port: Number(u.port || 80) };
  }

  /** Pulls usage events into the ledger (serialised; a new boot closes the old boot's open reservations). */
  syncUsage(knownBoot?: string): Promise<void> {
    if (this.syncing) return this.syncing;
    this.syncing = (async () => {
      try {
        let fromStart = false;
        for (let i = 0; i < 50; i++) {
          const cur = this.opts.spend.cursor();
          const after = fromStart || (knownBoot && cur && cur.bootId !== knownBoot) ? 0 : (cur?.seq ?? 0);
          const result = await this.call<{ bootId: string; events: UsageEvent[]; lastSeq: number; oldestSeq: number }>('GET', `/admin/usage?after=${after}&limit=5000`);
          if (result.status !== 200) return;
          if (cur && cur.bootId !== result.body.bootId && after !== 0) {
            fromStart = true; // the gateway restarted: read the new boot from its start
            continue;
          }
          fromStart = false;
          if (result.body.oldestSeq > after + 1) this.opts.log.warn({ after, oldest: result.body.oldestSeq }, 'gateway usage events were dropped before the runner read them');
          const last = result.body.events.at(-1)?.seq ?? after;
          this.opts.spend.ingest(result.body.bootId, result.body.events, last);
          if (last >= result.body.lastSeq) return;
        }
      } finally {
        this.syncing = null;
      }
    })();
    return this.syncing;
  }
}
