/** Spec section "Models and spend tools" (8 tools). */
import { defineTool } from './define.js';
import { CREDID, IDEM, INT, PROFILEID, URI, VREFID, int, str, z } from './types.js';

const domain = 'Models and spend tools';

/** Provider values of the model provider registry. */
export const PROVIDER = z
  .enum(['provider_a', 'provider_b', 'provider_c', 'provider_d', 'provider_e', 'provider_f', 'custom'])
  .describe('Model provider from the registry (provider_a..provider_f), or custom: one caller-entered HTTPS upstream URL');

/** The only two wire protocols the gateway speaks. */
export const API_MODE = z
  .enum(['chat-completions', 'responses'])
  .describe('Wire protocol: chat-completions (Chat Completions) or responses (Responses); check model_provider_list for what the provider supports');

const MICROS_PER_MTOK = 'integer micro-USD per million tokens';

/** Profile prices; null cached prices mean unknown, never free. */
export const PRICING = z
  .strictObject({
    inputMicrosPerMillionTokens: int().describe(`Input price, ${MICROS_PER_MTOK}`),
    outputMicrosPerMillionTokens: int().describe(`Output price, ${MICROS_PER_MTOK}`),
    cachedReadMicrosPerMillionTokens: int()
      .nullable()
      .optional()
      .describe(`Cached-read price, ${MICROS_PER_MTOK}; null = unknown (never treated as free)`),
    cachedWriteMicrosPerMillionTokens: int()
      .nullable()
      .optional()
      .describe(
        `Cached-write price, ${MICROS_PER_MTOK}; null = unknown (never free): the gateway then charges cache writes at 2x the input price for providers that bill cache writes, else at the input price`,
      ),
  })
  .describe(
    'Prices in integer micro-USD per million tokens. Prices typed by hand are marked as an override; pin catalog-verified prices with catalogPriceRef instead where possible',
  );

/** Per-request bounds of a profile. */
export const LIMITS = z
  .strictObject({
    maxInputTokens: int(1, 2000000).describe('Most input tokens one agent run on this profile may use (1-2000000)'),
    maxOutputTokens: int(1, 2000000).describe('Most output tokens one agent run on this profile may use (1-2000000)'),
    maxCostMicros: int(0, 1000000000).describe('Most estimated cost in micro-USD one agent run on this profile may spend (0-1000000000)'),
  })
  .describe('Token and cost limits of the profile. Raising any of them over MCP needs owner approval');

/** Pins catalog-verified prices. */
export const CATALOG_PRICE_REF = z
  .strictObject({
    sourceModelId: str(1, 200).describe('pricing.provenance.sourceModelId of a model_catalog_search entry'),
  })
  .describe('Pins the catalog-verified prices of a model_catalog_search entry instead of hand-typed override prices');

/** Opt-in probes of a connection check. */
export const CHECKS = z
  .strictObject({
    toolCall: z
      .boolean()
      .default(false)
      .describe('Also probe a tool call (opt-in; spends a few tokens on the provider account)'),
  })
  .describe('Optional probes. Authentication, model access and streaming inference are always checked');

export const MODEL = str(1, 100).describe('Provider model id, e.g. a model_catalog_search providerModelId (1-100 characters)');
export const DISPLAY_NAME = str(1, 100).describe('Human-readable profile name (1-100 characters)');
export const CUSTOM_UPSTREAM_URL = URI.max(1024).describe(
  'Custom credentials only: the one HTTPS upstream URL (max 1024). Over MCP it must already be used by one of the owner\'s profiles on that credential, else OWNER_APPROVAL_REQUIRED and nothing is sent',
);
export const MAX_PROXY_OPERATIONS = z
  .array(str(1, 64))
  .max(200)
  .describe('Tool names an agent on this profile may proxy, e.g. files_read, grep_search (at most 200 names). Widening this list over MCP needs owner approval');

export const modelProviderList = defineTool({
  name: 'model_provider_list',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#7 model control plane',
  description:
    'List the model provider registry (auth header modes, API modes, endpoints, catalog source per provider) and the metadata of your stored provider credentials (id, provider, status, key version, last check). ' +
    'Use it to find a credentialId before searching the catalog or preparing a profile. Key values are never returned; keys can only be added, rotated or removed by the owner on the dashboard.',
  input: {
    provider: PROVIDER.optional().describe('Only this provider (omit for all)'),
  },
  run: async (args, ctx) => ctx.services.models.providerList(args.provider),
});

export const modelCatalogSearch = defineTool({
  name: 'model_catalog_search',
  domain,
  badges: ['readOnly', 'idempotent', 'openWorld'],
  tracking: '#7 model control plane',
  description:
    'Search a provider\'s model catalog: providerModelId, prices (integer micro-USD per million tokens; null = unknown, never free), availability and capability tags. ' +
    'Use an entry\'s providerModelId as model and its pricing.provenance.sourceModelId as catalogPriceRef.sourceModelId to pin catalog-verified prices. ' +
    'availability public_catalog does not prove your key can call the model (pass credentialId for listed_for_credential, then model_connection_verify). A cold or stale cache may be refilled from the provider, so the call can be slow; custom has no catalog.',
  input: {
    provider: PROVIDER,
    credentialId: CREDID.optional().describe('Search with this credential\'s key, so entries show whether they are listed for it'),
    query: z.string().max(200).optional().describe('Text to match in model ids'),
    cursor: str(1, 256).optional().describe('Opaque cursor from a previous page (1-256 characters). Omit for the first page.'),
    limit: int(1, 100).default(25).describe('Page size (1-100)'),
    capability: z.enum(['tools', 'reasoning', 'vision']).optional().describe('Only models with this capability tag'),
  },
  run: async (args, ctx) => ctx.services.modelCatalog.search(args, ctx.signal, ctx.progress),
});

export const modelConnectionVerify = defineTool({
  name: 'model_connection_verify',
  domain,
  badges: ['openWorld'],
  tracking: '#7 model control plane',
  description:
    'Prove one model route works right now: authentication, model access, streaming inference and (opt-in, checks.toolCall) a tool call. ' +
    'Give either profileId alone (a saved profile) or a draft route: credentialId with model and apiMode (plus customUpstreamUrl for a custom credential); a draft that names a model returns a verificationRef to pass to the next model_profile_create or model_profile_update (it attaches only if that save uses the identical route, shortly after). ' +
    'Runs from the runner, not through any agent budget, but spends a few provider tokens and is rate limited; models served only on native protocols fail with unsupported_protocol.',
  input: {
    credentialId: CREDID.optional().describe('Draft route: the stored credential to test (from model_provider_list)'),
    model: MODEL.optional(),
    apiMode: API_MODE.optional(),
    customUpstreamUrl: CUSTOM_UPSTREAM_URL.optional(),
    checks: CHECKS.optional(),
    profileId: PROFILEID.optional().describe('Check this saved profile (give it alone, without draft-route fields)'),
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
    'List your agent model profiles: status (disabled or active), generation (pass it as expectedGeneration to model_profile_update), active revision, pinned prices, limits, last connection check and repricing review. ' +
    'Use it to pick an active profileId for agent_spawn. Only the owner can activate, disable or delete profiles, on the dashboard.',
  input: {
    profileId: PROFILEID.optional().describe('Only this profile (omit for all)'),
  },
  run: async (args, ctx) => ctx.services.models.list(args.profileId),
});

export const modelProfileValidate = defineTool({
  name: 'model_profile_validate',
  domain,
  badges: ['readOnly', 'idempotent'],
  tracking: '#7 model control plane',
  description:
    'Dry run of model_profile_create (action create: send the same fields) or model_profile_update (action update: profileId, expectedGeneration and the changed fields). Writes nothing. ' +
    'Returns the revision a save would write, issues, a pricing review, whether verificationRef would attach, and an escalations list naming changes a save would refuse with OWNER_APPROVAL_REQUIRED ' +
    '(another credential, raised token or cost limits, lower prices not catalog-verified, override prices carried to another model or credential, a wider maxProxyOperations, an unbound custom URL). Run it before saving.',
  input: {
    action: z.enum(['create', 'update']).describe('Which save to simulate'),
    profileId: PROFILEID.optional(),
    displayName: DISPLAY_NAME.optional(),
    credentialId: CREDID.optional().describe('Stored provider credential (from model_provider_list)'),
    model: MODEL.optional(),
    apiMode: API_MODE.optional(),
    customUpstreamUrl: CUSTOM_UPSTREAM_URL.optional(),
    pricing: PRICING.optional(),
    limits: LIMITS.optional(),
    maxProxyOperations: MAX_PROXY_OPERATIONS.optional(),
    verificationRef: VREFID.optional().describe('verificationRef from a draft model_connection_verify'),
    catalogPriceRef: CATALOG_PRICE_REF.optional(),
    expectedGeneration: INT.optional().describe('action update: the generation from model_profile_list'),
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
    'Save a new agent model profile. It is created disabled: the owner must activate it on the dashboard before agent_spawn can use it (activation approves the revision you wrote). ' +
    'Only an unbound custom upstream URL is refused (OWNER_APPROVAL_REQUIRED); hand-typed override prices on a new route need owner approval (price_unverified_for_new_route), so prefer catalogPriceRef. ' +
    'Check first with model_profile_validate. The same idempotencyKey with the same input replays the first result (replayed true) for 24 hours; with different input it is a CONFLICT.',
  input: {
    profileId: PROFILEID.describe('New profile id: 1-80 characters of A-Z a-z 0-9 . _ -'),
    displayName: DISPLAY_NAME,
    credentialId: CREDID.describe('Stored provider credential (from model_provider_list); MCP cannot add keys'),
    model: MODEL,
    apiMode: API_MODE,
    pricing: PRICING,
    limits: LIMITS,
    maxProxyOperations: MAX_PROXY_OPERATIONS,
    idempotencyKey: IDEM,
    customUpstreamUrl: CUSTOM_UPSTREAM_URL.optional(),
    verificationRef: VREFID.optional().describe('verificationRef from a draft model_connection_verify of this identical route; attaches only to your next save, else the profile shows Not verified'),
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
    'Write a new revision of a profile; omitted fields keep their values and status never changes. Needs expectedGeneration from model_profile_list (a moved generation is a CONFLICT). ' +
    'Escalations are refused with OWNER_APPROVAL_REQUIRED whatever the status, and nothing changes: another credential, raised token or cost limits, lower prices not catalog-verified, override prices carried to another model or credential, a wider maxProxyOperations, an unbound custom URL; changing model or credential of a provider_f profile must be done on the dashboard. ' +
    'Check first with model_profile_validate. The same idempotencyKey with the same input replays the first result for 24 hours; different input is a CONFLICT.',
  input: {
    profileId: PROFILEID,
    expectedGeneration: INT.describe('The profile generation from model_profile_list'),
    idempotencyKey: IDEM,
    displayName: DISPLAY_NAME.optional(),
    credentialId: CREDID.optional().describe('Move to another stored credential (needs owner approval over MCP)'),
    model: MODEL.optional(),
    apiMode: API_MODE.optional(),
    customUpstreamUrl: CUSTOM_UPSTREAM_URL.optional(),
    pricing: PRICING.optional(),
    limits: LIMITS.optional(),
    maxProxyOperations: MAX_PROXY_OPERATIONS.optional(),
    verificationRef: VREFID.optional().describe('verificationRef from a draft model_connection_verify of this identical route; attaches only to your next save'),
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
    'Estimated model spend for the current UTC day and UTC month: settled, reserved by open agent runs, and unreconciled, with the owner-set spend policies that bound them. ' +
    'Figures are estimates from pinned profile prices, not provider invoices; spend policies can only be changed by the owner on the dashboard.',
  input: {
    period: z.enum(['day', 'month']).optional().describe('Only this window (omit for both)'),
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
