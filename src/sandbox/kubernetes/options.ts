/** Settings of the Kubernetes executor driver (from the runner's config: src/core/config.ts). */
export interface KubernetesExecutorOptions {
  /** A kubeconfig file; undefined = in-cluster credentials (the runner's service account). */
  kubeconfig?: string;
  /** Namespace of every object the driver makes. */
  namespace: string;
  /** Image holding the daemon (/opt/atelier/daemon) and the toolchains (deploy/kubernetes/workspace.Containerfile). */
  workspaceImage: string;
  /** StorageClass of the workspaces' claims; undefined = the cluster's default. */
  storageClass?: string;
  /** Size requested for each workspace claim (a Kubernetes quantity), default 10Gi. */
  storageSize?: string;
  /** RuntimeClass of every Pod (e.g. gvisor); undefined = the cluster's default runtime. */
  runtimeClass?: string;
  /**
   * A SandboxWarmPool (agent-sandbox) in the namespace: a new workspace whose settings match its
   * template is claimed from it (SandboxClaim) instead of starting a Sandbox of its own
   * (sandbox-objects.ts, docs/scaling.md); undefined = never.
   */
  warmPool?: string;
  /** How long a new SandboxClaim may take to name its Sandbox before the workspace gets one of its own (default 10000 ms). */
  claimWaitMs?: number;
  /** The service's workspaces directory (<dataDir>/workspaces): <it>/<id>/repo maps onto workspace <id>'s claim. */
  workspacesDir?: string;
  /** Runner-local directory for the relay sockets (one per workspace). */
  runDir: string;
  /** How long create() waits for the Pod to run and its daemon to answer (default 120000 ms). */
  startTimeoutMs?: number;
  /** The daemon ends when no runner has been connected for this long (default 900000 ms; 0 = never). */
  orphanGraceMs?: number;
}
