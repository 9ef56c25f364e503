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
  /**
   * Agent trees: the lease this one's budget was carved from (null for a root). What is left of a
   * lease when it ends goes back to its nearest ancestor still live (see Budget.carve).
   */
  parent: Lease | null;
  /** Whether what was left of this ended lease has been given back (once, when it is revoked and idle). */
  returned: boolean;
}

/** The three budgets a lease holds and a carve moves. */
export interface Amounts {
  inputTokens: number;
  outputTokens: number;
  costMicros: number;
}

/** Part of a live lease's budget set aside for a child agent whose lease is not issued yet. */
export interface Carve {
  id: string;
  from: Lease;
  amounts: Amounts;
}

/** Which budget a carve did not fit, by the spawn field that asked for it. */
export const CARVE_FIELDS: Record<keyof Amounts, string> = { inputTokens: 'maxInputTokens', outputTokens: 'maxOutputTokens', costMicros: 'maxCostMicros' };
const DIMS = ['inputTokens', 'outputTokens', 'costMicros'] as const;

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
  /** Carves set aside for children whose lease is not issued yet, by id. */
  readonly carves = new Map<string, Carve>();
  /** Budget given back by ended leases that had no live ancestor left (it went to no one: the tree is over). */
  forfeited: Amounts = { inputTokens: 0, outputTokens: 0, costMicros: 0 };

  constructor(private readonly now: () => number = Date.now) {}

  /**
   * Issues a lease. With `carveId` (an agent tree's child) its budgets are the carve's, each
   * further capped by `req.budgets` (the profile's limits); what the cap leaves of the carve goes
   * back at once, and the lease remembers its parent. A carve is used once.
   */
  issue(req: LeaseRequest): { lease: Lease; token: string } {
    let carve: Carve | undefined;
    if (req.carveId !== undefined) {
      carve = this.carves.get(req.carveId);
      if (!carve) throw new Error(`no carve ${req.carveId} is held (released, used, or never made)`);
      this.carves.delete(carve.id);
    }
    const budgets = carve
      ? { maxInputTokens: Math.min(req.budgets.maxInputTokens, carve.amounts.inputTokens), maxOutputTokens: Math.min(req.budgets.maxOutputTokens, carve.amounts.outputTokens), maxCostMicros: Math.min(req.budgets.maxCostMicros, carve.amounts.costMicros) }
      : { ...req.budgets };
    if (carve)
      this.giveBack(carve.from, {
        inputTokens: carve.amounts.inputTokens - budgets.maxInputTokens,
        outputTokens: carve.amounts.outputTokens - budgets.maxOutputTokens,
        costMicros: carve.amounts.costMicros - budgets.maxCostMicros,
      });
    const token = 'atlg_' + randomToken(40);
    const lease: Lease = {
      id: 'lease_' + randomToken(24),
      tokenHash: hashToken(token),
      agentId: req.agentId,
      profileId: req.profileId,
      revision: req.revision,
      budgets,
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
      parent: carve?.from ?? null,
      returned: false,
    };
    this.leases.set(lease.tokenHash, lease);
    this.leasesById.set(lease.id, lease);
    return { lease, token };
  }

  /**
   * Revoking stops new requests at once; requests in flight settle normally. Once nothing is in
   * flight, what is left of the lease goes back up its tree (giveBackLeft).
   */
  revoke(id: string): Lease | undefined {
    const l = this.leasesById.get(id);
    if (!l) return undefined;
    l.revoked = true;
    this.leases.delete(l.tokenHash);
    this.giveBackLeft(l);
    if (idle(l)) this.leasesById.delete(id);
    return l;
  }

  /** What a lease may still reserve, per budget (never negative). */
  room(l: Lease): Amounts {
    return {
      inputTokens: Math.max(0, l.budgets.maxInputTokens - l.usedIn - l.resIn),
      outputTokens: Math.max(0, l.budgets.maxOutputTokens - l.usedOut - l.resOut),
      costMicros: Math.max(0, l.budgets.maxCostMicros - l.usedCost - l.resCost),
    };
  }

  /**
   * Agent trees: sets `amounts` aside from a live lease's budgets for a child (all three budgets,
   * atomically with the lease's own reservations: this is synchronous). Refused, changing nothing,
   * when any amount is more than the lease has left. The carve becomes the child's lease budgets at
   * issue (carveId), or goes back with release().
   */
  carve(leaseId: string, amounts: Amounts): { ok: true; carve: Carve; room: Amounts } | { ok: false; reason: 'not_found' } | { ok: false; reason: 'exceeded'; field: string; room: Amounts } {
    const l = this.leasesById.get(leaseId);
    if (!l || l.revoked) return { ok: false, reason: 'not_found' };
    const room = this.room(l);
    for (const d of ['costMicros', 'inputTokens', 'outputTokens'] as const) if (amounts[d] > room[d]) return { ok: false, reason: 'exceeded', field: CARVE_FIELDS[d], room };
    l.budgets = { maxInputTokens: l.budgets.maxInputTokens - amounts.inputTokens, maxOutputTokens: l.budgets.maxOutputTokens - amounts.outputTokens, maxCostMicros: l.budgets.maxCostMicros - amounts.costMicros };
    const c: Carve = { id: 'carve_' + randomToken(24), from: l, amounts: { ...amounts } };
    this.carves.set(c.id, c);
    return { ok: true, carve: c, room: this.room(l) };
  }

  /** A carve whose child never got a lease goes back up the tree. Unknown (already used or released): false. */
  releaseCarve(id: string): boolean {
    const c = this.carves.get(id);
    if (!c) return false;
    this.carves.delete(id);
    this.giveBack(c.from, c.amounts);
    return true;
  }

  /**
   * Adds `amounts` to the budgets of the nearest lease that is still live, starting at `from` and
   * walking up the tree; with none left (the whole chain above has ended) it goes to no one.
   */
  private giveBack(from: Lease | null, amounts: Amounts): void {
    if (DIMS.every((d) => amounts[d] <= 0)) return;
    let to = from;
    while (to && to.revoked) to = to.parent;
    if (!to) {
      for (const d of DIMS) this.forfeited[d] += Math.max(0, amounts[d]);
      return;
    }
    to.budgets = {
      maxInputTokens: to.budgets.maxInputTokens + Math.max(0, amounts.inputTokens),
      maxOutputTokens: to.budgets.maxOutputTokens + Math.max(0, amounts.outputTokens),
      maxCostMicros: to.budgets.maxCostMicros + Math.max(0, amounts.costMicros),
    };
  }

  /**
   * An ended lease with nothing in flight gives back exactly what is left of it (its budgets, which
   * already exclude what it carved for its children, minus what it used), once. Children carved
   * from it keep their own budgets; what they leave goes up past it when they end.
   */
  private giveBackLeft(l: Lease): void {
    if (!l.revoked || l.returned || !idle(l)) return;
    l.returned = true;
    this.giveBack(l.parent, { inputTokens: l.budgets.maxInputTokens - l.usedIn, outputTokens: l.budgets.maxOutputTokens - l.usedOut, costMicros: l.budgets.maxCostMicros - l.usedCost });
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
    if (l.revoked) this.giveBackLeft(l);
    // A lease the owner revoked goes when idle; one ended by an overrun stays visible (admin GET) until swept.
    if (l.revoked && idle(l) && l.revokedReason === null) this.leasesById.delete(l.id);
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
      if (l.expiresAtMs < cutoff && idle(l)) {
        l.revoked = true;
        this.giveBackLeft(l);
        this.leases.delete(l.tokenHash);
        this.leasesById.delete(l.id);
      }
    }
  }
}

/** Nothing of the lease is reserved by a request in flight. */
function idle(l: Lease): boolean {
  return l.resCost === 0 && l.resIn === 0 && l.resOut === 0;
}
