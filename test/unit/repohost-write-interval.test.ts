import { describe, expect, it } from 'vitest';
import { DEFAULT_WRITE_INTERVAL_MS, writeIntervalFromEnv } from '../../src/services/repohost/host.js';

describe('ATELIER_REPOHOST_WRITE_INTERVAL_MS', () => {
  it('defaults to GitHub guidance of one second between writes', () => {
    expect(DEFAULT_WRITE_INTERVAL_MS).toBe(1000);
    expect(writeIntervalFromEnv(undefined)).toBe(1000);
    expect(writeIntervalFromEnv('')).toBe(1000);
  });
  it('takes whole milliseconds from 0 to 60000 and names the setting and the rule otherwise', () => {
    expect(writeIntervalFromEnv('0')).toBe(0);
    expect(writeIntervalFromEnv('250')).toBe(250);
    expect(writeIntervalFromEnv('60000')).toBe(60_000);
    for (const bad of ['-1', '60001', '1.5', 'fast', '1e3x'])
      expect(() => writeIntervalFromEnv(bad)).toThrow(/ATELIER_REPOHOST_WRITE_INTERVAL_MS must be a whole number of milliseconds from 0 to 60000/);
  });
});
