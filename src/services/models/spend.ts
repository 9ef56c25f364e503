/**
 * The runner's spend ledger: reservations and settlements reported by the gateway (pulled from its
 * /admin/usage), per UTC day and month; and the owner's spend policies. Owns spend_reservations,
 * spend_policies, spend_cursor. All money is integer micro-USD. See docs/spend.md.
 */
import type { DB } from '../../store/db.js';
import { tx } from '../../store/db.js';
import { ServiceError } from '../../core/errors.js';
import { windowKeys } from '../../core/pricing.js';
import type { SpendPolicies, UsageEvent, WindowBaseline } from '../../contracts/gateway.js';

export const SPEND_NOTE = 'Figures are estimates from pinned profile prices, not provider invoices.';
export const MAX_CAP_MICROS = 1_000_000_000_000; // one million USD

export interface SpendWindow {
  period: 'day' | 'month';
  key: string;
  startsAt: string;
  endsAt: string;
  settledMicros: number;
  reservedMicros: number;
  unreconciledMicros: number;
  totalMicros: number;
  /** Micro-USD settled past reservations by providers that ignored the limits (included in the totals). */
  overrunMicros: number;
  /** Each provider overrun of the window, newest first (at most 100). */
  overruns: SpendOverrun[];
  policy: { capMicros: number | null; remainingMicros: number | null };
}

export interface SpendSeriesRow {
  bucket: string;
  profileId: string | null;
  agentId: string | null;
  settledMicros: number;
  reservedMicros: number;
  unreconciledMicros: number;
}

export interface SpendOverrun {
  reservationId: string;
  leaseId: string;
  agentId: string;
  profileId: string;
  revision: number;
  at: string;
  costMicros: number;
  reservedMicros: number;
  overrunMicros: number;
  inputTokensPastBound: number;
  outputTokensPastLimit: number;
  unreconciled: boolean;
  leaseRevoked: boolean;
  reason: string | null;
}

export interface PolicyRecord extends SpendPolicies {
  updatedAt: string | null;
}

export class SpendService {
  constructor(
    private readonly db: DB,
    private readonly now: () => number = Date.now,
  ) {}

  cursor(): { bootId: string; seq: number } | null {
    const r = this.db.prepare('SELECT boot_id, seq FROM spend_cursor WHERE id = 1').get() as { boot_id: string; seq: number } | undefined;
    return r ? { bootId: r.boot_id, seq: r.seq } : null;
  }

  /**
   * Records events of gateway boot `bootId` and moves the cursor. When the boot differs from the
   * cursor's, the old boot's open reservations can never settle any more: they become unreconciled
   * at their reserved (worst-case) amount.
   */
  ingest(bootId: string, events: UsageEvent[], lastSeq: number): void {
    tx(this.db, () => {
      const cur = this.cursor();
      if (cur && cur.bootId !== bootId) this.closeBoot(cur.bootId, 'gateway restarted before settling');
      const ins = this.db.prepare(
        `INSERT OR IGNORE INTO spend_reservations (id, boot_id, lease_id, agent_id, profile_id, revision, day, month, reserved_micros, state, reserved_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'open', ?)`,
      );
      const upd = this.db.prepare(
        `UPDATE spend_reservations SET state = ?, cost_micros = ?, usage_json = ?, reason = ?, settled_at = ?, overrun_micros = ?, overrun_json = ? WHERE id = ? AND state = 'open'`,
      );
      for (const e of events) {
        if (e.type === 'reserve') ins.run(e.reservationId, bootId, e.leaseId, e.agentId, e.profileId, e.revision, e.day, e.month, e.reservedMicros, e.at);
        else
          upd.run(e.unreconciled ? 'unreconciled' : 'settled', e.costMicros, JSON.stringify(e.usage), e.reason ?? null, e.at, e.overrun ? e.overrun.micros : null, e.overrun ? JSON.stringify(e.overrun) : null, e.reservationId);
      }
      this.db.prepare('INSERT INTO spend_cursor (id, boot_id, seq) VALUES (1, ?, ?) ON CONFLICT(id) DO UPDATE SET boot_id = excluded.boot_id, seq = excluded.seq').run(bootId, lastSeq);
    });
  }

  private closeBoot(bootId: string, reason: string): void {
    this.db
      .prepare(`UPDATE spend_reservations SET state = 'unreconciled', cost_micros = reserved_micros, reason = ?, settled_at = ? WHERE boot_id = ? AND state = 'open'`)
      .run(reason, new Date(this.now()).toISOString(), bootId);
  }

  /** What the ledger holds for the current windows from boots other than `bootId` (pushed so policies hold across gateway restarts). */
  baselines(bootId: string | null): WindowBaseline[] {
    const { day, month } = windowKeys(this.now());
    const query = (col: 'day' | 'month', key: string) =>
      (this.db
        .prepare(`SELECT COALESCE(SUM(CASE WHEN state = 'open' THEN reserved_micros ELSE cost_micros END), 0) FROM spend_reservations WHERE ${col} = ? AND boot_id != ?`)
        .pluck()
        .get(key, bootId ?? '') as number);
    return [
      { window: 'day', key: day, spentMicros: query('day', day) },
      { window: 'month', key: month, spentMicros: query('month', month) },
    ];
  }

  policies(): PolicyRecord {
    const record = this.db.prepare('SELECT * FROM spend_policies WHERE id = 1').get() as Record<string, number | string | null> | undefined;
    return {
      dailyCapMicros: (record?.daily_cap_micros as number | null) ?? null,
      monthlyCapMicros: (record?.monthly_cap_micros as number | null) ?? null,
      perAgentCapMicros: (record?.per_agent_cap_micros as number | null) ?? null,
      updatedAt: (record?.updated_at as string | null) ?? null,
    };
  }

  /** Replaces the policies; every field is required (null = no cap). */
  setPolicies(input: Record<string, unknown>): PolicyRecord {
    const out: Partial<SpendPolicies> = {};
    for (const k of ['dailyCapMicros', 'monthlyCapMicros', 'perAgentCapMicros'] as const) {
      const v = input[k];
      if (v === undefined) out[k] = this.policies()[k];
      else if (v === null) out[k] = null;
      else if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v <= MAX_CAP_MICROS) out[k] = v;
      else throw new ServiceError('INVALID_ARGUMENT', `${k}: must be null (no cap) or an integer number of micro-USD from 0 to ${MAX_CAP_MICROS}`, { field: k });
    }
    for (const k of Object.keys(input)) if (!['dailyCapMicros', 'monthlyCapMicros', 'perAgentCapMicros'].includes(k)) throw new ServiceError('INVALID_ARGUMENT', `${k}: unknown policy (known: dailyCapMicros, monthlyCapMicros, perAgentCapMicros)`, { field: k });
    const at = new Date(this.now()).toISOString();
    this.db
      .prepare(
        `INSERT INTO spend_policies (id, daily_cap_micros, monthly_cap_micros, per_agent_cap_micros, updated_at) VALUES (1, ?, ?, ?, ?)
         ON CONFLICT(id) DO UPDATE SET daily_cap_micros = excluded.daily_cap_micros, monthly_cap_micros = excluded.monthly_cap_micros, per_agent_cap_micros = excluded.per_agent_cap_micros, updated_at = excluded.updated_at`,
      )
      .run(out.dailyCapMicros, out.monthlyCapMicros, out.perAgentCapMicros, at);
    return this.policies();
  }

  window(period: 'day' | 'month', at = this.now()): SpendWindow {
    const keys = windowKeys(at);
    const key = keys[period];
    const d = new Date(at);
    const start = period === 'day' ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()) : Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
    const end = period === 'day' ? start + 86_400_000 : Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
    const rows = this.db
      .prepare(`SELECT state, COALESCE(SUM(reserved_micros), 0) AS reserved, COALESCE(SUM(cost_micros), 0) AS cost FROM spend_reservations WHERE ${period} = ? GROUP BY state`)
      .all(key) as Array<{ state: string; reserved: number; cost: number }>;
    const by = (s: string) => rows.find((r) => r.state === s);
    const settled = by('settled')?.cost ?? 0;
    const reserved = by('open')?.reserved ?? 0;
    const unreconciled = by('unreconciled')?.cost ?? 0;
    const pol = this.policies();
    const cap = period === 'day' ? pol.dailyCapMicros : pol.monthlyCapMicros;
    const total = settled + reserved + unreconciled;
    const overrunRows = this.db
      .prepare(`SELECT * FROM spend_reservations WHERE ${period} = ? AND overrun_json IS NOT NULL ORDER BY settled_at DESC, id LIMIT 100`)
      .all(key) as Array<Record<string, unknown>>;
    const overrunMicros = this.db.prepare(`SELECT COALESCE(SUM(overrun_micros), 0) FROM spend_reservations WHERE ${period} = ? AND overrun_json IS NOT NULL`).pluck().get(key) as number;
    const overruns: SpendOverrun[] = overrunRows.map((row) => {
      const overrun = JSON.parse(row.overrun_json as string) as { micros: number; inputTokens: number; outputTokens: number; leaseRevoked: boolean };
      return {
        reservationId: row.id as string,
        leaseId: row.lease_id as string,
        agentId: row.agent_id as string,
        profileId: row.profile_id as string,
        revision: row.revision as number,
        at: row.settled_at as string,
        costMicros: row.cost_micros as number,
        reservedMicros: row.reserved_micros as number,
        overrunMicros: overrun.micros,
        inputTokensPastBound: overrun.inputTokens,
        outputTokensPastLimit: overrun.outputTokens,
        unreconciled: row.state === 'unreconciled',
        leaseRevoked: overrun.leaseRevoked,
        reason: (row.reason as string | null) ?? null,
      };
    });
    return {
      period,
      key,
      startsAt: new Date(start).toISOString(),
      endsAt: new Date(end).toISOString(),
      settledMicros: settled,
      reservedMicros: reserved,
      unreconciledMicros: unreconciled,
      totalMicros: total,
      overrunMicros,
      overruns,
      policy: { capMicros: cap, remainingMicros: cap === null ? null : Math.max(0, cap - total) },
    };
  }

  /** An agent's spend in the ledger (all windows): settled, reserved by open runs, unreconciled. */
  agentSpend(agentId: string): { settledMicros: number; reservedMicros: number; unreconciledMicros: number; totalMicros: number } {
    const rows = this.db
      .prepare(`SELECT state, COALESCE(SUM(reserved_micros), 0) AS reserved, COALESCE(SUM(cost_micros), 0) AS cost FROM spend_reservations WHERE agent_id = ? GROUP BY state`)
      .all(agentId) as Array<{ state: string; reserved: number; cost: number }>;
    const by = (s: string) => rows.find((r) => r.state === s);
    const settled = by('settled')?.cost ?? 0;
    const reserved = by('open')?.reserved ?? 0;
    const unreconciled = by('unreconciled')?.cost ?? 0;
    return { settledMicros: settled, reservedMicros: reserved, unreconciledMicros: unreconciled, totalMicros: settled + reserved + unreconciled };
  }

  summary(period?: 'day' | 'month') {
    const periods: Array<'day' | 'month'> = period ? [period] : ['day', 'month'];
    const at = this.now();
    const { updatedAt, ...policies } = this.policies();
    return {
      windows: periods.map((p) => this.window(p, at)),
      policies: { ...policies, updatedAt },
      unit: 'micro-USD',
      estimate: true,
      note: SPEND_NOTE,
      asOf: new Date(at).toISOString(),
    };
  }

  /**
   * Spend per UTC day of the month holding `at` (range "month") or per UTC month of its year
   * (range "year"), split by profile and agent, with settled, reserved (open) and unreconciled
   * apart. Rows only for buckets with spend; the dashboard fills the gaps.
   */
  series(range: 'month' | 'year', at = this.now()): { range: 'month' | 'year'; key: string; buckets: string[]; rows: SpendSeriesRow[] } {
    const { month } = windowKeys(at);
    const date = new Date(at);
    const year = String(date.getUTCFullYear());
    const col = range === 'month' ? 'day' : 'month';
    const key = range === 'month' ? month : year;
    const buckets: string[] = [];
    if (range === 'month') {
      const days = new Date(Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 0)).getUTCDate();
      for (let i = 1; i <= days; i++) buckets.push(`${month}-${String(i).padStart(2, '0')}`);
    } else {
      for (let i = 1; i <= 12; i++) buckets.push(`${year}-${String(i).padStart(2, '0')}`);
    }
    const rows = this.db
      .prepare(
        `SELECT ${col} AS bucket, profile_id, agent_id,
                COALESCE(SUM(CASE WHEN state = 'settled' THEN cost_micros ELSE 0 END), 0) AS settled,
                COALESCE(SUM(CASE WHEN state = 'open' THEN reserved_micros ELSE 0 END), 0) AS reserved,
                COALESCE(SUM(CASE WHEN state = 'unreconciled' THEN cost_micros ELSE 0 END), 0) AS unreconciled
           FROM spend_reservations WHERE ${col} >= ? AND ${col} <= ? GROUP BY ${col}, profile_id, agent_id ORDER BY ${col}`,
      )
      .all(buckets[0], buckets[buckets.length - 1]) as Array<{ bucket: string; profile_id: string | null; agent_id: string | null; settled: number; reserved: number; unreconciled: number }>;
    return {
      range,
      key,
      buckets,
      rows: rows.map((r) => ({ bucket: r.bucket, profileId: r.profile_id, agentId: r.agent_id, settledMicros: r.settled, reservedMicros: r.reserved, unreconciledMicros: r.unreconciled })),
    };
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type SpendSummaryResult = Awaited<ReturnType<SpendService['summary']>>;
