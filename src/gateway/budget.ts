/**
 * In-memory budget accounting of the gateway: per lease and per UTC window (day, month), with the
 * owner's policies. reserve() and settle() are synchronous, so on Node's single thread a check and
 * its reservation can never interleave with another request's: under any concurrency, settled plus
 * reserved never exceeds a lease budget or a policy. See docs/spend.md.
 */
import { createHash } from 'node:crypto';
import { randomToken } from '../core/ids.js';
import {
  affordableOutputTokens,
  costMicros,
  worstCaseMicros,
  windowKeys,
  type EffectivePrices,
  type Usage,
} from '../core/pricing.js';
import type { LeaseInfo, LeaseRequest, ProviderOverrun, SpendPolicies, UsageEvent, WindowBaseline } from '../contracts/gateway.js';
import { NO_POLICIES } from '../contracts/gateway.js';

export interface Lease {
  id: string;
  tokenHash: string;
  agentId: string;
  profileId: string;
  revision: number;
  budgets: LeaseRequest['budgets'];
  expiresAtMs: number;
  revoked: boolean;
  revokedReason: string | null;
  overrunMicros: number;
  usedIn: number;
  usedOut: number;
  usedCost: number;
  resIn: number;
  resOut: number;
  resCost: number;
}

interface WindowState {
  spent: number; // settled + unreconciled by this boot
  reserved: number;
  baseline: number; // from the runner's ledger (other boots)
}

export interface Reservation {
  id: string;
  lease: Lease;
  day: string;
  month: string;
  inputBound: number;
  outputLimit: number;
  micros: number;
  prices: EffectivePrices;
  settled: boolean;
}

export class BudgetError extends Error {
  constructor(
    readonly code: 'budget_exceeded' | 'policy_exceeded',
    message: string,
    readonly details: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

/**
 * Input tokens allowed on top of the request's bytes for what the provider adds around them (chat
 * template start and end tokens, a hidden preamble): a token is at least one byte of the text it
 * encodes, and the JSON of a request spends far more bytes on keys and quoting than the template
 * adds per message (16 more per message or input item are added too). An input that still passes
 * the bound is a provider overrun: recorded at its true cost, shown, and the lease ends.
 */
export const INPUT_TEMPLATE_ALLOWANCE = 128;
export const INPUT_PER_ITEM_ALLOWANCE = 16;

/** Delta events allowed past the clamped output limit, per choice, before a stream is cut (role and finish chunks carry "delta" too). */
export const STREAM_DELTA_SLACK = 8;

/** The smallest answer worth sending: below it a request is refused instead of clamped. */
export const MIN_OUTPUT_TOKENS = 16;
const MAX_EVENTS = 200_000;

export const hashToken = (t: string): string => createHash('sha256').update(t).digest('base64url');

export class Budget {
  readonly leases = new Map<string, Lease>(); // by token hash
  readonly leasesById = new Map<string, Lease>();
  private readonly windows = new Map<string, WindowState>();
  policies: SpendPolicies = { ...NO_POLICIES };
  readonly events: UsageEvent[] = [];
  seq = 0;
  openReservations = 0;

  constructor(private readonly now: () => number = Date.now) {}

  issue(req: LeaseRequest): { lease: Lease; token: string } {
    const token = 'atlg_' + randomToken(40);
    const lease: Lease = {
      id: 'lease_' + randomToken(24),
      tokenHash: hashToken(token),
      agentId: req.agentId,
      profileId: req.profileId,
      revision: req.revision,
      budgets: { ...req.budgets },
      expiresAtMs: Date.parse(req.expiresAt),
      revoked: false,
      revokedReason: null,
      overrunMicros: 0,
      usedIn: 0,
      usedOut: 0,
      usedCost: 0,
      resIn: 0,
      resOut: 0,
      resCost: 0,
    };
    this.leases.set(lease.tokenHash, lease);
    this.leasesById.set(lease.id, lease);
    return { lease, token };
  }

  /** Revoking stops new requests at once; requests in flight settle normally. */
  revoke(id: string): Lease | undefined {
    const l = this.leasesById.get(id);
    if (!l) return undefined;
    l.revoked = true;
    this.leases.delete(l.tokenHash);
    if (l.resCost === 0) this.leasesById.delete(id);
    return l;
  }

  byToken(token: string): Lease | undefined {
    return this.leases.get(hashToken(token));
  }

  info(l: Lease): LeaseInfo {
    return {
      leaseId: l.id,
      agentId: l.agentId,
      profileId: l.profileId,
      revision: l.revision,
      budgets: l.budgets,
      expiresAt: new Date(l.expiresAtMs).toISOString(),
      revoked: l.revoked,
      revokedReason: l.revokedReason,
      overrunMicros: l.overrunMicros,
      used: { inputTokens: l.usedIn, outputTokens: l.usedOut, costMicros: l.usedCost },
      reserved: { inputTokens: l.resIn, outputTokens: l.resOut, costMicros: l.resCost },
    };
  }

  private win(key: string): WindowState {
    let w = this.windows.get(key);
    if (!w) this.windows.set(key, (w = { spent: 0, reserved: 0, baseline: 0 }));
    return w;
  }

  setBaselines(list: WindowBaseline[] | undefined): void {
    for (const b of list ?? []) {
      if (!Number.isSafeInteger(b.spentMicros) || b.spentMicros < 0) continue;
      this.win((b.window === 'day' ? 'd:' : 'm:') + b.key).baseline = b.spentMicros;
    }
  }

  windowTotals(): Array<{ window: 'day' | 'month'; key: string; spentMicros: number; reservedMicros: number; baselineMicros: number }> {
    const { day, month } = windowKeys(this.now());
    return [
      ['day', day, 'd:' + day],
      ['month', month, 'm:' + month],
    ].map(([window, key, k]) => {
      const w = this.win(k!);
      return { window: window as 'day' | 'month', key: key!, spentMicros: w.spent, reservedMicros: w.reserved, baselineMicros: w.baseline };
    });
  }

  /**
   * Reserves the worst case of one request, synchronously. Returns the reservation with the output
   * limit clamped to what every budget allows, or throws BudgetError when not even
   * min(requested, MIN_OUTPUT_TOKENS) output tokens fit.
   */
  reserve(lease: Lease, inputBound: number, requestedOutput: number | null, prices: EffectivePrices): Reservation {
    const b = lease.budgets;
    const inRoom = b.maxInputTokens - lease.usedIn - lease.resIn;
    if (inputBound > inRoom)
      throw new BudgetError('budget_exceeded', `the request may use up to ${inputBound} input tokens but only ${Math.max(0, inRoom)} remain in this agent's input budget`, { inputBound, remainingInputTokens: Math.max(0, inRoom) });
    let out = b.maxOutputTokens - lease.usedOut - lease.resOut;
    let limitedBy = 'agent output token budget';
    if (requestedOutput !== null && requestedOutput < out) {
      out = requestedOutput;
      limitedBy = 'request';
    }
    const costCap = this.policies.perAgentCapMicros !== null ? Math.min(b.maxCostMicros, this.policies.perAgentCapMicros) : b.maxCostMicros;
    const rooms: Array<[string, number, BudgetError['code']]> = [['agent cost budget', costCap - lease.usedCost - lease.resCost, 'budget_exceeded']];
    const { day, month } = windowKeys(this.now());
    const dw = this.win('d:' + day);
    const mw = this.win('m:' + month);
    if (this.policies.dailyCapMicros !== null) rooms.push(['daily spend policy', this.policies.dailyCapMicros - dw.baseline - dw.spent - dw.reserved, 'policy_exceeded']);
    if (this.policies.monthlyCapMicros !== null) rooms.push(['monthly spend policy', this.policies.monthlyCapMicros - mw.baseline - mw.spent - mw.reserved, 'policy_exceeded']);
    let code: BudgetError['code'] = 'budget_exceeded';
    for (const [name, room, c] of rooms) {
      const n = affordableOutputTokens(room, inputBound, prices);
      if (n < out) {
        out = n;
        limitedBy = name;
        code = c;
      }
    }
    const minimum = requestedOutput !== null ? Math.min(requestedOutput, MIN_OUTPUT_TOKENS) : MIN_OUTPUT_TOKENS;
    if (out < Math.max(1, minimum))
      throw new BudgetError(limitedBy === 'agent output token budget' ? 'budget_exceeded' : code, `refused before sending: not even a ${Math.max(1, minimum)}-token answer fits the ${limitedBy}`, { limitedBy, inputBound });
    const micros = worstCaseMicros(inputBound, out, prices);
    lease.resIn += inputBound;
    lease.resOut += out;
    lease.resCost += micros;
    dw.reserved += micros;
    mw.reserved += micros;
    this.openReservations++;
    const r: Reservation = { id: 'res_' + randomToken(20), lease, day, month, inputBound, outputLimit: out, micros, prices, settled: false };
    this.push({ seq: 0, type: 'reserve', at: new Date(this.now()).toISOString(), reservationId: r.id, leaseId: lease.id, agentId: lease.agentId, profileId: lease.profileId, revision: lease.revision, day, month, reservedMicros: micros });
    return r;
  }

  /**
   * Settles a reservation with real (or, when unreconciled, estimated) usage and releases the rest. Idempotent.
   * The true cost is always recorded, whatever the reservation was. When the usage passes the
   * reservation (more input tokens than the input bound, more output than the clamped limit, or a
   * cost above the reserved worst case) it is a provider overrun: the event says by how much and
   * the lease is ended at once, so a provider that ignores the clamp cannot be asked again on it.
   */
  settle(r: Reservation, usage: Usage, unreconciled: boolean, reason?: string): number {
    if (r.settled) return 0;
    r.settled = true;
    const cost = costMicros(usage, r.prices);
    const l = r.lease;
    let overrun: ProviderOverrun | undefined;
    const overIn = Math.max(0, usage.inputTokens - r.inputBound);
    const overOut = Math.max(0, usage.outputTokens - r.outputLimit);
    if (overIn > 0 || overOut > 0 || cost > r.micros) {
      overrun = { micros: Math.max(0, cost - r.micros), inputTokens: overIn, outputTokens: overOut, leaseRevoked: true };
      l.overrunMicros += overrun.micros;
      if (!l.revoked) {
        l.revoked = true;
        l.revokedReason = `provider overrun on ${r.id}: ${overOut} output and ${overIn} input tokens past the reservation, ${overrun.micros} micro-USD past its worst case`;
        this.leases.delete(l.tokenHash);
      }
    }
    l.resIn -= r.inputBound;
    l.resOut -= r.outputLimit;
    l.resCost -= r.micros;
    l.usedIn += usage.inputTokens;
    l.usedOut += usage.outputTokens;
    l.usedCost += cost;
    // A settlement counts in the windows of its reservation, even after a UTC midnight.
    for (const k of ['d:' + r.day, 'm:' + r.month]) {
      const w = this.win(k);
      w.reserved -= r.micros;
      w.spent += cost;
    }
    this.openReservations--;
    // A lease the owner revoked goes when idle; one ended by an overrun stays visible (admin GET) until swept.
    if (l.revoked && l.resCost === 0 && l.revokedReason === null) this.leasesById.delete(l.id);
    this.push({ seq: 0, type: 'settle', at: new Date(this.now()).toISOString(), reservationId: r.id, costMicros: cost, usage, unreconciled, ...(reason ? { reason } : {}), ...(overrun ? { overrun } : {}) });
    return cost;
  }

  private push(e: UsageEvent): void {
    e.seq = ++this.seq;
    this.events.push(e);
    if (this.events.length > MAX_EVENTS) this.events.splice(0, this.events.length - MAX_EVENTS);
  }

  eventsAfter(after: number, limit: number): UsageEvent[] {
    if (this.events.length === 0) return [];
    const first = this.events[0]!.seq;
    const start = Math.max(0, after - first + 1);
    return this.events.slice(start, start + limit);
  }

  /** Drops leases that expired more than an hour ago and have nothing in flight. */
  sweep(): void {
    const cutoff = this.now() - 3600_000;
    for (const l of this.leasesById.values()) {
      if (l.expiresAtMs < cutoff && l.resCost === 0) {
        this.leases.delete(l.tokenHash);
        this.leasesById.delete(l.id);
      }
    }
  }
}
