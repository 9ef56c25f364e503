/**
 * Pricing math for model spend, shared by the gateway (reservations, settlement) and the runner.
 * Prices are integer micro-USD per million tokens (spec routing rule 3); money is integer micro-USD,
 * computed with BigInt and rounded up once per request. No floats touch money.
 * See docs/spend.md for every rule below.
 */

export interface Pricing {
  inputMicrosPerMillionTokens: number | null;
  outputMicrosPerMillionTokens: number | null;
  cachedReadMicrosPerMillionTokens?: number | null;
  cachedWriteMicrosPerMillionTokens?: number | null;
}

/** Token usage of one response. inputTokens is the total input and includes cached reads and cache writes. */
export interface Usage {
  inputTokens: number;
  cachedInputTokens: number;
  cacheWriteTokens: number;
  outputTokens: number;
  /** Reasoning tokens are part of outputTokens and billed at the output price. */
  reasoningTokens: number;
}

export const ZERO_USAGE: Usage = { inputTokens: 0, cachedInputTokens: 0, cacheWriteTokens: 0, outputTokens: 0, reasoningTokens: 0 };

/** Resolved prices (micro-USD per million tokens) with every unknown replaced by its rule. */
export interface EffectivePrices {
  input: bigint;
  output: bigint;
  cachedRead: bigint;
  cacheWrite: bigint;
  /** The highest price any input token can be billed at: what a worst-case reservation uses. */
  maxInputSide: bigint;
}

const MILLION = 1_000_000n;

function validPrice(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

/**
 * Resolves a profile's prices. Input and output prices are required: when either is unknown (null or
 * missing) the cost of a request cannot be bounded and the result is an error string (the gateway
 * refuses the request before anything is sent). An unknown cached-read price is charged at the input
 * price (a cached read is never billed above an uncached one). An unknown cache-write price is charged
 * at 2x the input price when the provider is marked as billing cache writes, else at the input price
 * (spec routing rule 2).
 */
export function effectivePrices(p: Pricing | null | undefined, cacheWriteBilled: boolean): EffectivePrices | string {
  if (!p) return 'the route has no pricing';
  if (!validPrice(p.inputMicrosPerMillionTokens)) return 'the input price is unknown (null is never free)';
  if (!validPrice(p.outputMicrosPerMillionTokens)) return 'the output price is unknown (null is never free)';
  for (const k of ['cachedReadMicrosPerMillionTokens', 'cachedWriteMicrosPerMillionTokens'] as const) {
    const v = p[k];
    if (v !== null && v !== undefined && !validPrice(v)) return `${k} must be a non-negative integer or null`;
  }
  const input = BigInt(p.inputMicrosPerMillionTokens);
  const output = BigInt(p.outputMicrosPerMillionTokens);
  const cachedRead = validPrice(p.cachedReadMicrosPerMillionTokens) ? BigInt(p.cachedReadMicrosPerMillionTokens) : input;
  const cacheWrite = validPrice(p.cachedWriteMicrosPerMillionTokens) ? BigInt(p.cachedWriteMicrosPerMillionTokens) : cacheWriteBilled ? 2n * input : input;
  let maxInputSide = input;
  if (cachedRead > maxInputSide) maxInputSide = cachedRead;
  if (cacheWrite > maxInputSide) maxInputSide = cacheWrite;
  return { input, output, cachedRead, cacheWrite, maxInputSide };
}

function ceilDiv(a: bigint, b: bigint): bigint {
  return a <= 0n ? 0n : (a + b - 1n) / b;
}

function nonNeg(n: number): bigint {
  return Number.isSafeInteger(n) && n > 0 ? BigInt(n) : 0n;
}

/** micro-USD * 1e6 (the exact, unrounded cost) of a usage. */
export function costScaled(u: Usage, pr: EffectivePrices): bigint {
  const input = nonNeg(u.inputTokens);
  const cached = nonNeg(u.cachedInputTokens);
  const write = nonNeg(u.cacheWriteTokens);
  let uncached = input - cached - write;
  if (uncached < 0n) uncached = 0n;
  return uncached * pr.input + cached * pr.cachedRead + write * pr.cacheWrite + nonNeg(u.outputTokens) * pr.output;
}

/** Cost of a usage in integer micro-USD, rounded up (once, on the request's total). */
export function costMicros(u: Usage, pr: EffectivePrices): number {
  return Number(ceilDiv(costScaled(u, pr), MILLION));
}

/** Worst case of a request: every input token at the highest input-side price, plus the output limit at the output price. */
export function worstCaseMicros(inputBound: number, outputTokens: number, pr: EffectivePrices): number {
  return Number(ceilDiv(nonNeg(inputBound) * pr.maxInputSide + nonNeg(outputTokens) * pr.output, MILLION));
}

/**
 * The most output tokens whose worst case still fits in `remainingMicros` next to `inputBound` input
 * tokens, or -1 when not even the input fits. Infinity when output is free.
 */
export function affordableOutputTokens(remainingMicros: number, inputBound: number, pr: EffectivePrices): number {
  const room = nonNeg(remainingMicros) * MILLION - nonNeg(inputBound) * pr.maxInputSide;
  if (room < 0n) return -1;
  if (pr.output === 0n) return Number.POSITIVE_INFINITY;
  const n = room / pr.output;
  return n > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(n);
}

/** UTC window keys of an instant: day YYYY-MM-DD and month YYYY-MM. */
export function windowKeys(ms: number): { day: string; month: string } {
  const iso = new Date(ms).toISOString();
  return { day: iso.slice(0, 10), month: iso.slice(0, 7) };
}
