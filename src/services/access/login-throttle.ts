/**
 * Throttling of the dashboard's password login (issue #31 item 5). A password check is scrypt on
 * libuv's thread pool, the pool the service's file I/O shares, so guesses are limited three ways:
 *
 *  - per client address (an IPv4 address, or the /64 of an IPv6 one) and overall, failures bring
 *    growing delays and then a lockout: after half of the lockout threshold each further failure
 *    makes the next attempt wait 1 s, 2 s, 4 s, … (at most 60 s); at the threshold password login
 *    is locked for the lockout time, doubled for each lockout of the same key in a row (at most
 *    24 hours). An attempt during a delay or a lockout is refused at once, without a check, even
 *    with the right password. Failures are forgotten after 15 minutes without one; a success
 *    forgets its address's failures (not the overall count, which only time clears);
 *  - one password check from an address at a time;
 *  - at most MAX_RUNNING checks run at once and MAX_WAITING wait; past that an attempt is refused
 *    at once (busy), so a flood never queues scrypt work in front of the service's file I/O.
 *
 * The one-time login link and existing sessions are not throttled: they run no password check, and
 * they are how the owner gets in while an attacker keeps password login locked
 * (`atelier owner login-link`). State is in memory: a restart clears it (an attacker cannot restart
 * the service). Lockouts are audited (action login_lockout) and shown on the dashboard's overview.
 */
import { isIP } from 'node:net';

export const MAX_RUNNING = 1;
export const MAX_WAITING = 3;
export const FORGET_AFTER_MS = 15 * 60_000;
export const MAX_DELAY_MS = 60_000;
export const MAX_LOCKOUT_MS = 24 * 3600_000;
/** Lockouts of a key count as "in a row" while the next comes within this time of the last one's end. */
export const LOCKOUT_MEMORY_MS = 24 * 3600_000;
export const MAX_ADDRESSES = 10_000;

export interface LoginLimits {
  /** Failures from one address that lock it (the delays start after half of them). */
  perAddress: number;
  /** Failures from all addresses together that lock password login for everyone. */
  overall: number;
  /** The first lockout's length, ms. */
  lockoutMs: number;
  /** The first delay's length, ms (each further failure doubles it, at most MAX_DELAY_MS). Default 1000. */
  delayMs?: number;
}

interface Counter {
  failures: number;
  lastFailureAt: number;
  delayedUntil: number;
  lockedUntil: number;
  lockouts: number;
}

export type Scope = 'address' | 'overall';

export type Refusal =
  | { reason: 'delay' | 'lockout'; scope: Scope; until: number }
  | { reason: 'concurrent' | 'busy'; scope: 'address' | 'service'; until: number };

export type AttemptResult = { outcome: 'ok' } | { outcome: 'wrong'; lockout?: Scope } | ({ outcome: 'refused' } & Refusal);

export interface LockoutEvent {
  scope: Scope;
  key: string;
  until: number;
  failures: number;
  lockouts: number;
}

export interface ThrottleView {
  limits: { perAddress: number; overall: number; lockoutSeconds: number };
  overall: { failures: number; delayedUntil: string | null; lockedUntil: string | null };
  /** Addresses locked, delayed or with failures, the most recently failed first (at most 20). */
  addresses: Array<{ address: string; failures: number; delayedUntil: string | null; lockedUntil: string | null }>;
  /** How many addresses are locked now (all of them, not only the 20 listed). */
  lockedAddresses: number;
  checks: { running: number; waiting: number };
}

export interface ThrottleCounters {
  checks: { ok: number; wrong: number };
  refused: { delay: number; lockout: number; concurrent: number; busy: number };
  lockouts: { address: number; overall: number };
  /** The most password checks that ever ran at once (bounded by MAX_RUNNING). */
  runningMax: number;
}

/** The key an address is counted under: IPv4 as is (IPv4-mapped IPv6 too), IPv6 by its /64. */
export function addressKey(ip: string | undefined): string {
  let a = (ip ?? '').trim().toLowerCase();
  const zone = a.indexOf('%');
  if (zone >= 0) a = a.slice(0, zone);
  if (a.startsWith('::ffff:') && isIP(a.slice(7)) === 4) return a.slice(7);
  if (isIP(a) === 4) return a;
  if (isIP(a) !== 6) return 'unknown';
  const [head, tail] = a.includes('::') ? a.split('::') : [a, undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  // An embedded IPv4 tail counts as two groups; only the first four groups matter here.
  const groups = tail === undefined ? h : [...h, ...Array(Math.max(0, 8 - h.length - t.length)).fill('0'), ...t];
  return groups.slice(0, 4).map((g) => (g === '' ? '0' : g.replace(/^0+(?=.)/, ''))).join(':') + '::/64';
}

const iso = (ms: number) => (ms > 0 ? new Date(ms).toISOString() : null);

export class LoginThrottle {
  private readonly addresses = new Map<string, Counter>();
  private readonly overall: Counter = fresh();
  private readonly busyAddresses = new Set<string>();
  private running = 0;
  private readonly waiting: Array<() => void> = [];
  private readonly counters: ThrottleCounters = { checks: { ok: 0, wrong: 0 }, refused: { delay: 0, lockout: 0, concurrent: 0, busy: 0 }, lockouts: { address: 0, overall: 0 }, runningMax: 0 };

  constructor(
    private readonly limits: LoginLimits,
    private readonly onLockout: (e: LockoutEvent) => void = () => undefined,
    private readonly now: () => number = Date.now,
  ) {}

  /**
   * One password login attempt from `ip`: refused at once when throttled or busy, otherwise
   * `check` (the scrypt comparison) runs when its turn comes, and its result is counted.
   */
  async attempt(ip: string | undefined, check: () => Promise<boolean>): Promise<AttemptResult> {
    const key = addressKey(ip);
    const refused = this.refusal(key);
    if (refused) return this.refuse(refused);
    if (this.busyAddresses.has(key)) return this.refuse({ reason: 'concurrent', scope: 'address', until: this.now() + 1000 });
    if (this.running + this.waiting.length >= MAX_RUNNING + MAX_WAITING) return this.refuse({ reason: 'busy', scope: 'service', until: this.now() + 1000 });
    this.busyAddresses.add(key);
    try {
      await this.turn();
      try {
        // A failure elsewhere may have locked login while this one waited: no check then.
        const late = this.refusal(key);
        if (late) return this.refuse(late);
        const ok = await check();
        return ok ? this.succeeded(key) : this.failed(key);
      } finally {
        this.running--;
        this.waiting.shift()?.();
      }
    } finally {
      this.busyAddresses.delete(key);
    }
  }

  /** Why an attempt from this address would be refused now (delay or lockout), or null. */
  refusal(key: string): Refusal | null {
    const now = this.now();
    const o = this.decay(this.overall, now);
    const a = this.addresses.get(key);
    if (a) this.decay(a, now);
    if (o.lockedUntil > now) return { reason: 'lockout', scope: 'overall', until: o.lockedUntil };
    if (a && a.lockedUntil > now) return { reason: 'lockout', scope: 'address', until: a.lockedUntil };
    if (a && a.delayedUntil > now) return { reason: 'delay', scope: 'address', until: a.delayedUntil };
    if (o.delayedUntil > now) return { reason: 'delay', scope: 'overall', until: o.delayedUntil };
    return null;
  }

  /** What the dashboard shows (REST field `login` of GET /api/v1/overview). */
  view(): ThrottleView {
    const now = this.now();
    this.decay(this.overall, now);
    const rows = [...this.addresses.entries()]
      .map(([address, c]) => [address, this.decay(c, now)] as const)
      .filter(([, c]) => c.failures > 0 || c.lockedUntil > now || c.delayedUntil > now);
    const live = (t: number) => (t > now ? iso(t) : null);
    return {
      limits: { perAddress: this.limits.perAddress, overall: this.limits.overall, lockoutSeconds: Math.round(this.limits.lockoutMs / 1000) },
      overall: { failures: this.overall.failures, delayedUntil: live(this.overall.delayedUntil), lockedUntil: live(this.overall.lockedUntil) },
      addresses: rows
        .sort((x, y) => y[1].lastFailureAt - x[1].lastFailureAt)
        .slice(0, 20)
        .map(([address, c]) => ({ address, failures: c.failures, delayedUntil: live(c.delayedUntil), lockedUntil: live(c.lockedUntil) })),
      lockedAddresses: rows.filter(([, c]) => c.lockedUntil > now).length,
      checks: { running: this.running, waiting: this.waiting.length },
    };
  }

  metrics(): ThrottleCounters {
    return structuredClone(this.counters);
  }

  // ---- internals ----

  private refuse(refusal: Refusal): AttemptResult {
    this.counters.refused[refusal.reason]++;
    return { outcome: 'refused', ...refusal };
  }

  /** Waits for a free check slot (admission already bounded the queue). */
  private async turn(): Promise<void> {
    if (this.running >= MAX_RUNNING) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.running++;
    this.counters.runningMax = Math.max(this.counters.runningMax, this.running);
  }

  private succeeded(key: string): AttemptResult {
    this.counters.checks.ok++;
    const a = this.addresses.get(key);
    if (a && a.lockouts === 0) this.addresses.delete(key);
    else if (a) Object.assign(a, { failures: 0, delayedUntil: 0 });
    return { outcome: 'ok' };
  }

  private failed(key: string): AttemptResult {
    this.counters.checks.wrong++;
    const now = this.now();
    let a = this.addresses.get(key);
    if (!a) {
      this.makeRoom(now);
      a = fresh();
      if (this.addresses.size < MAX_ADDRESSES) this.addresses.set(key, a);
    }
    const byAddress = this.count(a, this.limits.perAddress, now);
    const overall = this.count(this.overall, this.limits.overall, now);
    if (byAddress) {
      this.counters.lockouts.address++;
      this.onLockout({ scope: 'address', key, until: a.lockedUntil, failures: this.limits.perAddress, lockouts: a.lockouts });
    }
    if (overall) {
      this.counters.lockouts.overall++;
      this.onLockout({ scope: 'overall', key: 'overall', until: this.overall.lockedUntil, failures: this.limits.overall, lockouts: this.overall.lockouts });
    }
    return { outcome: 'wrong', ...(overall ? { lockout: 'overall' as const } : byAddress ? { lockout: 'address' as const } : {}) };
  }

  /** Counts one failure; true when it starts a lockout. */
  private count(counter: Counter, limit: number, now: number): boolean {
    counter.failures++;
    counter.lastFailureAt = now;
    if (counter.failures >= limit) {
      counter.lockouts++;
      counter.lockedUntil = now + Math.min(this.limits.lockoutMs * 2 ** (counter.lockouts - 1), MAX_LOCKOUT_MS);
      counter.failures = 0;
      counter.delayedUntil = 0;
      return true;
    }
    const free = Math.floor(limit / 2);
    if (counter.failures > free) counter.delayedUntil = now + Math.min((this.limits.delayMs ?? 1000) * 2 ** (counter.failures - free - 1), MAX_DELAY_MS);
    return false;
  }

  /** Forgets failures after a quiet FORGET_AFTER_MS, and past lockouts after LOCKOUT_MEMORY_MS. */
  private decay(counter: Counter, now: number): Counter {
    if (counter.lockedUntil > now || counter.delayedUntil > now) return counter;
    if (counter.failures > 0 && now - counter.lastFailureAt > FORGET_AFTER_MS) counter.failures = 0;
    if (counter.lockouts > 0 && now - counter.lockedUntil > LOCKOUT_MEMORY_MS) counter.lockouts = 0;
    return counter;
  }

  /** Keeps the address table bounded: idle entries go first, then the oldest unlocked one. */
  private makeRoom(now: number): void {
    if (this.addresses.size < MAX_ADDRESSES) return;
    for (const [k, c] of this.addresses) {
      this.decay(c, now);
      if (c.failures === 0 && c.lockouts === 0 && c.lockedUntil <= now && c.delayedUntil <= now) this.addresses.delete(k);
    }
    if (this.addresses.size < MAX_ADDRESSES) return;
    for (const [k, c] of this.addresses) {
      if (c.lockedUntil <= now) {
        this.addresses.delete(k);
        return;
      }
    }
  }
}

function fresh(): Counter {
  return { failures: 0, lastFailureAt: 0, delayedUntil: 0, lockedUntil: 0, lockouts: 0 };
}
