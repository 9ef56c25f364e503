/**
 * Provider credentials (docs/models.md, dashboard only): the provider registry, keys sealed at
 * rest (their metadata out), rotation, status and removal. The base of the model service
 * (profiles.ts).
 */
import type { DB } from '../../store/db.js';
import type { SecretBox } from '../../core/crypto.js';
import type { AuditLog } from '../instance/index.js';
import type { Logger } from '../../core/log.js';
import { ServiceError } from '../../core/errors.js';
import { newId } from '../../core/ids.js';
import { nowIso } from '../../core/clock.js';
import {
  PROVIDER_IDS,
  readProviderOverrides,
  resolveProviders,
  type AuthHeaderMode,
  type ProviderId,
  type ProviderInfo,
} from '../../core/providers.js';
import { CredRow, CredentialMeta, UNSUPPORTED_SIGN_IN, aadOf } from './records.js';

export class ModelCredentials {
  constructor(
    protected readonly opts: { db: DB; secrets: SecretBox; audit: AuditLog; log: Logger; configPath: string },
  ) {}

  protected get db(): DB {
    return this.opts.db;
  }

  // ---------------- registry ----------------

  registry(): Record<ProviderId, ProviderInfo> {
    try {
      return resolveProviders(readProviderOverrides(this.opts.configPath));
    } catch (e) {
      this.opts.log.warn({ err: (e as Error).message }, 'config section "providers" is invalid; using the registry defaults');
      return resolveProviders({});
    }
  }

  providerList(provider?: ProviderId) {
    const reg = this.registry();
    const ids = provider ? [provider] : [...PROVIDER_IDS];
    return {
      providers: ids.map((id) => {
        const providerInfo = reg[id];
        return {
          provider: providerInfo.id,
          authHeaderModes: providerInfo.authHeaderModes,
          apiModes: providerInfo.apiModes,
          apiNote: providerInfo.apiNote,
          endpoints:
            providerInfo.id === 'custom'
              ? { baseUrl: null, note: 'one caller-entered HTTPS upstream URL per profile' }
              : { baseUrl: providerInfo.baseUrl, chatCompletions: providerInfo.apiModes.includes('chat-completions') ? providerInfo.baseUrl + '/chat/completions' : null, responses: providerInfo.apiModes.includes('responses') ? providerInfo.baseUrl + '/responses' : null, models: providerInfo.catalogSource === 'provider-models-endpoint' ? providerInfo.baseUrl + '/models' : null },
          hosts: providerInfo.hosts,
          catalogSource: providerInfo.catalogSource,
          cacheWriteBilled: providerInfo.cacheWriteBilled,
          ...(providerInfo.sessionHeader ? { sessionHeader: providerInfo.sessionHeader, userAgent: providerInfo.userAgent } : {}),
        };
      }),
      credentials: this.listCredentials(provider),
      acceptedSignIn: 'provider API keys only, added by the owner on the dashboard',
      unsupportedSignIn: UNSUPPORTED_SIGN_IN,
    };
  }

  // ---------------- credentials (dashboard only) ----------------

  protected meta(credential: CredRow): CredentialMeta {
    return {
      id: credential.id,
      provider: credential.provider,
      label: credential.label,
      authHeader: credential.auth_header,
      status: credential.status,
      keyVersion: credential.key_version,
      lastCheck: credential.last_check_json ? JSON.parse(credential.last_check_json) : null,
      createdAt: credential.created_at,
      updatedAt: credential.updated_at,
    };
  }

  listCredentials(provider?: ProviderId): CredentialMeta[] {
    const rows = (provider
      ? this.db.prepare('SELECT * FROM provider_credentials WHERE provider = ? ORDER BY created_at, id').all(provider)
      : this.db.prepare('SELECT * FROM provider_credentials ORDER BY created_at, id').all()) as CredRow[];
    return rows.map((r) => this.meta(r));
  }

  protected credRow(id: string, field = 'credentialId'): CredRow {
    const r = this.db.prepare('SELECT * FROM provider_credentials WHERE id = ?').get(id) as CredRow | undefined;
    if (!r) throw new ServiceError('NOT_FOUND', `${field}: no provider credential ${id}; model_provider_list lists them`, { field, credentialId: id });
    return r;
  }

  credential(id: string): CredentialMeta {
    return this.meta(this.credRow(id));
  }

  /** The plain key, for the gateway snapshot and connection checks only. Never returned by a tool or REST path. */
  keyOf(id: string): string {
    const r = this.credRow(id);
    return this.opts.secrets.open(r.key_sealed, aadOf(r.id, r.key_version)).toString('utf8');
  }

  protected checkKey(key: unknown): string {
    if (typeof key !== 'string' || key.length < 8 || key.length > 4096 || /[\s\x00-\x1f\x7f]/.test(key))
      throw new ServiceError('INVALID_ARGUMENT', 'key: must be a string of 8-4096 characters without spaces or control characters', { field: 'key' });
    return key;
  }

  createCredential(input: { provider: unknown; key: unknown; authHeader?: unknown; label?: unknown }): CredentialMeta {
    const provider = input.provider as ProviderId;
    if (!(PROVIDER_IDS as readonly string[]).includes(String(provider)))
      throw new ServiceError('INVALID_ARGUMENT', `provider: must be one of ${PROVIDER_IDS.join(', ')}`, { field: 'provider' });
    const key = this.checkKey(input.key);
    const p = this.registry()[provider];
    const authHeader = (input.authHeader ?? p.authHeaderModes[0]) as AuthHeaderMode;
    if (!p.authHeaderModes.includes(authHeader))
      throw new ServiceError('INVALID_ARGUMENT', `authHeader: ${provider} accepts ${p.authHeaderModes.join(' or ')}`, { field: 'authHeader' });
    const label = input.label === undefined ? '' : input.label;
    if (typeof label !== 'string' || label.length > 100) throw new ServiceError('INVALID_ARGUMENT', 'label: must be a string of at most 100 characters', { field: 'label' });
    const id = newId('credential');
    const now = nowIso();
    this.db
      .prepare('INSERT INTO provider_credentials (id, provider, label, auth_header, status, key_version, key_sealed, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?)')
      .run(id, provider, label, authHeader, 'active', this.opts.secrets.seal(key, aadOf(id, 1)), now, now);
    this.opts.audit.record({ actor: 'dashboard', action: 'provider_credential_create', target: id, outcome: 'ok', details: { provider, authHeader, keyVersion: 1 } });
    return this.credential(id);
  }

  rotateCredential(id: string, keyRaw: unknown): CredentialMeta {
    const r = this.credRow(id, 'id');
    const key = this.checkKey(keyRaw);
    const v = r.key_version + 1;
    this.db.prepare('UPDATE provider_credentials SET key_version = ?, key_sealed = ?, updated_at = ?, last_check_json = NULL WHERE id = ?').run(v, this.opts.secrets.seal(key, aadOf(id, v)), nowIso(), id);
    this.opts.audit.record({ actor: 'dashboard', action: 'provider_credential_rotate', target: id, outcome: 'ok', details: { keyVersion: v } });
    return this.credential(id);
  }

  setCredentialStatus(id: string, status: 'active' | 'disabled'): CredentialMeta {
    this.credRow(id, 'id');
    this.db.prepare('UPDATE provider_credentials SET status = ?, updated_at = ? WHERE id = ?').run(status, nowIso(), id);
    this.opts.audit.record({ actor: 'dashboard', action: status === 'active' ? 'provider_credential_enable' : 'provider_credential_disable', target: id, outcome: 'ok' });
    return this.credential(id);
  }

  deleteCredential(id: string): { deleted: true; id: string; profilesLeftWithoutCredential: string[] } {
    this.credRow(id, 'id');
    const profiles = (this.db.prepare('SELECT DISTINCT profile_id FROM model_profile_revisions WHERE credential_id = ?').all(id) as Array<{ profile_id: string }>).map((r) => r.profile_id);
    this.db.prepare('DELETE FROM provider_credentials WHERE id = ?').run(id);
    this.opts.audit.record({ actor: 'dashboard', action: 'provider_credential_delete', target: id, outcome: 'ok' });
    return { deleted: true, id, profilesLeftWithoutCredential: profiles };
  }
}
