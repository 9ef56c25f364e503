/**
 * Object names and labels. Workspace ids ([A-Za-z0-9_-], up to 100 characters) are not DNS
 * names, so names are a hash (stable: recover() finds the objects of a workspace after a runner
 * restart from its id alone); the id itself is a label value when it fits one.
 */
import { createHash } from 'node:crypto';

export const MANAGED_BY = 'app.kubernetes.io/managed-by';
export const WORKSPACE_LABEL = 'atelier.dev/workspace';
export const ROLE_LABEL = 'atelier.dev/role';
/** Short-lived Pods (git network operations, package builds, the bash toolbox, agent runtimes). */
export const EPHEMERAL_ROLE = 'ephemeral';
export const WORKSPACE_ROLE = 'workspace';

export function objectName(id: string): string {
  return `atl-${createHash('sha256').update(id).digest('hex').slice(0, 20)}`;
}

export function labelsFor(id: string, role: string): Record<string, string> {
  const labels: Record<string, string> = { [MANAGED_BY]: 'atelier', [ROLE_LABEL]: role };
  // A label value: at most 63 characters, alphanumeric at both ends.
  if (/^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$/.test(id)) labels[WORKSPACE_LABEL] = id;
  return labels;
}
