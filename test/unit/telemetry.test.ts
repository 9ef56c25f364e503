/**
 * The telemetry helpers alone (issue #35): the one attribute filter every span goes through, and
 * the helpers with tracing off (the e2e test, test/e2e/telemetry.test.ts, covers tracing on).
 */
import { describe, expect, it } from 'vitest';
import { attrs, extractContext, inSpan, injectHeaders, startSpan, stepSpan, tracingEnabled } from '../../src/telemetry/tracing.js';
import { registerGauge, registry } from '../../src/telemetry/metrics.js';

describe('attrs: the attribute filter (hostile values)', () => {
  it('drops credential-shaped strings, keys outside the conventions, and empty values; cuts long strings', () => {
    const out = attrs({
      'atelier.workspace.id': 'ws_abc',
      'gen_ai.tool.name': 'exec_run',
      'atelier.a': 'atl_' + 'x'.repeat(40),
      'atelier.b': 'Bearer abc',
      'atelier.c': 'sk-provider-key',
      'atelier.d': 'atlg_abc',
      'atelier.e': 'A'.repeat(40),
      'atelier.f': '-----BEGIN PRIVATE KEY-----',
      'atelier.g': 'ghp_0123',
      'atelier.h': 'github_pat_0123',
      'atelier.i': 'glpat-0123',
      'atelier.long': 'word '.repeat(100),
      authorization: 'x',
      'http.request.header.cookie': 'c',
      password: 'p',
      'atelier.n': 3,
      'atelier.none': undefined,
      'atelier.null': null,
    });
    expect(out['atelier.workspace.id']).toBe('ws_abc');
    expect(out['gen_ai.tool.name']).toBe('exec_run');
    for (const k of ['atelier.a', 'atelier.b', 'atelier.c', 'atelier.d', 'atelier.e', 'atelier.f', 'atelier.g', 'atelier.h', 'atelier.i', 'authorization', 'password', 'atelier.none', 'atelier.null']) expect(out[k], k).toBeUndefined();
    expect((out['atelier.long'] as string).length).toBe(256);
    expect(out['atelier.n']).toBe(3);
  });
});

describe('tracing off', () => {
  it('loads no SDK, records nothing and runs every wrapped function as is', async () => {
    expect(tracingEnabled()).toBe(false);
    expect(await inSpan('x', {}, async () => 7)).toBe(7);
    expect(await inSpan('x', {}, () => 8)).toBe(8);
    await expect(inSpan('x', {}, async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(stepSpan('y', () => 9)).toBe(9);
    expect(startSpan('z')).toBeUndefined();
    expect(injectHeaders()).toEqual({});
    const base = extractContext([{ traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' }]);
    expect(base).toBeDefined();
  });
});

describe('registerGauge: the hook for other parts (the backups\' age)', () => {
  it('adds a gauge read at scrape time, replaces one of the same name, and refuses names outside atelier_*', async () => {
    let age: number | null = 42;
    registerGauge({ name: 'atelier_test_backup_age_seconds', help: 'test', collect: () => age });
    expect(await registry.getSingleMetricAsString('atelier_test_backup_age_seconds')).toContain('atelier_test_backup_age_seconds 42');
    age = null;
    expect(await registry.getSingleMetricAsString('atelier_test_backup_age_seconds')).not.toMatch(/^atelier_test_backup_age_seconds \d/m);
    registerGauge({ name: 'atelier_test_backup_age_seconds', help: 'test', labelNames: ['kind'], collect: () => [{ labels: { kind: 'full' }, value: 5 }] });
    expect(await registry.getSingleMetricAsString('atelier_test_backup_age_seconds')).toContain('atelier_test_backup_age_seconds{kind="full"} 5');
    expect(() => registerGauge({ name: 'process_evil', help: 'x', collect: () => 1 })).toThrow(/atelier_/);
    registry.removeSingleMetric('atelier_test_backup_age_seconds');
  });
});
