/**
 * An exact in-memory vector index: every vector of one owner in one contiguous Float32Array (row
 * after row), normalised once when added. A search first scans an int16 copy of the rows (each row
 * scaled so its largest component is 2000) with a tiny WebAssembly SIMD kernel, assembled below
 * from its opcodes: half the bytes of float32, eight products and their sums in one instruction.
 * Quantisation only narrows the field: each row's rounding error bounds how far its integer score
 * can be from the true one (about 0.002 for the model's vectors), and every row that could still be
 * among the best is scored again from the float32 rows, so the answer is the same as an exact float
 * scan. Where WebAssembly SIMD is missing, or the dimension is not a multiple of 8, a plain
 * JavaScript float loop does the exact scan (several times slower).
 *
 * Removal moves the last row into the freed slot, so the rows stay dense and a scan touches only
 * live vectors. Search returns the best n rows at or above a floor that pass a caller's filter; the
 * filter runs only for rows that score high enough to matter.
 */

export interface VectorHit<M> {
  id: string;
  score: number;
  meta: M;
}

/** The part of the WebAssembly API used here (the project's TypeScript libs do not declare it). */
interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}
interface WasmApi {
  validate(bytes: Uint8Array): boolean;
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: Record<string, Record<string, unknown>>) => { exports: Record<string, unknown> };
  Memory: new (d: { initial: number }) => WasmMemory;
}
const wasm = (globalThis as unknown as { WebAssembly?: WasmApi }).WebAssembly;

// ---------- the WebAssembly kernel ----------

const leb = (limit: number): number[] => {
  const out: number[] = [];
  do {
    let b = limit & 0x7f;
    limit >>>= 7;
    if (limit) b |= 0x80;
    out.push(b);
  } while (limit);
  return out;
};
const section = (id: number, bytes: number[]): number[] => [id, ...leb(bytes.length), ...bytes];
const name = (s: string): number[] => [s.length, ...Buffer.from(s, 'utf8')];

/**
 * scan(q, data, n, rowBytes, out): for each of n rows of rowBytes bytes of int16 values starting at
 * data, out[row] = the int32 dot product of the int16 query at q with that row (exact integer
 * arithmetic: with components scaled to at most SCALE, 512 x SCALE x SCALE < 2^31). Memory is
 * imported (env.mem) so the index owns and grows it. rowBytes must be a multiple of 16: each step
 * adds the i32x4.dot_i16x8_s of eight lanes to the accumulator.
 */
function kernelBytes(): Uint8Array {
  const get = 0x20, set = 0x21, tee = 0x22, simd = 0xfd;
  const v128load = [simd, 0x00, 0, 0]; // align 1, offset 0
  const dot = [simd, 0xba, 0x01]; // i32x4.dot_i16x8_s
  const add = [simd, 0xae, 0x01]; // i32x4.add
  const lane = (i: number): number[] => [simd, 0x1b, i]; // i32x4.extract_lane
  // params: 0 q, 1 data, 2 n, 3 rowBytes, 4 out; locals: 5 qv v128, 6 rv v128, 7 i i32, 8 row i32, 9 acc v128
  const code = [
    get, 1, set, 8, // row = data
    0x02, 0x40, // block
    0x03, 0x40, //   loop (rows)
    get, 2, 0x45, 0x0d, 1, //     if n == 0: break
    simd, 0x0c, ...new Array<number>(16).fill(0), set, 9, //     acc = 0
    0x41, 0, set, 7, //     i = 0
    0x03, 0x40, //     loop (16 bytes at a time)
    get, 0, get, 7, 0x6a, ...v128load, set, 5, //       qv = q[i..i+16]
    get, 8, get, 7, 0x6a, ...v128load, set, 6, //       rv = row[i..i+16]
    get, 9, get, 5, get, 6, ...dot, ...add, set, 9, //       acc += dot(qv, rv)
    get, 7, 0x41, 16, 0x6a, tee, 7, get, 3, 0x49, 0x0d, 0, //       i += 16; continue while i < rowBytes
    0x0b, //     end
    get, 4, get, 9, ...lane(0), get, 9, ...lane(1), 0x6a, get, 9, ...lane(2), 0x6a, get, 9, ...lane(3), 0x6a, 0x36, 2, 0, //     *out = sum of lanes
    get, 4, 0x41, 4, 0x6a, set, 4, //     out += 4
    get, 8, get, 3, 0x6a, set, 8, //     row += rowBytes
    get, 2, 0x41, 1, 0x6b, set, 2, //     n -= 1
    0x0c, 0, //     continue
    0x0b, //   end
    0x0b, // end
    0x0b, // end of function
  ];
  const body = [0x03, 0x02, 0x7b, 0x02, 0x7f, 0x01, 0x7b, ...code]; // locals: 2 x v128, 2 x i32, 1 x v128
  return new Uint8Array([
    0x00, 0x61, 0x73, 0x6d, 1, 0, 0, 0,
    ...section(1, [1, 0x60, 5, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0]), // type: (i32 x5) -> ()
    ...section(2, [1, ...name('env'), ...name('mem'), 0x02, 0x00, 1]), // import env.mem, min 1 page
    ...section(3, [1, 0]), // one function of type 0
    ...section(7, [1, ...name('scan'), 0x00, 0]), // export "scan"
    ...section(10, [1, ...leb(body.length), ...body]),
  ]);
}

let wasmModule: object | null | undefined;
function simdModule(): object | null {
  if (wasmModule !== undefined) return wasmModule;
  try {
    const bytes = kernelBytes();
    wasmModule = wasm && wasm.validate(bytes) ? new wasm.Module(bytes) : null;
  } catch {
    wasmModule = null;
  }
  return wasmModule;
}

/** Whether the SIMD kernel can run here (tests compare it with the JavaScript loop). */
export function simdAvailable(): boolean {
  return simdModule() !== null;
}

const PAGE = 65536;
const align16 = (n: number): number => Math.ceil(n / 16) * 16;
/** Slack added to the quantisation error bound for float rounding of the scales. */
const EPS = 1e-6;

export class VectorIndex<M> {
  private readonly ids: string[] = [];
  private readonly metas: M[] = [];
  private readonly slots = new Map<string, number>();
  private capacity = 0;
  /** Unit vectors, row after row (the exact values: re-ranking, vector()). */
  private data = new Float32Array(0);
  private readonly query: Float32Array;
  // The SIMD path: int16 rows in WebAssembly memory, a scale and an error bound per row.
  private memory: WasmMemory | undefined;
  private scan: ((q: number, data: number, n: number, rowBytes: number, out: number) => void) | undefined;
  private q16 = new Int16Array(0);
  private rows16 = new Int16Array(0);
  private dots = new Int32Array(0);
  private inv = new Float32Array(0);
  private err = new Float32Array(0);
  readonly usesSimd: boolean;

  /** dim: floats per vector; simd false forces the exact JavaScript scan. */
  constructor(
    readonly dim: number,
    opts: { simd?: boolean; initialCapacity?: number } = {},
  ) {
    if (!Number.isInteger(dim) || dim <= 0) throw new RangeError(`VectorIndex: dim must be a positive integer, not ${dim}`);
    const mod = opts.simd !== false && dim % 8 === 0 ? simdModule() : null;
    if (mod) {
      this.memory = new wasm!.Memory({ initial: 1 });
      this.scan = new wasm!.Instance(mod, { env: { mem: this.memory } }).exports.scan as typeof this.scan;
    }
    this.usesSimd = !!mod;
    this.query = new Float32Array(dim);
    this.grow(Math.max(16, opts.initialCapacity ?? 0));
  }

  get size(): number {
    return this.ids.length;
  }

  has(id: string): boolean {
    return this.slots.has(id);
  }

  meta(id: string): M | undefined {
    const s = this.slots.get(id);
    return s === undefined ? undefined : this.metas[s];
  }

  /** Replaces the filter data of a row without touching its vector; false if the id is unknown. */
  setMeta(id: string, meta: M): boolean {
    const s = this.slots.get(id);
    if (s === undefined) return false;
    this.metas[s] = meta;
    return true;
  }

  /** The stored (normalised) vector of an id, copied. */
  vector(id: string): Float32Array | undefined {
    const s = this.slots.get(id);
    return s === undefined ? undefined : this.data.slice(s * this.dim, (s + 1) * this.dim);
  }

  *entries(): IterableIterator<[string, M]> {
    for (let i = 0; i < this.ids.length; i++) yield [this.ids[i]!, this.metas[i]!];
  }

  /** Adds or replaces the vector of an id (stored normalised to unit length; a zero vector stays zero). */
  upsert(id: string, vec: Float32Array, meta: M): void {
    if (vec.length !== this.dim) throw new RangeError(`VectorIndex: vector of ${vec.length} dimensions, index has ${this.dim}`);
    let text = this.slots.get(id);
    if (text === undefined) {
      if (this.ids.length === this.capacity) this.grow(this.capacity * 2);
      text = this.ids.length;
      this.ids.push(id);
      this.metas.push(meta);
      this.slots.set(id, text);
    } else this.metas[text] = meta;
    const n = norm(vec);
    const row = this.data.subarray(text * this.dim, (text + 1) * this.dim);
    for (let i = 0; i < this.dim; i++) row[i] = n > 0 ? vec[i]! / n : 0;
    if (this.usesSimd) {
      const q = quantise(row, this.rows16.subarray(text * this.dim, (text + 1) * this.dim));
      this.inv[text] = q.inv;
      this.err[text] = q.err;
    }
  }

  /** Removes an id; the last row moves into its slot. False if it was not there. */
  remove(id: string): boolean {
    const text = this.slots.get(id);
    if (text === undefined) return false;
    const last = this.ids.length - 1;
    if (text !== last) {
      this.data.copyWithin(text * this.dim, last * this.dim, (last + 1) * this.dim);
      if (this.usesSimd) {
        this.rows16.copyWithin(text * this.dim, last * this.dim, (last + 1) * this.dim);
        this.inv[text] = this.inv[last]!;
        this.err[text] = this.err[last]!;
      }
      const moved = this.ids[last]!;
      this.ids[text] = moved;
      this.metas[text] = this.metas[last]!;
      this.slots.set(moved, text);
    }
    this.ids.pop();
    this.metas.pop();
    this.slots.delete(id);
    return true;
  }

  clear(): void {
    this.ids.length = 0;
    this.metas.length = 0;
    this.slots.clear();
  }

  /**
   * The best n rows by cosine similarity to q (normalised here), each at least minScore and
   * accepted by the filter, best first (ties by slot). Scores are exact: with the SIMD kernel the
   * int16 scan only bounds each row's score (|exact - approximate| <= the row's error bound), and
   * every row that could still be among the best n is scored again in full precision.
   */
  search(query: Float32Array, limit: number, minScore: number, accept?: (meta: M, id: string) => boolean): Array<VectorHit<M>> {
    if (query.length !== this.dim) throw new RangeError(`VectorIndex: query of ${query.length} dimensions, index has ${this.dim}`);
    const count = this.ids.length;
    if (count === 0 || limit <= 0) return [];
    const qn = norm(query);
    for (let i = 0; i < this.dim; i++) this.query[i] = qn > 0 ? query[i]! / qn : 0;
    const top = this.usesSimd ? this.searchQuantised(count, limit, minScore, accept) : this.searchExact(count, limit, minScore, accept);
    return top.map((t) => ({ id: this.ids[t.slot]!, score: t.score, meta: this.metas[t.slot]! }));
  }

  private exact(slot: number): number {
    const data = this.data;
    const query = this.query;
    const options = slot * this.dim;
    let s0 = 0;
    let s1 = 0;
    let i = 0;
    for (; i + 1 < this.dim; i += 2) {
      s0 += query[i]! * data[options + i]!;
      s1 += query[i + 1]! * data[options + i + 1]!;
    }
    if (i < this.dim) s0 += query[i]! * data[options + i]!;
    return s0 + s1;
  }

  private searchExact(count: number, limit: number, minScore: number, accept?: (meta: M, id: string) => boolean): Array<{ slot: number; score: number }> {
    let top: Array<{ slot: number; score: number }> = [];
    let floor = minScore;
    for (let result = 0; result < count; result++) {
      const s = this.exact(result);
      if (!(s >= floor)) continue;
      if (accept && !accept(this.metas[result]!, this.ids[result]!)) continue;
      top.push({ slot: result, score: s });
      if (top.length >= limit * 2) {
        top.sort(byScore);
        top = top.slice(0, limit);
        floor = top[limit - 1]!.score;
      }
    }
    return top.sort(byScore).slice(0, limit);
  }

  private searchQuantised(count: number, limit: number, minScore: number, accept?: (meta: M, id: string) => boolean): Array<{ slot: number; score: number }> {
    const qq = quantise(this.query, this.q16);
    this.scan!(0, this.rows16.byteOffset, count, this.dim * 2, this.dots.byteOffset);
    const dots = this.dots;
    const inv = this.inv;
    const err = this.err;
    // The n best lower bounds seen so far (a min-heap): n rows score at least its root, so a row
    // whose upper bound is below the root cannot be among the best n and is skipped at once.
    const heap = new Float64Array(limit);
    let filled = 0;
    // Rows that could still place (upper bound reached the floor and the root when seen; passed the filter).
    const slots: number[] = [];
    const highs: number[] = [];
    for (let result = 0; result < count; result++) {
      const approx = dots[result]! * inv[result]! * qq.inv;
      const bound = err[result]! + qq.err * (1 + err[result]!) + EPS;
      const high = approx + bound;
      if (high < minScore || (filled === limit && high < heap[0]!)) continue;
      if (accept && !accept(this.metas[result]!, this.ids[result]!)) continue;
      slots.push(result);
      highs.push(high);
      const low = approx - bound;
      if (filled < limit) heapPush(heap, filled++, low);
      else if (low > heap[0]!) heapReplaceRoot(heap, limit, low);
    }
    const cut = filled === limit ? heap[0]! : -Infinity;
    const out: Array<{ slot: number; score: number }> = [];
    for (let k = 0; k < slots.length; k++) {
      if (highs[k]! < cut) continue;
      const s = this.exact(slots[k]!);
      if (s >= minScore) out.push({ slot: slots[k]!, score: s });
    }
    return out.sort(byScore).slice(0, limit);
  }

  private grow(capacity: number): void {
    const keep = this.ids.length * this.dim;
    const data = new Float32Array(capacity * this.dim);
    data.set(this.data.subarray(0, keep));
    this.data = data;
    if (this.memory) {
      // Layout: the int16 query, the int16 rows, the int32 dot products (scratch, moved on growth).
      const rowsAt = align16(this.dim * 2);
      const dotsAt = align16(rowsAt + capacity * this.dim * 2);
      const need = dotsAt + capacity * 4;
      const have = this.memory.buffer.byteLength;
      if (need > have) this.memory.grow(Math.ceil((need - have) / PAGE));
      const buf = this.memory.buffer;
      this.q16 = new Int16Array(buf, 0, this.dim);
      this.rows16 = new Int16Array(buf, rowsAt, capacity * this.dim);
      this.dots = new Int32Array(buf, dotsAt, capacity);
      const inv = new Float32Array(capacity);
      inv.set(this.inv.subarray(0, this.ids.length));
      this.inv = inv;
      const err = new Float32Array(capacity);
      err.set(this.err.subarray(0, this.ids.length));
      this.err = err;
    }
    this.capacity = capacity;
  }

  /** Bytes the vectors occupy (capacity, not only live rows). */
  get bytes(): number {
    return this.data.byteLength + (this.memory ? this.memory.buffer.byteLength + this.inv.byteLength + this.err.byteLength : 0);
  }
}

/**
 * Largest int16 component: a unit vector has at most 512 components of at most SCALE, and
 * 512 x 2000 x 2000 = 2.05e9 < 2^31, so the kernel's int32 sums cannot overflow (more dimensions
 * use a proportionally smaller scale, see scaleFor).
 */
const SCALE = 2000;
const scaleFor = (dim: number): number => Math.min(SCALE, Math.floor(Math.sqrt(2 ** 31 / Math.max(1, dim)) - 1));

/**
 * Scales a vector into int16 (its largest component to the scale) and gives the factor back to
 * floats and the exact length of the rounding error (||v - q * inv||), which bounds the score error.
 */
function quantise(value: Float32Array, out: Int16Array): { inv: number; err: number } {
  let max = 0;
  for (let i = 0; i < value.length; i++) max = Math.max(max, Math.abs(value[i]!));
  if (max === 0) {
    out.fill(0);
    return { inv: 0, err: 0 };
  }
  const scale = scaleFor(value.length);
  const inv = Math.fround(max / scale);
  let err = 0;
  for (let i = 0; i < value.length; i++) {
    const q = Math.max(-scale, Math.min(scale, Math.round(value[i]! / inv)));
    out[i] = q;
    const d = value[i]! - q * inv;
    err += d * d;
  }
  return { inv, err: Math.sqrt(err) };
}

/** Min-heap of numbers in h[0..size): adds x at position size. */
function heapPush(host: Float64Array, size: number, item: number): void {
  let i = size;
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (host[parent]! <= item) break;
    host[i] = host[parent]!;
    i = parent;
  }
  host[i] = item;
}

/** Min-heap of numbers in h[0..size): replaces the smallest with x. */
function heapReplaceRoot(host: Float64Array, size: number, item: number): void {
  let i = 0;
  for (;;) {
    const l = 2 * i + 1;
    if (l >= size) break;
    const c = l + 1 < size && host[l + 1]! < host[l]! ? l + 1 : l;
    if (host[c]! >= item) break;
    host[i] = host[c]!;
    i = c;
  }
  host[i] = item;
}

function byScore(a: { slot: number; score: number }, b: { slot: number; score: number }): number {
  return b.score - a.score || a.slot - b.slot;
}

function norm(value: Float32Array): number {
  let s = 0;
  for (let i = 0; i < value.length; i++) s += value[i]! * value[i]!;
  return Math.sqrt(s);
}
