import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { expect, it } from 'vitest';

it('docs/STATUS.md is generated from the current catalog (not stale)', () => {
  const root = resolve(import.meta.dirname, '../..');
  expect(() => execFileSync(process.execPath, [resolve(root, 'scripts/gen-status.mjs'), '--check'], { cwd: root, stdio: 'pipe' })).not.toThrow();
});
