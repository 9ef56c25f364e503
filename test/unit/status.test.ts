import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';
import { expect, it } from 'vitest';

it('docs/STATUS.md is generated from the current catalog (not stale)', () => {
  const root = resolve(import.meta.dirname, '../..');
  expect(() => execFileSync(process.execPath, [resolve(root, 'scripts/gen-status.mjs'), '--check'], { cwd: root, stdio: 'pipe' })).not.toThrow();
});

it('the README states the same count of working tools as docs/STATUS.md', async () => {
  const { readFileSync } = await import('node:fs');
  const root = resolve(import.meta.dirname, '../..');
  const status = /\*\*(\d+) of (\d+) tools working\.\*\*/.exec(readFileSync(resolve(root, 'docs/STATUS.md'), 'utf8'));
  const readme = /\*\*(\d+) of (\d+) tools working\*\*/.exec(readFileSync(resolve(root, 'README.md'), 'utf8'));
  expect(status, 'docs/STATUS.md count').not.toBeNull();
  expect(readme, 'README count').not.toBeNull();
  expect(readme!.slice(1)).toEqual(status!.slice(1));
});
