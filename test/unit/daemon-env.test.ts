/**
 * The daemon's `env.set` (src/sandbox/daemon/env.ts): the environment commands start from, given
 * after start (a warm-pool Pod claimed for a workspace, docs/scaling.md). Hostile input is
 * refused whole, naming the rule, and the environment stays as it was.
 */
import { describe, expect, it } from 'vitest';
import { envMethods, MAX_ENV_BYTES, MAX_ENV_VARS } from '../../src/sandbox/daemon/env.js';
import { methodCaller } from './daemon-methods.js';

describe('daemon env.set', () => {
  let base: Record<string, string> = {};
  const { call, refusal } = methodCaller(() => envMethods(base));

  it('replaces the whole base environment in place (the object exec and pty read)', async () => {
    base = { OLD: 'x', PATH: '/bin' };
    const same = base;
    expect(await call('env.set', { env: { PATH: '/usr/bin:/bin', TOKEN: 'a=b c', EMPTY: '' } })).toEqual({ set: 3 });
    expect(same).toEqual({ PATH: '/usr/bin:/bin', TOKEN: 'a=b c', EMPTY: '' });
    expect(await call('env.set', { env: {} })).toEqual({ set: 0 });
    expect(same).toEqual({});
  });

  it('refuses what is not a flat object of strings, whole, leaving the environment as it was', async () => {
    base = { KEEP: 'kept' };
    const nested: Record<string, unknown> = {};
    let cur = nested;
    for (let i = 0; i < 10_000; i++) cur = cur.a = {} as Record<string, unknown>;
    const cases: Array<[unknown, RegExp]> = [
      [undefined, /params must be an object/],
      [null, /params must be an object/],
      [[1], /params must be an object/],
      [{}, /env must be a plain object/],
      [{ env: 'A=1' }, /env must be a plain object/],
      [{ env: ['A=1'] }, /env must be a plain object/],
      [{ env: null }, /env must be a plain object/],
      [{ env: { A: 'ok', B: 1 } }, /every value must be a string/],
      [{ env: { A: 'ok', B: { C: 'x' } } }, /every value must be a string/],
      [{ env: { A: nested } }, /every value must be a string/],
      [{ env: { A: ['x'] } }, /every value must be a string/],
      [{ env: { A: null } }, /every value must be a string/],
      [{ env: { 'A=B': 'x' } }, /without = or NUL/],
      [{ env: { '': 'x' } }, /non-empty/],
      [{ env: { 'A\0B': 'x' } }, /without = or NUL/],
      [{ env: { A: 'x\0y' } }, /must not contain NUL/],
      [{ env: Object.fromEntries(Array.from({ length: MAX_ENV_VARS + 1 }, (_, i) => [`V${i}`, ''])) }, new RegExp(`at most ${MAX_ENV_VARS} variables`)],
      [{ env: { A: 'x'.repeat(MAX_ENV_BYTES) } }, new RegExp(`at most ${MAX_ENV_BYTES} bytes`)],
    ];
    for (const [i, [params, why]] of cases.entries()) {
      const e = await refusal('env.set', params as never);
      expect(e.code, `case ${i}`).toBe('INVALID_ARGUMENT');
      expect(e.message).toMatch(why);
      expect(e.details).toMatchObject({ field: 'env' });
      expect(base).toEqual({ KEEP: 'kept' });
    }
    // A name like __proto__ is a plain variable, not a prototype change.
    expect(await call('env.set', JSON.parse('{"env":{"__proto__":"p","constructor":"c"}}'))).toEqual({ set: 2 });
    expect(Object.keys(base).sort()).toEqual(['__proto__', 'constructor']);
    expect(Object.getPrototypeOf(base)).toBe(Object.prototype);
  });
});
