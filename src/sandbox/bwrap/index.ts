/**
 * The bubblewrap driver (the embedded default: sandboxes on one Linux host), as the rest of the
 * runner sees it: the executor, its options, the host probe `atelier doctor` and `serve` run, and
 * the few constants and helpers its tests and the fixtures use. The modules beside this one are
 * the driver's own (executor.ts lists them).
 */
export { removeSandboxRoot } from '../rootdir.js';
export { BwrapExecutor } from './executor.js';
export type { BwrapExecutorOptions } from './options.js';
export { SANDBOX_USER } from './layout.js';
export { spareTarget } from './spares.js';
export { DAEMON_NODE_FLAGS } from './start.js';
export { collect } from './collect.js';
export { probeSandboxSupport, type SandboxProblem } from './probe.js';
