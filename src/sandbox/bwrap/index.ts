/**
 * The bubblewrap driver (the embedded default: sandboxes on one Linux host), as the rest of the
 * runner sees it: the executor, its options, the host probe `atelier doctor` and `serve` run, and
 * the few constants and helpers its tests and the fixtures use. The modules beside this one are
 * the driver's own.
 */
export { BwrapExecutor, collect, DAEMON_NODE_FLAGS, probeSandboxSupport, removeSandboxRoot, SANDBOX_USER, spareTarget, type BwrapExecutorOptions, type SandboxProblem } from './executor.js';
