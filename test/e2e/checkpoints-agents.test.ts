/**
 * Parallel subagents on forks (issue #33 item 2) through the real `atelier serve`, the real
 * gateway and the scripted fake provider: one workspace is forked twice (workspace_fork), an agent
 * is spawned into each fork (agent_spawn with the fork's id), and the two write the same file at
 * the same time: the scripts wait for each other, so each agent's write lands before the other
 * reads the file back. Each reads its own content; the source is untouched; the work comes back
 * as a patch (workspace_recover patch) and as a branch (workspace_recover export).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAgentEnv, type AgentEnv } from './agents-fixture.js';

let e: AgentEnv;
beforeAll(async () => {
  e = await startAgentEnv();
  await e.makeProfile('fork-coder', 'chat-completions');
}, 180_000);
afterAll(async () => {
  await e?.dispose();
});

/** A promise and its resolver. */
function signal(): { wait: Promise<void>; fire: () => void } {
  let fire!: () => void;
  const wait = new Promise<void>((r) => (fire = r));
  return { wait, fire };
}

describe('two agents on two forks', () => {
  it('edit the same file without interfering; their work comes back as a patch and as a branch', async () => {
    const forks: string[] = [];
    for (const k of ['a', 'b']) {
      const f = await e.ok('workspace_fork', { workspaceId: e.ws, idempotencyKey: `fork-agents-${k}-${Date.now()}` });
      expect(f.forkedFrom).toEqual({ workspaceId: e.ws });
      forks.push(f.workspaceId as string);
    }
    const wrote = { a: signal(), b: signal() };
    const script = (me: 'a' | 'b', other: 'a' | 'b') => async (c: { step: number; hasTools: boolean; toolResults: string[] }) => {
      if (!c.hasTools) return { text: 'summary' };
      if (c.step === 0) return { calls: [{ name: 'files_write', args: { path: 'src/parser.js', content: `export const who = "${me}";\n` } }] };
      if (c.step === 1) {
        // This agent's write is done; read back only once the other agent's write is done too.
        wrote[me].fire();
        await wrote[other].wait;
        return { calls: [{ name: 'files_read', args: { path: 'src/parser.js' } }] };
      }
      return { text: `read back: ${c.toolResults.at(-1)?.includes(`who = \\"${me}\\"`) || c.toolResults.at(-1)?.includes(`who = "${me}"`) ? me : `something else: ${c.toolResults.at(-1)}`}` };
    };
    e.fake.scripts.set('fork-a', script('a', 'b'));
    e.fake.scripts.set('fork-b', script('b', 'a'));
    const ids: string[] = [];
    for (const [i, name] of ['fork-a', 'fork-b'].entries()) {
      const r = await e.ok('agent_spawn', { workspaceId: forks[i], profileId: 'fork-coder', prompt: `#agent=${name} write the parser`, proxyOperations: ['files_read', 'files_write'], idempotencyKey: `spawn-${name}-${Date.now()}` });
      expect(r.workspaceId).toBe(forks[i]);
      ids.push(r.agentId as string);
    }
    // agent_status looks in the given workspace (each agent is in its fork).
    const waitEnd = async (agentId: string, workspaceId: string) => {
      const until = Date.now() + 180_000;
      for (;;) {
        const st = await e.ok('agent_status', { agentId, workspaceId });
        if (st.terminal === true || Date.now() > until) return st;
        await new Promise((r) => setTimeout(r, 200));
      }
    };
    const [endA, endB] = await Promise.all(ids.map((id, i) => waitEnd(id, forks[i]!)));
    expect(endA!.status, JSON.stringify(endA)).toBe('SUCCEEDED');
    expect(endB!.status, JSON.stringify(endB)).toBe('SUCCEEDED');
    expect(endA!.summary).toBe('read back: a');
    expect(endB!.summary).toBe('read back: b');

    // Each fork holds its own agent's file; the source still has the original.
    expect((await e.ok('files_read', { workspaceId: forks[0], path: 'src/parser.js' })).content).toBe('export const who = "a";\n');
    expect((await e.ok('files_read', { workspaceId: forks[1], path: 'src/parser.js' })).content).toBe('export const who = "b";\n');
    expect((await e.ok('files_read', { workspaceId: e.ws, path: 'src/parser.js' })).content).toContain('split(",")');

    // The work comes back: A's as a patch, B's pushed to a branch of the repository.
    const patch = await e.ok('workspace_recover', { workspaceId: forks[0], mode: 'patch' });
    expect(patch.patch).toContain('+export const who = "a";');
    expect(patch.patch).not.toContain('who = "b"');
    const exported = await e.ok('workspace_recover', { workspaceId: forks[1], mode: 'export', targetBranch: 'agent-b-work' });
    expect(exported.pushedOid).toMatch(/^[0-9a-f]{40}$/);
    // The branch is on the host: the source fetches it and sees B's file there, its own checkout unchanged.
    await e.ok('git_fetch', { workspaceId: e.ws, refspec: '+refs/heads/agent-b-work:refs/remotes/origin/agent-b-work' });
    const shown = await e.ok('exec_run', { workspaceId: e.ws, command: 'git show origin/agent-b-work:src/parser.js' });
    expect(shown.stdout).toBe('export const who = "b";\n');
    for (const f of forks) await e.ok('workspace_close', { workspaceId: f });
  }, 420_000);
});
