/**
 * The price list for catalogs whose listing carries no prices: data/price-list.json shipped with
 * the service, overridden and extended by the operator in the config file section "prices":
 *   "prices": { "provider_a": { "model-x": { "inputMicrosPerMillionTokens": 150000, "outputMicrosPerMillionTokens": 600000,
 *                                            "cachedReadMicrosPerMillionTokens": 75000, "cachedWriteMicrosPerMillionTokens": null } } }
 * Both are re-read when they change. Integer micro-USD per million tokens; null means unknown (never free).
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ConfigError } from '../../core/config.js';

export interface ListedPrice {
  inputMicrosPerMillionTokens: number | null;
  outputMicrosPerMillionTokens: number | null;
  cachedReadMicrosPerMillionTokens: number | null;
  cachedWriteMicrosPerMillionTokens: number | null;
}

type Table = Record<string, Record<string, ListedPrice>>;

export const SHIPPED_PRICE_LIST = fileURLToPath(new URL('../../../data/price-list.json', import.meta.url));
const FIELDS = ['inputMicrosPerMillionTokens', 'outputMicrosPerMillionTokens', 'cachedReadMicrosPerMillionTokens', 'cachedWriteMicrosPerMillionTokens'] as const;

function validate(raw: unknown, where: string): Table {
  if (raw === undefined) return {};
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ConfigError(`${where}: must be an object of provider -> model -> prices`);
  const out: Table = {};
  for (const [provider, models] of Object.entries(raw as Record<string, unknown>)) {
    if (typeof models !== 'object' || models === null || Array.isArray(models)) throw new ConfigError(`${where}.${provider}: must be an object of model -> prices`);
    out[provider] = {};
    for (const [model, price] of Object.entries(models as Record<string, unknown>)) {
      const p = (price ?? {}) as Record<string, unknown>;
      const entry = {} as Record<(typeof FIELDS)[number], number | null>;
      for (const file of FIELDS) {
        const v = p[file] ?? null;
        if (v !== null && !(Number.isSafeInteger(v) && (v as number) >= 0))
          throw new ConfigError(`${where}.${provider}.${model}.${file}: must be a non-negative integer (micro-USD per million tokens) or null`);
        entry[file] = v as number | null;
      }
      out[provider]![model] = entry;
    }
  }
  return out;
}

export class PriceList {
  private cache = new Map<string, { key: string; table: Table }>();

  constructor(
    private readonly configPath: string,
    private readonly shippedFile = SHIPPED_PRICE_LIST,
  ) {}

  private load(file: string, pick: (json: Record<string, unknown>) => unknown, where: string): Table {
    if (!existsSync(file)) return {};
    const st = statSync(file);
    const key = `${st.mtimeMs}:${st.size}`;
    const hit = this.cache.get(file);
    if (hit && hit.key === key) return hit.table;
    let json: Record<string, unknown>;
    try {
      json = JSON.parse(readFileSync(file, 'utf8'));
    } catch (e) {
      throw new ConfigError(`${where} is not valid JSON: ${(e as Error).message}`);
    }
    const table = validate(pick(json), where);
    this.cache.set(file, { key, table });
    return table;
  }

  /** The listed price of a model, the operator's entry winning over the shipped one. */
  lookup(provider: string, modelId: string): { price: ListedPrice; source: 'operator-price-list' | 'price-list' } | null {
    const operator = this.load(this.configPath, (j) => j.prices, `config file ${this.configPath}: "prices"`)[provider]?.[modelId];
    if (operator) return { price: operator, source: 'operator-price-list' };
    const shipped = this.load(this.shippedFile, (j) => j.prices, `price list ${this.shippedFile}`)[provider]?.[modelId];
    if (shipped) return { price: shipped, source: 'price-list' };
    return null;
  }
}
