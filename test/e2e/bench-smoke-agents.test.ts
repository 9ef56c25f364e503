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
    const result = JSON.parse(/RESULT (\{.*\})/.exec(out)![1]!);
    for (const k of ['spawnP50', 'execP50', 'proxiedP50', 'directP50']) {
      expect(Number.isFinite(result[k]), k).toBe(true);
      expect(result[k], k).toBeGreaterThan(0);
    }
  }, 300_000);
});
