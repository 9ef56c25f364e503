/**
 * The records of the model control plane (docs/models.md): credentials as shown, profile
 * revisions, their input, pricing and limits, escalations, the rows, the catalog price lookup.
 */
import type { Pricing } from '../../core/pricing.js';
import {
  type ApiMode,
  type AuthHeaderMode,
  type ProviderId,
} from '../../core/providers.js';

export type { Actor } from '../instance/index.js';

/** Draft connection checks attach only to a save within this many ms (routing rule 6; spec: "a short expiry"). */
export const DRAFT_CHECK_TTL_MS = 15 * 60 * 1000;

/** Sign-in kinds the spec names as unsupported: refused, documented in model_provider_list. */
export const UNSUPPORTED_SIGN_IN = [
  { kind: 'consumer_plan_sign_in', provider: 'provider_a', reason: 'needs vendor approval for remotely hosted apps, uses a loopback redirect a remote service cannot receive, and needs rotating refresh tokens' },
  { kind: 'consumer_chat_session', provider: null, reason: 'cookies or scraped consumer chat sessions are not credentials' },
  { kind: 'native_protocol', provider: null, reason: 'native message or vendor-specific protocols are not spoken; only Chat Completions and Responses' },
];

export interface CredentialMeta {
  id: string;
  provider: ProviderId;
  label: string;
  authHeader: AuthHeaderMode;
  status: 'active' | 'disabled';
  keyVersion: number;
  lastCheck: Record<string, unknown> | null;
  createdAt: string;
  updatedAt: string;
}

export interface FullPricing {
  inputMicrosPerMillionTokens: number;
  outputMicrosPerMillionTokens: number;
  cachedReadMicrosPerMillionTokens: number | null;
  cachedWriteMicrosPerMillionTokens: number | null;
}

export interface Limits {
  maxInputTokens: number;
  maxOutputTokens: number;
  maxCostMicros: number;
}

/** One immutable revision of a profile. */
export interface RevisionBody {
  displayName: string;
  credentialId: string;
  model: string;
  apiMode: ApiMode;
  customUpstreamUrl: string | null;
  pricing: FullPricing;
  /** catalog: pinned by catalogPriceRef and equal to the cached catalog price; override: typed by hand. */
  priceSource: 'catalog' | 'override';
  limits: Limits;
  maxProxyOperations: string[];
  catalogPriceRef: { sourceModelId: string } | null;
  verification: { verificationRef: string; status: 'verified'; checkedAt: string } | { verificationRef: string | null; status: 'not_verified' };
}

export interface ProfileInput {
  profileId?: string;
  displayName?: string;
  credentialId?: string;
  model?: string;
  apiMode?: ApiMode;
  customUpstreamUrl?: string;
  pricing?: Pricing;
  limits?: Limits;
  maxProxyOperations?: string[];
  verificationRef?: string;
  catalogPriceRef?: { sourceModelId: string };
  expectedGeneration?: number;
}

export interface Escalation {
  kind: 'credential_change' | 'limit_raised' | 'price_lowered_unverified' | 'price_unverified_for_new_route' | 'proxy_operations_widened' | 'custom_url_unbound' | 'provider_f_route_change';
  field: string;
  message: string;
}

export interface ProfileRow {
  id: string;
  status: 'disabled' | 'active';
  generation: number;
  latest_revision: number;
  active_revision: number | null;
  created_at: string;
  updated_at: string;
  last_check_json: string | null;
}

export interface CredRow {
  id: string;
  provider: ProviderId;
  label: string;
  auth_header: AuthHeaderMode;
  status: 'active' | 'disabled';
  key_version: number;
  key_sealed: string;
  created_at: string;
  updated_at: string;
  last_check_json: string | null;
}

export const aadOf = (id: string, version: number) => `provider_credential:${id}:v${version}`;

/**
 * The cached catalog price of a model, as the repricing review and catalog verification read it
 * (never fetched here; rule 4): the price of the cached entry whose providerModelId is `model`, with
 * that entry's pricing.provenance.sourceModelId (where the catalog says the price comes from).
 */
export type CatalogPriceLookup = (provider: ProviderId, model: string) => { pricing: FullPricing; sourceModelId: string; fetchedAt: string; stale: boolean } | null;
