/**
 * The state one gateway boot shares between its admin API (./admin.ts) and its proxy
 * (./proxy.ts). A snapshot replaces `routes` whole; a request in flight keeps the Route object it
 * started with.
 */
import type { GatewayStatus } from '../contracts/gateway.js';
import type { Budget } from './budget.js';
import type { Route, UpstreamAgents } from './routing.js';

export type GatewayLog = (level: 'info' | 'warn' | 'error', msg: string, extra?: Record<string, unknown>) => void;

export interface GatewayContext {
  readonly bootId: string;
  readonly startedAt: string;
  readonly budget: Budget;
  readonly agents: UpstreamAgents;
  readonly now: () => number;
  readonly log: GatewayLog;
  /** Request JSON cap in bytes. */
  readonly maxBodyBytes: number;
  /** After a client disconnects, how long upstream is still read for its usage. */
  readonly drainMs: number;
  /** The session header of the options (lowercased), used when a snapshot clears its own. */
  readonly defaultSessionHeader: string | null;
  readonly adminAuthorized: (authorization: string | undefined) => boolean;
  routes: Map<string, Route>;
  /** Generation of the last snapshot applied, null until the first. */
  generation: number | null;
  sessionHeader: string | null;
  inflight: number;
}

export function gatewayStatus(ctx: GatewayContext): GatewayStatus {
  return {
    bootId: ctx.bootId,
    startedAt: ctx.startedAt,
    generation: ctx.generation,
    profileCount: ctx.routes.size,
    noProfilesSinceRestart: ctx.generation === null,
    leases: ctx.budget.leasesById.size,
    inflight: ctx.inflight,
    lastEventSeq: ctx.budget.seq,
  };
}
