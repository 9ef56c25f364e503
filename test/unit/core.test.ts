import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CursorCodec } from '../../src/core/cursor.js';
import { SecretBox, hashPassword, verifyPassword } from '../../src/core/crypto.js';
import { newId } from '../../src/core/ids.js';
import { ConfigError, loadConfig } from '../../src/core/config.js';
import { openDatabase } from '../../src/store/db.js';
import { IdempotencyStore } from '../../src/services/instance/idempotency.js';
import { canonicalJson } from '../../src/core/canonical-json.js';
import { ServiceError } from '../../src/core/errors.js';
import { ToolRegistry } from '../../src/mcp/registry.js';
import { CATALOG } from '../../src/tools/index.js';

const master = Buffer.alloc(32, 7);
const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'atelier-unit-'));
  dirs.push(d);
  return d;
};
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));

describe('identifiers', () => {
  it('have the prefix and URL-safe characters within the spec lengths', () => {
    for (let i = 0; i < 200; i++) expect(newId('workspace')).toMatch(/^ws_[A-Za-z0-9_-]{24}$/);
    expect(new Set(Array.from({ length: 1000 }, () => newId('task'))).size).toBe(1000);
  });
});

describe('cursors', () => {
  const c = new CursorCodec(master);
  it('round-trip and stay within 256 characters', () => {
    const cur = c.encode('files_list', { o: 500, p: 'src/some/dir' });
    expect(cur.length).toBeLessThanOrEqual(256);
    expect(c.decode('files_list', cur)).toEqual({ o: 500, p: 'src/some/dir' });
  });
  it('refuse tampering, another listing and another key', () => {
    const cur = c.encode('files_list', { o: 1 });
    const forged = Buffer.from(JSON.stringify({ o: 999 })).toString('base64url') + cur.slice(cur.indexOf('.'));
    expect(() => c.decode('files_list', forged)).toThrow(ServiceError);
    expect(() => c.decode('git_log', cur)).toThrow(/cursor/);
    expect(() => new CursorCodec(Buffer.alloc(32, 8)).decode('files_list', cur)).toThrow(ServiceError);
  });
});

describe('secrets at rest', () => {
  it('seal and open with AES-256-GCM bound to their row', () => {
    const box = new SecretBox(master);
    const sealed = box.seal('sk-very-secret', 'cred_1');
    expect(sealed).not.toContain('sk-very-secret');
    expect(box.open(sealed, 'cred_1').toString()).toBe('sk-very-secret');
    expect(() => box.open(sealed, 'cred_2')).toThrow(ServiceError);
  });
  it('passwords hash with scrypt and verify', async () => {
    const h = await hashPassword('correct horse battery');
    expect(await verifyPassword('correct horse battery', h)).toBe(true);
    expect(await verifyPassword('wrong', h)).toBe(false);
  });
});

describe('idempotency records', () => {
  it('replay the same input, refuse different input with CONFLICT, ignore key order', () => {
    const db = openDatabase(join(tmp(), 'a.db'));
    const s = new IdempotencyStore(db);
    expect(s.lookup('t', 'k1', { a: 1, b: 2 })).toBeNull();
    s.save('t', 'k1', { a: 1, b: 2 }, { id: 'x' });
    expect(s.lookup('t', 'k1', { b: 2, a: 1 })).toEqual({ result: { id: 'x' }, isError: false });
    expect(() => s.lookup('t', 'k1', { a: 1, b: 3 })).toThrow(/different input/);
    expect(s.lookup('other', 'k1', { a: 9 })).toBeNull();
    s.save('t', 'k2', { a: 1 }, { id: 'y' }, false, -1);
    expect(s.lookup('t', 'k2', { a: 2 })).toBeNull(); // expired records neither replay nor conflict
    db.close();
  });
  it('canonical JSON sorts keys and drops undefined', () => {
    expect(canonicalJson({ b: 1, a: [{ d: 1, c: undefined }] })).toBe('{"a":[{"d":1}],"b":1}');
  });
});

describe('configuration', () => {
  it('takes flags over environment over file over defaults', () => {
    const d = tmp();
    expect(loadConfig(['--data-dir', d]).port).toBe(7420);
    expect(loadConfig(['--data-dir', d], { ATELIER_PORT: '8000' }).port).toBe(8000);
    expect(loadConfig(['--data-dir', d, '--port=9000'], { ATELIER_PORT: '8000' }).port).toBe(9000);
  });
  it('names the setting and the rule when a value is bad', () => {
    expect(() => loadConfig(['--data-dir', tmp(), '--log-level', 'loud'])).toThrow(ConfigError);
    expect(() => loadConfig(['--data-dir', tmp(), '--log-level', 'loud'])).toThrow(/--log-level \/ ATELIER_LOG_LEVEL: must be one of/);
  });
});

describe('the registry', () => {
  const reg = new ToolRegistry(CATALOG);
  it('applies defaults and refuses bad input naming field and rule', () => {
    expect(reg.parse('workspace_list', {})).toEqual({ limit: 100 });
    expect(() => reg.parse('workspace_list', { limit: 501 })).toThrow(/limit must be at most 500/);
    expect(() => reg.parse('files_read', { path: 'a', offset: -1 })).toThrow(/offset must be at least 0/);
    expect(() => reg.parse('workspace_set_active', { workspaceId: 'ws_short' })).toThrow(/workspaceId/);
    expect(() => reg.parse('files_read', { path: 'a', limit: '5' })).toThrow(/limit must be of type number \(got string\)/);
  });
  it('runs cross-field checks after validation', () => {
    expect(() => reg.parse('workspace_recover', { mode: 'export' })).toThrow(/targetBranch required when mode is export/);
  });
});

describe('known conditions are never INTERNAL (issue #12 item 8)', () => {
  it('a cancelled call (DOMException or Node AbortError) is CANCELLED; a ConfigError is FAILED_PRECONDITION naming the setting', async () => {
    const { toErrorBody, ServiceError } = await import('../../src/core/errors.js');
    const ac = new AbortController();
    ac.abort();
    expect(toErrorBody(ac.signal.reason)).toMatchObject({ code: 'CANCELLED', retryable: true });
    const nodeAbort = await import('node:timers/promises').then((t) => t.setTimeout(10, undefined, { signal: ac.signal }).catch((e) => e));
    expect(toErrorBody(nodeAbort).code).toBe('CANCELLED');
    const cfg = new ConfigError('config file x: "repositories.allow" must be a list of strings');
    expect(cfg).toBeInstanceOf(ServiceError);
    expect(toErrorBody(cfg)).toMatchObject({ code: 'FAILED_PRECONDITION', details: { setting: 'repositories.allow' } });
    expect(toErrorBody(new ConfigError('bad', 'egress.allow[0].host')).details).toEqual({ setting: 'egress.allow[0].host' });
    expect(toErrorBody(new TypeError('boom'))).toMatchObject({ code: 'INTERNAL', message: expect.not.stringContaining('boom') });
  });
});
