import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { call, connectV2, runCli, serveExpectingFailure, startService } from './harness.js';
import { ALL_TOOLS } from './spec.js';
import { REPO_FILES, startGitHost, startWorkspaceService } from './workspace-fixture.js';

describe('start-up and shutdown', () => {
  it('first start prints URL, token and the claude mcp add line; a restart keeps tokens and prints none', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'atelier-life-'));
    try {
      const a = await startService({ dataDir });
      expect(a.stdout()).toContain(`claude mcp add --transport http atelier ${a.mcpUrl} --header "Authorization: Bearer ${a.token}"`);
      // Which tool list to pick, with the counts of this build (issue #45 item 3).
      expect(a.stdout()).toContain(`(all ${ALL_TOOLS} tools;`);
      expect(a.stdout()).toMatch(/X-MCP-Dynamic-Toolsets: true.*\n.*X-MCP-Toolsets: code" \(47 tools.*"lean" \(29: Cursor\)/s);
      expect(await a.stop('SIGTERM')).toBe(0);
      expect(a.stderr()).toContain('"msg":"stopped"');
      const b = await startService({ dataDir });
      expect(b.token).toBe('');
      expect(b.stdout()).toContain('atelier token create');
      const c = await connectV2(b, a.token);
      expect((await c.listTools()).tools).toHaveLength(ALL_TOOLS);
      await c.close();
      await b.stop();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('SIGTERM during a call lets it finish before the process exits', async () => {
    const host = await startGitHost();
    const svc = await startWorkspaceService(host);
    try {
      const c = await connectV2(svc);
      const repoUrl = (await host.createRepo('approved/sigterm', REPO_FILES)).url;
      const opened = await call(c, 'workspace_open', { repositoryUrl: repoUrl, idempotencyKey: 'sigterm-open-1' });
      if (!opened.ok) throw new Error(opened.text);
      const ws = opened.result.workspaceId as string;
      // A call that is surely in flight when the signal arrives: it has written its marker and sleeps.
      const pending = call(c, 'exec_run', { workspaceId: ws, command: 'echo started > started.txt; sleep 2; echo finished' });
      const probe = await connectV2(svc);
      for (let i = 0; i < 100; i++) {
        const r = await call(probe, 'files_read', { workspaceId: ws, path: 'started.txt' });
        if (r.ok) break;
        await new Promise((res) => setTimeout(res, 50));
      }
      await probe.close();
      svc.proc.kill('SIGTERM');
      const r = await pending; // no catch: an error here fails the test
      if (!r.ok) throw new Error(`the call in flight was cut off: ${r.text}`);
      expect(r.result).toMatchObject({ exitCode: 0, stdout: 'finished\n' });
      expect(await svc.stop()).toBe(0);
      await c.close().catch(() => undefined);
    } finally {
      await svc.dispose();
      await host.close();
    }
  }, 120_000);

  // Some fifteen service starts in a row, each refused: under a loaded CI machine one start took
  // seconds, and the default 60 s ran out (the start-up test above has 120 s for the same reason).
  it('a bad setting stops start-up with a message naming the setting and the rule', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'atelier-bad-'));
    try {
      const port = await serveExpectingFailure(['--data-dir', dataDir, '--port', 'abc']);
      expect(port.code).toBe(2);
      expect(port.stderr).toContain('--port / ATELIER_PORT');
      expect(port.stderr).toContain('integer from 0 to 65535');

      const envPort = await serveExpectingFailure(['--data-dir', dataDir], { ATELIER_PORT: '70000' });
      expect(envPort.code).toBe(2);
      expect(envPort.stderr).toContain('ATELIER_PORT');

      const host = await serveExpectingFailure(['--data-dir', dataDir, '--host', '0.0.0.0']);
      expect(host.code).toBe(2);
      expect(host.stderr).toContain('--public-origin / ATELIER_PUBLIC_ORIGIN');

      const unknown = await serveExpectingFailure(['--data-dir', dataDir, '--prot', '1']);
      expect(unknown.code).toBe(2);
      expect(unknown.stderr).toContain('unknown option --prot');

      writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ idleLeaseSeconds: 5 }));
      const file = await serveExpectingFailure(['--data-dir', dataDir]);
      expect(file.code).toBe(2);
      expect(file.stderr).toContain('"idleLeaseSeconds" in the config file');

      // The structured sections are checked at start-up too, never silently replaced by defaults.
      const sections: Array<[unknown, string]> = [
        [{ egress: { allow: [{ host: 'registry.npmjs.org', ports: [0] }] } }, '"egress.allow[0].ports"'],
        [{ egress: { allow: [{ host: 'bad host!' }] } }, '"egress.allow[0].host"'],
        [{ egress: { allow: 'registry.npmjs.org' } }, '"egress.allow"'],
        [{ egress: { allow: [{ host: '*.com' }] } }, '"egress.allow[0].host"'],
        [{ egress: { allow: [{ host: 'a.example', allowPrivate: 'yes' }] } }, '"egress.allow[0].allowPrivate"'],
        [{ egress: { deny: [] } }, '"egress.deny"'],
        [{ providers: { provider_a: { baseUrl: 'ftp://x' } } }, '"providers.provider_a.baseUrl"'],
        [{ prices: { provider_a: { m: { inputMicrosPerMillionTokens: -1 } } } }, '"prices"'],
        [{ httpHeadersTimeoutMs: 60000, httpRequestTimeoutMs: 5000 }, '--http-headers-timeout-ms'],
      ];
      for (const [config, named] of sections) {
        writeFileSync(join(dataDir, 'config.json'), JSON.stringify(config));
        const r = await serveExpectingFailure(['--data-dir', dataDir]);
        expect(r.code, JSON.stringify(config)).toBe(2);
        expect(r.stderr, JSON.stringify(config)).toContain(named);
      }
      // A valid egress section starts.
      writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ egress: { allow: [{ host: '*.npmjs.org', ports: [443] }, { host: '10.0.0.1', allowPrivate: true }, { host: '::1' }] } }));
      const good = await startService({ dataDir });
      await good.stop();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 120_000);

  it('doctor reports each requirement with a fix for what is missing', async () => {
    const r = await runCli(['doctor']);
    for (const what of ['bubblewrap', 'git', 'ripgrep', 'universal-ctags', 'user namespaces', 'cgroup memory', 'cgroup pids']) expect(r.stdout).toContain(what);
    expect([0, 1]).toContain(r.code);
    if (r.code === 1) expect(r.stdout).toContain('fix:');
  });
});

describe('without bubblewrap', () => {
  it('refuses to start, naming what is missing, unless the unsafe development flag is given', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'atelier-nobwrap-'));
    try {
      const refused = await serveExpectingFailure(['--data-dir', dataDir, '--sandbox-bwrap-path', '/nonexistent/bwrap']);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toContain('bubblewrap');
      expect(refused.stderr).toContain('--unsafe-dev-no-sandbox');
      const svc = await startService({ dataDir, args: ['--sandbox-bwrap-path', '/nonexistent/bwrap', '--unsafe-dev-no-sandbox'] });
      try {
        expect(svc.stdout()).toContain('UNSAFE DEVELOPMENT MODE');
        const c = await connectV2(svc);
        const r = await c.callTool({ name: 'workspace_open', arguments: { repositoryUrl: 'https://example.com/a.git', idempotencyKey: 'unsafe-mode-1' } });
        expect(r.isError).toBe(true);
        expect((r.structuredContent as { error: { code: string } }).error.code).toBe('FAILED_PRECONDITION');
        await c.close();
      } finally {
        await svc.stop();
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
