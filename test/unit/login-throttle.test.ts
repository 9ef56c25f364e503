/** Password-login throttling (issue #31 item 5): delays, lockouts, bounded checks, on a fake clock. */
import { describe, expect, it } from 'vitest';
import { addressKey, FORGET_AFTER_MS, LoginThrottle, MAX_ADDRESSES, MAX_RUNNING, MAX_WAITING, type LockoutEvent } from '../../src/services/access/login-throttle.js';

function throttle(perAddress = 10, overall = 100, lockoutMs = 900_000) {
  let t = 1_000_000;
  const events: LockoutEvent[] = [];
  let checks = 0;
  const th = new LoginThrottle({ perAddress, overall, lockoutMs }, (e) => events.push(e), () => t);
  return {
    th,
    events,
    checks: () => checks,
    advance: (ms: number) => (t += ms),
    now: () => t,
    /** One attempt whose check answers `right` (and is counted). */
    try: (ip: string, right = false) =>
      th.attempt(ip, async () => {
        checks++;
        return right;
      }),
  };
}

describe('addressKey', () => {
  it('counts IPv4 as is, IPv4-mapped IPv6 as IPv4, IPv6 by its /64', () => {
    expect(addressKey('127.0.0.2')).toBe('127.0.0.2');
    expect(addressKey('::ffff:10.1.2.3')).toBe('10.1.2.3');
    expect(addressKey('2001:db8:0:1::5')).toBe('2001:db8:0:1::/64');
    expect(addressKey('2001:db8:0:1:aaaa:bbbb:cccc:dddd')).toBe('2001:db8:0:1::/64');
    expect(addressKey('2001:0db8:0000:0001:0:0:0:9')).toBe('2001:db8:0:1::/64');
    expect(addressKey('::1')).toBe('0:0:0:0::/64');
    expect(addressKey('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(addressKey(undefined)).toBe('unknown');
    expect(addressKey('not an address')).toBe('unknown');
  });
});

describe('LoginThrottle', () => {
  it('per address: free failures, then growing delays that refuse even the right password without a check, then a lockout', async () => {
    const x = throttle(10);
    for (let i = 1; i <= 5; i++) expect((await x.try('10.0.0.1')).outcome).toBe('wrong');
    expect(x.th.refusal('10.0.0.1')).toBeNull();
    const delays: number[] = [];
    for (let i = 6; i <= 9; i++) {
      expect((await x.try('10.0.0.1')).outcome).toBe('wrong');
      const r = x.th.refusal('10.0.0.1')!;
      expect(r).toMatchObject({ reason: 'delay', scope: 'address' });
      delays.push(r.until - x.now());
      const before = x.checks();
      expect(await x.try('10.0.0.1', true)).toMatchObject({ outcome: 'refused', reason: 'delay' });
      expect(x.checks()).toBe(before);
      x.advance(r.until - x.now());
    }
    expect(delays).toEqual([1000, 2000, 4000, 8000]);
    // Another address is not slowed down.
    expect((await x.try('10.0.0.2', true)).outcome).toBe('ok');
    expect(await x.try('10.0.0.1')).toEqual({ outcome: 'wrong', lockout: 'address' });
    expect(x.events).toEqual([{ scope: 'address', key: '10.0.0.1', until: x.now() + 900_000, failures: 10, lockouts: 1 }]);
    const before = x.checks();
    expect(await x.try('10.0.0.1', true)).toMatchObject({ outcome: 'refused', reason: 'lockout', scope: 'address', until: x.now() + 900_000 });
    expect(x.checks()).toBe(before);
    expect(x.th.view().lockedAddresses).toBe(1);
    expect(x.th.view().addresses[0]).toMatchObject({ address: '10.0.0.1', lockedUntil: new Date(x.now() + 900_000).toISOString() });
    // The lockout ends; a second one in a row lasts twice as long.
    x.advance(900_000);
    expect(x.th.refusal('10.0.0.1')).toBeNull();
    for (let i = 1; i <= 10; i++) {
      await x.try('10.0.0.1');
      const r = x.th.refusal('10.0.0.1');
      if (r?.reason === 'delay') x.advance(r.until - x.now());
    }
    expect(x.events[1]).toMatchObject({ scope: 'address', until: x.now() + 1_800_000, lockouts: 2 });
  });

  it('overall: failures from many addresses slow down and then lock password login for every address', async () => {
    const x = throttle(1000, 8);
    for (let i = 1; i <= 4; i++) expect((await x.try(`10.0.1.${i}`)).outcome).toBe('wrong');
    expect(x.th.refusal('10.9.9.9')).toBeNull();
    for (let i = 5; i <= 7; i++) {
      expect((await x.try(`10.0.1.${i}`)).outcome).toBe('wrong');
      const r = x.th.refusal('10.9.9.9')!;
      expect(r).toMatchObject({ reason: 'delay', scope: 'overall' });
      expect(await x.try('10.9.9.9', true)).toMatchObject({ outcome: 'refused', reason: 'delay', scope: 'overall' });
      x.advance(r.until - x.now());
    }
    expect(await x.try('10.0.1.8')).toEqual({ outcome: 'wrong', lockout: 'overall' });
    expect(x.events.map((e) => e.scope)).toEqual(['overall']);
    expect(await x.try('10.9.9.9', true)).toMatchObject({ outcome: 'refused', reason: 'lockout', scope: 'overall' });
    expect(x.th.view().overall.lockedUntil).toBe(new Date(x.now() + 900_000).toISOString());
  });

  it('forgets failures after a quiet while; a success forgets its address', async () => {
    const x = throttle(10);
    for (let i = 0; i < 5; i++) await x.try('10.0.0.1');
    x.advance(FORGET_AFTER_MS + 1);
    await x.try('10.0.0.1');
    expect(x.th.refusal('10.0.0.1')).toBeNull(); // one failure after the quiet time, not six
    for (let i = 0; i < 4; i++) await x.try('10.0.0.1');
    expect((await x.try('10.0.0.1', true)).outcome).toBe('ok');
    await x.try('10.0.0.1');
    expect(x.th.refusal('10.0.0.1')).toBeNull();
    expect(x.th.view().addresses).toEqual([expect.objectContaining({ address: '10.0.0.1', failures: 1 })]);
  });

  it('runs at most MAX_RUNNING checks, queues MAX_WAITING, refuses the rest at once; one check per address at a time', async () => {
    const th = new LoginThrottle({ perAddress: 10, overall: 100, lockoutMs: 900_000 });
    let running = 0;
    let most = 0;
    let checks = 0;
    const gates: Array<() => void> = [];
    const check = () =>
      new Promise<boolean>((resolve) => {
        checks++;
        running++;
        most = Math.max(most, running);
        gates.push(() => {
          running--;
          resolve(false);
        });
      });
    const all = Array.from({ length: 20 }, (_, i) => th.attempt(`10.0.2.${i}`, check));
    const same = th.attempt('10.0.2.0', check);
    await new Promise((r) => setImmediate(r));
    expect(checks).toBe(MAX_RUNNING);
    expect(await same).toMatchObject({ outcome: 'refused', reason: 'concurrent' });
    const results = [];
    // Let the queued checks through one by one.
    while (gates.length) {
      gates.shift()!();
      await new Promise((r) => setImmediate(r));
    }
    for (const p of all) results.push(await p);
    expect(most).toBe(MAX_RUNNING);
    expect(checks).toBe(MAX_RUNNING + MAX_WAITING);
    expect(results.filter((r) => r.outcome === 'wrong').length).toBe(MAX_RUNNING + MAX_WAITING);
    expect(results.filter((r) => r.outcome === 'refused' && r.reason === 'busy').length).toBe(20 - MAX_RUNNING - MAX_WAITING);
    expect(th.metrics()).toMatchObject({ runningMax: MAX_RUNNING, checks: { ok: 0, wrong: MAX_RUNNING + MAX_WAITING }, refused: { busy: 20 - MAX_RUNNING - MAX_WAITING, concurrent: 1 } });
    expect(th.view().checks).toEqual({ running: 0, waiting: 0 });
  });

  it('keeps the address table bounded', async () => {
    const x = throttle(10, 1_000_000);
    for (let i = 0; i < MAX_ADDRESSES + 50; i++) await x.try(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
    expect(x.th.view().addresses.length).toBeLessThanOrEqual(20);
    expect((x.th as unknown as { addresses: Map<string, unknown> }).addresses.size).toBeLessThanOrEqual(MAX_ADDRESSES);
  });
});
