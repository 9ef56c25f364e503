/**
 * The language servers' history across host processes (issue #44; src/sandbox/daemon/lsp/host.ts,
 * remote.ts): what a host reports of each server (crashes, restarts, last exit) is taken up by the
 * next host's manager, so the crash bound and the reasons hold across hosts; servers a host had
 * running when it ended unasked count as crashed with that reason; an operator's server (known only
 * once a call's settings name it) takes up its history when its slot is made. Hostile history
 * (wrong types, unknown servers) is ignored, never a throw.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Confinement } from '../../src/sandbox/daemon/files/index.js';
import { LSP_LIMITS, LspManager, type ManagerHistory } from '../../src/sandbox/daemon/lsp/manager.js';

const dir = mkdtempSync(join(tmpdir(), 'atelier-lsp-history-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const manager = (): LspManager => new LspManager(new Confinement(dir), { nodePath: process.execPath, home: dir });
const row = (m: LspManager, id: string) => m.status().find((s) => s.server === id)!;

describe('LspManager history', () => {
  it('a new manager takes up restarts, crashes and the last exit; a lost host counts its running servers as crashed', () => {
    const now = Date.now();
    const h: ManagerHistory = {
      slots: { typescript: { crashes: [now - 1000], restarts: 2, everStarted: true, requests: 7, lastExit: { at: new Date(now - 1000).toISOString(), reason: 'killed by SIGKILL', expected: false } } },
      running: ['typescript'],
    };
    const m = manager();
    m.adopt(h);
    expect(row(m, 'typescript')).toMatchObject({ state: 'stopped', restarts: 2, crashesInWindow: 1, requests: 7, lastExit: { reason: 'killed by SIGKILL' } });
    const lost = manager();
    lost.adopt(h, 'the language-server host killed by SIGKILL');
    expect(row(lost, 'typescript')).toMatchObject({ crashesInWindow: 2, lastExit: { expected: false, reason: 'the language-server host killed by SIGKILL' } });
    // What it hands on again is what it took up (the next host gets the same).
    expect(lost.history().slots.typescript).toMatchObject({ restarts: 2, everStarted: true, crashes: [now - 1000, expect.any(Number)] });
    expect(lost.history().running).toEqual([]);
  });

  it('after the crash bound a server taken up from history is refused as crashed, with its reason', async () => {
    const now = Date.now();
    const m = manager();
    m.adopt({ slots: { python: { crashes: [now - 3000, now - 2000, now - 1000], restarts: 3, everStarted: true, requests: 3, lastExit: { at: new Date(now).toISOString(), reason: 'exited with status 1', expected: false } } }, running: [] });
    expect(row(m, 'python').state).toBe('crashed');
    await expect(m.with('python', async () => 'answered')).rejects.toMatchObject({ code: 'FAILED_PRECONDITION', details: { reason: 'crashed', crashes: LSP_LIMITS.maxCrashes } });
  });

  it("an operator's server takes up its history when its slot is made", () => {
    const m = manager();
    m.adopt({ slots: { 'custom:later': { crashes: [], restarts: 4, everStarted: true, requests: 1 } }, running: [] });
    expect(m.history().slots['custom:later']).toMatchObject({ restarts: 4 });
    m.configure({ custom: [{ name: 'later', command: '/usr/bin/true', extensions: { '.later': 'later' } }] });
    expect(row(m, 'custom:later')).toMatchObject({ restarts: 4 });
  });

  it('hostile history is ignored field by field, never a throw', () => {
    const m = manager();
    const junk = JSON.parse('{"slots":{"typescript":{"crashes":["x",5,null],"restarts":"many","everStarted":"yes","requests":{}},"python":null,"__proto__":{"restarts":9}},"running":"all"}') as ManagerHistory;
    expect(() => m.adopt(junk, 'lost')).not.toThrow();
    expect(row(m, 'typescript')).toMatchObject({ restarts: 0, crashesInWindow: 0 });
    expect(({} as Record<string, unknown>).restarts).toBeUndefined();
    expect(Object.getPrototypeOf(m.history().slots)).toBeNull();
    expect(Object.keys(m.history().slots)).toEqual(['typescript']);
  });

  it('is quiet with nothing running, and not while a call is being answered', async () => {
    const m = manager();
    expect(m.quiet()).toBe(true);
    // A call on a server the history marks crashed out is refused; while it is under way the manager is not quiet.
    m.adopt({ slots: { python: { crashes: [Date.now(), Date.now(), Date.now()], restarts: 0, everStarted: true, requests: 0 } }, running: [] });
    const p = m.with('python', async () => 'unreached');
    const during = m.quiet();
    await expect(p).rejects.toMatchObject({ details: { reason: 'crashed' } });
    expect(during).toBe(false);
    expect(m.quiet()).toBe(true);
  });
});
