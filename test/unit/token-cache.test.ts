/**
 * The cache of verified tokens (src/services/access/token-cache.ts) on a real database: an entry stands
 * while the token tables are unchanged, whatever else is written (a tool call's audit entry), and
 * goes at the first change to them by this connection or another (migration 0019's counter).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AuditLog } from '../../src/services/instance/audit.js';
import { AuthService } from '../../src/services/access/tokens.js';
import { TokenVerifyCache } from '../../src/services/access/token-cache.js';
import { openDatabase, type DB } from '../../src/store/db.js';

describe('remembered token verification', () => {
  let dir: string;
  let db: DB;
  let other: DB;
  let auth: AuthService;
  let cache: TokenVerifyCache;
  let token: string;
  let id: string;
  let checks = 0;
  const verify = () =>
    cache.verify('bearer', token, () => {
      checks++;
      return auth.verifyBearerAccess(token);
    });

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'atelier-token-cache-'));
    db = openDatabase(path.join(dir, 'a.db'));
    other = openDatabase(path.join(dir, 'a.db'));
    auth = new AuthService(db);
    const made = auth.createToken('t');
    token = made.token;
    id = made.info.id;
    cache = new TokenVerifyCache(db);
    checks = 0;
  });
  afterEach(() => {
    other.close();
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('stays through writes to other tables (audit entries), by this connection or another', () => {
    expect(verify()?.principal).toBe(id);
    // The first verification wrote the token's last use: the entry made then is checked once more.
    expect(verify()?.principal).toBe(id);
    const settled = checks;
    const audit = new AuditLog(db);
    for (let i = 0; i < 5; i++) {
      audit.record({ actor: 'mcp', principal: id, action: 'exec_run', target: 'ws_1', outcome: 'ok' });
      new AuditLog(other).record({ actor: 'cli', principal: 'owner', action: 'x', target: null, outcome: 'ok' });
      expect(verify()?.principal).toBe(id);
    }
    expect(checks).toBe(settled);
  });

  it('goes at a revocation by this connection, and the token is refused', () => {
    verify();
    verify();
    auth.revokeToken(id);
    expect(verify()).toBeNull();
  });

  it('goes at a revocation by another connection (the CLI), and the token is refused', () => {
    verify();
    verify();
    new AuthService(other).revokeToken(id);
    expect(verify()).toBeNull();
  });

  it('goes at any change to the OAuth tables', () => {
    verify();
    verify();
    const before = checks;
    other.prepare("INSERT INTO oauth_clients (id, name, redirect_uris_json, metadata_json, created_at) VALUES ('c1', 'c', '[]', '{}', 'now')").run();
    verify();
    expect(checks).toBe(before + 1);
    other.prepare("UPDATE oauth_clients SET revoked_at = 'now' WHERE id = 'c1'").run();
    verify();
    expect(checks).toBe(before + 2);
    other.prepare("DELETE FROM oauth_clients WHERE id = 'c1'").run();
    verify();
    expect(checks).toBe(before + 3);
    verify();
    expect(checks).toBe(before + 3);
  });
});
