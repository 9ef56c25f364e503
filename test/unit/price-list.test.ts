import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { PriceList, SHIPPED_PRICE_LIST } from '../../src/services/models/price-list.js';
import { ModelCatalog } from '../../src/services/models/catalog.js';
import { PROVIDERS } from '../../src/core/providers.js';
import { ConfigError } from '../../src/core/config.js';

const dirs: string[] = [];
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));
const price = (i: number, o: number) => ({ inputMicrosPerMillionTokens: i, outputMicrosPerMillionTokens: o, cachedReadMicrosPerMillionTokens: null, cachedWriteMicrosPerMillionTokens: null });

function setup(shipped: unknown, operator: unknown) {
  const d = mkdtempSync(join(tmpdir(), 'atelier-prices-'));
  dirs.push(d);
  writeFileSync(join(d, 'shipped.json'), JSON.stringify({ version: 1, prices: shipped }));
  writeFileSync(join(d, 'config.json'), JSON.stringify({ prices: operator }));
  const list = new PriceList(join(d, 'config.json'), join(d, 'shipped.json'));
  // parse() uses only the price list; the other collaborators are not touched by it.
  const catalog = new ModelCatalog({ db: undefined as never, cursors: undefined as never, models: {} as never, prices: list });
  return { d, list, catalog };
}

describe('the price list for catalogs without prices', () => {
  it('ships a valid list with the service', () => {
    expect(() => new PriceList('/nonexistent/config.json').lookup('provider_a', 'anything')).not.toThrow();
    expect(SHIPPED_PRICE_LIST.endsWith('data/price-list.json')).toBe(true);
  });

  it('fills a listing without prices from the shipped list; the operator entry wins; listing prices stay; provider_f stays unknown', () => {
    const { catalog } = setup({ provider_a: { 'm-shipped': price(100, 200), 'm-both': price(1, 2) } }, { provider_a: { 'm-both': price(300, 400) }, provider_f: { 'f-model': price(5, 6) } });
    const now = new Date().toISOString();
    const a = catalog.parse(PROVIDERS.provider_a, { data: [{ id: 'm-shipped' }, { id: 'm-both' }, { id: 'm-none' }, { id: 'm-listed', pricing: price(7, 8) }] }, 'listed_for_credential', now);
    const by = Object.fromEntries(a.map((e) => [e.providerModelId, e.pricing]));
    expect(by['m-shipped']).toMatchObject({ inputMicrosPerMillionTokens: 100, outputMicrosPerMillionTokens: 200, provenance: { source: 'price-list' } });
    expect(by['m-both']).toMatchObject({ inputMicrosPerMillionTokens: 300, outputMicrosPerMillionTokens: 400, provenance: { source: 'operator-price-list' } });
    expect(by['m-none']).toMatchObject({ inputMicrosPerMillionTokens: null, outputMicrosPerMillionTokens: null });
    expect(by['m-listed']).toMatchObject({ inputMicrosPerMillionTokens: 7, provenance: { source: PROVIDERS.provider_a.catalogSource } });
    const f = catalog.parse(PROVIDERS.provider_f, { data: [{ id: 'f-model' }] }, 'listed_for_credential', now);
    expect(f[0]!.pricing.inputMicrosPerMillionTokens).toBeNull();
  });

  it('picks up an operator change without a restart, and refuses a bad entry naming it', () => {
    const { d, list } = setup({}, {});
    expect(list.lookup('provider_b', 'x')).toBeNull();
    writeFileSync(join(d, 'config.json'), JSON.stringify({ prices: { provider_b: { x: price(11, 22) } } }) + ' ');
    expect(list.lookup('provider_b', 'x')).toMatchObject({ source: 'operator-price-list', price: { inputMicrosPerMillionTokens: 11 } });
    writeFileSync(join(d, 'config.json'), JSON.stringify({ prices: { provider_b: { x: { inputMicrosPerMillionTokens: 1.5 } } } }));
    expect(() => list.lookup('provider_b', 'x')).toThrow(ConfigError);
    expect(() => list.lookup('provider_b', 'x')).toThrow(/"prices"\.provider_b\.x\.inputMicrosPerMillionTokens/);
  });
});
