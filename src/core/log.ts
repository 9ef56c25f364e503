/**
 * Structured logs (pino, JSON lines on stderr). Anything that looks like a credential is
 * redacted by path before it is written; services never log secret values in the first place.
 */
import pino from 'pino';

export type Logger = pino.Logger;

export const REDACT_PATHS = [
  'authorization',
  '*.authorization',
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'headers.cookie',
  'token',
  '*.token',
  'password',
  '*.password',
  'apiKey',
  '*.apiKey',
  'key',
  '*.key',
  'secret',
  '*.secret',
];

export function createLogger(level: string, destination: pino.DestinationStream | number = 2): Logger {
  return pino(
    {
      level,
      base: { svc: 'atelier' },
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    typeof destination === 'number' ? boundedDestination(destination) : destination,
  );
}

/**
 * How long the synchronous flush at exit may wait for the descriptor to take the log's last lines.
 * pino flushes an asynchronous destination synchronously when the process exits, and retries a
 * write that meets a full pipe (EAGAIN) every 100 ms in `Atomics.wait`, for ever: a process whose
 * stderr reader had stopped reading then never exited, and ignored SIGTERM, since its handler can
 * only run when the main thread returns (issue #42 item 9). Past this bound the rest is dropped.
 */
export const EXIT_FLUSH_MS = 1_000;

/** An asynchronous destination on `fd` whose synchronous flush gives up on a full pipe after EXIT_FLUSH_MS. */
function boundedDestination(fd: number): pino.DestinationStream {
  let flushingSince: number | undefined;
  const stream = pino.destination({
    fd,
    sync: false,
    // Asynchronous writes keep retrying (a slow reader catches up); a synchronous flush only for a while.
    retryEAGAIN: () => flushingSince === undefined || Date.now() - flushingSince < EXIT_FLUSH_MS,
  });
  const flushSync = stream.flushSync.bind(stream);
  stream.flushSync = () => {
    flushingSince = Date.now();
    try {
      flushSync();
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'EAGAIN' && code !== 'EBUSY') throw e;
      // Nothing reads the descriptor: what it did not take is lost, the process goes on exiting.
    } finally {
      flushingSince = undefined;
    }
  };
  return stream;
}
