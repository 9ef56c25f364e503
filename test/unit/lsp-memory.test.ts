/**
 * A language server's memory (issue #44 item 6): the resident set of its process group leader and
 * every descendant, from /proc. A real process tree: a leader (in a group of its own, as the daemon
 * starts servers) whose child holds 64 MiB, so the sum must exceed what the leader holds alone; a
 * gone pid reads as undefined, never a throw.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { treeRssBytes } from '../../src/sandbox/daemon/lsp/memory.js';

const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) if (c.pid) try { process.kill(-c.pid, 'SIGKILL'); } catch { /* gone */ }
});

const rss = (pid: number) => Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'latin1'))![1]) * 1024;

describe('treeRssBytes', () => {
  it('sums the leader and its descendants', async () => {
    // The leader (in a group of its own) starts a node child that fills 64 MiB, then says so.
    const CHILD = "globalThis.b = Buffer.alloc(64 * 1048576, 1); console.log('ready'); setInterval(() => {}, 1000);";
    const LEADER = `require('child_process').spawn(process.execPath, ['-e', ${JSON.stringify(CHILD)}], { stdio: ['ignore', 'inherit', 'ignore'] }); setInterval(() => {}, 1000);`;
    const leader = spawn(process.execPath, ['-e', LEADER], { detached: true, stdio: ['ignore', 'pipe', 'ignore'] });
    children.push(leader);
    await new Promise<void>((res) => leader.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && res()));
    const total = treeRssBytes(leader.pid)!;
    expect(total).toBeGreaterThan(rss(leader.pid!) + 60 * 1048576);
  });

  it('is undefined for a process that is gone or no pid', async () => {
    const c = spawn('/bin/true');
    await new Promise((res) => c.on('exit', res));
    expect(treeRssBytes(c.pid)).toBeUndefined();
    expect(treeRssBytes(undefined)).toBeUndefined();
  });
});
