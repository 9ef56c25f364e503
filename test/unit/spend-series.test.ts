/** SpendService.series: per UTC day of the month / month of the year, by profile and agent, states apart. */
import { describe, expect, it } from 'vitest';
import Database from 'better-sqlite3';
import { migrate } from '../../src/store/db.js';
import { SpendService } from '../../src/services/models/spend.js';

describe('spend series', () => {
  it('buckets every day of the month and every month of the year, splitting settled, reserved and unreconciled', () => {
    const db = new Database(':memory:');
    migrate(db);
    const now = Date.parse('2026-02-14T12:00:00Z');
    const s = new SpendService(db, () => now);
    const at = (d: string) => `${d}T10:00:00Z`;
    const ev = (id: string, agent: string, profile: string, day: string, reserved: number) => ({ type: 'reserve' as const, reservationId: id, leaseId: 'l', agentId: agent, profileId: profile, revision: 1, day, month: day.slice(0, 7), reservedMicros: reserved, at: at(day) });
    s.ingest('boot_a', [ev('r1', 'agent_a', 'p1', '2026-02-03', 500), ev('r2', 'agent_b', 'p1', '2026-02-03', 700), ev('r3', 'agent_a', 'p2', '2026-01-20', 900), ev('r4', 'agent_a', 'p2', '2026-02-14', 300)], 4);
    s.ingest('boot_a', [{ type: 'settle', reservationId: 'r1', costMicros: 120, usage: {}, at: at('2026-02-03') } as never, { type: 'settle', reservationId: 'r3', costMicros: 900, unreconciled: true, usage: {}, at: at('2026-01-20') } as never], 6);
    const m = s.series('month');
    expect(m.key).toBe('2026-02');
    expect(m.buckets).toHaveLength(28);
    expect(m.buckets[0]).toBe('2026-02-01');
    expect(m.rows).toEqual([
      { bucket: '2026-02-03', profileId: 'p1', agentId: 'agent_a', settledMicros: 120, reservedMicros: 0, unreconciledMicros: 0 },
      { bucket: '2026-02-03', profileId: 'p1', agentId: 'agent_b', settledMicros: 0, reservedMicros: 700, unreconciledMicros: 0 },
      { bucket: '2026-02-14', profileId: 'p2', agentId: 'agent_a', settledMicros: 0, reservedMicros: 300, unreconciledMicros: 0 },
    ]);
    const y = s.series('year');
    expect(y.buckets).toEqual(Array.from({ length: 12 }, (_, i) => `2026-${String(i + 1).padStart(2, '0')}`));
    expect(y.rows.find((r) => r.bucket === '2026-01')).toEqual({ bucket: '2026-01', profileId: 'p2', agentId: 'agent_a', settledMicros: 0, reservedMicros: 0, unreconciledMicros: 900 });
    expect(y.rows.filter((r) => r.bucket === '2026-02').reduce((a, r) => a + r.settledMicros + r.reservedMicros, 0)).toBe(1120);
  });
});
