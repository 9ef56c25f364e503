import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { BIN, connectV2, runCli, startService } from './harness.js';

function serveExpectingFailure(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [BIN, 'serve', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    p.stderr.on('data', (d) => (stderr += d));
    const t = setTimeout(() => p.kill('SIGKILL'), 15_000);
    p.on('exit', (code) => {
      clearTimeout(t);
      resolve({ code, stderr });
    });
  });
}

describe('start-up and shutdown', () => {
  it('first start prints URL, token and the claude mcp add line; a restart keeps tokens and prints none', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'atelier-life-'));
    try {
      const a = await startService({ dataDir });
      expect(a.stdout()).toContain(`claude mcp add --transport http atelier ${a.mcpUrl} --header "Authorization: Bearer ${a.token}"`);
      expect(await a.stop('SIGTERM')).toBe(0);
      expect(a.stderr()).toContain('"msg":"stopped"');
      const b = await startService({ dataDir });
      expect(b.token).toBe('');
      expect(b.stdout()).toContain('atelier token create');
      const c = await connectV2(b, a.token);
      expect((await c.listTools()).tools).toHaveLength(107);
      await c.close();
      await b.stop();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('SIGTERM during a call lets it finish before the process exits', async () => {
    const svc = await startService();
    try {
      const c = await connectV2(svc);
      const pending = c.listTools();
      svc.proc.kill('SIGTERM');
      const r = await pending.catch((e) => e);
      // Either the call completed, or it was never accepted: a call in flight is not cut off half-way.
      if (!(r instanceof Error)) expect(r.tools).toHaveLength(107);
      expect(await svc.stop()).toBe(0);
    } finally {
      await svc.dispose();
    }
  });

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
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

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
