/** bench/agents.mjs runs end to end in its smoke mode (tiny counts) and prints its figures beside their baselines. */
import { describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from './harness.js';

describe('bench/agents --smoke', () => {
  it('measures spawn-to-first-request and proxied-call overhead against baselines from the same run', async () => {
    const out = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, [join(ROOT, 'bench/agents.mjs'), '--smoke'], { timeout: 240_000, maxBuffer: 4 * 1024 * 1024 }, (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stdout}\n${stderr}`)) : resolve(stdout))),
    );
    expect(out).toContain('spawn to first provider request');
    expect(out).toContain('baseline: MCP exec_run true');
    expect(out).toContain('baseline: direct MCP files_read');
    // Each goal is printed as met or not beside its same-run baseline.
    expect(out).toMatch(/spawn to first provider request, pool ready .* goal p50 < 150 ms: goal (MET|NOT met)/);
    expect(out).toMatch(/overhead of a proxied call over a direct MCP call: .* goal < 2 ms: goal (MET|NOT met)/);
    expect(out).toContain('pool empty (runtime starting on demand');
    const result = JSON.parse(/RESULT (\{.*\})/.exec(out)![1]!);
    expect(typeof result.spawnGoalMet).toBe('boolean');
    expect(typeof result.overheadGoalMet).toBe('boolean');
    for (const k of ['spawnP50', 'coldSpawnP50', 'execP50', 'directP50']) {
      expect(Number.isFinite(result[k]), k).toBe(true);
      expect(result[k], k).toBeGreaterThan(0);
    }
    // The proxied figure is a difference of two timings ((K calls - 1 call) / (K - 1)): with the
    // smoke mode's few rounds it may come out below zero, so it must only be a number.
    expect(Number.isFinite(result.proxiedP50), 'proxiedP50').toBe(true);
    expect(Number.isFinite(result.overheadP50), 'overheadP50').toBe(true);
  }, 300_000);
});
