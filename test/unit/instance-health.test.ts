/** Calls of the last hour (services/instance/health.ts): per-minute buckets, errors, slowest tools, nothing older than an hour. */
import { describe, expect, it } from 'vitest';
import { CallStats } from '../../src/services/instance/health.js';

describe('CallStats', () => {
  it('counts calls and errors of the last hour and ranks the slowest tools by mean', () => {
    let now = Date.UTC(2026, 0, 1, 12, 0, 0);
    const s = new CallStats(() => now);
    s.record('files_read', 2, true);
    s.record('files_read', 4, false);
    s.record('exec_run', 900, true);
    now += 30 * 60_000;
    s.record('git_push', 1500, true);
    s.record('exec_run', 100, true);
    const h = s.lastHour(2);
    expect(h).toMatchObject({ calls: 5, errors: 1 });
    expect(h.slowest).toEqual([
      { tool: 'git_push', calls: 1, errors: 0, meanMs: 1500, maxMs: 1500 },
      { tool: 'exec_run', calls: 2, errors: 0, meanMs: 500, maxMs: 900 },
    ]);
    // An hour later the first minute's calls are gone; the later ones stay until their hour ends.
    now += 31 * 60_000;
    s.record('files_read', 1, true);
    expect(s.lastHour()).toMatchObject({ calls: 3, errors: 0 });
    now += 60 * 60_000;
    expect(s.lastHour()).toEqual({ calls: 0, errors: 0, slowest: [] });
  });
});
