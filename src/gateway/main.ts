/**
 * `atelier gateway`: the model gateway as its own process (started by `atelier serve` as a child
 * by default). Flags: --host (127.0.0.1), --port (0 = a free port), --admin-secret-file (required;
 * the shared secret of /admin/*), --max-body-bytes, --drain-ms, --session-header (or the
 * MODEL_GATEWAY_SESSION_HEADER variable). Prints one line "atelier gateway listening at URL (boot ID)"
 * on stdout once it accepts requests. Keeps nothing on disk.
 */
import { readFileSync, statSync } from 'node:fs';
import { startGateway } from './server.js';
import { startTracing, stopTracing } from '../telemetry/tracing.js';
import { VERSION } from '../core/version.js';

export const GATEWAY_USAGE = `Usage: atelier gateway --admin-secret-file FILE [--host 127.0.0.1] [--port 0] [--max-body-bytes N] [--drain-ms N] [--session-header NAME]\n`;

export async function gatewayMain(argv: string[]): Promise<number> {
  const flags: Record<string, string> = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--help') {
      process.stdout.write(GATEWAY_USAGE);
      return 0;
    }
    const eq = a.indexOf('=');
    const k = eq > 0 ? a.slice(0, eq) : a;
    if (!['--host', '--port', '--admin-secret-file', '--max-body-bytes', '--drain-ms', '--session-header', '--log-level'].includes(k)) {
      process.stderr.write(`atelier gateway: unknown option ${k}\n${GATEWAY_USAGE}`);
      return 2;
    }
    const v = eq > 0 ? a.slice(eq + 1) : argv[++i];
    if (v === undefined) {
      process.stderr.write(`atelier gateway: option ${k} needs a value\n`);
      return 2;
    }
    flags[k] = v;
  }
  const secretFile = flags['--admin-secret-file'] ?? process.env.ATELIER_GATEWAY_ADMIN_SECRET_FILE;
  if (!secretFile) {
    process.stderr.write(`atelier gateway: --admin-secret-file is required\n${GATEWAY_USAGE}`);
    return 2;
  }
  let secret: string;
  try {
    if ((statSync(secretFile).mode & 0o077) !== 0) {
      process.stderr.write(`atelier gateway: ${secretFile} must not be readable by group or others (chmod 600)\n`);
      return 2;
    }
    secret = readFileSync(secretFile, 'utf8').trim();
  } catch (e) {
    process.stderr.write(`atelier gateway: cannot read ${secretFile}: ${(e as Error).message}\n`);
    return 2;
  }
  if (secret.length < 16) {
    process.stderr.write('atelier gateway: the admin secret must have at least 16 characters\n');
    return 2;
  }
  const int = (k: string, d: number) => {
    const v = flags[k];
    if (v === undefined) return d;
    const n = Number(v);
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${k} must be a non-negative integer`);
    return n;
  };
  // Traces (docs/operations.md): on when the runner (or the operator) sets the OTLP endpoint.
  const otlp = process.env.ATELIER_OTLP_TRACES_ENDPOINT ?? '';
  // Loaded beside the server's start, not before it (about a second on a loaded machine): the runner
  // waits for the "listening" line; a request before the SDK is ready is simply not traced.
  const tracing = /^https?:\/\/[^\s/@]+(\/\S*)?$/.test(otlp) ? startTracing({ endpoint: otlp, serviceName: 'atelier-gateway', serviceVersion: VERSION }).catch((e) => process.stderr.write(`atelier gateway: tracing did not start: ${(e as Error).message}\n`)) : null;
  const quiet = flags['--log-level'] === 'silent';
  const gw = await startGateway({
    host: flags['--host'] ?? '127.0.0.1',
    port: int('--port', 0),
    adminSecret: secret,
    maxBodyBytes: int('--max-body-bytes', 32 * 1024 * 1024),
    drainMs: int('--drain-ms', 120_000),
    sessionHeader: flags['--session-header'] ?? process.env.MODEL_GATEWAY_SESSION_HEADER ?? process.env.ATELIER_MODEL_GATEWAY_SESSION_HEADER ?? null,
    log: quiet ? undefined : (level, msg, extra) => process.stderr.write(JSON.stringify({ level, time: Date.now(), name: 'gateway', msg, ...extra }) + '\n'),
  });
  process.stdout.write(`atelier gateway listening at ${gw.url} (${gw.bootId})\n`);
  await tracing;
  const stop = () => {
    void gw.close().then(stopTracing).then(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  // The embedded child stops with its parent: stdin closes when the runner goes away.
  if (process.env.ATELIER_GATEWAY_PARENT_WATCH === '1') {
    process.stdin.on('end', stop).on('error', stop).resume();
  }
  return -1;
}
