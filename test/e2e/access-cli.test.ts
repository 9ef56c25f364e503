/**
 * The newcomer's frictions (issue #16): CLI commands without the service's data directory do not
 * create a second one; --help shows the real default; `atelier repos ca add|list|remove`; a clone
 * failing on an unknown CA names the setting that fixes it, and adding the CA fixes it.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, connectV2, runCli, type Service } from './harness.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';
import type { GitHost } from '../fixtures/githost.js';

describe('CLI without the service data directory', () => {
  const home = mkdtempSync(join(tmpdir(), 'atelier-home-'));
  afterAll(() => rmSync(home, { recursive: true, force: true }));
  const env = { HOME: home, XDG_DATA_HOME: '', ATELIER_DATA_DIR: '' };

  it('token, env, credentials and repos commands refuse, name the directory, and create nothing', async () => {
    const dflt = join(home, '.local/share/atelier');
    for (const args of [['token', 'list'], ['token', 'create'], ['env', 'list'], ['credentials', 'list'], ['repos', 'allow', 'https://example.com/x.git'], ['repos', 'ca', 'list'], ['owner', 'set-password']]) {
      const r = await runCli(args, { env, input: 'a-long-enough-password\n' });
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).toContain(`no Atelier data directory at ${dflt} (the default for this user)`);
      expect(r.stderr).toMatch(/--data-dir DIR or ATELIER_DATA_DIR=DIR/);
    }
    const other = join(home, 'elsewhere');
    const r = await runCli(['token', 'list', '--data-dir', other], { env });
    expect(r.stderr).toContain(`no Atelier data directory at ${other}:`);
    expect(existsSync(dflt)).toBe(false);
    expect(existsSync(other)).toBe(false);
    expect(existsSync(join(home, '.local'))).toBe(false);
  });

  it('--help shows the real default data directory and the access flags', async () => {
    const r = await runCli(['--help'], { env });
    expect(r.stdout).toContain(`default ${join(home, '.local/share/atelier')} for this user`);
    expect(r.stdout).toContain('--toolsets LIST');
    expect(r.stdout).toContain('--read-only');
    expect(r.stdout).toContain('atelier repos ca add FILE');
  });
});

describe('extra CA certificates', () => {
  let host: GitHost;
  let svc: Service;
  let repoUrl: string;
  let scratch: string;

  beforeAll(async () => {
    host = await startGitHost();
    repoUrl = (await host.createRepo('approved/ca', REPO_FILES)).url;
    svc = await startWorkspaceService(host);
    scratch = mkdtempSync(join(tmpdir(), 'atelier-ca-'));
  }, 120_000);
  afterAll(async () => {
    await svc?.dispose();
    await host?.close();
    rmSync(scratch, { recursive: true, force: true });
  });

  const cli = (...args: string[]) => runCli([...args, '--data-dir', svc.dataDir]);

  it('a clone on an unknown CA names the setting; `atelier repos ca add` fixes it at once', async () => {
    expect((await cli('repos', 'ca', 'remove', host.caCertPath)).code).toBe(0);
    expect((await cli('repos', 'ca', 'list')).stdout).toContain('(none; the system trust store only)');
    const c = await connectV2(svc);
    const r = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'ca-open-untrusted' });
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error.message).toContain('atelier repos ca add FILE');
      expect(r.error.details.setting).toBe('repositories.extraCaCertificates');
    }
    const added = await cli('repos', 'ca', 'add', host.caCertPath);
    expect(added.code, added.stderr).toBe(0);
    expect(added.stdout).toMatch(/added CA certificate .* to repositories.extraCaCertificates/);
    const listed = await cli('repos', 'ca', 'list');
    expect(listed.stdout).toContain(host.caCertPath);
    expect(listed.stdout).toMatch(/subject .*valid until/);
    const ok = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'ca-open-trusted' });
    expect(ok.ok, ok.ok ? '' : ok.text).toBe(true);
    await c.close();
  }, 180_000);

  it('refuses files that are not CA certificates, and removing one that is not there', async () => {
    const notPem = join(scratch, 'not.pem');
    writeFileSync(notPem, 'hello');
    const garbage = join(scratch, 'garbage.pem');
    writeFileSync(garbage, '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
    for (const [f, msg] of [
      [notPem, /no PEM certificate/],
      [garbage, /does not parse/],
      [join(scratch, 'missing.pem'), /no such file/],
      [scratch, /no such file/],
    ] as const) {
      const r = await cli('repos', 'ca', 'add', f);
      expect(r.code, f).toBe(2);
      expect(r.stderr).toMatch(msg);
    }
    const rm = await cli('repos', 'ca', 'remove', join(scratch, 'never-added.pem'));
    expect(rm.code).toBe(2);
    expect(rm.stderr).toMatch(/is not in repositories.extraCaCertificates/);
    expect((await cli('repos', 'ca', 'frobnicate')).stderr).toMatch(/usage: atelier repos ca add FILE/);
  });
});
