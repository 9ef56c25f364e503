/**
 * Runner side of the daemon's relay mode (daemon/relay.ts): a fresh connection to the daemon's
 * socket turned into a byte pipe to one loopback port inside the sandbox. The workspace keeps no
 * inbound network: preview URLs (services/previews/links.ts) reach a workspace server only this way.
 */
import { connect, type Socket } from 'node:net';
import { ServiceError } from '../core/errors.js';
import { daemonError } from './client.js';
import { encodeMessage, type DaemonErrorBody } from './daemon/protocol.js';

/** Longest reply line accepted before the relay starts. */
const MAX_REPLY = 16 * 1024;
const GARBAGE = 'the sandbox daemon answered the relay request with garbage';

/**
 * Opens a relay to `port` through the daemon at `socketPath`. Resolves with the socket, paused,
 * positioned at the first relayed byte; rejects with the daemon's error (INVALID_ARGUMENT for a
 * refused port, FAILED_PRECONDITION when nothing listens) or UNAVAILABLE.
 */
export function openRelay(socketPath: string, port: number, timeoutMs = 10_000): Promise<Socket> {
  return new Promise<Socket>((resolve, reject) => {
    const socket = connect({ path: socketPath });
    let buf = Buffer.alloc(0);
    let settled = false;
    const done = (err: unknown, s?: Socket): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.off('data', onData);
      if (err) {
        socket.destroy();
        reject(err);
      } else resolve(s!);
    };
    const timer = setTimeout(() => done(new ServiceError('UNAVAILABLE', 'the sandbox daemon did not open the relay in time')), timeoutMs);
    // The reply comes from inside the sandbox: whatever it is, a failure rejects this relay only (issue #42 item 1).
    const onData = (chunk: Buffer): void => {
      try {
        onReply(chunk);
      } catch {
        done(new ServiceError('UNAVAILABLE', GARBAGE));
      }
    };
    const onReply = (chunk: Buffer): void => {
      buf = Buffer.concat([buf, chunk]);
      const nl = buf.indexOf(10);
      if (nl === -1) {
        if (buf.length > MAX_REPLY) done(new ServiceError('UNAVAILABLE', GARBAGE));
        return;
      }
      socket.pause();
      let msg: { id?: unknown; result?: { relayed?: unknown }; error?: DaemonErrorBody };
      try {
        msg = JSON.parse(buf.subarray(0, nl).toString('utf8'));
      } catch {
        return done(new ServiceError('UNAVAILABLE', GARBAGE));
      }
      if (msg === null || typeof msg !== 'object' || Array.isArray(msg) || (msg.error !== undefined && (msg.error === null || typeof msg.error !== 'object' || typeof msg.error.code !== 'string' || typeof msg.error.message !== 'string')))
        return done(new ServiceError('UNAVAILABLE', GARBAGE));
      if (msg.error?.code === 'NOT_IMPLEMENTED')
        // A daemon started before relays existed (same protocol version: the method was added compatibly).
        return done(new ServiceError('FAILED_PRECONDITION', 'this workspace\'s sandbox daemon was started before preview relays existed (the service was upgraded while it ran): it relays once its sandbox starts again (close and reopen the workspace)', { daemonCode: 'NOT_IMPLEMENTED' }));
      if (msg.error) return done(daemonError(msg.error));
      if (msg.id !== 1 || msg.result?.relayed !== true) return done(new ServiceError('UNAVAILABLE', 'the sandbox daemon does not relay (an older daemon?)'));
      const rest = buf.subarray(nl + 1);
      if (rest.length > 0) socket.unshift(rest);
      done(null, socket);
    };
    socket.once('connect', () => {
      socket.setNoDelay(true);
      socket.write(encodeMessage({ id: 1, method: 'relay', params: { port } }));
    });
    socket.on('data', onData);
    socket.on('error', (err: NodeJS.ErrnoException) => done(new ServiceError('UNAVAILABLE', 'sandbox daemon is not reachable', { cause: err.code ?? err.message })));
    socket.once('close', () => done(new ServiceError('UNAVAILABLE', 'the sandbox daemon closed the relay before answering')));
  });
}
