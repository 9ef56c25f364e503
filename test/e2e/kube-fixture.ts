/**
 * The Kubernetes side of the e2e tests that run the real service with `--executor kubernetes`:
 * the fixture API server (test/fixtures/kube-apiserver/: each Pod a local bubblewrap sandbox), or
 * a real cluster when the opt-in suite names one, the service's arguments for it, and a record of
 * every object the fixture's cluster is given (what a test checks for leaks and for the Pods made).
 */
import type { KubeApiServer, KubeApiServerOptions } from '../fixtures/kube-apiserver/index.js';

type R = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export interface KubeTarget {
  /** The fixture API server; absent on a real cluster. */
  api?: KubeApiServer;
  /** `--executor kubernetes` and what it needs (kubeconfig, namespace, workspace image). */
  args: string[];
  /** Every watch event of the fixture's store since start, as JSON (empty on a real cluster). */
  stored: string[];
  /** The same events parsed (each a copy of what was stored at that moment). */
  events: R[];
  /** The Pods the cluster was given (ADDED events), oldest first. */
  podsMade(): R[];
  close(): Promise<void>;
}

/**
 * Starts the fixture API server (or, with `kubeconfig`, targets that real cluster) and returns the
 * service arguments for it. `record` keeps every stored object (the fixture only).
 */
export async function startKubeTarget(opts: { kubeconfig?: string; record?: boolean; fixture?: KubeApiServerOptions; namespace?: string } = {}): Promise<KubeTarget> {
  let api: KubeApiServer | undefined;
  let kubeconfig = opts.kubeconfig;
  const stored: string[] = [];
  const events: R[] = [];
  if (!kubeconfig) {
    const { startKubeApiServer } = await import('../fixtures/kube-apiserver/index.js');
    api = await startKubeApiServer(opts.fixture);
    kubeconfig = api.kubeconfig;
    if (opts.record)
      api.store.watch(Number(api.store.resourceVersion), (e) => {
        const json = JSON.stringify(e);
        stored.push(json);
        events.push(JSON.parse(json) as R);
      });
  }
  const args = [
    '--executor', 'kubernetes',
    '--kubeconfig', kubeconfig,
    '--kube-namespace', opts.namespace ?? (opts.kubeconfig ? (process.env.ATELIER_TEST_KUBE_NAMESPACE ?? 'atelier') : 'atelier'),
    '--kube-workspace-image', opts.kubeconfig ? (process.env.ATELIER_TEST_KUBE_IMAGE ?? 'atelier-workspace:test') : 'atelier-workspace:test',
  ];
  return {
    api,
    args,
    stored,
    events,
    podsMade: () => stored.map((e) => JSON.parse(e) as R).filter((e) => e.type === 'ADDED' && e.object?.kind === 'Pod').map((e) => e.object as R),
    close: async () => {
      await api?.close();
    },
  };
}
