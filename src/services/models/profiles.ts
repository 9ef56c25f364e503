/**
 * The model control plane (issue #7): provider credentials (keys sealed at rest, metadata out),
 * agent model profiles with immutable revisions and generations, the MCP constraints on profiles
 * (escalations refused with OWNER_APPROVAL_REQUIRED), custom upstream URL binding, draft-check
 * attachment (routing rule 6), owner activation/disable/delete, and the gateway snapshot routes.
 * ModelService is this module's class on credentials.ts (the provider registry and the
 * credentials); records.ts has the types and rows. One service, two transports: MCP tools
 * (src/tools/models.ts) and dashboard REST (src/dashboard/models.ts) call the same methods;
 * `actor` says who acts. See docs/models.md.
 */
import { sha256Hex } from '../../core/crypto.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';
import { canonicalJson } from '../../core/canonical-json.js';
import type { Pricing } from '../../core/pricing.js';
import {
  upstreamUrlProblem,
  type ApiMode,
  type ProviderId,
} from '../../core/providers.js';
import type { SnapshotRoute } from '../../contracts/gateway.js';
import { CatalogPriceLookup, CredRow, DRAFT_CHECK_TTL_MS, Escalation, FullPricing, ProfileInput, ProfileRow, RevisionBody, aadOf } from './records.js';
import { ModelCredentials } from './credentials.js';
import type { Actor } from '../instance/index.js';

export { DRAFT_CHECK_TTL_MS, UNSUPPORTED_SIGN_IN, type Actor, type CatalogPriceLookup, type CredentialMeta, type Escalation, type FullPricing, type Limits, type ProfileInput, type RevisionBody } from './records.js';

export class ModelService extends ModelCredentials {
  /** Set by the catalog when it exists; without it no price is catalog-verified. */
  catalogPrice: CatalogPriceLookup = () => null;

  // ---------------- profiles ----------------

  private profileRow(id: string): ProfileRow | undefined {
    return this.db.prepare('SELECT * FROM model_profiles WHERE id = ?').get(id) as ProfileRow | undefined;
  }

  private revision(id: string, rev: number): RevisionBody {
    const r = this.db.prepare('SELECT body_json FROM model_profile_revisions WHERE profile_id = ? AND revision = ?').get(id, rev) as { body_json: string };
    return JSON.parse(r.body_json) as RevisionBody;
  }

  /** Custom upstream URLs bound to a credential: used by any revision of any (not deleted) profile on it (constraint 4). */
  boundUrls(credentialId: string): Set<string> {
    const rows = this.db.prepare('SELECT DISTINCT custom_upstream_url u FROM model_profile_revisions WHERE credential_id = ? AND custom_upstream_url IS NOT NULL').all(credentialId) as Array<{ u: string }>;
    return new Set(rows.map((r) => r.u));
  }

  private fullPricing(pricing: Pricing): FullPricing {
    return {
      inputMicrosPerMillionTokens: pricing.inputMicrosPerMillionTokens as number,
      outputMicrosPerMillionTokens: pricing.outputMicrosPerMillionTokens as number,
      cachedReadMicrosPerMillionTokens: pricing.cachedReadMicrosPerMillionTokens ?? null,
      cachedWriteMicrosPerMillionTokens: pricing.cachedWriteMicrosPerMillionTokens ?? null,
    };
  }

  /**
   * Whether catalogPriceRef names the catalog source of the model the profile routes to: the model
   * itself, or the pricing.provenance.sourceModelId of that model's own cached catalog entry. A ref
   * to any other model pins nothing (issue #31 item 8: a cheap model's price on an expensive route).
   */
  private refMatchesRoute(ref: { sourceModelId: string } | null, model: string, cached: ReturnType<CatalogPriceLookup>): boolean {
    return !!ref && (ref.sourceModelId === model || (!!cached && ref.sourceModelId === cached.sourceModelId));
  }

  /**
   * Whether the prices are catalog-verified: catalogPriceRef names the catalog source of the routed
   * `model` and the prices equal that model's cached catalog price (never fetches; rule 4). The
   * price compared is always the routed model's, whatever the ref names.
   */
  private catalogVerified(provider: ProviderId, model: string, ref: { sourceModelId: string } | null, pricing: FullPricing): boolean {
    if (!ref || provider === 'custom') return false;
    const c = this.catalogPrice(provider, model);
    return !!c && this.refMatchesRoute(ref, model, c) && canonicalJson(c.pricing) === canonicalJson(pricing);
  }

  private routeHash(result: { credentialId: string; model: string; apiMode: ApiMode; customUpstreamUrl: string | null }): string {
    return sha256Hex(canonicalJson({ c: result.credentialId, m: result.model, a: result.apiMode, u: result.customUpstreamUrl }));
  }

  /** Records a draft check result; returns its verificationRef (used by model_connection_verify). */
  recordDraftCheck(principal: string, route: { credentialId: string; model: string; apiMode: ApiMode; customUpstreamUrl: string | null }, result: Record<string, unknown>, ok: boolean): string {
    const id = newId('verification');
    const now = Date.now();
    // Only the newest draft check of a principal can attach: older ones are superseded.
    this.db.prepare('UPDATE model_verifications SET consumed_at = ? WHERE principal = ? AND consumed_at IS NULL').run(new Date(now).toISOString(), principal);
    this.db
      .prepare('INSERT INTO model_verifications (id, principal, route_hash, result_json, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)')
      .run(id, principal, ok ? this.routeHash(route) : null, JSON.stringify(result), new Date(now).toISOString(), new Date(now + DRAFT_CHECK_TTL_MS).toISOString());
    return id;
  }

  recordProfileCheck(profileId: string, summary: Record<string, unknown>): void {
    this.db.prepare('UPDATE model_profiles SET last_check_json = ? WHERE id = ?').run(JSON.stringify(summary), profileId);
  }

  recordCredentialCheck(credentialId: string, summary: Record<string, unknown>): void {
    this.db.prepare('UPDATE provider_credentials SET last_check_json = ? WHERE id = ?').run(JSON.stringify(summary), credentialId);
  }

  /** Rule 6: whether verificationRef would attach (the principal's newest unconsumed draft check, unexpired, identical route). */
  private draftAttach(principal: string, ref: string | undefined, body: Omit<RevisionBody, 'verification' | 'priceSource'>): { attaches: boolean; reason: string; pendingId: string | null; checkedAt?: string } {
    const pending = this.db
      .prepare('SELECT id, route_hash, created_at, expires_at FROM model_verifications WHERE principal = ? AND consumed_at IS NULL ORDER BY created_at DESC LIMIT 1')
      .get(principal) as { id: string; route_hash: string | null; created_at: string; expires_at: string } | undefined;
    const pendingId = pending?.id ?? null;
    if (!ref) return { attaches: false, reason: 'no verificationRef given', pendingId };
    if (!pending || pending.id !== ref) return { attaches: false, reason: 'verificationRef is not the latest unused draft check of this principal', pendingId };
    if (pending.expires_at <= nowIso()) return { attaches: false, reason: 'the draft check expired', pendingId };
    if (!pending.route_hash) return { attaches: false, reason: 'the draft check did not pass', pendingId };
    if (pending.route_hash !== this.routeHash(body)) return { attaches: false, reason: 'the route differs from the checked one', pendingId };
    return { attaches: true, reason: 'attaches', pendingId, checkedAt: pending.created_at };
  }

  /**
   * Computes what a save would write: the revision, issues (INVALID_ARGUMENT when fatal), escalations
   * (refused over MCP) and whether the verificationRef attaches. Writes nothing.
   */
  plan(action: 'create' | 'update', input: ProfileInput, actor: Actor, principal: string) {
    const issues: Array<{ field: string; message: string; severity: 'error' | 'warning' }> = [];
    const escalations: Escalation[] = [];
    const id = input.profileId!;
    const row = this.profileRow(id);
    let prev: RevisionBody | null = null;
    if (action === 'create') {
      if (row) throw new ServiceError('CONFLICT', `profileId: a profile ${id} already exists; use model_profile_update`, { field: 'profileId', profileId: id });
    } else {
      if (!row) throw new ServiceError('NOT_FOUND', `profileId: no profile ${id}; model_profile_list lists them`, { field: 'profileId', profileId: id });
      if (input.expectedGeneration !== row.generation)
        throw new ServiceError('CONFLICT', `expectedGeneration: the profile is at generation ${row.generation}, not ${input.expectedGeneration}; read it again with model_profile_list`, {
          field: 'expectedGeneration',
          currentGeneration: row.generation,
        });
      prev = this.revision(id, row.latest_revision);
    }
    const credentialId = input.credentialId ?? prev!.credentialId;
    const cred = this.credRow(credentialId);
    const provider = cred.provider;
    const reg = this.registry()[provider];
    const model = input.model ?? prev!.model;
    const apiMode = input.apiMode ?? prev!.apiMode;
    const customUpstreamUrl = provider === 'custom' ? (input.customUpstreamUrl ?? (prev && prev.credentialId === credentialId ? prev.customUpstreamUrl : null)) : null;
    const catalogPriceRef = input.catalogPriceRef !== undefined ? input.catalogPriceRef : (prev?.catalogPriceRef ?? null);
    const pricing = input.pricing ? this.fullPricing(input.pricing) : prev!.pricing;
    const limits = input.limits ?? prev!.limits;
    const maxProxyOperations = input.maxProxyOperations ? [...new Set(input.maxProxyOperations)] : prev!.maxProxyOperations;
    const displayName = input.displayName ?? prev!.displayName;

    if (!reg.apiModes.includes(apiMode)) throw new ServiceError('INVALID_ARGUMENT', `apiMode: ${provider} speaks ${reg.apiModes.join(', ')}, not ${apiMode}`, { field: 'apiMode' });
    if (provider !== 'custom' && input.customUpstreamUrl !== undefined)
      throw new ServiceError('INVALID_ARGUMENT', `customUpstreamUrl: only custom credentials take an upstream URL (${credentialId} is ${provider})`, { field: 'customUpstreamUrl' });
    if (provider === 'custom') {
      if (!customUpstreamUrl) throw new ServiceError('INVALID_ARGUMENT', 'customUpstreamUrl: required for a custom credential', { field: 'customUpstreamUrl' });
      const problem = upstreamUrlProblem(customUpstreamUrl);
      if (problem) throw new ServiceError('INVALID_ARGUMENT', `customUpstreamUrl: ${problem}`, { field: 'customUpstreamUrl' });
    }
    if (cred.status !== 'active') issues.push({ field: 'credentialId', message: `credential ${credentialId} is disabled: the profile will not route until the owner enables it`, severity: 'warning' });

    // Verified against the model this revision routes to (after this update), never the ref's own model.
    const verified = this.catalogVerified(provider, model, catalogPriceRef, pricing);
    const priceSource: RevisionBody['priceSource'] = verified ? 'catalog' : 'override';
    if (catalogPriceRef && !verified) {
      const routed = provider === 'custom' ? null : this.catalogPrice(provider, model);
      issues.push({
        field: 'catalogPriceRef',
        message:
          provider === 'custom'
            ? 'custom has no catalog: the prices are kept as an override'
            : !this.refMatchesRoute(catalogPriceRef, model, routed)
              ? `sourceModelId ${catalogPriceRef.sourceModelId} is not the catalog source of model ${model}, the model this profile routes to${routed ? ` (its catalog entry names ${routed.sourceModelId})` : ''}: only the routed model's catalog price is catalog-verified; the prices are kept as an override`
              : `the prices do not match the cached catalog price of model ${model}${routed ? '' : ' (none is cached)'}: they are kept as an override`,
        severity: 'warning',
      });
    }

    // Constraint 4 (and 2, 3): an unbound custom URL.
    if (provider === 'custom' && customUpstreamUrl && !this.boundUrls(credentialId).has(customUpstreamUrl))
      escalations.push({ kind: 'custom_url_unbound', field: 'customUpstreamUrl', message: `no profile on ${credentialId} uses ${customUpstreamUrl} yet; the owner must bind it on the dashboard` });

    if (action === 'create' && priceSource === 'override')
      issues.push({ field: 'pricing', message: 'price_unverified_for_new_route: override prices on a new route; the owner approves them when activating', severity: 'warning' });

    if (prev) {
      const routeChanged = prev.credentialId !== credentialId || prev.model !== model;
      if (prev.credentialId !== credentialId) escalations.push({ kind: 'credential_change', field: 'credentialId', message: `moves from ${prev.credentialId} to ${credentialId}` });
      for (const k of ['maxInputTokens', 'maxOutputTokens', 'maxCostMicros'] as const)
        if (limits[k] > prev.limits[k]) escalations.push({ kind: 'limit_raised', field: `limits.${k}`, message: `raises ${k} from ${prev.limits[k]} to ${limits[k]}` });
      if (priceSource === 'override') {
        for (const k of ['inputMicrosPerMillionTokens', 'outputMicrosPerMillionTokens', 'cachedReadMicrosPerMillionTokens', 'cachedWriteMicrosPerMillionTokens'] as const) {
          const a = prev.pricing[k];
          const b = pricing[k];
          // Lower, or unknown -> a number: both make spend estimates smaller without catalog proof.
          if (b !== null && (a === null || b < a)) escalations.push({ kind: 'price_lowered_unverified', field: `pricing.${k}`, message: `lowers ${k} from ${a ?? 'unknown'} to ${b} without catalog verification` });
        }
        if (routeChanged) escalations.push({ kind: 'price_unverified_for_new_route', field: 'pricing', message: 'override prices carried to another model or credential' });
      }
      const old = new Set(prev.maxProxyOperations);
      const added = maxProxyOperations.filter((o) => !old.has(o));
      if (added.length) escalations.push({ kind: 'proxy_operations_widened', field: 'maxProxyOperations', message: `adds ${added.join(', ')}` });
      const prevProvider = (this.db.prepare('SELECT provider FROM provider_credentials WHERE id = ?').get(prev.credentialId) as { provider: ProviderId } | undefined)?.provider;
      if ((provider === 'provider_f' || prevProvider === 'provider_f') && routeChanged)
        escalations.push({ kind: 'provider_f_route_change', field: prev.model !== model ? 'model' : 'credentialId', message: 'model or credential changes of a provider_f profile are made on the dashboard' });
    }

    const base = { displayName, credentialId, model, apiMode, customUpstreamUrl, pricing, limits, maxProxyOperations, catalogPriceRef };
    const attach = this.draftAttach(principal, input.verificationRef, base);
    const verification: RevisionBody['verification'] = attach.attaches
      ? { verificationRef: input.verificationRef!, status: 'verified', checkedAt: attach.checkedAt! }
      : { verificationRef: input.verificationRef ?? null, status: 'not_verified' };
    const body: RevisionBody = { ...base, priceSource, verification };
    const refused = actor === 'mcp' && escalations.length > 0;
    return {
      provider,
      row,
      body,
      revision: row ? row.latest_revision + 1 : 1,
      issues,
      escalations,
      refused,
      attach,
      pricingReview: this.pricingReview(provider, body),
    };
  }

  /**
   * Rule 4: compares pinned prices only with the cached catalog price of the model the revision
   * routes to (never with the model catalogPriceRef names, which may be another one); custom is
   * always unknown. A ref that is not that model's catalog source is reported beside the status.
   */
  pricingReview(provider: ProviderId, body: RevisionBody) {
    if (provider === 'custom') return { status: 'unknown', reason: 'custom has no catalog' };
    const c = this.catalogPrice(provider, body.model);
    const ref = body.catalogPriceRef ? { catalogPriceRef: { sourceModelId: body.catalogPriceRef.sourceModelId, matchesRoutedModel: this.refMatchesRoute(body.catalogPriceRef, body.model, c) } } : {};
    if (!c) return { status: 'unknown', reason: 'no cached catalog price for this model', model: body.model, sourceModelId: body.model, ...ref };
    const same = canonicalJson(c.pricing) === canonicalJson(body.pricing);
    return { status: same ? 'current' : 'differs', model: body.model, sourceModelId: c.sourceModelId, catalogPricing: c.pricing, catalogFetchedAt: c.fetchedAt, stale: c.stale, priceSource: body.priceSource, ...ref };
  }

  validate(action: 'create' | 'update', input: ProfileInput, actor: Actor, principal: string) {
    try {
      const plan = this.plan(action, input, actor, principal);
      return {
        valid: !plan.refused,
        action,
        profileId: input.profileId,
        revision: { revision: plan.revision, provider: plan.provider, ...plan.body },
        issues: plan.issues,
        pricingReview: plan.pricingReview,
        verificationRef: { given: input.verificationRef ?? null, wouldAttach: plan.attach.attaches, reason: plan.attach.reason },
        escalations: plan.escalations,
        ownerApprovalRequired: plan.refused,
      };
    } catch (e) {
      if (!(e instanceof ServiceError) || (e.code !== 'INVALID_ARGUMENT' && e.code !== 'NOT_FOUND' && e.code !== 'CONFLICT')) throw e;
      return { valid: false, action, profileId: input.profileId, revision: null, issues: [{ field: (e.details.field as string) ?? '(arguments)', message: e.message, severity: 'error', code: e.code }], escalations: [], ownerApprovalRequired: false };
    }
  }

  /** Saves a new profile (disabled) or a new revision. Over MCP, escalations refuse and nothing changes. */
  save(action: 'create' | 'update', input: ProfileInput, actor: Actor, principal: string) {
    const plan = this.plan(action, input, actor, principal);
    if (plan.refused) {
      const priceNewRoute = plan.escalations.some((e) => e.kind === 'price_unverified_for_new_route');
      throw new ServiceError('OWNER_APPROVAL_REQUIRED', `model_profile_${action}: needs owner approval on the dashboard, nothing was changed: ${plan.escalations.map((e) => e.message).join('; ')}`, {
        escalations: plan.escalations,
        ...(priceNewRoute ? { reason: 'price_unverified_for_new_route' } : {}),
      });
    }
    const id = input.profileId!;
    const now = nowIso();
    const tx = this.db.transaction(() => {
      // Rule 6: the first save by this principal consumes its pending draft check, matched or not.
      if (plan.attach.pendingId) this.db.prepare('UPDATE model_verifications SET consumed_at = ? WHERE principal = ? AND consumed_at IS NULL').run(now, principal);
      this.db
        .prepare('INSERT INTO model_profile_revisions (profile_id, revision, credential_id, custom_upstream_url, body_json, actor, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)')
        .run(id, plan.revision, plan.body.credentialId, plan.body.customUpstreamUrl, JSON.stringify(plan.body), actor, now);
      if (action === 'create') {
        this.db.prepare('INSERT INTO model_profiles (id, status, generation, latest_revision, active_revision, created_at, updated_at) VALUES (?, ?, 1, 1, NULL, ?, ?)').run(id, 'disabled', now, now);
      } else {
        // A non-escalating update of an active profile becomes its active revision (nothing the owner approved is widened).
        this.db
          .prepare("UPDATE model_profiles SET generation = generation + 1, latest_revision = ?, active_revision = CASE WHEN status = 'active' THEN ? ELSE active_revision END, updated_at = ? WHERE id = ?")
          .run(plan.revision, plan.revision, now, id);
      }
    });
    tx();
    return { profile: this.profile(id), revision: plan.revision, issues: plan.issues, verificationAttached: plan.attach.attaches, verificationReason: plan.attach.reason };
  }

  profile(id: string) {
    const row = this.profileRow(id);
    if (!row) throw new ServiceError('NOT_FOUND', `profileId: no profile ${id}`, { field: 'profileId', profileId: id });
    return this.view(row);
  }

  private view(row: ProfileRow) {
    const latest = this.revision(row.id, row.latest_revision);
    const active = row.active_revision ? this.revision(row.id, row.active_revision) : null;
    const cred = this.db.prepare('SELECT provider, status FROM provider_credentials WHERE id = ?').get(latest.credentialId) as { provider: ProviderId; status: string } | undefined;
    return {
      profileId: row.id,
      status: row.status,
      generation: row.generation,
      latestRevision: row.latest_revision,
      activeRevision: row.active_revision,
      pendingOwnerApproval: row.active_revision !== row.latest_revision,
      provider: cred?.provider ?? null,
      credentialStatus: cred ? cred.status : 'deleted',
      ...latest,
      pinnedPrices: { ...latest.pricing, source: latest.priceSource, catalogPriceRef: latest.catalogPriceRef },
      active: active ? { revision: row.active_revision, model: active.model, apiMode: active.apiMode, credentialId: active.credentialId, pricing: active.pricing, limits: active.limits } : null,
      lastCheck: row.last_check_json ? JSON.parse(row.last_check_json) : latest.verification.status === 'verified' ? { source: 'draft', ...latest.verification } : null,
      verified: latest.verification.status === 'verified' ? 'Verified' : 'Not verified',
      repricingReview: cred ? this.pricingReview(cred.provider, latest) : { status: 'unknown', reason: 'credential deleted' },
      createdAt: row.created_at,
      updatedAt: row.updated_at,
    };
  }

  list(profileId?: string) {
    const rows = (profileId
      ? this.db.prepare('SELECT * FROM model_profiles WHERE id = ?').all(profileId)
      : this.db.prepare('SELECT * FROM model_profiles ORDER BY id').all()) as ProfileRow[];
    return { profiles: rows.map((r) => this.view(r)) };
  }

  /** Every revision of a profile, oldest first, with who saved it (the dashboard's history and diff). */
  revisions(id: string): Array<{ revision: number; actor: string; createdAt: string; body: RevisionBody }> {
    if (!this.profileRow(id)) throw new ServiceError('NOT_FOUND', `profileId: no profile ${id}`, { field: 'profileId', profileId: id });
    const rows = this.db.prepare('SELECT revision, actor, created_at FROM model_profile_revisions WHERE profile_id = ? ORDER BY revision').all(id) as Array<{ revision: number; actor: string; created_at: string }>;
    return rows.map((r) => ({ revision: r.revision, actor: r.actor, createdAt: r.created_at, body: this.revision(id, r.revision) }));
  }

  /** Owner activation on the dashboard: approves the whole latest revision (or `revision`), which becomes the active one. */
  activate(id: string, opts: { revision?: number; expectedGeneration?: number } = {}) {
    const row = this.profileRow(id);
    if (!row) throw new ServiceError('NOT_FOUND', `no profile ${id}`, { profileId: id });
    if (opts.expectedGeneration !== undefined && opts.expectedGeneration !== row.generation)
      throw new ServiceError('CONFLICT', `expectedGeneration: the profile is at generation ${row.generation}`, { field: 'expectedGeneration', currentGeneration: row.generation });
    const rev = opts.revision ?? row.latest_revision;
    if (!Number.isInteger(rev) || rev < 1 || rev > row.latest_revision) throw new ServiceError('INVALID_ARGUMENT', `revision: must be 1-${row.latest_revision}`, { field: 'revision' });
    this.db.prepare("UPDATE model_profiles SET status = 'active', active_revision = ?, generation = generation + 1, updated_at = ? WHERE id = ?").run(rev, nowIso(), id);
    this.opts.audit.record({ actor: 'dashboard', action: 'model_profile_activate', target: id, outcome: 'ok', details: { revision: rev } });
    return this.profile(id);
  }

  disable(id: string) {
    if (!this.profileRow(id)) throw new ServiceError('NOT_FOUND', `no profile ${id}`, { profileId: id });
    this.db.prepare("UPDATE model_profiles SET status = 'disabled', generation = generation + 1, updated_at = ? WHERE id = ?").run(nowIso(), id);
    this.opts.audit.record({ actor: 'dashboard', action: 'model_profile_disable', target: id, outcome: 'ok' });
    return this.profile(id);
  }

  /** Deletes the profile and its revisions: its custom URLs are no longer bound (constraint 4). */
  deleteProfile(id: string): { deleted: true; profileId: string } {
    if (!this.profileRow(id)) throw new ServiceError('NOT_FOUND', `no profile ${id}`, { profileId: id });
    this.db.transaction(() => {
      this.db.prepare('DELETE FROM model_profile_revisions WHERE profile_id = ?').run(id);
      this.db.prepare('DELETE FROM model_profiles WHERE id = ?').run(id);
    })();
    this.opts.audit.record({ actor: 'dashboard', action: 'model_profile_delete', target: id, outcome: 'ok' });
    return { deleted: true, profileId: id };
  }

  /**
   * What an agent spawn pins (issue #14): the profile's status and its active revision with the
   * provider of that revision's credential. Throws NOT_FOUND for an unknown profile.
   */
  pinnable(id: string): { status: 'active' | 'disabled'; revision: number | null; body: RevisionBody | null; provider: ProviderId | null; credentialStatus: string } {
    const row = this.profileRow(id);
    if (!row) throw new ServiceError('NOT_FOUND', `profileId: no profile ${id}`, { field: 'profileId', profileId: id });
    if (!row.active_revision) return { status: row.status, revision: null, body: null, provider: null, credentialStatus: 'unknown' };
    const body = this.revision(row.id, row.active_revision);
    const cred = this.db.prepare('SELECT provider, status FROM provider_credentials WHERE id = ?').get(body.credentialId) as { provider: ProviderId; status: string } | undefined;
    return { status: row.status, revision: row.active_revision, body, provider: cred?.provider ?? null, credentialStatus: cred?.status ?? 'deleted' };
  }

  /**
   * Snapshot routes: the active revision of every active profile whose credential exists and is
   * active, plus `pinned` revisions (agents keep the revision they were spawned on until they end,
   * agent rule 3) of profiles that are still active.
   */
  routes(pinned: Array<{ profileId: string; revision: number }> = []): SnapshotRoute[] {
    const out: SnapshotRoute[] = [];
    const rows = this.db.prepare("SELECT * FROM model_profiles WHERE status = 'active' AND active_revision IS NOT NULL").all() as ProfileRow[];
    const wanted: Array<{ row: ProfileRow; rev: number }> = rows.map((row) => ({ row, rev: row.active_revision! }));
    const seen = new Set(wanted.map((w) => `${w.row.id}@${w.rev}`));
    for (const record of pinned) {
      const row = rows.find((r) => r.id === record.profileId);
      if (!row || seen.has(`${record.profileId}@${record.revision}`)) continue;
      seen.add(`${record.profileId}@${record.revision}`);
      wanted.push({ row, rev: record.revision });
    }
    for (const { row, rev } of wanted) {
      const revisionBody = this.revision(row.id, rev);
      const cred = this.db.prepare('SELECT * FROM provider_credentials WHERE id = ?').get(revisionBody.credentialId) as CredRow | undefined;
      if (!cred || cred.status !== 'active') continue;
      let key: string;
      try {
        key = this.opts.secrets.open(cred.key_sealed, aadOf(cred.id, cred.key_version)).toString('utf8');
      } catch {
        this.opts.log.error({ credentialId: cred.id }, 'a provider key failed its integrity check; its profiles do not route');
        continue;
      }
      out.push({
        profileId: row.id,
        revision: rev,
        provider: cred.provider,
        apiMode: revisionBody.apiMode,
        model: revisionBody.model,
        credential: { id: cred.id, key, authHeader: cred.auth_header },
        upstreamUrl: cred.provider === 'custom' ? revisionBody.customUpstreamUrl : null,
        pricing: revisionBody.pricing,
        limits: revisionBody.limits,
      });
    }
    return out;
  }
}

/** What the methods above answer, by name (the shapes are the code's own, inferred by the compiler). */
export type ModelProviderListResult = Awaited<ReturnType<ModelService['providerList']>>;
export type ModelPricingReviewResult = Awaited<ReturnType<ModelService['pricingReview']>>;
export type ModelValidateResult = Awaited<ReturnType<ModelService['validate']>>;
export type ModelSaveResult = Awaited<ReturnType<ModelService['save']>>;
export type ModelProfileResult = Awaited<ReturnType<ModelService['profile']>>;
export type ModelListResult = Awaited<ReturnType<ModelService['list']>>;
export type ModelActivateResult = Awaited<ReturnType<ModelService['activate']>>;
export type ModelDisableResult = Awaited<ReturnType<ModelService['disable']>>;
