/**
 * fs.read through the descriptor handoff (handoff.ts) when the sandbox has it: for a large range
 * the daemon names its open descriptor and the runner reads the bytes itself.
 */
import type { DaemonClient } from '../client.js';
import type { FsReadParams, FsReadReply } from '../daemon/protocol.js';
import type { FileHandoff } from '../handoff.js';

/**
 * The first read of a sandbox sets the handoff up (or finds it unavailable); a handoff that fails
 * switches it off for the sandbox and the read is asked again the ordinary way. `setup` names the
 * sandbox's root directory and its cgroup's members, when they are known.
 */
export async function readFile(
  handoff: FileHandoff,
  client: DaemonClient,
  id: string,
  params: FsReadParams,
  opts: { signal?: AbortSignal; timeoutMs?: number },
  setup: () => { rootDir: string; members: (() => Promise<number[]>) | undefined } | undefined,
): Promise<FsReadReply> {
  const { handOff: _ignored, release: _theirs, ...plain } = params;
  if (!handoff.enabled(id)) {
    const reply = await client.request('fs.read', plain, opts);
    // Set up once the connection is open (its peer is the daemon), when the addon is loaded.
    if (!handoff.known(id) && handoff.calls()) {
      const s = setup();
      if (s) await handoff.prepare(id, client, s.rootDir, s.members).catch(() => undefined);
    }
    return reply;
  }
  const reply = await client.request('fs.read', { ...plain, handOff: true, release: handoff.releases(id) }, opts);
  if (!reply.handOff) return reply;
  try {
    return handoff.take(id, client, reply);
  } catch (err) {
    handoff.off(id, (err as Error).message);
    return client.request('fs.read', plain, opts);
  }
}
