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
    typeof destination === 'number' ? pino.destination({ fd: destination, sync: false }) : destination,
  );
}
