/**
 * Repository credentials (issue #6, item 6): prefix rules, the GitHub App JWT, sealing at rest,
 * and the retired config-file credentials.
 */
import { createVerify, generateKeyPairSync, createPrivateKey } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { appJwt, normalisePrefix, ownerAndName, prefixCovers, RepoCredentialStore } from '../../src/services/repos/credentials.js';
import { parseRepoUrl, readRepositorySettings } from '../../src/services/repos/policy.js';
import { openDatabase, migrate } from '../../src/store/db.js';
import { SecretBox } from '../../src/core/crypto.js';
import { AuditLog } from '../../src/services/instance/audit.js';
import { ServiceError } from '../../src/core/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'atelier-rcred-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const codeOf = (fn: () => unknown) => {
  try {
    fn();
  } catch (e) {
    return { code: (e as ServiceError).code, message: (e as Error).message };
  }
  throw new Error('did not throw');
};

describe('prefixes', () => {
  it('normalises host and path prefixes and refuses what is not an https prefix, naming the field', () => {
    expect(normalisePrefix('https://GitHub.com')).toBe('https://github.com/');
    expect(normalisePrefix('https://github.com:443/acme/*')).toBe('https://github.com/acme/');
    expect(normalisePrefix('https://git.example:8443/team//')).toBe('https://git.example:8443/team/');
    for (const bad of ['http://github.com/', 'https://u:p@github.com/', 'https://github.com/?q=1', 'github.com', '', 'https://h/a/../b/']) {
      const e = codeOf(() => normalisePrefix(bad));
      expect(e.code).toBe('INVALID_ARGUMENT');
      expect(e.message).toMatch(/^prefix: /);
    }
  });

  it('covers repositories at a path-segment boundary, ignoring .git, on the same authority only', () => {
    const r = (u: string) => parseRepoUrl(u);
    expect(prefixCovers('https://h.example/', r('https://h.example/acme/app.git'))).toBe(true);
    expect(prefixCovers('https://h.example/acme/', r('https://h.example/acme/app'))).toBe(true);
    expect(prefixCovers('https://h.example/acme/', r('https://h.example/acme-evil/app'))).toBe(false);
    expect(prefixCovers('https://h.example/acme/app/', r('https://h.example/acme/app.git'))).toBe(true);
    expect(prefixCovers('https://h.example/acme/app.git/', r('https://h.example/acme/app'))).toBe(true);
    expect(prefixCovers('https://h.example/acme/app/', r('https://h.example/acme/application'))).toBe(false);
    expect(prefixCovers('https://h.example/', r('https://h.example:8443/acme/app'))).toBe(false);
    expect(prefixCovers('https://h.example/', r('https://h.example.evil/acme/app'))).toBe(false);
    expect(ownerAndName(r('https://h.example/acme/app.git'))).toEqual(['acme', 'app']);
    expect(ownerAndName(r('https://h.example/group/sub/app'))).toBeNull();
  });
});

describe('GitHub App JWT', () => {
  it('is RS256, issued by the app id, valid from a minute ago for at most ten minutes, and verifies with the public key', () => {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    const now = Date.UTC(2026, 10, 22, 12, 0, 0);
    const jwt = appJwt('12345', privateKey, now);
    const [h, b, sig] = jwt.split('.');
    expect(JSON.parse(Buffer.from(h!, 'base64url').toString())).toEqual({ alg: 'RS256', typ: 'JWT' });
    const claims = JSON.parse(Buffer.from(b!, 'base64url').toString());
    expect(claims).toEqual({ iat: now / 1000 - 60, exp: now / 1000 + 540, iss: '12345' });
    expect(claims.exp - claims.iat).toBeLessThanOrEqual(600);
    expect(createVerify('RSA-SHA256').update(`${h}.${b}`).verify(publicKey, Buffer.from(sig!, 'base64url'))).toBe(true);
  });
});

describe('the store', () => {
  const db = openDatabase(join(dir, 'a.db'));
  migrate(db);
  const store = new RepoCredentialStore({ db, secrets: new SecretBox(Buffer.alloc(32, 7)), audit: new AuditLog(db), extraCaPem: () => '' });
  const TOKEN = 'tok-UNIQUE-secret-value-0123456789';

  it('seals secrets: neither the token nor the private key is stored or answered in clear', async () => {
    const t = store.addToken({ prefix: 'https://git.example/', token: TOKEN, username: 'bot' }, 'cli');
    expect(t).toMatchObject({ prefix: 'https://git.example/', kind: 'token', username: 'bot', secretVersion: 1, fingerprint: expect.stringMatching(/^sha256:[0-9a-f]{16}$/) });
    const pem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
    const a = store.addGitHubApp({ prefix: 'https://github.com/acme/', appId: 99, privateKey: pem }, 'dashboard');
    expect(a).toMatchObject({ kind: 'github_app', appId: '99', apiUrl: 'https://api.github.com', installationId: null, fingerprint: expect.stringMatching(/^SHA256:/) });
    expect(JSON.stringify(store.list())).not.toContain(TOKEN);
    expect(JSON.stringify(store.list())).not.toContain('PRIVATE KEY');
    db.pragma('wal_checkpoint(TRUNCATE)');
    const raw = readFileSync(join(dir, 'a.db'));
    expect(raw.includes(Buffer.from(TOKEN))).toBe(false);
    expect(raw.includes(Buffer.from(pem.split('\n')[1]!))).toBe(false);
    const got = await store.resolve(parseRepoUrl('https://git.example/team/app.git'));
    expect(got).toMatchObject({ username: 'bot', token: TOKEN, credentialId: t.id, kind: 'token' });
    expect(store.get(t.id).lastUsedAt).toEqual(expect.any(String));
  });

  it('picks the longest prefix, refuses a duplicate prefix, and rotates to a new version', async () => {
    const narrow = store.addToken({ prefix: 'https://git.example/team/special', token: 'narrow-token-value' }, 'cli');
    expect((await store.resolve(parseRepoUrl('https://git.example/team/special.git')))!.token).toBe('narrow-token-value');
    expect((await store.resolve(parseRepoUrl('https://git.example/team/other.git')))!.token).toBe(TOKEN);
    expect(await store.resolve(parseRepoUrl('https://elsewhere.example/team/other.git'))).toBeNull();
    const dup = codeOf(() => store.addToken({ prefix: 'https://git.example/team/special/', token: 'x'.repeat(10) }, 'cli'));
    expect(dup.code).toBe('CONFLICT');
    expect(dup.message).toContain(narrow.id);
    const rotated = store.rotate(narrow.id, 'rotated-token-value', 'cli');
    expect(rotated.secretVersion).toBe(2);
    expect((await store.resolve(parseRepoUrl('https://git.example/team/special')))!.token).toBe('rotated-token-value');
    store.remove(narrow.id, 'cli');
    expect((await store.resolve(parseRepoUrl('https://git.example/team/special')))!.token).toBe(TOKEN);
  });

  it('names the field and the rule on bad input', () => {
    const ec = generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey.export({ type: 'pkcs8', format: 'pem' }) as string;
    const rsa = createPrivateKey(generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs1', format: 'pem' }) as string).export({ type: 'pkcs1', format: 'pem' }) as string;
    const cases: Array<[() => unknown, RegExp]> = [
      [() => store.addToken({ prefix: 'https://x.example/', token: 'has space in it' }, 'cli'), /^token: /],
      [() => store.addToken({ prefix: 'https://x.example/', token: 'short' }, 'cli'), /^token: /],
      [() => store.addToken({ prefix: 'https://x.example/', token: 'long-enough-token', username: 'a:b' }, 'cli'), /^username: /],
      [() => store.addGitHubApp({ prefix: 'https://x.example/', appId: '1', privateKey: ec }, 'cli'), /^privateKey: must be an RSA key/],
      [() => store.addGitHubApp({ prefix: 'https://x.example/', appId: '1', privateKey: 'not a key' }, 'cli'), /^privateKey: /],
      [() => store.addGitHubApp({ prefix: 'https://x.example/', appId: '1', privateKey: rsa }, 'cli'), /^apiUrl: is required for x.example/],
      [() => store.addGitHubApp({ prefix: 'https://x.example/', appId: '1', privateKey: rsa, apiUrl: 'http://x.example/api/v3' }, 'cli'), /^apiUrl: /],
      [() => store.addGitHubApp({ prefix: 'https://x.example/', privateKey: rsa, apiUrl: 'https://x.example/api/v3' }, 'cli'), /^appId: is required/],
      [() => store.rotate('rcred_nope', 'whatever-token', 'cli'), /^id: no repository credential/],
    ];
    for (const [fn, re] of cases) expect(codeOf(fn).message).toMatch(re);
    expect(store.list().map((c) => c.prefix)).toEqual(['https://git.example/', 'https://github.com/acme/']);
  });
});

describe('config file', () => {
  it('no longer reads repositories.credentials and says where credentials went', () => {
    const f = join(dir, 'config.json');
    writeFileSync(f, JSON.stringify({ repositories: { allow: [], credentials: [{ prefix: 'https://h/', token: 'x' }] } }));
    expect(() => readRepositorySettings(f)).toThrow(/no longer read.*atelier credentials add-token/);
  });
});
