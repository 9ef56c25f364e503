/** The Kubernetes driver from the runner's settings (--executor kubernetes; docs/scaling.md). */
import { join } from 'node:path';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import { KubernetesExecutor } from './index.js';

export function kubernetesExecutor(config: Config, log: Logger): KubernetesExecutor {
  return new KubernetesExecutor(
    {
      kubeconfig: config.kubeconfig || undefined,
      namespace: config.kubeNamespace,
      workspaceImage: config.kubeWorkspaceImage,
      storageClass: config.kubeStorageClass || undefined,
      runtimeClass: config.kubeRuntimeClass || undefined,
      warmPool: config.kubeWarmPool || undefined,
      storageSize: config.kubeStorageSize,
      runDir: join(config.dataDir, 'run', 'kube'),
      workspacesDir: join(config.dataDir, 'workspaces'),
    },
    (message) => log.info(message),
  );
}
