/** The small part of the npm project's libraries that managed packages use (they ship no types). */
declare module '@npmcli/arborist' {
  interface ArbNode {
    name: string;
    packageName: string;
    version: string;
    location: string;
    resolved: string | null;
    integrity: string | null;
    isRoot: boolean;
    package: Record<string, unknown> & { bin?: unknown };
    children: Map<string, ArbNode>;
    inventory: Map<string, ArbNode>;
    meta?: { commit(): Record<string, unknown> };
  }
  export default class Arborist {
    constructor(opts: Record<string, unknown>);
    buildIdealTree(opts?: Record<string, unknown>): Promise<ArbNode>;
  }
}
declare module 'pacote' {
  const pacote: {
    packument(spec: string, opts?: Record<string, unknown>): Promise<Record<string, unknown>>;
    manifest(spec: string, opts?: Record<string, unknown>): Promise<Record<string, unknown>>;
  };
  export default pacote;
}
declare module 'npm-package-arg' {
  interface Spec {
    type: 'git' | 'tag' | 'version' | 'range' | 'file' | 'directory' | 'remote' | 'alias';
    name: string | null;
    registry?: boolean;
    rawSpec: string;
  }
  function npa(arg: string, where?: string): Spec;
  export default npa;
}
