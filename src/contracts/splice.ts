/**
 * The byte relay between two sockets that every bridging process uses (the runner's gateway relay
 * for agents, a preview's WebSocket, the agent runtime's loopback bridge, the egress proxy's tunnels): bytes both ways,
 * and when either side closes or fails, both are destroyed. Lives in contracts/ because the agent
 * runtime, which imports nothing of the runner, mounts it too.
 */
import type { Duplex } from 'node:stream';

export function splice(a: Duplex, b: Duplex): () => void {
  const teardown = (): void => {
    a.destroy();
    b.destroy();
  };
  a.on('error', teardown);
  b.on('error', teardown);
  a.on('close', teardown);
  b.on('close', teardown);
  a.pipe(b);
  b.pipe(a);
  return teardown;
}
