import { describe, expect, it } from 'vitest';
import { settlesWithin } from '../../src/core/clock.js';

describe('settlesWithin', () => {
  it('is true for work that settles in time, fulfilled or rejected', async () => {
    expect(await settlesWithin(Promise.resolve(1), 1_000)).toBe(true);
    expect(await settlesWithin(Promise.reject(new Error('x')), 1_000)).toBe(true);
  });
  it('is false when the time runs out first, without waiting for the work', async () => {
    const t0 = Date.now();
    expect(await settlesWithin(new Promise(() => undefined), 50)).toBe(false);
    expect(Date.now() - t0).toBeLessThan(1_000);
  });
});
