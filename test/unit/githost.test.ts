import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { gitEnvFor, startGitHost, type GitHost } from '../fixtures/githost.js';

const execFileP = promisify(execFile);
const TOKEN = 'tok-3f9a2c';
const IDENT = ['-c', 'user.name=Tester', '-c', 'user.email=tester@example.invalid'];

let host: GitHost;
let tmp: string;

/** Base env: no inherited GIT_* vars, isolated HOME so ~/.gitconfig can't interfere. */
function baseEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('GIT_')) env[k] = v;
  env.HOME = tmp;
  env.XDG_CONFIG_HOME = path.join(tmp, '.config');
  env.GIT_CONFIG_NOSYSTEM = '1';
  env.LC_ALL = 'C';
  return env;
}

async function git(
  args: string[],
  opts: { cwd?: string; env?: Record<string, string> } = {},
): Promise<{ stdout: string; stderr: string }> {
  const { stdout, stderr } = await execFileP('git', args, {
    cwd: opts.cwd ?? tmp,
    env: { ...baseEnv(), ...(opts.env ?? gitEnvFor(host)) },
    timeout: 60_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  return { stdout: stdout.trim(), stderr };
}

async function gitFails(args: string[], opts: { cwd?: string; env?: Record<string, string> } = {}): Promise<string> {
  try {
    await git(args, opts);
  } catch (err) {
    return String((err as { stderr?: unknown }).stderr ?? err);
  }
  throw new Error(`expected git ${args.join(' ')} to fail`);
}

beforeAll(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), 'githost-test-'));
  host = await startGitHost({ token: TOKEN });
}, 60_000);

afterAll(async () => {
  await host?.close();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

describe('githost fixture', () => {
  let headOid: string;
  let repoUrl: string;
  const full = () => path.join(tmp, 'full');

  it('starts on loopback with a generated CA', () => {
    expect(host.url).toBe(`https://127.0.0.1:${host.port}`);
    expect(host.caCertPem).toContain('BEGIN CERTIFICATE');
    expect(existsSync(host.caCertPath)).toBe(true);
    expect(host.token).toBe(TOKEN);
  });

  it('creates a bare repo with N commits and HEAD on the branch', async () => {
    const repo = await host.createRepo('demo', { 'README.md': '# demo\n', 'src/a.txt': 'a\n' }, { commits: 3 });
    headOid = repo.headOid;
    repoUrl = repo.url;
    expect(repo.url).toBe(`${host.url}/demo.git`);
    expect(repo.bareDir).toBe(path.join(host.root, 'demo.git'));
    expect(headOid).toMatch(/^[0-9a-f]{40}$/);
    const local = { GIT_DIR: repo.bareDir };
    expect((await git(['symbolic-ref', 'HEAD'], { env: local })).stdout).toBe('refs/heads/main');
    expect((await git(['rev-list', '--count', 'main'], { env: local })).stdout).toBe('3');
    expect((await git(['config', 'http.receivepack'], { env: local })).stdout).toBe('true');
  }, 60_000);

  it('clones over HTTPS with full history (401 challenge, then credential helper)', async () => {
    const before = host.requests.length;
    await git(['clone', '--quiet', repoUrl, full()]);
    expect((await git(['rev-parse', 'HEAD'], { cwd: full() })).stdout).toBe(headOid);
    expect((await git(['rev-list', '--count', 'HEAD'], { cwd: full() })).stdout).toBe('3');
    expect((await git(['show', 'HEAD:src/a.txt'], { cwd: full() })).stdout).toBe('a');
    const seen = host.requests.slice(before);
    expect(seen.some((r) => !r.authorized && r.path.startsWith('/demo.git/info/refs'))).toBe(true);
    expect(seen.some((r) => r.authorized && r.method === 'POST' && r.path === '/demo.git/git-upload-pack')).toBe(true);
    expect(seen.every((r) => r.userAgent?.startsWith('git/'))).toBe(true);
    expect(host.errors).toEqual([]);
  }, 60_000);

  it('clones shallow (--depth 1) and can unshallow', async () => {
    const dir = path.join(tmp, 'shallow');
    await git(['clone', '--quiet', '--depth', '1', repoUrl, dir]);
    expect((await git(['rev-list', '--count', 'HEAD'], { cwd: dir })).stdout).toBe('1');
    expect((await git(['rev-parse', '--is-shallow-repository'], { cwd: dir })).stdout).toBe('true');
    await git(['fetch', '--quiet', '--unshallow'], { cwd: dir });
    expect((await git(['rev-list', '--count', 'HEAD'], { cwd: dir })).stdout).toBe('3');
  }, 60_000);

  it('supports partial clone filters and fetch by (non-tip) sha', async () => {
    const dir = path.join(tmp, 'partial');
    await git(['clone', '--quiet', '--filter=blob:none', '--no-checkout', repoUrl, dir]);
    const parent = (await git(['rev-parse', 'HEAD~1'], { cwd: dir })).stdout;
    const bysha = path.join(tmp, 'bysha');
    await git(['init', '--quiet', bysha]);
    await git(['fetch', '--quiet', '--depth', '1', repoUrl, parent], { cwd: bysha });
    expect((await git(['rev-parse', 'FETCH_HEAD'], { cwd: bysha })).stdout).toBe(parent);
  }, 60_000);

  it('records backend failures in errors while git still sees the real error', async () => {
    const bysha = path.join(tmp, 'bysha');
    const missing = 'deadbeef'.repeat(5);
    const stderr = await gitFails(['fetch', repoUrl, missing], { cwd: bysha });
    expect(stderr).toContain(`not our ref ${missing}`);
    expect(stderr).not.toMatch(/curl|RPC failed/);
    expect(host.errors.pop()?.stderr).toContain('not our ref');
    expect(host.errors).toEqual([]);
  }, 60_000);

  it('rejects a wrong token with an authentication error', async () => {
    const stderr = await gitFails(['clone', '--quiet', repoUrl, path.join(tmp, 'nope')], {
      env: gitEnvFor({ ...host, token: 'wrong-token' }),
    });
    expect(stderr).toMatch(/Authentication failed/i);
    // No credentials at all and prompting disabled: also an auth failure.
    const { GIT_CONFIG_COUNT: _c, GIT_CONFIG_KEY_0: _k, GIT_CONFIG_VALUE_0: _v, ...noCreds } = gitEnvFor(host);
    const stderr2 = await gitFails(['ls-remote', repoUrl], { env: noCreds });
    expect(stderr2).toMatch(/could not read Username|Authentication failed/i);
  }, 60_000);

  it('pushes a new branch, including a large (chunked) pack', async () => {
    await writeFile(path.join(full(), 'feature.txt'), 'feature\n');
    // Incompressible > http.postBuffer (1 MiB) so git streams the POST with chunked encoding.
    await writeFile(path.join(full(), 'big.bin'), randomBytes(3 * 1024 * 1024));
    await git(['add', '-A'], { cwd: full() });
    await git([...IDENT, 'commit', '--quiet', '-m', 'feature'], { cwd: full() });
    const oid = (await git(['rev-parse', 'HEAD'], { cwd: full() })).stdout;
    await git(['push', '--quiet', 'origin', 'HEAD:refs/heads/feature'], { cwd: full() });
    const remote = (await git(['ls-remote', repoUrl, 'refs/heads/feature'])).stdout;
    expect(remote).toBe(`${oid}\trefs/heads/feature`);
    expect(host.errors).toEqual([]);
  }, 60_000);

  it('rejectPushes makes pushes fail with the reason, and null clears it', async () => {
    host.rejectPushes('demo', 'repository frozen for audit');
    await writeFile(path.join(full(), 'more.txt'), 'more\n');
    await git(['add', '-A'], { cwd: full() });
    await git([...IDENT, 'commit', '--quiet', '-m', 'more'], { cwd: full() });
    const stderr = await gitFails(['push', 'origin', 'HEAD:refs/heads/feature'], { cwd: full() });
    expect(stderr).toContain('repository frozen for audit');
    expect(stderr).toMatch(/pre-receive hook declined/);

    host.rejectPushes('demo', null);
    await git(['push', '--quiet', 'origin', 'HEAD:refs/heads/feature'], { cwd: full() });
  }, 60_000);

  it('deletes a branch by push', async () => {
    await git(['push', '--quiet', 'origin', '--delete', 'feature'], { cwd: full() });
    expect((await git(['ls-remote', repoUrl, 'refs/heads/feature'])).stdout).toBe('');
  }, 60_000);

  it('inflates gzip request bodies and forwards Git-Protocol (v2 ls-refs)', async () => {
    const pkt = (s: string) => (s.length + 4).toString(16).padStart(4, '0') + s;
    const body = gzipSync(Buffer.from(pkt('command=ls-refs\n') + '0001' + pkt('symrefs\n') + '0000'));
    const res = await new Promise<{ status: number; type: string; text: string }>((resolve, reject) => {
      const req = https.request(
        `${repoUrl}/git-upload-pack`,
        {
          method: 'POST',
          ca: host.caCertPem,
          headers: {
            Authorization: 'Basic ' + Buffer.from(`x-access-token:${TOKEN}`).toString('base64'),
            'Content-Type': 'application/x-git-upload-pack-request',
            'Content-Encoding': 'gzip',
            'Git-Protocol': 'version=2',
            'Content-Length': String(body.length),
          },
        },
        (r) => {
          const chunks: Buffer[] = [];
          r.on('data', (c: Buffer) => chunks.push(c));
          r.on('end', () =>
            resolve({ status: r.statusCode ?? 0, type: String(r.headers['content-type']), text: Buffer.concat(chunks).toString() }),
          );
        },
      );
      req.on('error', reject);
      req.end(body);
    });
    expect(res.status).toBe(200);
    expect(res.type).toBe('application/x-git-upload-pack-result');
    expect(res.text).toContain(`${headOid} HEAD symref-target:refs/heads/main`);
  }, 60_000);

  it('allowAnonymousRead lets clones through but still guards pushes', async () => {
    const anon = await startGitHost({ allowAnonymousRead: true });
    try {
      const repo = await anon.createRepo('pub', undefined, { branch: 'trunk' });
      const env = { GIT_SSL_CAINFO: anon.caCertPath, GIT_TERMINAL_PROMPT: '0' };
      const dir = path.join(tmp, 'anon');
      await git(['clone', '--quiet', repo.url, dir], { env });
      expect((await git(['rev-parse', 'HEAD'], { cwd: dir, env })).stdout).toBe(repo.headOid);
      expect((await git(['symbolic-ref', 'HEAD'], { cwd: dir, env })).stdout).toBe('refs/heads/trunk');
      expect(anon.requests.every((r) => !r.authorized)).toBe(true);

      await git([...IDENT, 'commit', '--quiet', '--allow-empty', '-m', 'x'], { cwd: dir, env });
      const stderr = await gitFails(['push', 'origin', 'HEAD:refs/heads/x'], { cwd: dir, env });
      expect(stderr).toMatch(/could not read Username|Authentication failed/i);
      await git(['push', '--quiet', 'origin', 'HEAD:refs/heads/x'], { cwd: dir, env: gitEnvFor(anon) });
    } finally {
      const root = anon.root;
      await anon.close();
      expect(existsSync(root)).toBe(false);
    }
  }, 60_000);
});
