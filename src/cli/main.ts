/**
 * bin/atelier: serve, token create|list|revoke, owner set-password|login-link, doctor.
 * Every serve flag is also an ATELIER_* variable and a config.json key (see core/config.ts).
 */
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { readRepositorySettings } from '../services/repos/index.js';
import { PriceList } from '../services/models/index.js';
import { OPEN_STEPS, createApp, openApp, type App } from '../app.js';
import { testPause } from '../core/test-pause.js';
import { ConfigError, SETTINGS, defaultDataDir, loadConfig, parseFlags } from '../core/config.js';
import { ServiceError } from '../core/errors.js';
import { startServer } from '../server.js';
import { startTracing, stopTracing } from '../telemetry/tracing.js';
import { runDoctor, sandboxProblems } from './doctor.js';
import { envCommand, reposCommand, requireServiceDataDir } from './admin.js';
import { CREDENTIALS_FLAGS, credentialsCommand } from './credentials.js';
import { repoCredentialRoutes } from '../dashboard/repo-credentials.js';
import { environmentRoutes } from '../dashboard/environments.js';
import { approvalRoutes } from '../dashboard/approvals.js';
import { SPEND_SERVED_PATHS, spendRoutes } from '../dashboard/spend.js';
import { MODELS_SERVED_PATHS, modelRoutes } from '../dashboard/models.js';
import { SKILLS_FLAGS, skillsCommand } from './skills.js';
import { BACKUP_FLAGS, backupCommand, restoreCommand } from './backup.js';
import { SCHEMA_VERSION } from '../store/db.js';
import { skillRoutes } from '../dashboard/skills.js';
import { agentRoutes } from '../dashboard/agents.js';
import { previewRoutes } from '../dashboard/previews.js';
import { ownerRoutes } from '../dashboard/owner.js';
import { instanceRoutes } from '../dashboard/instance.js';
import { codeServerRoutes } from '../dashboard/code-servers.js';
import { checkpointRoutes } from '../dashboard/checkpoints.js';
import { VERSION } from '../core/version.js';
import { CORE_TOOLS, DISCOVERY_TOOLSET, PRESETS, TOOLSETS, describeAccess, parseToolsets } from '../core/toolsets.js';
import { LOGIN_LINK_TTL_MS } from '../services/access/index.js';

const USAGE = `atelier ${VERSION}: a private MCP service for coding

Usage:
  atelier serve [options]                 start the service (MCP at /mcp, dashboard at /)
  atelier token create [--name NAME] [--toolsets LIST] [--read-only]
                                          create an owner bearer token for MCP (shown once); --toolsets narrows it
                                          (e.g. code = workspace,files,commands,git; see docs/access.md), --read-only
                                          allows only tools that change nothing; --allow-in-url (with --read-only) lets
                                          clients that cannot send headers pass it as ?access_token= (conformance suite);
                                          --dynamic-toolsets starts its connections with the core tools and toolsets_enable
  atelier token list                      list tokens (never their values)
  atelier token revoke ID                 revoke a token by id
  atelier owner set-password              set the dashboard password (reads it from stdin)
  atelier owner login-link [--json]       print a one-time dashboard login link (15 minutes; works while password login is locked)
  atelier repos allow|deny|remove RULE... approve (or deny) repositories: an exact https URL or a prefix ending in /*
  atelier repos list                      show the approved and denied repositories
  atelier repos ca add FILE | list | remove FILE
                                          extra CA certificates (PEM) trusted for repository hosts
  atelier env create NAME | list | show ENV | delete ENV
  atelier env set ENV|global NAME [--secret] [--setup-only] [--description D]   value from stdin (or NAME=VALUE for variables)
  atelier env script ENV [setup|maintenance [--file F | --clear]]   show, or set (from --file or stdin) the setup / maintenance script
  atelier env templates [delete TEMPLATE_ID]                      list workspace templates (docs/templates.md), or delete one
  atelier env unset ENV|global NAME
  atelier credentials list | add-token PREFIX | add-github-app PREFIX --app-id ID --private-key-file F | rotate ID | remove ID | test ID URL
                                          repository credentials of the broker (secrets from stdin or a file; see docs/credentials.md)
  atelier skills list | add DIR | remove NAME          owner skills (docs/extensions.md)
  atelier deployments list | allow REPO TARGET SHA256 [--environment ENV] [--allow-private-hosts] | revoke REPO TARGET
                                          the owner's consent to run a repository's deployment target
  atelier gateway --admin-secret-file F  run the model gateway alone (serve starts one by default)
  atelier backup DEST [--include-master-key] [--json]
                                          a consistent copy of the running instance into DEST (new or empty; see docs/operations.md);
                                          the master key only with --include-master-key; workspaces never
  atelier backup verify SRC               check a backup's checksums, database integrity and row counts
  atelier restore SRC [--master-key-file F] restore a backup into an EMPTY --data-dir (the key: the backup's, F, or ATELIER_MASTER_KEY)
  atelier doctor                          check sandboxing, git, rg and ctags; say how to fix
  atelier --version | --help              the version and the database schema version it writes

Commands other than serve work on the service's data directory and never create one: give them the
service's --data-dir (or ATELIER_DATA_DIR) when it is not this user's default.

Common options (also as ATELIER_* variables):
${SETTINGS.map((s) => `  ${(s.flag + (s.kind === 'bool' ? '' : ' VALUE')).padEnd(38)} ${s.help} (${s.env}; default ${s.key === 'dataDir' ? `${defaultDataDir()} for this user` : JSON.stringify(s.def) || '""'})`).join('\n')}
  --config FILE                          config file (ATELIER_CONFIG; default <data-dir>/config.json)
`;

const BOOLEAN_FLAGS = new Set(['--json', '--secret', '--allow-private-hosts', '--read-only', '--allow-in-url', '--include-master-key', '--setup-only', '--clear']);

/** Splits off options every subcommand accepts (data dir, config, log level) from its own. */
function splitCommon(argv: string[], own: string[]): { common: string[]; rest: Record<string, string | true> } {
  const common: string[] = [];
  const rest: Record<string, string | true> = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const flag = a.split('=')[0]!;
    const takesValue = !BOOLEAN_FLAGS.has(flag) && !a.includes('=') && argv[i + 1] !== undefined && !argv[i + 1]!.startsWith('--');
    if (own.includes(flag)) {
      rest[flag] = a.includes('=') ? a.slice(a.indexOf('=') + 1) : takesValue ? argv[++i]! : true;
    } else if (SETTINGS.some((s) => s.flag === flag) || flag === '--config') {
      common.push(a);
      if (!a.includes('=') && SETTINGS.find((s) => s.flag === flag)?.kind !== 'bool' && argv[i + 1] !== undefined) common.push(argv[++i]!);
    } else if (a.startsWith('--')) {
      throw new ConfigError(`unknown option ${flag} (see atelier --help)`);
    } else {
      rest[`#${Object.keys(rest).filter((k) => k.startsWith('#')).length}`] = a;
    }
  }
  return { common, rest };
}

async function readSecretFromStdin(prompt: string): Promise<string> {
  if (process.stdin.isTTY) {
    process.stderr.write(prompt);
    const rl = createInterface({ input: process.stdin, terminal: true });
    // Do not echo the password.
    (rl as unknown as { _writeToOutput: (s: string) => void })._writeToOutput = () => undefined;
    const line = await new Promise<string>((r) => rl.once('line', r));
    rl.close();
    process.stderr.write('\n');
    return line;
  }
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString('utf8').replace(/\r?\n$/, '');
}

function withApp<T>(common: string[], fn: (app: App) => Promise<T> | T): Promise<T> {
  const config = loadConfig(common);
  requireServiceDataDir(config);
  const app = createApp({ ...config, logLevel: 'warn' });
  return Promise.resolve(fn(app)).finally(() => app.close());
}

/** Past the calls' grace (--shutdown-grace-ms), how long the rest of a shutdown may take before the process exits anyway. */
const SHUTDOWN_REST_MS = 35_000;
/**
 * A start that fails or is stopped undoes what it started (listener, gateway child, sandboxes,
 * image pool, database) within this, or the process exits anyway (issue #42 item 9).
 */
const START_UNDO_MS = 10_000;
/** A stop request during start-up lets the phase in flight finish for at most this long, then undoes the start. */
const START_PHASE_GRACE_MS = 3_000;

/**
 * The phases of `atelier serve`'s start, in order (docs/operations.md, "Start-up failures"); the
 * test-only ATELIER_TEST_PAUSE_AT=start:<phase> pauses before one (core/test-pause.ts).
 */
export const START_PHASES = ['config', 'sandbox-check', ...OPEN_STEPS, 'tracing', 'recovery', 'listen', 'gateway', 'agents', 'ready'] as const;
type StartPhase = (typeof START_PHASES)[number];

class StartInterrupted extends Error {
  constructor(readonly signal: string) {
    super(`stopped by ${signal} during start-up`);
  }
}

/**
 * One `atelier serve` start: its phases, what each started (undone in reverse when the start fails
 * or a stop request comes), and the signal handlers, in place before anything is created. Every
 * end is an explicit, bounded exit: a failure exits 2 (a setting, a file, a port: the message says
 * which and why) or 1 (anything else) once what was started is undone; SIGTERM or SIGINT during
 * start-up ends it with status 0; after start-up they stop the service (`stop`).
 */
class ServeStart {
  phase: StartPhase = 'config';
  private interrupted: string | undefined;
  private readonly abort = new AbortController();
  private readonly undo: Array<() => unknown> = [];
  private undone: Promise<void> | undefined;
  private sequence: Promise<unknown> = Promise.resolve();
  private ended = false;
  /** Set once the service is up: a signal then stops it. */
  stopAfterStart: ((signal: string) => void) | undefined;

  constructor() {
    for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => this.onSignal(signal));
  }

  /** Runs the start sequence; its failure or an interruption ends the process (never returns then). */
  async run(sequence: (s: ServeStart) => Promise<void>): Promise<void> {
    const done = sequence(this);
    this.sequence = done.catch(() => undefined);
    try {
      await done;
    } catch (e) {
      if (this.interrupted !== undefined) return new Promise<never>(() => undefined); // the signal's path exits
      await this.fail(e);
    }
  }

  /** Before each phase: a pending stop request ends the start here; the test-only pause point. */
  async enter(phase: StartPhase): Promise<void> {
    if (this.interrupted !== undefined) throw new StartInterrupted(this.interrupted);
    this.phase = phase;
    await testPause(`start:${phase}`, this.abort.signal);
  }

  /** What to undo should a later phase fail (undone in reverse order; each failure of an undo is ignored). */
  started(undo: () => unknown): void {
    this.undo.push(undo);
  }

  private onSignal(signal: string): void {
    if (this.stopAfterStart) return this.stopAfterStart(signal);
    if (this.interrupted !== undefined || this.ended) return;
    this.interrupted = signal;
    this.abort.abort(new StartInterrupted(signal));
    const phase = this.phase;
    void (async () => {
      // The phase in flight (a sandbox being restarted, a child being spawned) may finish first, briefly.
      await Promise.race([this.sequence, new Promise((r) => setTimeout(r, START_PHASE_GRACE_MS))]);
      await this.end(0, `atelier: start-up stopped by ${signal} (during the ${phase} phase); nothing it started is left running\n`);
    })();
  }

  private async fail(e: unknown): Promise<never> {
    const known = e instanceof ConfigError || e instanceof ServiceError;
    const message = known ? `atelier: ${(e as Error).message}\n` : `atelier: start-up failed during the ${this.phase} phase: ${(e as Error)?.stack ?? String(e)}\n`;
    return this.end(known ? 2 : 1, message);
  }

  /** Undoes what was started (bounded by START_UNDO_MS), writes `message`, exits with `code`. */
  private async end(code: number, message: string): Promise<never> {
    this.ended = true;
    const limit = setTimeout(() => {
      process.stderr.write(`${message}atelier: undoing the start took longer than ${START_UNDO_MS / 1000} s; exiting\n`);
      process.exit(code === 0 ? 1 : code);
    }, START_UNDO_MS);
    this.undone ??= (async () => {
      for (const undo of this.undo.reverse()) {
        try {
          await undo();
        } catch {
          // the rest is still undone
        }
      }
    })();
    await this.undone;
    clearTimeout(limit);
    process.stderr.write(message);
    process.exit(code);
  }
}

async function serve(argv: string[]): Promise<void> {
  await new ServeStart().run((s) => startServing(s, argv));
}

async function startServing(s: ServeStart, argv: string[]): Promise<void> {
  await s.enter('config');
  parseFlags(argv); // reject unknown flags before anything is created
  const config = loadConfig(argv);
  // A bad "repositories" section (or the retired "repositories.credentials") stops start-up with its message.
  if (existsSync(config.configPath)) readRepositorySettings(config.configPath);
  new PriceList(config.configPath).lookup('provider_a', ''); // a bad "prices" section stops start-up too
  await s.enter('sandbox-check');
  // With --executor kubernetes the sandboxes are Pods: this host's bubblewrap does not matter.
  const problems = config.executor === 'kubernetes' ? [] : await sandboxProblems(config.sandboxBwrapPath);
  if (problems.length > 0 && !config.unsafeNoSandbox) {
    throw new ConfigError(
      `workspaces need real sandboxes and this machine cannot make them (--sandbox-bwrap-path ${config.sandboxBwrapPath}):\n${problems.map((p) => `  - ${p.what}: ${p.detail}${p.fix ? `\n    fix: ${p.fix}` : ''}`).join('\n')}\n` +
        'Fix the above (see `atelier doctor`), or, for development only, start with --unsafe-dev-no-sandbox (workspaces are then refused).',
    );
  }
  // The data directory, the database, the master key, the image pool and the services, a phase each.
  const app = await openApp(config, { sandboxDisabledReason: problems.length > 0 ? problems.map((p) => p.what).join(', ') + ' unavailable' : undefined, backgroundCheckpoints: true, makeImagePool: true }, (step) => s.enter(step));
  s.started(() => app.close());
  await s.enter('tracing');
  // Traces (docs/operations.md): the SDK is loaded only when an OTLP endpoint is set.
  if (config.otlpTracesEndpoint) {
    s.started(() => stopTracing());
    await startTracing({ endpoint: config.otlpTracesEndpoint, serviceName: 'atelier', serviceVersion: VERSION });
  }
  // Ready means ready (issue #12 item 10): restart recovery (interrupted commands, half-opened
  // workspaces removed, live sandboxes reattached or restarted) finishes before anything listens,
  // so /healthz and MCP calls are answered only by a recovered service (docs/operations.md).
  await s.enter('recovery');
  s.started(() => app.packages.shutdown());
  s.started(() => app.workspaces.shutdown());
  s.started(() => app.commands.shutdown());
  app.commands.startup();
  // Release mounts an earlier runner left go before any sandbox starts (docs/packages.md).
  await app.packages.startup();
  await app.workspaces.startup();
  // What no live sandbox owns goes: runtime directories (and their socket filesystems) of
  // sandboxes an earlier runner was starting or running when it was killed (issue #42 item 12).
  await app.executor.sweepRuntime?.();
  await s.enter('listen');
  let server: Awaited<ReturnType<typeof startServer>>;
  try {
    server = await startServer(app, { apiRoutes: [environmentRoutes, approvalRoutes, spendRoutes, modelRoutes, repoCredentialRoutes, skillRoutes, agentRoutes, ownerRoutes, instanceRoutes, codeServerRoutes, checkpointRoutes, previewRoutes], servedSpecPaths: [...SPEND_SERVED_PATHS, ...MODELS_SERVED_PATHS] });
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    if (err.code === 'EADDRINUSE') throw new ConfigError(`invalid setting --port / ATELIER_PORT: port ${config.port} on ${config.host} is already in use`);
    if (err.code === 'EADDRNOTAVAIL') throw new ConfigError(`invalid setting --host / ATELIER_HOST: ${config.host} is not an address of this machine`);
    throw e;
  }
  s.started(() => server.close());
  s.started(() => stopRetention(app));
  startRetention(app);
  await s.enter('gateway');
  s.started(() => app.gateway.stop());
  await app.gateway.start().catch((e) => app.log.error({ err: (e as Error).message }, 'model gateway did not start; agent spawns answer UNAVAILABLE until it does'));
  await s.enter('agents');
  s.started(() => app.agents.shutdown());
  await app.agents.startup();
  await s.enter('ready');
  s.stopAfterStart = (signal) => void stop(app, server, signal);
  announce(app, server, config, problems.length > 0);
}

/** A stop request once the service is up: calls finish within their grace, then everything stops in order and the process exits. */
let stopping = false;
async function stop(app: App, server: Awaited<ReturnType<typeof startServer>>, signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  app.log.info({ signal }, 'shutting down');
  // A stop request always ends the process: whatever part of the shutdown below is stuck, after
  // the calls' grace plus SHUTDOWN_REST_MS it exits anyway with status 1 (sandboxes end with the
  // runner through their keeper pipe).
  const limitMs = app.config.shutdownGraceMs + SHUTDOWN_REST_MS;
  setTimeout(() => {
    app.log.error({ signal, limitMs }, 'shutdown did not finish in time; exiting');
    app.log.flush?.();
    process.exit(1);
  }, limitMs).unref();
  await server.close();
  await app.agents.shutdown().catch(() => undefined);
  await app.gateway.stop().catch(() => undefined);
  await app.commands.shutdown().catch(() => undefined);
  await app.workspaces.shutdown().catch(() => undefined);
  await app.packages.shutdown().catch(() => undefined);
  await stopRetention(app);
  await stopTracing();
  app.close();
  app.log.info('stopped');
  app.log.flush?.();
  process.exit(0);
}

/**
 * Under the `claude mcp add` line: which tool list to pick (issue #45 item 3), with today's counts. Claude Code takes the
 * whole list (it defers MCP tools behind its tool search); clients that cap tools take a preset.
 */
function toolListHint(registry: { list: Array<{ name: string }>; get(name: string): { domain: string } | undefined }): string[] {
  const count = (sets: string[] | null) => registry.list.filter((t) => {
    const domain = registry.get(t.name)!.domain;
    return domain !== TOOLSETS[DISCOVERY_TOOLSET] && (sets === null || sets.some((s) => TOOLSETS[s] === domain));
  }).length;
  const start = registry.list.filter((t) => CORE_TOOLS.has(t.name) || registry.get(t.name)!.domain === TOOLSETS[DISCOVERY_TOOLSET]).length;
  return [
    `    (all ${count(null)} tools; Claude Code defers them behind its tool search. To start with ${start} and add toolsets`,
    '     on request, add --header "X-MCP-Dynamic-Toolsets: true"; a client that caps tools takes a preset:',
    `     --header "X-MCP-Toolsets: code" (${count(PRESETS.code!)} tools: VS Code, Codex, Windsurf) or "lean" (${count(PRESETS.lean!)}: Cursor);`,
    '     docs/clients.md "Tool caps")',
  ];
}

function announce(app: App, server: Awaited<ReturnType<typeof startServer>>, config: ReturnType<typeof loadConfig>, unsafe: boolean): void {
  const mcpUrl = `${server.url}/mcp`;
  const out: string[] = ['', `Atelier ${VERSION} is running.`, `  Data directory: ${config.dataDir}`, `  MCP URL:        ${mcpUrl}`];
  if (unsafe) out.splice(1, 0, '!!! UNSAFE DEVELOPMENT MODE (--unsafe-dev-no-sandbox): no sandboxes on this machine; workspace_open is refused !!!');
  if (app.firstRun || app.auth.activeTokenCount() === 0) {
    const { token } = app.auth.createToken(app.firstRun ? 'first owner token' : 'owner token: none was active');
    out.push(
      `  Owner token:    ${token}`,
      '                  (shown once: store it now; more with `atelier token create`)',
      '  Add it to Claude Code:',
      `    claude mcp add --transport http atelier ${mcpUrl} --header "Authorization: Bearer ${token}"`,
      ...toolListHint(server.registry),
    );
  } else {
    out.push(
      '  Owner token:    tokens exist; create a new one with `atelier token create --name NAME`',
      '  Add it to Claude Code:',
      `    claude mcp add --transport http atelier ${mcpUrl} --header "Authorization: Bearer <token>"`,
      ...toolListHint(server.registry),
    );
  }
  const link = app.auth.createLoginLink();
  out.push(`  Dashboard:      ${server.url}/login?token=${link}  (one-time link, valid 15 minutes)`, '');
  process.stdout.write(out.join('\n') + '\n');
  app.log.info({ url: server.url, port: server.port, tools: server.registry.list.length }, 'atelier started');
}

async function token(argv: string[]): Promise<void> {
  const sub = argv[0];
  const { common, rest } = splitCommon(argv.slice(1), ['--name', '--json', '--toolsets', '--read-only', '--allow-in-url', '--dynamic-toolsets']);
  const json = rest['--json'] === true;
  if (sub === 'create') {
    if (rest['--toolsets'] === true) throw new ConfigError(`--toolsets needs a value: a comma-separated list of toolsets or presets (${Object.keys(TOOLSETS).join(', ')}; presets ${Object.keys(PRESETS).join(', ')})`);
    const toolsets = parseToolsets(rest['--toolsets'] as string | undefined, '--toolsets');
    const readOnly = rest['--read-only'] === true;
    const allowInUrl = rest['--allow-in-url'] === true;
    const dynamicToolsets = rest['--dynamic-toolsets'] === true;
    if (allowInUrl && !readOnly) throw new ConfigError('--allow-in-url needs --read-only: only a read-only token may travel in a URL (?access_token=…)');
    await withApp(common, (app) => {
      const name = typeof rest['--name'] === 'string' ? rest['--name'] : `token ${new Date().toISOString().slice(0, 19)}`;
      const { token, info } = app.auth.createToken(name, { toolsets, readOnly, allowInUrl, dynamicToolsets });
      const described = `${describeAccess({ toolsets, readOnly })}${dynamicToolsets ? ', dynamic toolsets' : ''}`;
      app.audit.record({ actor: 'cli', action: 'token_create', target: info.id, outcome: 'ok', details: { access: described } });
      if (json) process.stdout.write(JSON.stringify({ ...info, token }) + '\n');
      else process.stdout.write(`${token}\n(id ${info.id}; ${described}; shown once: store it now)\n`);
    });
  } else if (sub === 'list') {
    await withApp(common, (app) => {
      const list = app.auth.listTokens();
      if (json) return void process.stdout.write(JSON.stringify(list) + '\n');
      if (list.length === 0) return void process.stdout.write('no tokens\n');
      for (const t of list)
        process.stdout.write(`${t.id}  ${t.prefix}…  ${t.revokedAt ? 'revoked ' + t.revokedAt : 'active'}  ${describeAccess(t)}${t.dynamicToolsets ? ', dynamic toolsets' : ''}  created ${t.createdAt}  last used ${t.lastUsedAt ?? 'never'}  ${t.name}\n`);
    });
  } else if (sub === 'revoke') {
    const id = rest['#0'];
    if (typeof id !== 'string') throw new ConfigError('usage: atelier token revoke ID');
    await withApp(common, (app) => {
      const t = app.auth.revokeToken(id);
      app.audit.record({ actor: 'cli', action: 'token_revoke', target: t.id, outcome: 'ok' });
      process.stdout.write(`revoked ${t.id}\n`);
    });
  } else {
    throw new ConfigError('usage: atelier token create|list|revoke');
  }
}

async function owner(argv: string[]): Promise<void> {
  if (argv[0] === 'login-link') {
    // The way into the dashboard that no password-login lockout touches (docs/operations.md).
    const { common, rest } = splitCommon(argv.slice(1), ['--json']);
    await withApp(common, (app) => {
      const token = app.auth.createLoginLink();
      app.audit.record({ actor: 'cli', action: 'login_link_create', outcome: 'ok' });
      const origin = app.config.publicOrigin || `http://${app.config.host.includes(':') ? `[${app.config.host}]` : app.config.host}:${app.config.port}`;
      const path = `/login?token=${token}`;
      const expiresAt = new Date(Date.now() + LOGIN_LINK_TTL_MS).toISOString();
      if (rest['--json'] === true) process.stdout.write(JSON.stringify({ url: origin + path, path, expiresAt }) + '\n');
      else process.stdout.write(`${origin}${path}\n(one-time dashboard login link, valid ${LOGIN_LINK_TTL_MS / 60_000} minutes; on another address or port, keep the path)\n`);
    });
    return;
  }
  if (argv[0] !== 'set-password') throw new ConfigError('usage: atelier owner set-password | login-link');
  const { common } = splitCommon(argv.slice(1), []);
  const pw = await readSecretFromStdin('New owner password (at least 12 characters): ');
  await withApp(common, async (app) => {
    await app.auth.setPassword(pw);
    app.audit.record({ actor: 'cli', action: 'owner_set_password', outcome: 'ok' });
  });
  process.stdout.write('owner password set; existing dashboard sessions were ended\n');
}

const rest0 = (argv: string[]) => argv.slice(2);
const positionals = (rest: Record<string, string | true>) =>
  Object.keys(rest)
    .filter((k) => k.startsWith('#'))
    .sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)))
    .map((k) => rest[k] as string);

export async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  try {
    switch (cmd) {
      case 'serve':
        await serve(rest);
        return -1; // keeps running
      case 'gateway':
        return await (await import('../gateway/main.js')).gatewayMain(rest);
      case 'token':
        await token(rest);
        return 0;
      case 'owner':
        await owner(rest);
        return 0;
      case 'doctor':
        return await runDoctor();
      case 'repos': {
        const { common, rest } = splitCommon(rest0(argv), []);
        await reposCommand(argv[1], positionals(rest), common, (t) => process.stdout.write(t));
        return 0;
      }
      case 'env': {
        const { common, rest } = splitCommon(rest0(argv), ['--secret', '--description', '--setup-only', '--clear', '--file']);
        await envCommand(argv[1], positionals(rest), rest, common, readSecretFromStdin, (t) => process.stdout.write(t));
        return 0;
      }
      case 'credentials': {
        const { common, rest } = splitCommon(rest0(argv), CREDENTIALS_FLAGS);
        await credentialsCommand(argv[1], positionals(rest), rest, (fn) => withApp(common, fn), readSecretFromStdin, (t) => process.stdout.write(t));
        return process.exitCode === 1 ? 1 : 0;
      }
      case 'skills':
      case 'deployments': {
        const { common, rest } = splitCommon(rest0(argv), SKILLS_FLAGS);
        await skillsCommand(cmd, argv[1], positionals(rest), rest, (fn) => withApp(common, fn), (t) => process.stdout.write(t));
        return 0;
      }
      case 'backup': {
        const { common, rest } = splitCommon(argv.slice(1), BACKUP_FLAGS);
        return await backupCommand(positionals(rest), rest, common, (t) => process.stdout.write(t));
      }
      case 'restore': {
        const { common, rest } = splitCommon(argv.slice(1), BACKUP_FLAGS);
        return await restoreCommand(positionals(rest), rest, common, (t) => process.stdout.write(t));
      }
      case '--version':
      case 'version':
        process.stdout.write(`${VERSION} (schema ${SCHEMA_VERSION})\n`);
        return 0;
      case undefined:
      case '--help':
      case 'help':
        process.stdout.write(USAGE);
        return cmd === undefined ? 2 : 0;
      default:
        process.stderr.write(`atelier: unknown command "${cmd}"\n\n${USAGE}`);
        return 2;
    }
  } catch (e) {
    if (e instanceof ConfigError || e instanceof ServiceError) {
      process.stderr.write(`atelier: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
}

/** Retention sweeps of notes, knowledge items and artifacts (also applied on every read), and the embedding worker. */
function startRetention(app: App): void {
  // Every 30 retention-seconds at most (30 s in production; tests shorten the retention second).
  const every = Math.max(200, Math.min(30_000, 30 * app.config.retentionSecondMs));
  app.memories.start(every);
  app.knowledge.start(every);
  app.artifacts.start(every);
  app.backups.start(); // scheduled backups, when --backup-dir is set
  void app.checkpoints.start(every).catch((e) => app.log.error({ err: e }, 'checkpoint start-up failed'));
}

/** Stops what startRetention started (the embedding worker and the backup schedule with them). */
async function stopRetention(app: App): Promise<void> {
  await app.backups.stop().catch(() => undefined);
  app.memories.stop();
  app.artifacts.stop();
  app.checkpoints.stop();
  await app.knowledge.stop().catch(() => undefined);
}
