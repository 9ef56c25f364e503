/**
 * Instance configuration. Every setting has a flag and an ATELIER_* variable; the config file
 * (<dataDir>/config.json, or --config) holds the same names in camelCase. Precedence:
 * flag > environment > config file > default. A bad value stops start-up with a message that
 * names the setting (flag and variable) and the rule it broke.
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join, resolve } from 'node:path';
import { isIP } from 'node:net';
import { ServiceError } from './errors.js';
import { resolveProviders } from './providers.js';
import { nameServerProblem, trustedProxyProblem } from './client-address.js';

/**
 * A setting or section of the configuration breaks its rule. At start-up it stops the service with
 * its message; met while running (the config file was edited) it is a FAILED_PRECONDITION naming
 * the setting (details.setting), never INTERNAL: the operator must fix the file.
 */
export class ConfigError extends ServiceError {
  constructor(message: string, setting?: string) {
    super('FAILED_PRECONDITION', message, { setting: setting ?? settingNamedIn(message) ?? 'config' });
    this.name = 'ConfigError';
  }
}

/** The first quoted dotted name in a message ("repositories.allow"), the setting it is about. */
function settingNamedIn(message: string): string | undefined {
  return /"([A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z0-9_*-]+)*)"/.exec(message)?.[1];
}

type Kind = 'string' | 'int' | 'bool' | 'list';

interface Setting {
  key: string; // camelCase name in config.json
  flag: string; // --kebab-case
  env: string; // ATELIER_*
  kind: Kind;
  def: unknown;
  rule?: string; // human text of the rule
  check?: (v: never) => boolean;
  help: string;
}

const S = (s: Setting): Setting => s;

export const SETTINGS: Setting[] = [
  S({ key: 'host', flag: '--host', env: 'ATELIER_HOST', kind: 'string', def: '127.0.0.1', help: 'Address to listen on' }),
  S({ key: 'port', flag: '--port', env: 'ATELIER_PORT', kind: 'int', def: 7420, rule: 'an integer from 0 to 65535 (0 picks a free port)', check: ((v: number) => v >= 0 && v <= 65535) as never, help: 'Port to listen on' }),
  S({ key: 'dataDir', flag: '--data-dir', env: 'ATELIER_DATA_DIR', kind: 'string', def: '', help: 'Data directory (database, master key, workspaces)' }),
  S({ key: 'publicOrigin', flag: '--public-origin', env: 'ATELIER_PUBLIC_ORIGIN', kind: 'string', def: '', rule: 'an http(s) origin such as https://atelier.example.com (no path)', check: ((v: string) => v === '' || /^https?:\/\/[^/\s]+$/.test(v)) as never, help: 'Public origin when not bound to loopback (Host and Origin are checked against it)' }),
  S({ key: 'logLevel', flag: '--log-level', env: 'ATELIER_LOG_LEVEL', kind: 'string', def: 'info', rule: 'one of fatal, error, warn, info, debug, trace, silent', check: ((v: string) => ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(v)) as never, help: 'Log level' }),
  S({ key: 'unsafeNoSandbox', flag: '--unsafe-dev-no-sandbox', env: 'ATELIER_UNSAFE_DEV_NO_SANDBOX', kind: 'bool', def: false, help: 'DEVELOPMENT ONLY: start without bubblewrap isolation' }),
  S({ key: 'gatewayUrl', flag: '--gateway-url', env: 'ATELIER_GATEWAY_URL', kind: 'string', def: '', rule: 'an http(s) URL', check: ((v: string) => v === '' || /^https?:\/\/\S+$/.test(v)) as never, help: 'Use an external model gateway instead of the embedded child' }),
  S({ key: 'gatewayAdminSecretFile', flag: '--gateway-admin-secret-file', env: 'ATELIER_GATEWAY_ADMIN_SECRET_FILE', kind: 'string', def: '', help: 'Admin secret file of the external gateway named by --gateway-url' }),
  S({ key: 'modelGatewaySessionHeader', flag: '--model-gateway-session-header', env: 'ATELIER_MODEL_GATEWAY_SESSION_HEADER', kind: 'string', def: '', rule: 'an HTTP header name', check: ((v: string) => v === '' || /^[A-Za-z0-9-]{1,100}$/.test(v)) as never, help: 'MODEL_GATEWAY_SESSION_HEADER: header (value: the agent id) the gateway sends to every provider but provider_f' }),
  S({ key: 'packagesEnabled', flag: '--packages-enabled', env: 'ATELIER_PACKAGES_ENABLED', kind: 'bool', def: false, help: 'Enable managed packages and the bash toolbox target (PACKAGES_ENABLED)' }),
  S({ key: 'packagesNpmRegistry', flag: '--packages-npm-registry', env: 'ATELIER_PACKAGES_NPM_REGISTRY', kind: 'string', def: 'https://registry.npmjs.org/', rule: 'an https URL ending in /, with no user or password in it', check: ((v: string) => /^https:\/\/[^\s/@]+(\/[^\s]*)?\/$/.test(v)) as never, help: 'Managed packages: the npm registry plans resolve against and builders fetch from' }),
  S({ key: 'packagesPythonIndex', flag: '--packages-python-index', env: 'ATELIER_PACKAGES_PYTHON_INDEX', kind: 'string', def: 'https://pypi.org/simple/', rule: 'an https URL of a PEP 503 simple index, ending in /, with no user or password in it', check: ((v: string) => /^https:\/\/[^\s/@]+(\/[^\s]*)?\/$/.test(v)) as never, help: 'Managed packages: the Python simple index uv plans resolve against (wheels only)' }),
  S({ key: 'packagesCaFile', flag: '--packages-ca-file', env: 'ATELIER_PACKAGES_CA_FILE', kind: 'string', def: '', rule: 'an absolute path to a PEM file', check: ((v: string) => v === '' || v.startsWith('/')) as never, help: 'Managed packages: extra CA certificates (PEM) trusted for the npm registry and the Python index' }),
  S({ key: 'packagesResolveWaitMs', flag: '--packages-resolve-wait-ms', env: 'ATELIER_PACKAGES_RESOLVE_WAIT_MS', kind: 'int', def: 20000, rule: 'an integer from 0 to 60000', check: ((v: number) => v >= 0 && v <= 60000) as never, help: 'Managed packages: how long packages_plan waits for a resolution before answering RESOLVING' }),
  S({ key: 'idleLeaseSeconds', flag: '--idle-lease-seconds', env: 'ATELIER_IDLE_LEASE_SECONDS', kind: 'int', def: 3600, rule: 'an integer from 10 to 86400', check: ((v: number) => v >= 10 && v <= 86400) as never, help: 'Default idle lease of a workspace, seconds' }),
  S({ key: 'maxWorkspaceLifetimeSeconds', flag: '--max-workspace-lifetime-seconds', env: 'ATELIER_MAX_WORKSPACE_LIFETIME_SECONDS', kind: 'int', def: 86400, rule: 'an integer from 20 to 2592000', check: ((v: number) => v >= 20 && v <= 2592000) as never, help: 'Instance maximum workspace lifetime (hardExpiresAt), seconds' }),
  S({ key: 'sandboxUid', flag: '--sandbox-uid', env: 'ATELIER_SANDBOX_UID', kind: 'int', def: 64000, rule: 'an integer from 1000 to 4294967294 (a dedicated non-root uid)', check: ((v: number) => v >= 1000 && v <= 4294967294) as never, help: 'Host uid (and gid) that workspace processes run as' }),
  S({ key: 'sandboxMemoryMb', flag: '--sandbox-memory-mb', env: 'ATELIER_SANDBOX_MEMORY_MB', kind: 'int', def: 2048, rule: 'an integer from 64 to 1048576', check: ((v: number) => v >= 64 && v <= 1048576) as never, help: 'Memory limit of one workspace (swap included), MiB' }),
  S({ key: 'sandboxPidsMax', flag: '--sandbox-pids-max', env: 'ATELIER_SANDBOX_PIDS_MAX', kind: 'int', def: 512, rule: 'an integer from 16 to 1000000', check: ((v: number) => v >= 16 && v <= 1000000) as never, help: 'Process and thread limit of one workspace' }),
  S({ key: 'sandboxCpuPercent', flag: '--sandbox-cpu-percent', env: 'ATELIER_SANDBOX_CPU_PERCENT', kind: 'int', def: 100, rule: 'an integer from 10 to 6400 (100 = one core)', check: ((v: number) => v >= 10 && v <= 6400) as never, help: 'CPU quota of one workspace, percent of one core' }),
  S({ key: 'sandboxCpus', flag: '--sandbox-cpus', env: 'ATELIER_SANDBOX_CPUS', kind: 'string', def: '', rule: 'a cpuset list such as 0 or 0-1 or 0,2', check: ((v: string) => v === '' || /^\d+(-\d+)?(,\d+(-\d+)?)*$/.test(v)) as never, help: 'CPUs a workspace may use (cpuset; empty = all)' }),
  S({ key: 'sandboxDiskMb', flag: '--sandbox-disk-mb', env: 'ATELIER_SANDBOX_DISK_MB', kind: 'int', def: 10240, rule: 'an integer from 0 to 16777216 (0 = no separate filesystem, no disk limit)', check: ((v: number) => v === 0 || (v >= 64 && v <= 16777216)) as never, help: 'Disk limit of one workspace (its own filesystem), MiB' }),
  S({ key: 'agentPoolSize', flag: '--agent-pool-size', env: 'ATELIER_AGENT_POOL_SIZE', kind: 'int', def: 1, rule: 'an integer from 0 to 8 (0 = no pool: every agent runtime starts on demand)', check: ((v: number) => v >= 0 && v <= 8) as never, help: 'Agent runtimes kept pre-started and idle (sandboxed, holding no lease or secret) while an agent profile is active; see docs/agents.md' }),
  S({ key: 'sandboxFavorDynmods', flag: '--sandbox-favor-dynmods', env: 'ATELIER_SANDBOX_FAVOR_DYNMODS', kind: 'string', def: 'on', rule: 'on or off', check: ((v: string) => v === 'on' || v === 'off') as never, help: "Set the kernel's cgroup favordynmods flag at the first sandbox (fast moves of commands into their cgroups; host-wide, see docs/sandbox.md)" }),
  S({ key: 'sandboxBwrapPath', flag: '--sandbox-bwrap-path', env: 'ATELIER_SANDBOX_BWRAP_PATH', kind: 'string', def: '/usr/bin/bwrap', rule: 'an absolute path', check: ((v: string) => v.startsWith('/')) as never, help: 'The bubblewrap binary' }),
  S({ key: 'executor', flag: '--executor', env: 'ATELIER_EXECUTOR', kind: 'string', def: 'bubblewrap', rule: 'bubblewrap or kubernetes', check: ((v: string) => v === 'bubblewrap' || v === 'kubernetes') as never, help: 'Where sandboxes run: bubblewrap on this host, or Pods in a Kubernetes cluster (docs/scaling.md)' }),
  S({ key: 'kubeconfig', flag: '--kubeconfig', env: 'ATELIER_KUBECONFIG', kind: 'string', def: '', rule: 'an absolute path to a kubeconfig file (empty = in-cluster credentials)', check: ((v: string) => v === '' || v.startsWith('/')) as never, help: 'Kubernetes executor: the kubeconfig to use (empty = the service account of the Pod the runner runs in)' }),
  S({ key: 'kubeNamespace', flag: '--kube-namespace', env: 'ATELIER_KUBE_NAMESPACE', kind: 'string', def: 'atelier', rule: 'a Kubernetes namespace name (lowercase RFC 1123 label)', check: ((v: string) => /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(v)) as never, help: 'Kubernetes executor: namespace of the workspace Pods, claims and NetworkPolicies' }),
  S({ key: 'kubeWorkspaceImage', flag: '--kube-workspace-image', env: 'ATELIER_KUBE_WORKSPACE_IMAGE', kind: 'string', def: 'atelier-workspace:latest', rule: 'an image reference', check: ((v: string) => /^\S+$/.test(v)) as never, help: 'Kubernetes executor: the workspace image (daemon and toolchains; deploy/kubernetes/workspace.Containerfile)' }),
  S({ key: 'kubeStorageClass', flag: '--kube-storage-class', env: 'ATELIER_KUBE_STORAGE_CLASS', kind: 'string', def: '', help: "Kubernetes executor: StorageClass of the workspaces' claims (empty = the cluster's default)" }),
  S({ key: 'kubeStorageSize', flag: '--kube-storage-size', env: 'ATELIER_KUBE_STORAGE_SIZE', kind: 'string', def: '10Gi', rule: 'a Kubernetes quantity such as 10Gi', check: ((v: string) => /^[0-9]+(Ki|Mi|Gi|Ti)?$/.test(v)) as never, help: "Kubernetes executor: size of each workspace's claim (its disk limit; --sandbox-disk-mb must be 0 on a runner in a Pod)" }),
  S({ key: 'kubeWarmPool', flag: '--kube-warm-pool', env: 'ATELIER_KUBE_WARM_POOL', kind: 'string', def: '', help: 'Kubernetes executor with agent-sandbox: a SandboxWarmPool in the namespace whose Sandboxes new workspaces are claimed from when their settings match its template (empty = every workspace a Sandbox of its own)' }),
  S({ key: 'kubeRuntimeClass', flag: '--kube-runtime-class', env: 'ATELIER_KUBE_RUNTIME_CLASS', kind: 'string', def: '', help: 'Kubernetes executor: RuntimeClass of every Pod, e.g. gvisor (empty = the default runtime)' }),
  S({ key: 'outputMaxMb', flag: '--output-max-mb', env: 'ATELIER_OUTPUT_MAX_MB', kind: 'int', def: 16, rule: 'an integer from 1 to 4096', check: ((v: number) => v >= 1 && v <= 4096) as never, help: 'Output kept on disk per operation or task, MiB' }),
  S({ key: 'skillSuggestUrl', flag: '--skill-suggest-url', env: 'ATELIER_SKILL_SUGGEST_URL', kind: 'string', def: '', rule: 'an https URL (http only on loopback)', check: ((v: string) => v === '' || /^https:\/\/\S+$/.test(v) || /^http:\/\/(127\.0\.0\.1|localhost|\[::1\])(:\d+)?(\/\S*)?$/.test(v)) as never, help: 'skill_suggest endpoint: the redacted prompt and the roster are POSTed there (needs --skill-suggest-key-file)' }),
  S({ key: 'skillSuggestKeyFile', flag: '--skill-suggest-key-file', env: 'ATELIER_SKILL_SUGGEST_KEY_FILE', kind: 'string', def: '', help: 'File holding the integration key sent to the skill_suggest endpoint (a secret)' }),
  S({ key: 'httpRequestTimeoutMs', flag: '--http-request-timeout-ms', env: 'ATELIER_HTTP_REQUEST_TIMEOUT_MS', kind: 'int', def: 300000, rule: 'an integer from 1000 to 3600000', check: ((v: number) => v >= 1000 && v <= 3600000) as never, help: 'Time a client has to send a whole request (headers and body), ms; then 408 and the connection is closed' }),
  S({ key: 'httpHeadersTimeoutMs', flag: '--http-headers-timeout-ms', env: 'ATELIER_HTTP_HEADERS_TIMEOUT_MS', kind: 'int', def: 30000, rule: 'an integer from 500 to 300000, at most --http-request-timeout-ms', check: ((v: number) => v >= 500 && v <= 300000) as never, help: 'Time a client has to send request headers, and the idle time allowed to a connection that has not authenticated, ms' }),
  S({ key: 'httpMaxUnauthenticatedConnections', flag: '--http-max-unauthenticated-connections', env: 'ATELIER_HTTP_MAX_UNAUTHENTICATED_CONNECTIONS', kind: 'int', def: 64, rule: 'an integer from 1 to 100000', check: ((v: number) => v >= 1 && v <= 100000) as never, help: 'Open connections that have not yet shown a valid token or session; past it the oldest is closed' }),
  S({ key: 'oauthAccessTokenSeconds', flag: '--oauth-access-token-seconds', env: 'ATELIER_OAUTH_ACCESS_TOKEN_SECONDS', kind: 'int', def: 3600, rule: 'an integer from 5 to 86400', check: ((v: number) => v >= 5 && v <= 86400) as never, help: 'Lifetime of OAuth access tokens, seconds (refresh tokens rotate)' }),
  S({ key: 'oauthCimdAllowLoopback', flag: '--oauth-cimd-allow-loopback', env: 'ATELIER_OAUTH_CIMD_ALLOW_LOOPBACK', kind: 'bool', def: false, help: 'DEVELOPMENT AND TESTS ONLY: fetch OAuth Client ID Metadata Documents from loopback addresses too (only with a loopback --host and no public origin)' }),
  S({ key: 'oauthCimdCaFile', flag: '--oauth-cimd-ca-file', env: 'ATELIER_OAUTH_CIMD_CA_FILE', kind: 'string', def: '', rule: 'an absolute path to a PEM file', check: ((v: string) => v === '' || v.startsWith('/')) as never, help: 'Extra CA certificates (PEM) trusted when fetching OAuth Client ID Metadata Documents, beside the system ones' }),
  S({ key: 'oauthCimdDnsServers', flag: '--oauth-cimd-dns-servers', env: 'ATELIER_OAUTH_CIMD_DNS_SERVERS', kind: 'list', def: [], rule: 'a comma-separated list of name server addresses (IP, IP:port or [IPv6]:port)', check: ((v: unknown[]) => v.every((x) => typeof x === 'string')) as never, help: "Name servers asked for the hosts of OAuth Client ID Metadata Document URLs (empty = the system's, from /etc/resolv.conf); asked with a bounded timeout, docs/access.md" }),
  S({ key: 'oauthCimdFetchesPerMinute', flag: '--oauth-cimd-fetches-per-minute', env: 'ATELIER_OAUTH_CIMD_FETCHES_PER_MINUTE', kind: 'int', def: 20, rule: 'an integer from 1 to 100000', check: ((v: number) => v >= 1 && v <= 100000) as never, help: 'OAuth Client ID Metadata Document fetches that authorization requests from one client address may cause per minute (one at a time; a kept fresh document costs none)' }),
  S({ key: 'trustedProxies', flag: '--trusted-proxies', env: 'ATELIER_TRUSTED_PROXIES', kind: 'list', def: [], rule: 'a comma-separated list of IP addresses or CIDRs (IPv4 or IPv6)', check: ((v: unknown[]) => v.every((x) => typeof x === 'string')) as never, help: 'Reverse proxies whose Forwarded / X-Forwarded-For headers name the client (addresses or CIDRs); from anyone else those headers are ignored (docs/operations.md "Behind a reverse proxy")' }),
  S({ key: 'loginLockoutFailures', flag: '--login-lockout-failures', env: 'ATELIER_LOGIN_LOCKOUT_FAILURES', kind: 'int', def: 10, rule: 'an integer from 2 to 1000', check: ((v: number) => v >= 2 && v <= 1000) as never, help: 'Failed password logins from one address that lock password login for it (growing delays from half of them on; docs/operations.md)' }),
  S({ key: 'loginLockoutFailuresOverall', flag: '--login-lockout-failures-overall', env: 'ATELIER_LOGIN_LOCKOUT_FAILURES_OVERALL', kind: 'int', def: 100, rule: 'an integer from 2 to 100000', check: ((v: number) => v >= 2 && v <= 100000) as never, help: 'Failed password logins from all addresses together that lock password login for everyone (the one-time link still works)' }),
  S({ key: 'loginDelaySeconds', flag: '--login-delay-seconds', env: 'ATELIER_LOGIN_DELAY_SECONDS', kind: 'int', def: 1, rule: 'an integer from 1 to 60', check: ((v: number) => v >= 1 && v <= 60) as never, help: 'The first delay after failed password logins, seconds (doubled for each further failure, at most 60 s; docs/operations.md)' }),
  S({ key: 'loginLockoutSeconds', flag: '--login-lockout-seconds', env: 'ATELIER_LOGIN_LOCKOUT_SECONDS', kind: 'int', def: 900, rule: 'an integer from 1 to 86400', check: ((v: number) => v >= 1 && v <= 86400) as never, help: 'Length of the first password-login lockout, seconds (doubled for each lockout in a row, at most a day)' }),
  S({ key: 'retentionSecondMs', flag: '--retention-second-ms', env: 'ATELIER_RETENTION_SECOND_MS', kind: 'int', def: 1000, rule: 'an integer from 1 to 1000', check: ((v: number) => v >= 1 && v <= 1000) as never, help: 'TESTING ONLY: milliseconds one second of memory, knowledge and artifact retention and of a preview link\'s lifetime lasts (1000 in production; tests shorten it)' }),
  S({ key: 'knowledgeEmbeddings', flag: '--knowledge-embeddings', env: 'ATELIER_KNOWLEDGE_EMBEDDINGS', kind: 'string', def: 'on', rule: 'on or off', check: ((v: string) => v === 'on' || v === 'off') as never, help: 'Semantic half of knowledge_search (local embedding model); off answers lexically only' }),
  S({ key: 'artifactMaxMb', flag: '--artifact-max-mb', env: 'ATELIER_ARTIFACT_MAX_MB', kind: 'int', def: 256, rule: 'an integer from 1 to 65536', check: ((v: number) => v >= 1 && v <= 65536) as never, help: 'Largest file artifacts_snapshot keeps, MiB' }),
  S({ key: 'artifactQuotaMb', flag: '--artifact-quota-mb', env: 'ATELIER_ARTIFACT_QUOTA_MB', kind: 'int', def: 4096, rule: 'an integer from 1 to 16777216', check: ((v: number) => v >= 1 && v <= 16777216) as never, help: 'Total stored artifact bytes (distinct blobs), MiB' }),
  S({ key: 'checkpointQuotaMb', flag: '--checkpoint-quota-mb', env: 'ATELIER_CHECKPOINT_QUOTA_MB', kind: 'int', def: 20480, rule: 'an integer from 1 to 16777216', check: ((v: number) => v >= 1 && v <= 16777216) as never, help: 'Host disk all workspace checkpoints of the owner may take, MiB (issue #33)' }),
  S({ key: 'checkpointMaxCount', flag: '--checkpoint-max-count', env: 'ATELIER_CHECKPOINT_MAX_COUNT', kind: 'int', def: 50, rule: 'an integer from 1 to 10000', check: ((v: number) => v >= 1 && v <= 10000) as never, help: 'Workspace checkpoints the owner may keep (issue #33)' }),
  S({ key: 'imagePool', flag: '--image-pool', env: 'ATELIER_IMAGE_POOL', kind: 'string', def: 'auto', rule: 'auto, xfs or off', check: ((v: string) => v === 'auto' || v === 'xfs' || v === 'off') as never, help: 'Workspace, checkpoint and template images in an XFS file with reflinks under the data directory (copy-on-write checkpoints and forks; docs/checkpoints.md). auto: when the data directory has no reflinks and mkfs.xfs is present' }),
  S({ key: 'imagePoolSizeMb', flag: '--image-pool-size-mb', env: 'ATELIER_IMAGE_POOL_SIZE_MB', kind: 'int', def: 0, rule: 'an integer from 0 to 1073741824 (0 = the size of the filesystem holding the data directory); at least 1024 otherwise', check: ((v: number) => v === 0 || (v >= 1024 && v <= 1073741824)) as never, help: 'Size of the image pool when it is made (a sparse file: it takes only what its images hold)' }),
  S({ key: 'otlpTracesEndpoint', flag: '--otlp-traces-endpoint', env: 'ATELIER_OTLP_TRACES_ENDPOINT', kind: 'string', def: '', rule: 'an http(s) URL of an OTLP/HTTP traces receiver, such as http://127.0.0.1:4318/v1/traces, with no user or password in it', check: ((v: string) => v === '' || /^https?:\/\/[^\s/@]+(\/\S*)?$/.test(v)) as never, help: 'Send OpenTelemetry traces (OTLP/HTTP, JSON) here; empty = tracing off, no SDK loaded (docs/operations.md)' }),
  S({ key: 'shutdownGraceMs', flag: '--shutdown-grace-ms', env: 'ATELIER_SHUTDOWN_GRACE_MS', kind: 'int', def: 10000, rule: 'an integer from 0 to 600000', check: ((v: number) => v >= 0 && v <= 600000) as never, help: 'How long shutdown waits for calls in flight' }),
  S({ key: 'codeIntelIdleSeconds', flag: '--code-intel-idle-seconds', env: 'ATELIER_CODE_INTEL_IDLE_SECONDS', kind: 'int', def: 600, rule: 'an integer from 1 to 86400', check: ((v: number) => v >= 1 && v <= 86400) as never, help: 'Code intelligence: a workspace\'s language server is stopped after this many seconds without a call (docs/code-intelligence.md)' }),
  S({ key: 'codeIntelDisabledServers', flag: '--code-intel-disabled-servers', env: 'ATELIER_CODE_INTEL_DISABLED_SERVERS', kind: 'string', def: '', rule: 'a comma-separated list of typescript, python, clangd, gopls, bash', check: ((v: string) => v.split(',').map((x) => x.trim()).filter(Boolean).every((x) => ['typescript', 'python', 'clangd', 'gopls', 'bash'].includes(x))) as never, help: 'Code intelligence: language servers never started (docs/code-intelligence.md)' }),
  S({ key: 'backupDir', flag: '--backup-dir', env: 'ATELIER_BACKUP_DIR', kind: 'string', def: '', rule: 'an absolute path outside the data directory (empty: no scheduled backups)', check: ((v: string) => v === '' || v.startsWith('/')) as never, help: 'Scheduled backups: each one a directory atelier-backup-<time> here (docs/operations.md); empty turns them off' }),
  S({ key: 'backupIntervalMinutes', flag: '--backup-interval-minutes', env: 'ATELIER_BACKUP_INTERVAL_MINUTES', kind: 'int', def: 1440, rule: 'an integer from 5 to 43200', check: ((v: number) => v >= 5 && v <= 43200) as never, help: 'Scheduled backups: minutes between two (the first when the service starts if none was taken that recently)' }),
  S({ key: 'backupKeep', flag: '--backup-keep', env: 'ATELIER_BACKUP_KEEP', kind: 'int', def: 7, rule: 'an integer from 1 to 1000', check: ((v: number) => v >= 1 && v <= 1000) as never, help: 'Scheduled backups: how many are kept in --backup-dir (older ones are removed after a successful backup)' }),
];

/** Structured sections of the config file, read by their services (e.g. repositories by services/repos/policy.ts). */
export const CONFIG_SECTIONS = ['repositories', 'egress', 'providers', 'prices', 'codeIntel'];

export interface Config {
  host: string;
  port: number;
  dataDir: string;
  publicOrigin: string;
  logLevel: string;
  unsafeNoSandbox: boolean;
  gatewayUrl: string;
  gatewayAdminSecretFile: string;
  modelGatewaySessionHeader: string;
  packagesEnabled: boolean;
  packagesNpmRegistry: string;
  packagesPythonIndex: string;
  packagesCaFile: string;
  packagesResolveWaitMs: number;
  idleLeaseSeconds: number;
  maxWorkspaceLifetimeSeconds: number;
  shutdownGraceMs: number;
  otlpTracesEndpoint: string;
  skillSuggestUrl: string;
  skillSuggestKeyFile: string;
  oauthAccessTokenSeconds: number;
  oauthCimdAllowLoopback: boolean;
  oauthCimdCaFile: string;
  oauthCimdDnsServers: string[];
  oauthCimdFetchesPerMinute: number;
  trustedProxies: string[];
  loginLockoutFailures: number;
  loginLockoutFailuresOverall: number;
  loginLockoutSeconds: number;
  loginDelaySeconds: number;
  sandboxUid: number;
  sandboxMemoryMb: number;
  sandboxPidsMax: number;
  sandboxCpuPercent: number;
  sandboxFavorDynmods: 'on' | 'off';
  sandboxCpus: string;
  sandboxDiskMb: number;
  sandboxBwrapPath: string;
  executor: 'bubblewrap' | 'kubernetes';
  kubeconfig: string;
  kubeNamespace: string;
  kubeWorkspaceImage: string;
  kubeStorageClass: string;
  kubeStorageSize: string;
  kubeRuntimeClass: string;
  kubeWarmPool: string;
  agentPoolSize: number;
  outputMaxMb: number;
  httpRequestTimeoutMs: number;
  httpHeadersTimeoutMs: number;
  httpMaxUnauthenticatedConnections: number;
  retentionSecondMs: number;
  codeIntelIdleSeconds: number;
  codeIntelDisabledServers: string;
  backupDir: string;
  backupIntervalMinutes: number;
  backupKeep: number;
  knowledgeEmbeddings: string;
  artifactMaxMb: number;
  artifactQuotaMb: number;
  checkpointQuotaMb: number;
  imagePool: 'auto' | 'xfs' | 'off';
  imagePoolSizeMb: number;
  checkpointMaxCount: number;
  /** The config file that was read, or null when there was none. */
  configFile: string | null;
  /** Where the config file is (or would be): the CLI edits it, services re-read it. */
  configPath: string;
}

export function defaultDataDir(): string {
  const xdg = process.env.XDG_DATA_HOME;
  return join(xdg && isAbsolute(xdg) ? xdg : join(homedir(), '.local', 'share'), 'atelier');
}

function parseValue(s: Setting, raw: unknown, source: string): unknown {
  const name = `${s.flag} / ${s.env}${source === 'file' ? ` / "${s.key}" in the config file` : ''}`;
  const fail = (rule: string) => new ConfigError(`invalid setting ${name}: must be ${rule} (got ${JSON.stringify(raw)})`, s.key);
  let v: unknown;
  switch (s.kind) {
    case 'string':
      if (typeof raw !== 'string') throw fail('a string');
      v = raw;
      break;
    case 'int': {
      const n = typeof raw === 'number' ? raw : typeof raw === 'string' && /^-?\d+$/.test(raw.trim()) ? Number(raw.trim()) : NaN;
      if (!Number.isSafeInteger(n)) throw fail(s.rule ?? 'an integer');
      v = n;
      break;
    }
    case 'bool':
      if (raw === true || raw === 'true' || raw === '1' || raw === 'yes') v = true;
      else if (raw === false || raw === 'false' || raw === '0' || raw === 'no' || raw === '') v = false;
      else throw fail('true or false');
      break;
    case 'list':
      v = Array.isArray(raw) ? raw : String(raw).split(',').map((x) => x.trim()).filter(Boolean);
      break;
  }
  if (s.check && !(s.check as (x: unknown) => boolean)(v)) throw fail(s.rule ?? 'valid');
  return v;
}

/** Parses `--flag value`, `--flag=value` and bare boolean flags; unknown flags are errors. */
export function parseFlags(argv: string[]): Record<string, string | true> {
  const out: Record<string, string | true> = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (!a.startsWith('--')) throw new ConfigError(`unexpected argument "${a}"`);
    const eq = a.indexOf('=');
    const flag = eq > 0 ? a.slice(0, eq) : a;
    const known = SETTINGS.find((s) => s.flag === flag);
    if (!known && flag !== '--config') throw new ConfigError(`unknown option ${flag} (see atelier serve --help)`);
    if (eq > 0) out[flag] = a.slice(eq + 1);
    else if (known?.kind === 'bool') out[flag] = true;
    else {
      const next = argv[i + 1];
      if (next === undefined || next.startsWith('--')) throw new ConfigError(`option ${flag} needs a value`);
      out[flag] = next;
      i++;
    }
  }
  return out;
}

export function loadConfig(argv: string[] = [], env: NodeJS.ProcessEnv = process.env): Config {
  const flags = parseFlags(argv);
  const raw: Record<string, { v: unknown; source: string }> = {};
  for (const s of SETTINGS) {
    if (flags[s.flag] !== undefined) raw[s.key] = { v: flags[s.flag], source: 'flag' };
    else if (env[s.env] !== undefined) raw[s.key] = { v: env[s.env], source: 'env' };
  }
  const dataDirRaw = (raw.dataDir?.v as string | undefined) || defaultDataDir();
  const dataDir = resolve(dataDirRaw);
  const configFile = (flags['--config'] as string | undefined) ?? env.ATELIER_CONFIG ?? join(dataDir, 'config.json');
  let fileValues: Record<string, unknown> = {};
  let usedFile: string | null = null;
  if (existsSync(configFile)) {
    try {
      fileValues = JSON.parse(readFileSync(configFile, 'utf8'));
      usedFile = configFile;
    } catch (e) {
      throw new ConfigError(`config file ${configFile} is not valid JSON: ${(e as Error).message}`);
    }
    if (typeof fileValues !== 'object' || fileValues === null || Array.isArray(fileValues))
      throw new ConfigError(`config file ${configFile} must hold a JSON object`);
    for (const k of Object.keys(fileValues)) {
      if (!SETTINGS.some((s) => s.key === k) && !CONFIG_SECTIONS.includes(k))
        throw new ConfigError(`config file ${configFile}: unknown key "${k}" (known: ${[...SETTINGS.map((s) => s.key), ...CONFIG_SECTIONS].join(', ')})`);
    }
  } else if (flags['--config'] !== undefined || env.ATELIER_CONFIG !== undefined) {
    throw new ConfigError(`config file ${configFile} (--config / ATELIER_CONFIG) does not exist`);
  }
  validateSections(fileValues, configFile);
  const cfg: Record<string, unknown> = {};
  for (const s of SETTINGS) {
    const given = raw[s.key];
    if (given) cfg[s.key] = parseValue(s, given.v, given.source);
    else if (s.key in fileValues) cfg[s.key] = parseValue(s, fileValues[s.key], 'file');
    else cfg[s.key] = s.def;
  }
  cfg.dataDir = dataDir;
  cfg.configFile = usedFile;
  cfg.configPath = configFile;
  const c = cfg as unknown as Config;
  if (!isLoopback(c.host) && !c.publicOrigin) {
    throw new ConfigError(
      `invalid setting --public-origin / ATELIER_PUBLIC_ORIGIN: required when --host / ATELIER_HOST is not a loopback address (got host ${JSON.stringify(c.host)}); Host and Origin headers are checked against it`,
    );
  }
  if (c.backupDir) {
    const b = resolve(c.backupDir);
    if (b === dataDir || b.startsWith(dataDir + '/') || dataDir.startsWith(b + '/')) {
      throw new ConfigError(`invalid setting --backup-dir / ATELIER_BACKUP_DIR: must be outside the data directory ${dataDir} and not contain it (got ${JSON.stringify(c.backupDir)}): a backup inside what it copies is lost with it`, 'backupDir');
    }
    c.backupDir = b;
  }
  if (c.oauthCimdAllowLoopback && (!isLoopback(c.host) || (c.publicOrigin !== '' && !isLoopback(new URL(c.publicOrigin).hostname)))) {
    throw new ConfigError(
      `invalid setting --oauth-cimd-allow-loopback / ATELIER_OAUTH_CIMD_ALLOW_LOOPBACK: for development and tests only, so only with a loopback --host and no public origin (got host ${JSON.stringify(c.host)}${c.publicOrigin ? `, public origin ${JSON.stringify(c.publicOrigin)}` : ''}): a deployment reachable from elsewhere must not fetch client metadata documents from its own loopback interface`,
      'oauthCimdAllowLoopback',
    );
  }
  if (c.oauthCimdCaFile) {
    let pem = '';
    try {
      pem = readFileSync(c.oauthCimdCaFile, 'utf8');
    } catch (e) {
      throw new ConfigError(`invalid setting --oauth-cimd-ca-file / ATELIER_OAUTH_CIMD_CA_FILE: ${c.oauthCimdCaFile} cannot be read (${(e as NodeJS.ErrnoException).code})`, 'oauthCimdCaFile');
    }
    if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new ConfigError(`invalid setting --oauth-cimd-ca-file / ATELIER_OAUTH_CIMD_CA_FILE: ${c.oauthCimdCaFile} holds no PEM certificate`, 'oauthCimdCaFile');
  }
  for (const entry of c.trustedProxies) {
    const problem = trustedProxyProblem(entry);
    if (problem) throw new ConfigError(`invalid setting --trusted-proxies / ATELIER_TRUSTED_PROXIES: ${JSON.stringify(entry.slice(0, 100))} ${problem}`, 'trustedProxies');
  }
  if (c.trustedProxies.length > 1000) throw new ConfigError('invalid setting --trusted-proxies / ATELIER_TRUSTED_PROXIES: at most 1000 entries (use CIDRs)', 'trustedProxies');
  for (const entry of c.oauthCimdDnsServers) {
    const problem = nameServerProblem(entry);
    if (problem) throw new ConfigError(`invalid setting --oauth-cimd-dns-servers / ATELIER_OAUTH_CIMD_DNS_SERVERS: ${JSON.stringify(entry.slice(0, 100))} ${problem}`, 'oauthCimdDnsServers');
  }
  if (c.maxWorkspaceLifetimeSeconds < c.idleLeaseSeconds) {
    throw new ConfigError(
      `invalid setting --max-workspace-lifetime-seconds / ATELIER_MAX_WORKSPACE_LIFETIME_SECONDS: must be at least the idle lease (${c.idleLeaseSeconds} s)`,
    );
  }
  if (c.httpHeadersTimeoutMs > c.httpRequestTimeoutMs) {
    throw new ConfigError(`invalid setting --http-headers-timeout-ms / ATELIER_HTTP_HEADERS_TIMEOUT_MS: must be at most --http-request-timeout-ms (${c.httpRequestTimeoutMs})`, 'httpHeadersTimeoutMs');
  }
  return c;
}

const HOST_LABEL = /^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$/;

/** A host an egress rule may name: a DNS name, an IP literal, or "*.name" with two labels or more after it. */
function egressHostProblem(host: string): string | null {
  if (host.length === 0 || host.length > 255) return 'must have 1-255 characters';
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (isIP(bare)) return bare.includes('%') ? 'must not carry an IPv6 zone id' : null;
  const wildcard = host.startsWith('*.');
  const name = (wildcard ? host.slice(2) : host).replace(/\.$/, '');
  const labels = name.split('.');
  if (!labels.every((l) => HOST_LABEL.test(l))) return 'must be a host name (letters, digits, "-" and dots), an IP literal or "*.example.com"';
  if (/^\d+$/.test(labels[labels.length - 1]!)) return 'must not end in a numeric label unless it is a dotted-decimal IPv4 address';
  if (wildcard && labels.length < 2) return 'a wildcard needs at least two labels after "*."';
  return null;
}

/**
 * The structured sections the core can check without the services: "egress" (the workspace egress
 * allow list) and "providers". A bad section stops start-up; it never falls back to defaults.
 * ("repositories" and "prices" are checked at start-up by their services' readers.)
 */
export function validateSections(file: Record<string, unknown>, where: string): void {
  if ('egress' in file) {
    const e = file.egress;
    if (typeof e !== 'object' || e === null || Array.isArray(e)) throw new ConfigError(`config file ${where}: "egress" must be an object such as {"allow": [{"host": "registry.npmjs.org", "ports": [443]}]}`, 'egress');
    for (const k of Object.keys(e)) if (k !== 'allow') throw new ConfigError(`config file ${where}: "egress.${k}" is not a setting (known: allow)`, `egress.${k}`);
    const allow = (e as { allow?: unknown }).allow;
    if (allow !== undefined) {
      if (!Array.isArray(allow)) throw new ConfigError(`config file ${where}: "egress.allow" must be a list of rules {host, ports?, allowPrivate?}`, 'egress.allow');
      allow.forEach((rule: unknown, i) => {
        const at = `egress.allow[${i}]`;
        const bad = (rule: string, setting = at) => new ConfigError(`config file ${where}: "${setting}" ${rule}`, setting);
        if (typeof rule !== 'object' || rule === null || Array.isArray(rule)) throw bad('must be an object {host, ports?, allowPrivate?}');
        const r = rule as Record<string, unknown>;
        for (const k of Object.keys(r)) if (!['host', 'ports', 'allowPrivate'].includes(k)) throw bad(`has an unknown key "${k}" (known: host, ports, allowPrivate)`);
        if (typeof r.host !== 'string') throw bad('must be a string', `${at}.host`);
        const problem = egressHostProblem(r.host);
        if (problem) throw bad(`${problem} (got ${JSON.stringify(r.host)})`, `${at}.host`);
        if (r.ports !== undefined && (!Array.isArray(r.ports) || r.ports.length === 0 || !r.ports.every((p) => Number.isInteger(p) && (p as number) >= 1 && (p as number) <= 65535)))
          throw bad('must be a non-empty list of integers 1-65535', `${at}.ports`);
        if (r.allowPrivate !== undefined && typeof r.allowPrivate !== 'boolean') throw bad('must be true or false', `${at}.allowPrivate`);
      });
    }
  }
  if ('codeIntel' in file) validateCodeIntel(file.codeIntel, where);
  if ('providers' in file) {
    try {
      resolveProviders((file.providers ?? {}) as never);
    } catch (e) {
      const msg = (e as Error).message;
      throw new ConfigError(`config file ${where}: "${msg.split(':')[0]}"${msg.slice(msg.indexOf(':'))}`, msg.split(':')[0]);
    }
  }
}

/**
 * "codeIntel": {"servers": [{"name", "command", "args"?, "extensions", "initializationOptions"?,
 * "settings"?, "runsNoRepositoryCode"?}]}: language servers the operator adds (docs/code-intelligence.md).
 */
function validateCodeIntel(v: unknown, where: string): void {
  const bad = (setting: string, rule: string) => new ConfigError(`config file ${where}: "${setting}" ${rule}`, setting);
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad('codeIntel', 'must be an object such as {"servers": [{"name": "rust", "command": "/usr/bin/rust-analyzer", "extensions": {".rs": "rust"}}]}');
  for (const k of Object.keys(v)) if (k !== 'servers') throw bad(`codeIntel.${k}`, 'is not a setting (known: servers)');
  const servers = (v as { servers?: unknown }).servers;
  if (servers === undefined) return;
  if (!Array.isArray(servers) || servers.length > 20) throw bad('codeIntel.servers', 'must be a list of at most 20 servers');
  const names = new Set<string>();
  servers.forEach((s: unknown, i) => {
    const at = `codeIntel.servers[${i}]`;
    if (typeof s !== 'object' || s === null || Array.isArray(s)) throw bad(at, 'must be an object {name, command, args?, extensions, initializationOptions?, settings?, runsNoRepositoryCode?}');
    const r = s as Record<string, unknown>;
    for (const k of Object.keys(r)) if (!['name', 'command', 'args', 'extensions', 'initializationOptions', 'settings', 'runsNoRepositoryCode'].includes(k)) throw bad(at, `has an unknown key "${k}"`);
    if (typeof r.name !== 'string' || !/^[a-z0-9][a-z0-9-]{0,39}$/.test(r.name)) throw bad(`${at}.name`, 'must be 1-40 characters of a-z 0-9 - (starting with a letter or digit)');
    if (names.has(r.name)) throw bad(`${at}.name`, `repeats ${r.name}`);
    names.add(r.name);
    if (typeof r.command !== 'string' || !r.command.startsWith('/') || r.command.includes('\0')) throw bad(`${at}.command`, 'must be an absolute path inside the sandbox (e.g. /usr/bin/rust-analyzer)');
    if (r.args !== undefined && (!Array.isArray(r.args) || r.args.length > 64 || !r.args.every((a) => typeof a === 'string' && !a.includes('\0')))) throw bad(`${at}.args`, 'must be a list of at most 64 strings');
    const ext = r.extensions;
    if (typeof ext !== 'object' || ext === null || Array.isArray(ext) || Object.keys(ext).length === 0) throw bad(`${at}.extensions`, 'must map file extensions to LSP language ids, e.g. {".rs": "rust"}');
    for (const [e, l] of Object.entries(ext)) {
      if (!/^\.[A-Za-z0-9_+-]{1,20}$/.test(e)) throw bad(`${at}.extensions`, `has ${JSON.stringify(e)}: an extension is a dot and 1-20 characters of A-Z a-z 0-9 _ + -`);
      if (typeof l !== 'string' || l.length === 0 || l.length > 40) throw bad(`${at}.extensions["${e}"]`, 'must be a language id of 1-40 characters');
    }
    if (r.settings !== undefined && (typeof r.settings !== 'object' || r.settings === null || Array.isArray(r.settings))) throw bad(`${at}.settings`, 'must be an object (what workspace/configuration answers, by section)');
    if (r.runsNoRepositoryCode !== undefined && typeof r.runsNoRepositoryCode !== 'boolean') throw bad(`${at}.runsNoRepositoryCode`, 'must be true or false');
    if (JSON.stringify(r).length > 65_536) throw bad(at, 'is larger than 64 KiB');
  });
}

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
}
