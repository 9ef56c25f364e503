/**
 * Entry point of the in-sandbox daemon. Runs as the workspace user inside the sandbox and serves
 * the protocol in protocol.ts on a Unix socket. Imports node built-ins and sibling modules only:
 * this directory is bind-mounted read-only into every sandbox and must not reach the runner's code.
 *
 *   node main.js --socket /run/atelier/d.sock [--workspace /workspace] [--env-file FILE]
 *                [--egress-socket /run/egress/proxy.sock --egress-port 3128] [--orphan-grace-ms N]
 *                [--exec-starter /opt/atelier/lib/exec-starter]
 *
 * The environment that commands start from comes from --env-file (a JSON object of strings), not
 * from the daemon's own environment, so workspace variables such as NODE_OPTIONS never change how
 * the daemon itself runs. `env.set` replaces it after start (a warm-pool Pod claimed for a workspace).
 */
import { homedir } from 'node:os';
import { parseArgs } from 'node:util';
import { startEgressBridge } from './bridge.js';
import { envMethods, readEnvFile } from './env.js';
import { Confinement } from './files/index.js';
import { codeHost } from './lsp/remote.js';
import { execMethods } from './exec.js';
import { ptyMethods } from './pty.js';
import { analyseRepository, type OverviewOptions } from './overview/index.js';
import { DAEMON_VERSION, type PingResult } from './protocol.js';
import { startServer, type Handlers, type ServedMethod } from './server.js';

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      socket: { type: 'string' },
      workspace: { type: 'string', default: '/workspace' },
      'env-file': { type: 'string' },
      'egress-socket': { type: 'string' },
      'egress-port': { type: 'string', default: '3128' },
      'orphan-grace-ms': { type: 'string', default: '0' },
      'exec-starter': { type: 'string' },
    },
    strict: true,
  });
  if (!values.socket) throw new Error('--socket is required');
  const baseEnv = values['env-file'] ? readEnvFile(values['env-file']) : {};

  process.umask(0o077);
  // code.* run in a child process of the daemon with the servers under it (lsp/host.ts), ended once none runs.
  const code = codeHost(new Confinement(values.workspace!), { nodePath: process.execPath, home: baseEnv.HOME || homedir() });
  const methods: Handlers<ServedMethod> = {
    ping: (): PingResult => ({ pid: process.pid, uid: process.getuid?.() ?? -1, version: DAEMON_VERSION }),
    ...execMethods({ workspaceRoot: values.workspace, baseEnv, execStarter: values['exec-starter'] }),
    ...ptyMethods({ workspaceRoot: values.workspace!, baseEnv }),
    // After start: a warm Pod learns its workspace's environment (env.ts; the same object exec and pty read).
    ...envMethods(baseEnv),
    // The root is the daemon's, never the caller's.
    overview: (params) => analyseRepository({ ...(params as OverviewOptions), root: values.workspace! }),
    // fs.* and search.* (files/, search/): confined to the workspace root; their writes reach the language servers.
    ...(await import('./search/index.js')).workspaceFileMethods(values.workspace!, code.notify),
    // code.* (lsp/): language servers, started on first use (issue #44).
    ...code.methods,
  };
  await startServer(values.socket, methods, {
    orphanGraceMs: Number(values['orphan-grace-ms']),
    // Preview URLs: a relay never reaches the egress bridge (it would lead out of the sandbox).
    relay: { forbiddenPorts: [Number(values['egress-port'])] },
    onOrphaned: () => {
      process.stderr.write('atelier daemon: no runner connection for the orphan grace period; exiting (the sandbox ends)\n');
      process.exit(0);
    },
  });
  if (values['egress-socket']) {
    await startEgressBridge('127.0.0.1', Number(values['egress-port']), values['egress-socket']);
  }
  process.stderr.write(`atelier daemon ${DAEMON_VERSION} listening on ${values.socket}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`atelier daemon failed: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
