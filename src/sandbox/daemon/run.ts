/**
 * Entry point for an ephemeral sandbox that needs the egress bridge: starts the bridge on
 * 127.0.0.1:<port>, runs one command with inherited stdio and the environment from --env-file,
 * and ends the way the command ended.
 *
 *   node run.js --env-file FILE --egress-socket /run/egress/proxy.sock [--egress-port 3128] -- ARGV...
 */
import { spawn } from 'node:child_process';
import { parseArgs } from 'node:util';
import { startEgressBridge } from './bridge.js';
import { readEnvFile } from './env.js';

async function run(): Promise<void> {
  const { values, positionals } = parseArgs({
    options: {
      'env-file': { type: 'string' },
      'egress-socket': { type: 'string' },
      'egress-port': { type: 'string', default: '3128' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (!values['egress-socket'] || positionals.length === 0) throw new Error('usage: run.js --egress-socket S -- ARGV');
  await startEgressBridge('127.0.0.1', Number(values['egress-port']), values['egress-socket']);
  const env = values['env-file'] ? readEnvFile(values['env-file']) : {};
  const child = spawn(positionals[0]!, positionals.slice(1), { stdio: 'inherit', env });
  child.on('error', (err) => {
    process.stderr.write(`${positionals[0]}: ${err.message}\n`);
    process.exit(127);
  });
  child.on('exit', (code, signal) => {
    if (signal) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    }
    process.exit(code ?? 128);
  });
}

run().catch((err: unknown) => {
  process.stderr.write(`atelier run failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
