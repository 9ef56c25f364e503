/**
 * The egress a workspace needs (src/sandbox/egress/workspace.ts), on a temporary directory: the
 * allow list read from the config file, and the proxies' sockets (mode, owner, replacement, removal).
 */
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { existsSync, symlinkSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/core/config.js';
import { DEFAULT_REGISTRY_RULES, type EgressDecision } from '../../src/sandbox/egress.js';
import { loadEgressRules, WorkspaceEgress } from '../../src/sandbox/egress/workspace.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'atelier-ws-egress-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Sends one CONNECT through a proxy socket and returns the status line. */
function connectThrough(socketPath: string, target: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = net.connect(socketPath);
    let buf = '';
    c.on('data', (d) => {
      buf += d.toString('latin1');
      if (buf.includes('\r\n')) {
        c.destroy();
        resolve(buf.split('\r\n')[0]!);
      }
    });
    c.on('error', reject);
    c.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
  });
}

describe('the allow list from the config file', () => {
  it('no file or no section: the default registries', async () => {
    expect(loadEgressRules(path.join(dir, 'missing.json'))).toBe(DEFAULT_REGISTRY_RULES);
    const f = path.join(dir, 'no-section.json');
    await writeFile(f, JSON.stringify({ providers: {} }));
    expect(loadEgressRules(f)).toBe(DEFAULT_REGISTRY_RULES);
  });

  it('a section replaces the defaults', async () => {
    const f = path.join(dir, 'allow.json');
    await writeFile(f, JSON.stringify({ egress: { allow: [{ host: '*.npmjs.org', ports: [443] }] } }));
    expect(loadEgressRules(f)).toEqual([{ host: '*.npmjs.org', ports: [443] }]);
  });

  it('a malformed file is a ConfigError naming the setting, never a silent fall back', async () => {
    const cases: Array<[string, string]> = [
      ['{not json', 'egress'],
      [JSON.stringify({ egress: { allow: [{ host: '../etc' }] } }), 'egress.allow[0].host'],
      [JSON.stringify({ egress: { allow: [{ host: '*.com' }] } }), 'egress.allow[0].host'],
      [JSON.stringify({ egress: { allow: [{ host: 'a.example', ports: [0] }] } }), 'egress.allow[0].ports'],
      [JSON.stringify({ egress: { deny: [] } }), 'egress.deny'],
      [JSON.stringify({ egress: [] }), 'egress'],
    ];
    for (const [text, setting] of cases) {
      const f = path.join(dir, 'bad.json');
      await writeFile(f, text);
      let err: unknown;
      try {
        loadEgressRules(f);
      } catch (e) {
        err = e;
      }
      expect(err, text).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).details, text).toMatchObject({ setting });
    }
  });
});

describe('WorkspaceEgress', () => {
  const uid = process.getuid!();
  const gid = process.getgid!();

  it('starts a workspace proxy on its socket (0600, the sandbox uid), replaces it, and stops it', async () => {
    const runDir = await mkdtemp(path.join(dir, 'run-'));
    const decisions: EgressDecision[] = [];
    let rules = [{ host: 'registry.npmjs.org' }];
    const eg = new WorkspaceEgress({ runDir, uid, gid, rules: () => rules, onDecision: (d) => decisions.push(d) });
    const id = 'ws_0123456789abcdefghij';
    const sock = await eg.start(id);
    expect(sock).toBe(path.join(runDir, 'eg-0123456789ab.sock'));
    const st = await stat(sock);
    expect(st.isSocket()).toBe(true);
    expect(st.mode & 0o777).toBe(0o600);
    expect(st.uid).toBe(uid);
    expect(await connectThrough(sock, 'example.com:443')).toBe('HTTP/1.1 403 Forbidden');
    expect(decisions.at(-1)).toMatchObject({ workspaceId: id, host: 'example.com', allowed: false });
    // A restart reads the rules again and replaces the proxy on the same socket.
    rules = [{ host: 'example.com' }];
    expect(await eg.start(id)).toBe(sock);
    expect(await connectThrough(sock, 'registry.npmjs.org:443')).toBe('HTTP/1.1 403 Forbidden');
    await eg.stop(id);
    expect(existsSync(sock)).toBe(false);
    await eg.stop(id); // idempotent
    await eg.stopAll();
  });

  it('replaces whatever a stale path holds (a file or a symlink) without following it', async () => {
    const runDir = await mkdtemp(path.join(dir, 'run-'));
    const eg = new WorkspaceEgress({ runDir, uid, gid, rules: () => DEFAULT_REGISTRY_RULES, onDecision: () => undefined });
    const target = path.join(dir, 'precious');
    await writeFile(target, 'keep');
    const id = 'ws_stalestalestale0000';
    symlinkSync(target, eg.socketPath(id));
    const sock = await eg.start(id);
    expect((await stat(sock)).isSocket()).toBe(true);
    expect(existsSync(target)).toBe(true);
    await eg.stopAll();
    expect(existsSync(sock)).toBe(false);
  });

  it('a repository-host-only proxy grants that host:port alone, private addresses included', async () => {
    const runDir = await mkdtemp(path.join(dir, 'run-'));
    const decisions: EgressDecision[] = [];
    const eg = new WorkspaceEgress({ runDir, uid, gid, rules: () => DEFAULT_REGISTRY_RULES, onDecision: (d) => decisions.push(d) });
    const upstream = net.createServer((s) => s.end());
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', () => r()));
    const port = (upstream.address() as net.AddressInfo).port;
    const sock = path.join(runDir, 'p.sock');
    const proxy = await eg.startRepositoryHostOnly(sock, 'ws_x', '127.0.0.1', port);
    try {
      expect((await stat(sock)).mode & 0o777).toBe(0o600);
      expect(await connectThrough(sock, `127.0.0.1:${port}`)).toBe('HTTP/1.1 200 Connection Established');
      expect(await connectThrough(sock, `127.0.0.1:${port === 65535 ? 1 : port + 1}`)).toBe('HTTP/1.1 403 Forbidden');
      expect(await connectThrough(sock, 'registry.npmjs.org:443')).toBe('HTTP/1.1 403 Forbidden');
      expect(decisions.map((d) => d.allowed)).toEqual([true, false, false]);
    } finally {
      await proxy.close();
      upstream.close();
    }
    expect(existsSync(sock)).toBe(false);
  });
});
