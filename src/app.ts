/**
 * Composition root: opens the data directory, the database and the master key, and builds the
 * services, each with its dependencies at construction, in dependency order; nothing is wired by
 * assignment afterwards. Where two services need each other (a true cycle) the later one is reached
 * through a small callback passed to the earlier one's constructor (docs/architecture.md,
 * "Composition"). Transports (MCP, dashboard, CLI) receive an App and call its services.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { Config } from './core/config.js';
import { ConfigError } from './core/config.js';
import { openDatabase, schemaVersionOf, type DB } from './store/db.js';
import { BackupService } from './services/instance/index.js';
import { CallStats, DiskUsage } from './services/instance/index.js';
import { WalCheckpointer } from './store/checkpointer.js';
import { createLogger, type Logger } from './core/log.js';
import { CursorCodec } from './core/cursor.js';
import { SecretBox } from './core/crypto.js';
import { AuthService } from './services/access/index.js';
import { IdempotencyStore } from './services/instance/index.js';
import { AuditLog } from './services/instance/index.js';
import { PrincipalState } from './services/access/index.js';
import { EnvironmentService } from './services/environments.js';
import { TemplateService } from './services/workspaces/index.js';
import { RepositoryPolicy } from './services/repos/index.js';
import { RepoCredentialStore } from './services/repos/index.js';
import { WorkspaceService } from './services/workspaces/index.js';
import { FileService } from './services/files.js';
import { CommandService } from './services/commands/index.js';
import { BwrapExecutor } from './sandbox/bwrap/index.js';
import type { Executor } from './sandbox/executor.js';
import { kubernetesExecutor } from './sandbox/kubernetes/from-config.js';
import { HostWorkspaceStorage } from './sandbox/host-storage.js';
import { loopsIn, openImagePool, type ImagePool } from './sandbox/image-pool.js';
import { SpendService } from './services/models/index.js';
import { GatewayClient } from './services/models/index.js';
import { GitService } from './services/git/index.js';
import { ModelService } from './services/models/index.js';
import { PriceList } from './services/models/index.js';
import { ModelCatalog } from './services/models/index.js';
import { ConnectionChecks } from './services/models/index.js';
import { ApprovalService } from './services/approvals.js';
import { PackageService } from './services/packages/index.js';
import { ROOT_DIR } from './core/version.js';
import { RepoHostService } from './services/repohost/index.js';
import { ExtensionService } from './services/extensions/index.js';
import { AgentService } from './services/agents/index.js';
import { MemoryService } from './services/memories.js';
import { KnowledgeService, Embedder } from './services/knowledge/index.js';
import { ArtifactService } from './services/artifacts.js';
import { CheckpointService } from './services/checkpoints.js';
import { OAuthStore } from './services/access/index.js';
import { LoginThrottle } from './services/access/index.js';
import { TokenVerifyCache } from './services/access/index.js';
import { ToolRegistry } from './mcp/registry.js';
import { wireNative } from './mcp/wire-native.js';
import { CATALOG } from './tools/index.js';
import type { ToolServices } from './tools/context.js';
import { WorkspaceLocks } from './core/locks.js';
import { PreviewService } from './services/previews/index.js';
import { CodeIntelService } from './services/code-intel/index.js';
import { deriveKey } from './core/crypto.js';

/** The composition root's product: the services the tools call (ToolServices), and what the transports and the CLI need besides. */
export interface App extends ToolServices {
  readonly config: Config;
  readonly dataDir: string;
  readonly db: DB;
  readonly log: Logger;
  readonly cursors: CursorCodec;
  readonly secrets: SecretBox;
  readonly auth: AuthService;
  readonly idempotency: IdempotencyStore;
  readonly audit: AuditLog;
  readonly principals: PrincipalState;
  readonly environments: EnvironmentService;
  /** Workspace templates: setup that runs once (docs/templates.md). */
  readonly templates: TemplateService;
  readonly repos: RepositoryPolicy;
  /** Repository credentials of the broker: tokens and GitHub Apps, sealed at rest (issue #6). */
  readonly repoCredentials: RepoCredentialStore;
  readonly executor: Executor;
  /** The OAuth authorization server's clients, grants and tokens (issue #16). */
  readonly oauth: OAuthStore;
  /** Delays, lockouts and a bound on concurrent checks for the dashboard's password login (issue #31). */
  readonly loginThrottle: LoginThrottle;
  /** Verified bearer and OAuth tokens of /mcp, remembered while the token tables are unchanged (services/access/token-cache.ts). */
  readonly tokenCache: TokenVerifyCache;
  /** The one per-workspace lock (lifecycle, git) and per-idempotency-key lock (core/locks.ts). */
  readonly locks: WorkspaceLocks;
  /** Every tool, and the call pipeline every transport (and agents' proxied calls) goes through. */
  readonly registry: ToolRegistry;
  /** True when the database was created by this start (first run). */
  readonly firstRun: boolean;
  /** The database's schema version after this start's migrations (/healthz, --version, the overview). */
  readonly schemaVersion: number;
  /** When this process built the App (the overview's uptime). */
  readonly startedAt: number;
  /** Backups and their schedule (issue #35, services/instance/backups.ts). */
  readonly backups: BackupService;
  /** Tool calls of the last hour and disk use, for the dashboard's overview (services/instance/health.ts). */
  readonly callStats: CallStats;
  readonly disk: DiskUsage;
  /** Where workspace, checkpoint and template images live: the XFS pool with reflinks, or the data directory (sandbox/image-pool.ts). */
  readonly imagePool: ImagePool;
  close(): void;
}

/**
 * Loads the master key: ATELIER_MASTER_KEY (64 hex characters or base64 of 32 bytes) wins;
 * otherwise <dataDir>/master.key, created with mode 0600 on first start.
 */
export function loadMasterKey(dataDir: string, env: NodeJS.ProcessEnv = process.env): Buffer {
  const fromEnv = env.ATELIER_MASTER_KEY;
  if (fromEnv !== undefined) {
    const k = /^[0-9a-fA-F]{64}$/.test(fromEnv) ? Buffer.from(fromEnv, 'hex') : Buffer.from(fromEnv, 'base64');
    if (k.length !== 32) throw new ConfigError('invalid setting ATELIER_MASTER_KEY: must be 32 bytes as 64 hex characters or base64');
    return k;
  }
  const file = join(dataDir, 'master.key');
  if (!existsSync(file)) {
    writeFileSync(file, randomBytes(32).toString('base64') + '\n', { mode: 0o600, flag: 'wx' });
  }
  const st = statSync(file);
  if ((st.mode & 0o077) !== 0) {
    throw new ConfigError(`master key ${file} must not be readable by group or others (mode ${(st.mode & 0o777).toString(8)}); run: chmod 600 ${file}`);
  }
  const k = Buffer.from(readFileSync(file, 'utf8').trim(), 'base64');
  if (k.length !== 32) throw new ConfigError(`master key ${file} must hold 32 bytes in base64`);
  return k;
}

/** Creates the data directory layout. The directory itself stays private to the service user. */
export function prepareDataDir(dataDir: string): void {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  // The data dir must be traversable (not listable) by sandbox uids so bubblewrap can bind
  // their workspace directories; everything sensitive in it is mode 0600/0700.
  chmodSync(dataDir, 0o711);
  for (const sub of ['workspaces', 'run']) {
    mkdirSync(join(dataDir, sub), { recursive: true, mode: 0o711 });
  }
  for (const sub of ['logs', 'state']) {
    mkdirSync(join(dataDir, sub), { recursive: true, mode: 0o700 });
  }
}

/** What createApp takes besides the configuration. */
export interface AppOptions {
  logger?: Logger;
  sandboxDisabledReason?: string;
  /**
   * WAL checkpoints in a worker thread rather than inside a commit on the event loop
   * (src/store/checkpointer.ts); the serving process asks for it, one-shot CLI commands not.
   */
  backgroundCheckpoints?: boolean;
  makeImagePool?: boolean;
}

/** The steps of opening an App, in order: `atelier serve` runs them as start phases of their own (cli/main.ts). */
export const OPEN_STEPS = ['data-dir', 'database', 'master-key', 'image-pool', 'services'] as const;
export type OpenStep = (typeof OPEN_STEPS)[number];

/** What the steps before 'services' opened (undone in reverse by undoOpened when a later step fails). */
interface Opened {
  db?: DB;
  firstRun?: boolean;
  master?: Buffer;
  imagePool?: ImagePool;
}

/** One opening step; a failure is a ConfigError naming what could not be opened and why. */
function openStep(step: Exclude<OpenStep, 'services'>, config: Config, opts: AppOptions, o: Opened): void {
  const dbFile = join(config.dataDir, 'atelier.db');
  switch (step) {
    case 'data-dir':
      try {
        prepareDataDir(config.dataDir);
      } catch (e) {
        throw new ConfigError(`invalid setting --data-dir / ATELIER_DATA_DIR: the data directory ${config.dataDir} cannot be prepared (${(e as Error).message})`);
      }
      return;
    case 'database':
      // The database (and its migrations) first: a start refused there must not leave the image pool mounted.
      o.firstRun = !existsSync(dbFile);
      try {
        o.db = openDatabase(dbFile);
      } catch (e) {
        if (e instanceof ConfigError) throw e;
        throw new ConfigError(`the database ${dbFile} cannot be opened (${(e as Error).message}); nothing was changed: restore it from a backup (atelier restore, docs/operations.md) or move it away to start afresh`);
      }
      return;
    case 'master-key':
      o.master = loadMasterKey(config.dataDir);
      return;
    case 'image-pool':
      // Images (workspace disks, checkpoints, templates) in the XFS pool with reflinks when there is one (docs/checkpoints.md).
      o.imagePool = openImagePool({
        dataDir: config.dataDir, setting: config.imagePool, sizeMb: config.imagePoolSizeMb, create: opts.makeImagePool === true,
        imagesUsed: config.executor !== 'kubernetes' && config.sandboxDiskMb > 0 && !opts.sandboxDisabledReason,
      });
  }
}

/** Undoes what the opening steps did: the image pool unmounted when this start mounted it, the database closed. */
function undoOpened(o: Opened): void {
  try {
    if (o.imagePool?.mountedHere) o.imagePool.release();
  } finally {
    if (o.db?.open) o.db.close();
  }
}

export function createApp(config: Config, opts: AppOptions = {}): App {
  const o: Opened = {};
  try {
    for (const step of OPEN_STEPS) if (step !== 'services') openStep(step, config, opts, o);
    return buildApp(config, opts, o as Required<Opened>);
  } catch (e) {
    undoOpened(o);
    throw e;
  }
}

/**
 * createApp one step at a time: `before(step)` is awaited before each step (OPEN_STEPS), so a
 * stop request during start-up is seen between them (cli/main.ts). A failure or a rejection of
 * `before` undoes the steps already done.
 */
export async function openApp(config: Config, opts: AppOptions, before: (step: OpenStep) => Promise<void>): Promise<App> {
  const o: Opened = {};
  try {
    for (const step of OPEN_STEPS) {
      await before(step);
      if (step !== 'services') openStep(step, config, opts, o);
    }
    return buildApp(config, opts, o as Required<Opened>);
  } catch (e) {
    undoOpened(o);
    throw e;
  }
}

function buildApp(config: Config, opts: AppOptions, opened: Required<Opened>): App {
  const { db, firstRun, master, imagePool } = opened;
  const dbFile = join(config.dataDir, 'atelier.db');
  const images = imagePool.root;
  const log = opts.logger ?? createLogger(config.logLevel);
  if (imagePool.state === 'xfs') log.info({ file: imagePool.file, mountPoint: imagePool.mountPoint, reason: imagePool.reason }, 'images are in the XFS image pool (reflink copies)');
  else if (config.imagePool !== 'off' && config.sandboxDiskMb > 0) log.info({ reason: imagePool.reason }, 'images are in the data directory, no image pool (full copies unless it has reflinks)');
  const cursors = new CursorCodec(master);
  const secrets = new SecretBox(master);
  const audit = new AuditLog(db, (err, lost) => log.error({ err, lost }, 'audit write failed'));
  const checkpointer = opts.backgroundCheckpoints ? new WalCheckpointer(db, dbFile, { onError: (message) => log.warn(message) }) : undefined;
  const principals = new PrincipalState(db);
  const environments = new EnvironmentService(db, secrets);
  const repos = new RepositoryPolicy(config.configPath);
  const repoCredentials = new RepoCredentialStore({ db, secrets, audit, extraCaPem: () => repos.extraCaPem() });
  const executor: Executor = config.executor === 'kubernetes' ? kubernetesExecutor(config, log) : new BwrapExecutor({
    runDir: join(config.dataDir, 'run'),
    uid: config.sandboxUid,
    gid: config.sandboxUid,
    bwrapPath: config.sandboxBwrapPath,
    favorDynmods: config.sandboxFavorDynmods === 'on',
    onNote: (message) => log.info(message),
    // The runner's native addon (loaded by the MCP transport at start): large files_read ranges
    // through the daemon's open descriptor (src/sandbox/handoff.ts).
    descriptorCalls: wireNative,
    storage: new HostWorkspaceStorage({ dataDir: images, sizeMb: config.sandboxDiskMb, uid: config.sandboxUid, gid: config.sandboxUid }),
  });
  const approvals = new ApprovalService({ db, audit });
  const locks = new WorkspaceLocks();
  // Cycles, each broken by a callback to a service built later in this function (called only
  // after createApp returns): packages ⇄ workspaces, workspaces/git → extensions (repository
  // hooks) → workspaces, workspaces → commands/packages/extensions (close clean-up), gateway ⇄
  // agents (the routes agents pin), agents → the tool registry → the App.
  const packages = new PackageService({
    db,
    config,
    log,
    audit,
    approvals,
    executor,
    installRoot: ROOT_DIR,
    sandboxDisabledReason: opts.sandboxDisabledReason,
    workspaces: () => ({
      exists: (id) => workspaces.retainedIds().includes(id),
      retained: () => workspaces.retainedIds(),
      sandboxLimits: workspaces.sandboxLimits,
      toolkits: (id) => workspaces.toolkitsOf(id),
    }),
  });
  // Repository hooks fire from the workspace lifecycle and the git tools (issue #19).
  const hooks = {
    fire: (...a: Parameters<ExtensionService['fire']>) => extensions.fire(...a),
    opened: (...a: Parameters<ExtensionService['opened']>) => extensions.opened(...a),
  };
  const templates = new TemplateService({ db, log, audit, environments, dataDir: images, diskMb: config.sandboxDiskMb, uid: config.sandboxUid, images: { onHost: executor.storage?.image !== undefined && executor.storage.copies !== undefined, executor: config.executor } });
  const workspaces = new WorkspaceService({
    db, config, log, audit, principals, cursors, executor, repos, repoCredentials, environments, packages, sandboxDisabledReason: opts.sandboxDisabledReason, hooks, locks, templates,
    onClose: [(id) => commands.forgetWorkspace(id), (id) => packages.forgetWorkspace(id), async (id) => extensions.forgetWorkspace(id), async (id) => previews.forgetWorkspace(id)],
  });
  const previews = new PreviewService({ db, key: deriveKey(master, 'preview-urls'), cursors, audit, workspaces, secondMs: config.retentionSecondMs });
  const commands = new CommandService({ db, config, log, audit, cursors, executor, workspaces, packages });
  const spend = new SpendService(db);
  const models = new ModelService({ db, secrets, audit, log, configPath: config.configPath });
  // Running agents keep the revision they were spawned on (agent rule 3).
  const gateway = new GatewayClient({ config, spend, log, routeSource: () => models.routes(agents.pins()) });
  const clock = { secondMs: config.retentionSecondMs };
  const files = new FileService({ workspaces, executor, cursors });
  const memories = new MemoryService({ db, cursors, workspaces, clock });
  const knowledge = new KnowledgeService({
    db,
    cursors,
    clock,
    embedder: new Embedder({ enabled: config.knowledgeEmbeddings === 'on' }),
    checkWorkspace: (id) => void workspaces.get(id),
  });
  const artifacts = new ArtifactService({
    db,
    cursors,
    files,
    workspaces,
    clock,
    root: join(config.dataDir, 'state', 'artifacts'),
    maxBytes: config.artifactMaxMb * 1_048_576,
    quotaBytes: config.artifactQuotaMb * 1_048_576,
  });
  const modelCatalog = new ModelCatalog({ db, cursors, models, prices: new PriceList(config.configPath) });
  const extensions = new ExtensionService({
    db, audit, config, log, cursors, executor, workspaces, approvals, environments,
    // skill_suggest ranks semantically too once the knowledge store's local model is ready (lexically until then).
    embedder: async (texts) => {
      const vectors = await knowledge.embedTexts(texts);
      if (!vectors) throw new Error('the embedding model is not ready');
      return vectors;
    },
  });
  const registry = new ToolRegistry(CATALOG, locks);
  // Agents proxy tool calls through this same registry (same validation, confinement, redaction, audit).
  const agents = new AgentService({
    db, config, log, audit, executor, gateway, spend, models, workspaces, environments,
    tools: {
      call: (name, args, cc) => registry.call(app, name, args, cc),
      get list() {
        return registry.list;
      },
      grantFor: (access, operations) => registry.grant({ access, operations: operations ?? undefined, actor: 'mcp' }),
    },
  });
  const app: App = {
    config,
    dataDir: config.dataDir,
    db,
    log,
    cursors,
    secrets,
    auth: new AuthService(db),
    idempotency: new IdempotencyStore(db),
    audit,
    principals,
    environments,
    templates,
    repos,
    repoCredentials,
    executor,
    workspaces,
    files,
    memories,
    knowledge,
    artifacts,
    checkpoints: new CheckpointService({
      db, cursors, log, audit, workspaces, clock,
      root: join(images, 'checkpoints'),
      pool: imagePool,
      copies: executor.storage?.copies,
      quotaBytes: config.checkpointQuotaMb * 1_048_576,
      maxCount: config.checkpointMaxCount,
    }),
    previews,
    codeIntel: new CodeIntelService({ workspaces, executor, cursors, idleSeconds: config.codeIntelIdleSeconds, disabledServers: config.codeIntelDisabledServers, configFile: config.configFile }),
    commands,
    approvals,
    packages,
    git: new GitService({ workspaces, cursors, repos, audit, hooks, locks }),
    repohost: new RepoHostService({ workspaces, repos, credentials: repoCredentials, log, audit }),
    extensions,
    spend,
    gateway,
    models,
    modelCatalog,
    modelChecks: new ConnectionChecks({ models, catalog: modelCatalog, audit }),
    agents,
    oauth: new OAuthStore(db, () => config.oauthAccessTokenSeconds * 1000),
    tokenCache: new TokenVerifyCache(db),
    loginThrottle: new LoginThrottle(
      { perAddress: config.loginLockoutFailures, overall: config.loginLockoutFailuresOverall, lockoutMs: config.loginLockoutSeconds * 1000, delayMs: config.loginDelaySeconds * 1000 },
      (e) => {
        const until = new Date(e.until).toISOString();
        audit.record({
          actor: 'dashboard',
          action: 'login_lockout',
          target: e.key,
          outcome: 'refused',
          reason: `${e.failures} failed password logins ${e.scope === 'overall' ? 'from all addresses' : `from ${e.key}`}: password login locked ${e.scope === 'overall' ? 'for everyone' : 'for this address'} until ${until} (the one-time login link still works)`,
          details: { scope: e.scope, until, lockoutsInARow: e.lockouts },
        });
        log.warn({ scope: e.scope, key: e.key, until }, 'password login locked after repeated failures');
      },
    ),
    locks,
    registry,
    firstRun,
    schemaVersion: schemaVersionOf(db),
    startedAt: Date.now(),
    backups: new BackupService({ db, config, log, audit, masterKey: master }),
    callStats: new CallStats(),
    disk: new DiskUsage({
      dataDir: config.dataDir,
      imagesDir: images,
      sandboxUid: config.sandboxUid,
      sandboxDiskMb: config.sandboxDiskMb,
      artifactQuotaBytes: config.artifactQuotaMb * 1_048_576,
      artifactBytes: () => artifacts.usedBytes(),
      workspaceIds: () => workspaces.retainedIds(),
    }),
    close() {
      try {
        audit.flush();
        checkpointer?.stop();
        db.pragma('wal_checkpoint(TRUNCATE)');
      } finally {
        db.close();
        // Unmounted only when nothing in it is mounted (a workspace image keeps it, like the workspace's own mount).
        if (imagePool.mountedHere && !imagePool.release()) log.info({ mountPoint: imagePool.mountPoint, inUse: loopsIn(imagePool.mountPoint!) }, 'the image pool stays mounted: workspace images in it are mounted');
      }
    },
    imagePool,
  };
  return app;
}
