/**
 * Agent runtimes, pre-started (issue #14, bench/agents: spawn to first model request).
 *
 * A runtime slot is one agent runtime (src/agent/runtime.ts) in its own short-lived bubblewrap
 * sandbox (own cgroup, no network, no workspace files) with two Unix sockets bound in from a
 * socket directory of its own: control (to the supervisor) and gateway (relayed to the gateway's
 * agent endpoint). A slot starts holding nothing of any agent: it loads node and the `openai`
 * client, warms them up against a stub inside its own sandbox, says `ready` and idles. The
 * supervisor (src/services/agents/agents.ts) hands one slot one job (lease token, profile, prompt,
 * limits) over the control socket; until then the slot's gateway relay refuses every connection,
 * and once the job ends the slot is killed and its socket directory removed: a slot is never
 * reused. The pool keeps `agentPoolSize` idle slots (0: none, every slot starts on demand) while
 * an agent profile is active, and refills in the background. See docs/agents.md.
 */
import { settlesWithin } from '../../core/clock.js';
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeFileSync } from 'node:fs';
import { splice } from '../../contracts/splice.js';
import { AGENT_SOCKET_DIR, SOCKET_DIR_ARG, type RuntimeMessage } from '../../contracts/agent.js';
import type { Executor, ExecResult } from '../../sandbox/executor.js';
import type { Logger } from '../../core/log.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
/** An idle slot older than this is replaced by a fresh one (bounds the sandbox's own backstop timeout). */
export const POOL_IDLE_MAX_MS = 60 * 60_000;
/** The longest an assigned slot may run: the longest agent TTL and the end of its drain. */
const MAX_AGENT_MS = 86_400_000 + 60_000;
/** How long a slot may take to say ready before the agent waiting for it fails. */
export const SLOT_READY_MS = 60_000;

/** Who a slot works for once assigned. */
export interface SlotOwner {
  onMessage(m: RuntimeMessage): void;
  /** Whether the slot's gateway relay passes connections now (never before assignment). */
  relayOpen(): boolean;
  /** A connection passed to the gateway (the launch timing notes the first). */
  onRelay?(): void;
}

export interface RuntimeSlot {
  readonly id: string;
  readonly warm: boolean;
  /** Its socket directory on the host (idle-<id> until assigned, then named after the agent). */
  dir: string;
  readonly servers: Server[];
  conn: Socket | null;
  readonly abort: AbortController;
  /** Resolves once the runtime said ready; false when it exited (or failed to start) first. */
  readonly ready: Promise<boolean>;
  isReady: boolean;
  /** Resolves when the sandbox is gone, with its result or the error that ended it. */
  readonly exited: Promise<ExecResult | Error>;
  readonly startedAt: number;
  readyTiming: { loadedMs: number; readyMs: number; sinceStartMs: number } | null;
  stderr: string;
  owner: SlotOwner | null;
}

interface Deps {
  executor: Executor;
  log: Logger;
  sandboxUid: number;
  /** <dataDir>/run/agents: socket directories. */
  runDir: string;
  /** <dataDir>/run/agent-opt: the runtime's package.json. */
  optDir: string;
  /** The gateway's agent endpoint (null while it is down). */
  gatewayEndpoint(): { host: string; port: number } | null;
  size: number;
}

export class AgentRuntimePool {
  private readonly idle: RuntimeSlot[] = [];
  private wanted = false;
  private closed = false;
  private failures = 0;
  /** Slots taken whose agent has not reached its first model turn yet: refills wait for them (they compete for the same CPUs). */
  private holds = 0;
  private refillTimer: NodeJS.Timeout | null = null;
  private readonly all = new Set<RuntimeSlot>();

  constructor(private readonly deps: Deps) {
    mkdirSync(deps.optDir, { recursive: true, mode: 0o755 });
    chmodSync(deps.optDir, 0o755);
    writeFileSync(join(deps.optDir, 'package.json'), '{"type":"module","private":true}\n', { mode: 0o644 });
  }

  get size(): number {
    return this.deps.size;
  }

  /** Whether idle slots are kept (an agent profile is active); false drains the idle ones. */
  want(on: boolean): void {
    if (this.closed || this.deps.size === 0) return;
    if (on && this.holds > 0 && this.wanted) return; // a refill is pending its release()
    this.wanted = on;
    if (on) this.fill();
    else for (const s of this.idle.splice(0)) this.dispose(s);
  }

  /**
   * An idle slot (ready ones first), else one started now on demand. Never the same slot twice.
   * The refill waits until `release()` (the agent's runtime said hello, or the agent ended), so
   * starting the next runtime does not slow this agent's first request.
   */
  take(): RuntimeSlot {
    const i = this.idle.findIndex((s) => s.isReady);
    const slot = i >= 0 ? this.idle.splice(i, 1)[0]! : (this.idle.shift() ?? this.start(false));
    this.holds++;
    return slot;
  }

  /** Once per take(): the refill may start. */
  release(): void {
    this.holds = Math.max(0, this.holds - 1);
    if (this.holds === 0) setTimeout(() => this.fill(), 100).unref();
  }

  /** Renames an assigned slot's socket directory after its agent (the sandbox's bind follows the directory). */
  rename(slot: RuntimeSlot, name: string): void {
    const to = join(this.deps.runDir, name);
    renameSync(slot.dir, to);
    slot.dir = to;
  }

  stats(): { size: number; idle: number; ready: number; running: number } {
    return { size: this.deps.size, idle: this.idle.length, ready: this.idle.filter((s) => s.isReady).length, running: this.all.size - this.idle.length };
  }

  /** Kills every idle slot and stops refilling (assigned slots are their agents' to end). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.refillTimer) clearTimeout(this.refillTimer);
    const idle = this.idle.splice(0);
    for (const s of idle) this.dispose(s);
    // Their sandboxes end with the abort; a slot stuck starting must not hold the shutdown.
    await settlesWithin(Promise.all(idle.map((s) => s.exited)), 10_000);
  }

  /** Kills a slot's sandbox and removes its sockets (used for idle slots; assigned ones end through their agent). */
  dispose(slot: RuntimeSlot): void {
    slot.abort.abort();
    for (const s of slot.servers) s.close();
    slot.conn?.destroy();
    rmSync(slot.dir, { recursive: true, force: true });
  }

  private fill(): void {
    if (this.closed || !this.wanted || this.refillTimer || this.holds > 0) return;
    const now = Date.now();
    for (const s of [...this.idle]) {
      if (now - s.startedAt > POOL_IDLE_MAX_MS) {
        this.idle.splice(this.idle.indexOf(s), 1);
        this.dispose(s);
      }
    }
    while (this.idle.length < this.deps.size) this.idle.push(this.start(true));
  }

  private start(warm: boolean): RuntimeSlot {
    const id = randomBytes(8).toString('hex');
    const dir = join(this.deps.runDir, `idle-${id}`);
    mkdirSync(this.deps.runDir, { recursive: true, mode: 0o711 });
    chmodSync(this.deps.runDir, 0o711);
    mkdirSync(dir, { mode: 0o711 });
    chmodSync(dir, 0o711);
    let readyResolve!: (ok: boolean) => void;
    const ready = new Promise<boolean>((r) => (readyResolve = r));
    const slot: RuntimeSlot = {
      id,
      warm,
      dir,
      servers: [],
      conn: null,
      abort: new AbortController(),
      ready,
      isReady: false,
      exited: null as unknown as Promise<ExecResult | Error>,
      startedAt: Date.now(),
      readyTiming: null,
      stderr: '',
      owner: null,
    };
    this.all.add(slot);
    // Gateway relay: closed until the slot is assigned (an idle runtime cannot reach the gateway).
    const gw = createServer((client) => {
      const ep = this.deps.gatewayEndpoint();
      if (!slot.owner?.relayOpen() || !ep) return client.destroy();
      slot.owner.onRelay?.();
      splice(client, connect(ep.port, ep.host));
    });
    const ctl = createServer((sock) => {
      if (slot.conn) return sock.destroy(); // one control connection per slot
      slot.conn = sock;
      this.serve(slot, sock, (timing) => {
        if (slot.isReady) return;
        slot.isReady = true;
        slot.readyTiming = { ...timing, sinceStartMs: Date.now() - slot.startedAt };
        this.failures = 0;
        readyResolve(true);
      });
    });
    slot.servers.push(gw, ctl);
    const listen = (server: Server, file: string) =>
      new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        // Closed (the slot disposed) before it listened: node then never says 'listening'.
        server.once('close', () => reject(new Error('the slot was closed while starting')));
        server.listen(file, () => {
          try {
            chownSync(file, this.deps.sandboxUid, this.deps.sandboxUid);
            chmodSync(file, 0o600);
            resolve();
          } catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
          }
        });
      });
    // Where this driver's sandbox takes the two sockets (a Kubernetes Pod: under its own /dev/shm/atelier).
    const socketDir = this.deps.executor.ephemeralLayout?.agentSocketDir;
    const sandbox = Promise.all([listen(gw, join(dir, 'gateway.sock')), listen(ctl, join(dir, 'control.sock'))]).then(() =>
      this.deps.executor.runEphemeral({
        id: `agent-rt-${id}`,
        argv: ['/usr/bin/node', '--max-old-space-size=128', '/opt/agent/dist/agent/runtime.js', ...(warm ? ['--warm'] : []), ...(socketDir ? [SOCKET_DIR_ARG, socketDir] : [])],
        binds: [
          { source: join(this.deps.optDir, 'package.json'), target: '/opt/agent/package.json', readOnly: true },
          { source: join(ROOT, 'dist', 'agent'), target: '/opt/agent/dist/agent', readOnly: true },
          { source: join(ROOT, 'dist', 'contracts'), target: '/opt/agent/dist/contracts', readOnly: true },
          { source: join(ROOT, 'node_modules', 'openai'), target: '/opt/agent/node_modules/openai', readOnly: true },
          { source: dir, target: socketDir ?? AGENT_SOCKET_DIR, readOnly: true, sockets: true },
        ],
        limits: { memoryBytes: 256 * 1024 * 1024, pidsMax: 64, cpuQuotaPercent: 100 },
        network: 'none',
        cwd: '/',
        // A backstop only: the supervisor ends an agent at its TTL and retires idle slots.
        timeoutMs: POOL_IDLE_MAX_MS + MAX_AGENT_MS + 60_000,
        maxOutputBytes: 16_384,
        signal: slot.abort.signal,
        onOutput: (stream, chunk) => {
          if (stream === 'stderr' && slot.stderr.length < 4096) slot.stderr += chunk.toString('utf8');
        },
      }),
    );
    (slot as { exited: Promise<ExecResult | Error> }).exited = sandbox.then(
      (r) => r,
      (e: unknown) => (e instanceof Error ? e : new Error(String(e))),
    ).then((result) => {
      this.all.delete(slot);
      // A sandbox that could not start says why (the agent's end reason quotes this tail).
      if (result instanceof Error && slot.stderr === '') slot.stderr = result.message.slice(0, 1000);
      readyResolve(false);
      const i = this.idle.indexOf(slot);
      if (i >= 0) {
        // An idle slot died: clean up, and refill with a growing delay if they keep dying.
        this.idle.splice(i, 1);
        this.dispose(slot);
        if (!this.closed && !slot.abort.signal.aborted) {
          this.failures++;
          this.deps.log.warn({ slot: id, err: result instanceof Error ? result.message : `exit ${result.exitCode}`, stderr: slot.stderr.slice(-500) }, 'an idle agent runtime exited');
          const delay = Math.min(60_000, 500 * 2 ** Math.min(this.failures, 7));
          this.refillTimer = setTimeout(() => {
            this.refillTimer = null;
            this.fill();
          }, delay);
          this.refillTimer.unref();
        }
      }
      return result;
    });
    return slot;
  }

  /**
   * Newline-delimited JSON from the runtime: before assignment only `ready` is heard. The runtime is
   * code in a sandbox acting on a model's output (docs/architecture.md, "Containing bytes from a
   * workspace"): a line that is not JSON is skipped, anything else goes to the owner's onMessage,
   * which checks each field and runs asynchronously (its failures are logged there); a buffer past
   * 64 MiB without a newline drops the connection. Nothing here throws into the socket's callback.
   */
  private serve(slot: RuntimeSlot, sock: Socket, onReady: (t: { loadedMs: number; readyMs: number }) => void): void {
    let buf = '';
    sock.setEncoding('utf8');
    sock.on('error', () => undefined);
    sock.on('data', (chunk: string) => {
      buf += chunk;
      if (buf.length > 64 * 1024 * 1024) return sock.destroy();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line) continue;
        let runtimeMessage: RuntimeMessage;
        try {
          runtimeMessage = JSON.parse(line) as RuntimeMessage;
        } catch {
          continue;
        }
        if (runtimeMessage?.t === 'ready') {
          const t = runtimeMessage.timing && typeof runtimeMessage.timing === 'object' ? runtimeMessage.timing : { loadedMs: 0, readyMs: 0 };
          onReady({ loadedMs: Number(t.loadedMs) || 0, readyMs: Number(t.readyMs) || 0 });
        } else if (slot.owner) slot.owner.onMessage(runtimeMessage);
      }
    });
  }
}
