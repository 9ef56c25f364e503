/**
 * Wire contract between the runner (src/services/models/gateway-client.ts, spend.ts, models.ts, agents.ts)
 * and the model gateway (src/gateway/*), which imports nothing of the runner: the snapshot the
 * runner pushes (PUT /admin/snapshot), the leases it issues (POST /admin/leases), the status it
 * reads (GET /admin/status) and the usage events it pulls (GET /admin/usage). Both sides import
 * these types from here, so neither imports the other. See docs/gateway.md.
 */
import type { Pricing, Usage } from '../core/pricing.js';
import type { ApiMode, AuthHeaderMode, ProviderId, ProviderOverrides } from '../core/providers.js';

/** One routable profile revision with the key of its credential. */
export interface SnapshotRoute {
  profileId: string;
  revision: number;
  provider: ProviderId;
  apiMode: ApiMode;
  model: string;
  credential: {
    id: string;
    /** The provider API key (plain text inside the admin channel only). */
    key: string;
    /** bearer (default) or x-api-key where the registry allows it (provider_b, custom). */
    authHeader?: AuthHeaderMode;
  };
  /** Custom routes only: the one upstream URL. */
  upstreamUrl?: string | null;
  pricing: Pricing;
  /** The profile's limits; a lease's budgets are capped by them. */
  limits?: { maxInputTokens?: number; maxOutputTokens?: number; maxCostMicros?: number };
}

/** Owner spend policies; null means no cap. */
export interface SpendPolicies {
  dailyCapMicros: number | null;
  monthlyCapMicros: number | null;
  /** Caps the cost budget of any single agent lease (the lease's maxCostMicros is lowered to it). */
  perAgentCapMicros: number | null;
}

export const NO_POLICIES: SpendPolicies = { dailyCapMicros: null, monthlyCapMicros: null, perAgentCapMicros: null };

/** Spend the runner's ledger holds for a window from other gateway boots (so policies hold across restarts). */
export interface WindowBaseline {
  window: 'day' | 'month';
  key: string; // YYYY-MM-DD or YYYY-MM (UTC)
  spentMicros: number;
}

export interface Snapshot {
  /** Runner-side counter, echoed on status. */
  generation: number;
  routes: SnapshotRoute[];
  /** Registry overrides (the runner's config section "providers"). */
  providers?: ProviderOverrides;
  policies?: SpendPolicies;
  windows?: WindowBaseline[];
  /** Instance setting MODEL_GATEWAY_SESSION_HEADER: header name sent (with the agent id) to every provider except provider_f. */
  sessionHeader?: string | null;
}

export interface LeaseRequest {
  agentId: string;
  profileId: string;
  revision: number;
  budgets: { maxInputTokens: number; maxOutputTokens: number; maxCostMicros: number };
  /** ISO time after which the lease stops working. */
  expiresAt: string;
  /**
   * Agent trees: the carve (POST /admin/leases/:id/carve) this child's budgets come from; the
   * lease's budgets are the carve's, each capped by `budgets`, and its parent is the carved lease.
   */
  carveId?: string;
}

/** POST /admin/leases/:id/carve: what a child agent takes from its parent's lease. */
export interface CarveRequest {
  inputTokens: number;
  outputTokens: number;
  costMicros: number;
}

/** The answer to a carve: its id and what the parent lease has left after it (or, refused, before it). */
export interface CarveAnswer {
  carveId: string;
  parentRemaining: CarveRequest;
}

export interface LeaseInfo {
  leaseId: string;
  agentId: string;
  profileId: string;
  revision: number;
  budgets: LeaseRequest['budgets'];
  expiresAt: string;
  revoked: boolean;
  /** Why the gateway ended the lease itself, when it did (a provider overrun). */
  revokedReason?: string | null;
  /** Micro-USD settled past reservations by provider overruns on this lease (included in used.costMicros). */
  overrunMicros?: number;
  used: { inputTokens: number; outputTokens: number; costMicros: number };
  reserved: { inputTokens: number; outputTokens: number; costMicros: number };
}

export interface GatewayStatus {
  bootId: string;
  startedAt: string;
  /** Generation of the last snapshot pushed to this boot, or null. */
  generation: number | null;
  profileCount: number;
  /** True after a (re)start until the first snapshot arrives. */
  noProfilesSinceRestart: boolean;
  leases: number;
  inflight: number;
  lastEventSeq: number;
}

export type UsageEvent =
  | {
      seq: number;
      type: 'reserve';
      at: string;
      reservationId: string;
      leaseId: string;
      agentId: string;
      profileId: string;
      revision: number;
      day: string;
      month: string;
      reservedMicros: number;
    }
  | {
      seq: number;
      type: 'settle';
      at: string;
      reservationId: string;
      costMicros: number;
      usage: Usage;
      /** True when the usage is an estimate (stream cut or no usage reported). */
      unreconciled: boolean;
      reason?: string;
      /** Set when the provider passed the reservation (docs/spend.md, "Provider overruns"); the lease was ended. */
      overrun?: ProviderOverrun;
    };

/** What a settlement passed its reservation by: cost (true cost - reserved worst case), and tokens past each bound. */
export interface ProviderOverrun {
  micros: number;
  inputTokens: number;
  outputTokens: number;
  leaseRevoked: boolean;
}
