/** The Kubernetes API as the driver uses it (@kubernetes/client-node 1.x), errors as ServiceErrors. */
import type { ApisApi, CoreV1Api, KubeConfig, Metrics, NetworkingV1Api, Watch } from '@kubernetes/client-node';
import { KubeExec } from './exec-stream.js';
import { ServiceError } from '../../core/errors.js';
import type { KubernetesExecutorOptions } from './options.js';

export interface KubeClients {
  kc: KubeConfig;
  core: CoreV1Api;
  net: NetworkingV1Api;
  apis: ApisApi;
  /** Exec streams: the runner's own client (exec-stream.ts), back-pressured and contained. */
  exec: KubeExec;
  metrics: Metrics;
  /** Watches (watch.ts): the official client's list+watch building block. */
  watch: Watch;
}

/**
 * Loaded on first use: the client is large (seconds to import on a loaded machine), and a runner
 * on the bubblewrap driver never needs it.
 */
export async function connectKube(o: KubernetesExecutorOptions): Promise<KubeClients> {
  const { ApisApi, CoreV1Api, KubeConfig, Metrics, NetworkingV1Api, Watch } = await import('@kubernetes/client-node');
  const kc = new KubeConfig();
  if (o.kubeconfig) kc.loadFromFile(o.kubeconfig);
  else kc.loadFromCluster();
  return { kc, core: kc.makeApiClient(CoreV1Api), net: kc.makeApiClient(NetworkingV1Api), apis: kc.makeApiClient(ApisApi), exec: new KubeExec(kc), metrics: new Metrics(kc), watch: new Watch(kc) };
}

export function statusCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'number' ? code : undefined;
}

/** A call whose 404 means "absent". */
export async function orNull<T>(p: Promise<T>): Promise<T | null> {
  try {
    return await p;
  } catch (err) {
    if (statusCode(err) === 404) return null;
    throw asServiceError(err, 'read');
  }
}

/** A create whose 409 AlreadyExists means "already there" (an earlier attempt, a restart). */
export async function createOrKeep<T>(p: Promise<T>): Promise<T | null> {
  try {
    return await p;
  } catch (err) {
    if (statusCode(err) === 409) return null;
    throw asServiceError(err, 'create');
  }
}

export async function deleteIfPresent(p: Promise<unknown>): Promise<void> {
  try {
    await p;
  } catch (err) {
    if (statusCode(err) !== 404) throw asServiceError(err, 'delete');
  }
}

export function asServiceError(err: unknown, verb: string): ServiceError {
  if (err instanceof ServiceError) return err;
  const code = statusCode(err);
  const body = (err as { body?: unknown })?.body;
  let message = err instanceof Error ? err.message : String(err);
  try {
    const status = typeof body === 'string' ? (JSON.parse(body) as { message?: string }) : (body as { message?: string });
    if (status?.message) message = status.message;
  } catch {
    /* not a Status */
  }
  const svc = code === 403 || code === 401 ? 'PERMISSION_DENIED' : code === 422 || code === 400 ? 'INVALID_ARGUMENT' : 'UNAVAILABLE';
  return new ServiceError(svc, `Kubernetes API ${verb} failed${code ? ` (${code})` : ''}: ${message}`, { kubernetesStatus: code ?? null });
}
