/** Spec section "Models and spend tools" (8 tools). */
import { defineTool } from './define.js';
import { CREDID, IDEM, INT, PROFILEID, URI, VREFID, int, str, z } from './types.js';

const domain = 'Models and spend tools';

/** Provider values of the model provider registry. */
export const PROVIDER = z
  .enum(['provider_a', 'provider_b', 'provider_c', 'provider_d', 'provider_e', 'provider_f', 'custom']);

/** The only two wire protocols the gateway speaks. */
export const API_MODE = z.enum(['chat-completions', 'responses']);

/**
 * Profile prices; null cached prices mean unknown, never free. The shared schemas carry no
 * descriptions: model_profile_create describes each field once, and model_profile_validate and
 * model_profile_update point to it (the tool list pays for each sentence once).
 */
export const PRICING = z.strictObject({
  inputMicrosPerMillionTokens: int(),
  outputMicrosPerMillionTokens: int(),
  cachedReadMicrosPerMillionTokens: int().nullable().optional(),
  cachedWriteMicrosPerMillionTokens: int().nullable().optional(),
});

/** Per-request bounds of a profile. */
export const LIMITS = z.strictObject({
  maxInputTokens: int(1, 2000000),
  maxOutputTokens: int(1, 2000000),
  maxCostMicros: int(0, 1000000000),
});

/** Pins catalog-verified prices. */
export const CATALOG_PRICE_REF = z.strictObject({
  sourceModelId: str(1, 200),
});

/** Opt-in probes of a connection check. */
export const CHECKS = z.strictObject({
  toolCall: z.boolean().default(false),
});

export const MODEL = str(1, 100);
export const DISPLAY_NAME = str(1, 100);
export const CUSTOM_UPSTREAM_URL = URI.max(1024);
export const MAX_PROXY_OPERATIONS = z.array(str(1, 64)).max(200);

export const modelProviderList = defineTool({
  name: 'model_provider_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#7 model control plane',
  description:
    'The provider registry (auth modes, API modes, endpoints, catalog source) and your stored credentials\' metadata (credentialId, provider, status, key version, last check). ' +
    'Key values are never returned; only the owner adds, rotates or removes keys, on the dashboard.',
  input: {
    provider: PROVIDER.optional(),
  },
  run: async (args, ctx) => ctx.services.models.providerList(args.provider),
});

export const modelCatalogSearch = defineTool({
  name: 'model_catalog_search',
  domain,
  badges: ['readOnly', 'idempotent', 'openWorld'],
  tracking: '#7 model control plane',
  description:
    'Search a provider\'s model catalog (custom has none): providerModelId (use as model), prices (micro-USD per million tokens; null = unknown, never free), availability, capability tags. ' +
    'catalogPriceRef.sourceModelId = pricing.provenance.sourceModelId pins verified prices. public_catalog does not prove your key can call it: pass credentialId (listed_for_credential), then model_connection_verify. A cold cache refill is slow.',
  input: {
    provider: PROVIDER,
    credentialId: CREDID.optional(),
    query: z.string().max(200).optional().describe('Matches model ids'),
    cursor: str(1, 256).optional(),
    limit: int(1, 100).default(25),
    capability: z.enum(['tools', 'reasoning', 'vision']).optional(),
  },
  run: async (args, ctx) => ctx.services.modelCatalog.search(args, ctx.signal, ctx.progress),
});

export const modelConnectionVerify = defineTool({
  name: 'model_connection_verify',
  domain,
  badges: ['openWorld'],
  tracking: '#7 model control plane',
  description:
    'Prove a model route works now: auth, model access, streaming inference, and with checks.toolCall a tool call. ' +
    'Give profileId alone, or a draft: credentialId, model, apiMode (+ customUpstreamUrl for custom; one unbound over MCP: OWNER_APPROVAL_REQUIRED, nothing sent). ' +
    'A draft returns a verificationRef; it attaches to your next model_profile_create/update only if that save, shortly after, has the identical route. ' +
    'Spends a few provider tokens (no agent budget); rate limited. Models served only on native protocols: unsupported_protocol.',
  input: {
    credentialId: CREDID.optional(),
    model: MODEL.optional(),
    apiMode: API_MODE.optional(),
    customUpstreamUrl: CUSTOM_UPSTREAM_URL.optional(),
    checks: CHECKS.optional(),
    profileId: PROFILEID.optional(),
  },
  check: (args) => {
    if (args.profileId !== undefined) {
      for (const f of ['credentialId', 'model', 'apiMode', 'customUpstreamUrl'] as const)
        if (args[f] !== undefined) return { field: f, message: 'give profileId alone, or a draft route (credentialId, model, apiMode) without profileId' };
      return undefined;
    }
    if (args.credentialId === undefined) return { field: 'credentialId', message: 'give profileId, or credentialId with model and apiMode' };
    if (args.model === undefined) return { field: 'model', message: 'a draft route needs model with credentialId' };
    if (args.apiMode === undefined) return { field: 'apiMode', message: 'a draft route needs apiMode with credentialId' };
    return undefined;
  },
  run: async (args, ctx) => ctx.services.modelChecks.verify(args, ctx.actor, ctx.principal, ctx.signal),
});

export const modelProfileList = defineTool({
  name: 'model_profile_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#7 model control plane',
  description:
    'Your model profiles: status (disabled/active; agent_spawn needs active), generation (expectedGeneration of model_profile_update), revisions, prices, limits, last check, repricing review. ' +
    'Only the owner activates, disables or deletes profiles, on the dashboard.',
  input: {
    profileId: PROFILEID.optional(),
  },
  run: async (args, ctx) => ctx.services.models.list(args.profileId),
});

export const modelProfileValidate = defineTool({
  name: 'model_profile_validate',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#7 model control plane',
  description:
    'Dry run of model_profile_create (action create, its fields) or model_profile_update (action update: profileId, expectedGeneration, changed fields); fields as there. ' +
    'Returns the revision a save would write, issues, pricingReview, whether verificationRef would attach, and escalations: what the save would refuse with OWNER_APPROVAL_REQUIRED (see model_profile_update).',
  input: {
    action: z.enum(['create', 'update']),
    profileId: PROFILEID.optional(),
    displayName: DISPLAY_NAME.optional(),
    credentialId: CREDID.optional(),
    model: MODEL.optional(),
    apiMode: API_MODE.optional(),
    customUpstreamUrl: CUSTOM_UPSTREAM_URL.optional(),
    pricing: PRICING.optional(),
    limits: LIMITS.optional(),
    maxProxyOperations: MAX_PROXY_OPERATIONS.optional(),
    verificationRef: VREFID.optional(),
    catalogPriceRef: CATALOG_PRICE_REF.optional(),
    expectedGeneration: INT.optional(),
  },
  check: (args) => {
    if (args.action === 'create') {
      for (const f of ['profileId', 'displayName', 'credentialId', 'model', 'apiMode', 'pricing', 'limits', 'maxProxyOperations'] as const)
        if (args[f] === undefined) return { field: f, message: `required when action is create` };
      return undefined;
    }
    if (args.profileId === undefined) return { field: 'profileId', message: 'required when action is update' };
    if (args.expectedGeneration === undefined) return { field: 'expectedGeneration', message: 'required when action is update' };
    return undefined;
  },
  run: async (args, ctx) => {
    const { action, ...input } = args;
    return ctx.services.models.validate(action, input, ctx.actor, ctx.principal);
  },
});

export const modelProfileCreate = defineTool({
  name: 'model_profile_create',
  domain,
  badges: ['idempotent'],
  tracking: '#7 model control plane',
  idempotency: 'key',
  description:
    'Save a new model profile, created disabled: agent_spawn can use it once the owner activates it on the dashboard, approving this revision (override prices on a new route too: issue price_unverified_for_new_route). ' +
    'Refused with OWNER_APPROVAL_REQUIRED only for an unbound customUpstreamUrl. Check first with model_profile_validate.',
  input: {
    profileId: PROFILEID,
    displayName: DISPLAY_NAME,
    credentialId: CREDID,
    model: MODEL,
    apiMode: API_MODE,
    pricing: PRICING.describe(
      'Micro-USD per million tokens; hand-typed = override. null cached = unknown, never free (a cache write then costs 2x input if the provider bills it, else 1x)',
    ),
    limits: LIMITS.describe('Per agent run; maxCostMicros is estimated micro-USD'),
    maxProxyOperations: MAX_PROXY_OPERATIONS.describe('Tool names its agents may proxy'),
    idempotencyKey: IDEM,
    customUpstreamUrl: CUSTOM_UPSTREAM_URL.optional().describe('Custom credentials only; over MCP, one already used on that credential'),
    verificationRef: VREFID.optional(),
    catalogPriceRef: CATALOG_PRICE_REF.optional(),
  },
  run: async (args, ctx) => {
    const { idempotencyKey: _k, ...input } = args;
    const r = ctx.services.models.save('create', input, ctx.actor, ctx.principal);
    return { ...r, gatewayPush: await pushAfterSave(ctx) };
  },
});

/** Routing rule 7: every save pushes a snapshot; the save succeeds even when the push fails. */
export async function pushAfterSave(ctx: { services: { gateway: { push(): Promise<unknown> } } }): Promise<{ ok: boolean; error?: string }> {
  try {
    await ctx.services.gateway.push();
    return { ok: true };
  } catch (e) {
    return { ok: false, error: (e as Error).message };
  }
}

export const modelProfileUpdate = defineTool({
  name: 'model_profile_update',
  domain,
  badges: ['destructive', 'idempotent'],
  tracking: '#7 model control plane',
  idempotency: 'key',
  description:
    'Write a new revision of a profile (fields as in model_profile_create); omitted fields are kept, status never changes. ' +
    'Refused with OWNER_APPROVAL_REQUIRED, nothing changed, whatever the status: another credential, raised limits, lower prices not catalog-verified, override prices carried to another model or credential, added maxProxyOperations, an unbound customUpstreamUrl, a provider_f profile\'s model or credential (dashboard only). ' +
    'Check first with model_profile_validate.',
  input: {
    profileId: PROFILEID,
    expectedGeneration: INT,
    idempotencyKey: IDEM,
    displayName: DISPLAY_NAME.optional(),
    credentialId: CREDID.optional(),
    model: MODEL.optional(),
    apiMode: API_MODE.optional(),
    customUpstreamUrl: CUSTOM_UPSTREAM_URL.optional(),
    pricing: PRICING.optional(),
    limits: LIMITS.optional(),
    maxProxyOperations: MAX_PROXY_OPERATIONS.optional(),
    verificationRef: VREFID.optional(),
    catalogPriceRef: CATALOG_PRICE_REF.optional(),
  },
  run: async (args, ctx) => {
    const { idempotencyKey: _k, ...input } = args;
    const r = ctx.services.models.save('update', input, ctx.actor, ctx.principal);
    return { ...r, gatewayPush: await pushAfterSave(ctx) };
  },
});

export const modelSpendSummary = defineTool({
  name: 'model_spend_summary',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#8 gateway and spend',
  description:
    'Estimated model spend (from pinned profile prices, not invoices) for the current UTC day and month: settled, reserved by open agent runs, unreconciled, and the owner\'s spend policies bounding them (changed only on the dashboard).',
  input: {
    period: z.enum(['day', 'month']).optional().describe('Omit for both'),
  },
  run: async (args, ctx) => {
    await ctx.services.gateway.syncUsage().catch(() => undefined);
    return ctx.services.spend.summary(args.period);
  },
});

export const tools = [
  modelProviderList,
  modelCatalogSearch,
  modelConnectionVerify,
  modelProfileList,
  modelProfileValidate,
  modelProfileCreate,
  modelProfileUpdate,
  modelSpendSummary,
];
