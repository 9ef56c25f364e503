/**
 * CONNECT tunnelling: the policy on the name (./policy.ts), a tunnel slot, the lookup on the host,
 * the private-address check, the connection to the resolved addresses in order (never resolving
 * again: no DNS-rebinding window), then bytes both ways. Resolving and connecting share one
 * deadline (-> 504). Exactly one decision is emitted per request.
 */
import { lookup } from 'node:dns/promises';
import net, { type Socket } from 'node:net';
import { splice } from '../../contracts/splice.js';
import { answer } from './http.js';
import { addressRefusal, decideConnect, sanitise, type CompiledRule } from './policy.js';
import type { EgressDecision } from './server.js';

class TimeoutError extends Error {}

export async function defaultResolver(host: string): Promise<string[]> {
  const found = await lookup(host, { all: true, verbatim: true });
  return found.map((a) => a.address);
}

/** The cap on concurrent tunnels (connecting or open). */
export class TunnelSlots {
  active = 0;
  constructor(readonly max: number) {}

  /** A release function (idempotent) for a free slot, or null when all are taken. */
  take(): (() => void) | null {
    if (this.active >= this.max) return null;
    this.active++;
    let released = false;
    return () => {
      if (!released) {
        released = true;
        this.active--;
      }
    };
  }
}

export interface ConnectDeps {
  resolver: (host: string) => Promise<string[]>;
  connectTimeoutMs: number;
  /** An open tunnel idle this long is closed; 0 = never. */
  idleTimeoutMs: number;
  slots: TunnelSlots;
  emit: (d: Omit<EgressDecision, 'at' | 'workspaceId'>) => void;
  /** Registers an upstream socket so closing the proxy destroys it. */
  track: (s: Socket) => void;
}

/** Handles one CONNECT request whose head has been read; `rules` is the snapshot it keeps throughout. */
export async function handleConnect(deps: ConnectDeps, rules: readonly CompiledRule[], client: Socket, target: string): Promise<void> {
  const method = 'CONNECT';
  // 1. Policy on the name, before any lookup.
  const verdict = decideConnect(rules, target);
  if (verdict.verdict === 'malformed') {
    deps.emit({ method, host: verdict.host, port: 0, allowed: false, reason: verdict.reason });
    answer(client, verdict.status, verdict.reason);
    return;
  }
  const { host, port } = verdict;
  let decided = false;
  let releaseSlot = (): void => {};
  const decide = (status: number, allowed: boolean, reason: string, resolved?: string): void => {
    if (decided) return;
    decided = true;
    deps.emit({ method, host: host.host, port, allowed, reason, resolved });
    if (!allowed) {
      releaseSlot();
      answer(client, status, reason);
    }
  };
  if (verdict.verdict === 'refused') return decide(verdict.status, false, verdict.reason);
  const { allowPrivate, rule } = verdict;

  // 2. Capacity.
  const release = deps.slots.take();
  if (!release) return decide(503, false, 'too many open tunnels');
  releaseSlot = release;
  let aborted = false;
  let pending: Socket | undefined;
  client.once('close', () => {
    releaseSlot();
    aborted = true;
    pending?.destroy();
    decide(0, false, 'client closed before the tunnel was established');
  });

  const deadline = Date.now() + deps.connectTimeoutMs;
  const withDeadline = <T>(p: Promise<T>): Promise<T> => {
    p.catch(() => {});
    return new Promise<T>((resolve, reject) => {
      const t = setTimeout(() => reject(new TimeoutError()), Math.max(0, deadline - Date.now()));
      p.then(
        (v) => {
          clearTimeout(t);
          resolve(v);
        },
        (e: unknown) => {
          clearTimeout(t);
          reject(e);
        },
      );
    });
  };

  // 3. Resolve on the host (IP literals are their own address).
  let addresses: string[];
  if (host.kind === 'ip') {
    addresses = [host.host];
  } else {
    try {
      addresses = await withDeadline(Promise.resolve().then(() => deps.resolver(host.host)));
    } catch (err) {
      if (aborted) return;
      if (err instanceof TimeoutError) return decide(504, false, 'timed out resolving the host');
      const code = (err as NodeJS.ErrnoException)?.code;
      return decide(502, false, `DNS lookup failed${typeof code === 'string' ? `: ${sanitise(code)}` : ''}`);
    }
    if (aborted) return;
  }

  // 4. Every address must be usable (an IP literal always is), and public unless the rule allows private ones.
  const refusal = addressRefusal(addresses, allowPrivate);
  if (refusal) return decide(refusal.status, false, refusal.reason);

  // 5. Connect to the resolved addresses in order, never resolving again.
  let upstream: Socket | undefined;
  let lastError = 'no address';
  let lastAddress: string | undefined;
  let timedOut = false;
  for (let i = 0; i < addresses.length && !upstream; i++) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) {
      timedOut = true;
      break;
    }
    const address = addresses[i]!;
    lastAddress = address;
    const attempt = net.connect({ host: address, port, family: net.isIP(address), allowHalfOpen: true });
    deps.track(attempt);
    pending = attempt;
    try {
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(new TimeoutError()), remaining / (addresses.length - i));
        attempt.once('connect', () => {
          clearTimeout(t);
          resolve();
        });
        attempt.once('error', (e) => {
          clearTimeout(t);
          reject(e);
        });
        attempt.once('close', () => {
          clearTimeout(t);
          reject(new Error('closed'));
        });
      });
      upstream = attempt;
    } catch (err) {
      attempt.destroy();
      if (err instanceof TimeoutError) {
        timedOut = true;
        lastError = 'timed out';
      } else {
        timedOut = false;
        lastError = (err as NodeJS.ErrnoException).code ?? 'error';
      }
    }
    pending = undefined;
    if (aborted) {
      attempt.destroy();
      return;
    }
  }
  if (!upstream) {
    if (timedOut) return decide(504, false, 'timed out connecting to the host', lastAddress);
    return decide(502, false, `connect failed: ${sanitise(lastError)}`, lastAddress);
  }

  // 6. Tunnel.
  const up = upstream;
  // Bytes are relayed as they come: Nagle's algorithm would hold a small write until the host's
  // delayed ACK (up to 40 ms per request-response turn; most of a clone's cost through the proxy).
  up.setNoDelay(true);
  up.on('error', () => {});
  decide(200, true, `allowed by rule ${rule.label}`, lastAddress);
  client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
  const teardown = splice(client, up);
  if (deps.idleTimeoutMs > 0) client.setTimeout(deps.idleTimeoutMs, teardown);
}
