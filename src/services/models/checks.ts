/**
 * Connection checks (issue #7, routing rules 1, 5, 6 and 9): prove one route at one moment, from
 * the runner (not through the gateway, no agent budget), rate limited per principal, audited.
 * Probes: authentication, model access, streaming inference, and opt-in a tool call. A draft
 * check (credentialId + model + apiMode [+ customUpstreamUrl]) returns a verificationRef that
 * attaches only to the next save by the same principal, within DRAFT_CHECK_TTL_MS, with the
 * identical route. Models served only on native protocols fail with unsupported_protocol.
 */
import type { AuditLog } from '../instance/index.js';
import { ServiceError } from '../../core/errors.js';
import { nowIso } from '../../core/clock.js';
import { authHeader, endpointFor, type ApiMode, type ProviderInfo } from '../../core/providers.js';
import type { Actor, ModelService } from './profiles.js';
import { providerExtraHeaders, type ModelCatalog } from './catalog.js';

/** Connection checks per principal per minute (the spec leaves the number open); ATELIER_MODEL_CHECKS_PER_MINUTE overrides it. */
const envRate = Number(process.env.ATELIER_MODEL_CHECKS_PER_MINUTE);
export const CHECK_RATE = { max: Number.isInteger(envRate) && envRate > 0 ? envRate : 10, windowMs: 60_000 };
const PROBE_TIMEOUT_MS = 30_000;

type ProbeName = 'authentication' | 'modelAccess' | 'streamingInference' | 'toolCall';
interface Probe {
  name: ProbeName;
  status: 'pass' | 'fail' | 'skipped';
  httpStatus?: number;
  ms?: number;
  detail: string;
}

const NATIVE_HINT = /native|not supported (?:on|by|for) this (?:endpoint|api)|unsupported[_ ](?:api|endpoint|protocol)|only (?:available|supported|served) (?:on|via|through)/i;

export class ConnectionChecks {
  private readonly recent = new Map<string, number[]>();

  constructor(private readonly opts: { models: ModelService; catalog: ModelCatalog; audit: AuditLog }) {}

  private rateLimit(principal: string): void {
    const now = Date.now();
    const list = (this.recent.get(principal) ?? []).filter((t) => now - t < CHECK_RATE.windowMs);
    if (list.length >= CHECK_RATE.max) {
      const retryAfterSeconds = Math.ceil((CHECK_RATE.windowMs - (now - list[0]!)) / 1000);
      throw new ServiceError('RESOURCE_EXHAUSTED', `connection checks are limited to ${CHECK_RATE.max} per minute per principal; try again in ${retryAfterSeconds} s`, { retryAfterSeconds, limit: CHECK_RATE.max, windowSeconds: CHECK_RATE.windowMs / 1000 });
    }
    list.push(now);
    this.recent.set(principal, list);
  }

  async verify(
    args: { profileId?: string; credentialId?: string; model?: string; apiMode?: ApiMode; customUpstreamUrl?: string; checks?: { toolCall?: boolean } },
    actor: Actor,
    principal: string,
    signal?: AbortSignal,
  ) {
    const models = this.opts.models;
    let route: { credentialId: string; model: string; apiMode: ApiMode; customUpstreamUrl: string | null };
    const draft = !args.profileId;
    if (args.profileId) {
      const p = models.profile(args.profileId) as Record<string, unknown>;
      route = { credentialId: p.credentialId as string, model: p.model as string, apiMode: p.apiMode as ApiMode, customUpstreamUrl: (p.customUpstreamUrl as string | null) ?? null };
    } else {
      if (!args.credentialId || !args.model || !args.apiMode) throw new ServiceError('INVALID_ARGUMENT', 'give profileId, or credentialId with model and apiMode', { field: 'credentialId' });
      route = { credentialId: args.credentialId, model: args.model, apiMode: args.apiMode, customUpstreamUrl: args.customUpstreamUrl ?? null };
    }
    const cred = models.credential(route.credentialId);
    const providerInfo = models.registry()[cred.provider];
    if (cred.provider !== 'custom' && route.customUpstreamUrl) throw new ServiceError('INVALID_ARGUMENT', `customUpstreamUrl: only custom credentials take an upstream URL`, { field: 'customUpstreamUrl' });
    if (cred.provider === 'custom') {
      if (!route.customUpstreamUrl) throw new ServiceError('INVALID_ARGUMENT', 'customUpstreamUrl: required for a custom credential', { field: 'customUpstreamUrl' });
      // Constraint 4: over MCP a custom key goes only to a URL already bound to that credential.
      if (actor === 'mcp' && !models.boundUrls(cred.id).has(route.customUpstreamUrl))
        throw new ServiceError('OWNER_APPROVAL_REQUIRED', `customUpstreamUrl: no profile on ${cred.id} uses ${route.customUpstreamUrl}; nothing was sent`, { field: 'customUpstreamUrl', escalations: [{ kind: 'custom_url_unbound' }] });
    }
    if (cred.status !== 'active') throw new ServiceError('FAILED_PRECONDITION', `credentialId: ${cred.id} is disabled`, { field: 'credentialId' });
    const ep = endpointFor(providerInfo, route.apiMode, route.customUpstreamUrl);
    if (typeof ep === 'string') throw new ServiceError('INVALID_ARGUMENT', ep, { field: 'apiMode' });
    this.rateLimit(principal);

    const key = models.keyOf(cred.id);
    const scrub = (s: string) => s.split(key).join('[redacted]').slice(0, 300);
    const probes: Probe[] = [];
    let unsupported = false;

    // 1 + 2: authentication and model access from the listing, where the provider lists with the key.
    if (providerInfo.catalogSource === 'provider-models-endpoint') {
      const t0 = Date.now();
      try {
        const listing = await this.opts.catalog.fetchListing(providerInfo, key, cred.authHeader, signal);
        const ms = Date.now() - t0;
        if (listing.status === 401 || listing.status === 403) probes.push({ name: 'authentication', status: 'fail', httpStatus: listing.status, ms, detail: 'the provider refused the key' });
        else if (listing.status >= 200 && listing.status < 300) {
          probes.push({ name: 'authentication', status: 'pass', httpStatus: listing.status, ms, detail: 'the key lists models' });
          let entries: ReturnType<ModelCatalog['parse']> = [];
          try {
            entries = this.opts.catalog.parse(providerInfo, listing.body, 'listed_for_credential', nowIso());
          } catch {
            /* unparsable listing: leave model access to inference */
          }
          const catalogEntry = entries.find((x) => x.providerModelId === route.model);
          if (catalogEntry?.supportedEndpoints && !catalogEntry.supportedEndpoints.some((s) => /chat|responses/i.test(s))) {
            unsupported = true;
            probes.push({ name: 'modelAccess', status: 'fail', ms, detail: `unsupported_protocol: ${route.model} is served only on ${catalogEntry.supportedEndpoints.join(', ')}` });
          } else if (catalogEntry) probes.push({ name: 'modelAccess', status: 'pass', ms, detail: 'the model is listed for this key' });
          else if (entries.length) probes.push({ name: 'modelAccess', status: 'fail', ms, detail: 'the model is not listed for this key' });
        } else probes.push({ name: 'authentication', status: 'fail', httpStatus: listing.status, ms, detail: `the models endpoint answered HTTP ${listing.status}` });
      } catch (e) {
        probes.push({ name: 'authentication', status: 'fail', ms: Date.now() - t0, detail: scrub(`the provider cannot be reached: ${(e as Error).message}`) });
      }
    }

    const authFailed = probes.some((x) => x.name === 'authentication' && x.status === 'fail');
    const accessFailed = probes.some((x) => x.name === 'modelAccess' && x.status === 'fail');
    if (authFailed || accessFailed) {
      probes.push({ name: 'streamingInference', status: 'skipped', detail: 'skipped: an earlier probe failed' });
    } else {
      const inf = await this.inference(providerInfo, ep.url, cred.authHeader, key, route, 'stream', signal);
      if (inf.unsupported) unsupported = true;
      if (!probes.some((x) => x.name === 'authentication'))
        probes.push({ name: 'authentication', status: inf.httpStatus === 401 || inf.httpStatus === 403 ? 'fail' : inf.httpStatus ? 'pass' : 'fail', httpStatus: inf.httpStatus, ms: inf.ms, detail: inf.httpStatus === 401 || inf.httpStatus === 403 ? 'the provider refused the key' : inf.httpStatus ? 'the key was accepted' : scrub(inf.detail) });
      if (!probes.some((x) => x.name === 'modelAccess'))
        probes.push({ name: 'modelAccess', status: inf.ok ? 'pass' : 'fail', httpStatus: inf.httpStatus, ms: inf.ms, detail: inf.ok ? 'the model answered' : scrub(inf.detail) });
      probes.push({ name: 'streamingInference', status: inf.ok ? 'pass' : 'fail', httpStatus: inf.httpStatus, ms: inf.ms, detail: scrub(inf.detail) });
    }
    if (args.checks?.toolCall) {
      if (probes.some((x) => x.status === 'fail')) probes.push({ name: 'toolCall', status: 'skipped', detail: 'skipped: an earlier probe failed' });
      else {
        const t = await this.inference(providerInfo, ep.url, cred.authHeader, key, route, 'tool', signal);
        probes.push({ name: 'toolCall', status: t.ok ? 'pass' : 'fail', httpStatus: t.httpStatus, ms: t.ms, detail: scrub(t.detail) });
      }
    } else probes.push({ name: 'toolCall', status: 'skipped', detail: 'opt-in: pass checks.toolCall true' });

    const ok = !unsupported && probes.every((x) => x.status !== 'fail');
    const checkedAt = nowIso();
    const usageReported = probes.find((x) => x.name === 'streamingInference')?.detail.includes('usage not reported') ? false : true;
    const result: Record<string, unknown> = {
      ok,
      checkedAt,
      route: { provider: cred.provider, credentialId: cred.id, keyVersion: cred.keyVersion, model: route.model, apiMode: route.apiMode, customUpstreamUrl: route.customUpstreamUrl, endpointHost: ep.url.host },
      probes,
      ...(ok && !usageReported ? { warnings: ['the stream reported no usage: the gateway will meter this route with estimates (unreconciled)'] } : {}),
      note: 'Proves this route at this moment only; run from the runner, not counted against any agent budget; inference and tool probes spend a few provider tokens.',
    };
    if (unsupported) result.code = 'unsupported_protocol';
    const summary = { ok, probes: probes.map((x) => `${x.name}:${x.status}`), checkedAt, model: route.model, apiMode: route.apiMode };
    if (draft) {
      result.verificationRef = models.recordDraftCheck(principal, route, summary, ok);
      result.verificationRefAttaches = ok ? 'to your next model_profile_create or model_profile_update with this identical route, within 15 minutes' : 'never: the check did not pass';
    } else models.recordProfileCheck(args.profileId!, summary);
    models.recordCredentialCheck(cred.id, summary);
    this.opts.audit.record({ actor, principal, action: 'model_connection_check', target: args.profileId ?? cred.id, outcome: ok ? 'ok' : 'failed', reason: unsupported ? 'unsupported_protocol' : null, details: summary });
    if (unsupported)
      throw new ServiceError('unsupported_protocol', `${route.model} is served only on a protocol the gateway does not speak (it speaks Chat Completions and Responses)`, {
        ...result,
      });
    return result;
  }

  private async inference(
    providerInfo: ProviderInfo,
    url: URL,
    mode: 'bearer' | 'x-api-key',
    key: string,
    route: { model: string; apiMode: ApiMode },
    kind: 'stream' | 'tool',
    signal?: AbortSignal,
  ): Promise<{ ok: boolean; httpStatus?: number; ms: number; detail: string; unsupported?: boolean }> {
    const t0 = Date.now();
    const h = authHeader(providerInfo, mode, key);
    if (typeof h === 'string') return { ok: false, ms: 0, detail: h };
    const headers: Record<string, string> = { 'content-type': 'application/json', accept: kind === 'stream' ? 'text/event-stream' : 'application/json', 'accept-encoding': 'identity', ...providerExtraHeaders(providerInfo), [h[0]]: h[1] };
    const chat = route.apiMode === 'chat-completions';
    const tool = { name: 'atelier_probe', description: 'Connection probe: call it with ok true.', parameters: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } };
    let body: Record<string, unknown>;
    if (kind === 'stream')
      body = chat
        ? { model: route.model, messages: [{ role: 'user', content: 'Reply with the single word OK.' }], max_tokens: 16, stream: true, stream_options: { include_usage: true } }
        : { model: route.model, input: 'Reply with the single word OK.', max_output_tokens: 16, stream: true };
    else
      body = chat
        ? { model: route.model, messages: [{ role: 'user', content: 'Call the atelier_probe tool with ok true.' }], max_tokens: 64, tools: [{ type: 'function', function: tool }], tool_choice: 'required' }
        : { model: route.model, input: 'Call the atelier_probe tool with ok true.', max_output_tokens: 64, tools: [{ type: 'function', ...tool }], tool_choice: 'required' };
    let response: Response;
    try {
      response = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body), redirect: 'manual', signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(PROBE_TIMEOUT_MS)]) : AbortSignal.timeout(PROBE_TIMEOUT_MS) });
    } catch (e) {
      return { ok: false, ms: Date.now() - t0, detail: `the upstream cannot be reached: ${(e as Error).message}` };
    }
    let text: string;
    try {
      text = await response.text();
    } catch (e) {
      return { ok: false, httpStatus: response.status, ms: Date.now() - t0, detail: `the answer was cut: ${(e as Error).message}` };
    }
    const ms = Date.now() - t0;
    if (response.status >= 300 && response.status < 400) return { ok: false, httpStatus: response.status, ms, detail: 'the upstream answered a redirect (never followed)' };
    if (response.status < 200 || response.status > 299) {
      const unsupported = [400, 404, 405, 415, 422].includes(response.status) && NATIVE_HINT.test(text);
      return { ok: false, httpStatus: response.status, ms, unsupported, detail: `${unsupported ? 'unsupported_protocol: ' : ''}HTTP ${response.status}: ${text.slice(0, 200)}` };
    }
    if (kind === 'tool') {
      let j: Record<string, any> = {};
      try {
        j = JSON.parse(text);
      } catch {
        return { ok: false, httpStatus: response.status, ms, detail: 'the answer is not JSON' };
      }
      const called = chat ? Array.isArray(j.choices?.[0]?.message?.tool_calls) && j.choices[0].message.tool_calls.length > 0 : Array.isArray(j.output) && j.output.some((o: { type?: string }) => o.type === 'function_call');
      return { ok: called, httpStatus: response.status, ms, detail: called ? 'the model called the tool' : 'the model answered without calling the tool' };
    }
    const events = text.split(/\r?\n\r?\n/).map((e) => e.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n')).filter(Boolean);
    if (!events.length) return { ok: false, httpStatus: response.status, ms, detail: 'the answer is not an event stream' };
    const done = chat ? events.includes('[DONE]') || events.some((e) => /"finish_reason"\s*:\s*"[a-z_]+"/.test(e)) : events.some((e) => e.includes('"response.completed"'));
    if (!done) return { ok: false, httpStatus: response.status, ms, detail: 'the stream ended before it completed' };
    const usage = events.some((e) => /"usage"\s*:\s*\{/.test(e));
    return { ok: true, httpStatus: response.status, ms, detail: `streamed ${events.length} events${usage ? ', usage reported' : ', usage not reported'}` };
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type ConnectionChecksVerifyResult = Awaited<ReturnType<ConnectionChecks['verify']>>;
