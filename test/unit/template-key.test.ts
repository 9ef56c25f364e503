/**
 * What a template's key holds of an environment's entries (issue #42 item 5; docs/templates.md
 * "What a template is keyed on"): the digest moves with every change the setup could see (a
 * rotated secret, even to the same value; a variable's value; the setup-only flag; an entry
 * added or removed, in the environment or the global scope) and stays put otherwise; no value is
 * in it, and setupInputs reads the digest and the values together.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { migrate, openDatabase } from '../../src/store/db.js';
import { SecretBox } from '../../src/core/crypto.js';
import { EnvironmentService } from '../../src/services/environments.js';

const dir = mkdtempSync(join(tmpdir(), 'tpl-key-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('entriesDigest', () => {
  it('moves with every change the setup could see, and with nothing else', () => {
    const db = openDatabase(join(dir, 'a.db'));
    migrate(db);
    const envs = new EnvironmentService(db, new SecretBox(Buffer.alloc(32, 3)));
    const env = envs.create('e').id;
    const other = envs.create('other').id;
    envs.set(env, 'TOKEN', 'secret-value-one-123456', { secret: true });
    envs.set(env, 'PLAIN', 'plain-value', { secret: false });
    const seen = new Set<string>();
    const step = (what: string) => {
      const d = envs.entriesDigest(env);
      expect(seen.has(d), what).toBe(false);
      seen.add(d);
      expect(d).not.toContain('secret-value');
      return d;
    };
    const d0 = step('start');
    expect(envs.entriesDigest(env)).toBe(d0); // stable while nothing changes
    envs.set(other, 'ELSEWHERE', 'x', { secret: false });
    expect(envs.entriesDigest(env)).toBe(d0); // another environment's entries are not this one's
    envs.set(env, 'TOKEN', 'secret-value-two-654321', { secret: true });
    step('rotated');
    envs.set(env, 'TOKEN', 'secret-value-two-654321', { secret: true });
    step('set again to the same value (a new version)');
    envs.set(env, 'PLAIN', 'plain-value-2', { secret: false });
    step('variable changed');
    envs.set(env, 'PLAIN', 'plain-value-2', { secret: false, setupOnly: true });
    step('marked setup-only');
    envs.set('global', 'GLOBAL_ONE', 'g', { secret: false });
    step('a global entry added');
    envs.unset(env, 'PLAIN');
    step('removed');
    const inputs = envs.setupInputs(env);
    expect(inputs.digest).toBe(envs.entriesDigest(env));
    expect(inputs.env).toEqual({ GLOBAL_ONE: 'g', TOKEN: 'secret-value-two-654321' });
    expect(JSON.stringify(db.prepare('SELECT * FROM env_entries').all())).not.toContain('secret-value-two');
  });
});
