/**
 * An exact in-memory vector index: every vector of one owner in one contiguous Float32Array (row
 * after row), normalised once when added, scanned with a dot-product kernel. The kernel is a tiny
 * WebAssembly module using 128-bit SIMD (four float32 lanes, two accumulators), assembled below
 * from its opcodes; where WebAssembly SIMD is missing, or the dimension is not a multiple of 8, a
 * plain JavaScript loop over the same array does the same work (about 4x slower).
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

type Kernel = (n: number) => void;

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

const leb = (n: number): number[] => {
  const out: number[] = [];
  do {
    let b = n & 0x7f;
    n >>>= 7;
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
};
const section = (id: number, bytes: number[]): number[] => [id, ...leb(bytes.length), ...bytes];
const name = (s: string): number[] => [s.length, ...Buffer.from(s, 'utf8')];

/**
 * scan(q, data, n, rowBytes, out): for each of n rows of rowBytes bytes starting at data,
 * out[row] = dot(q, row) in float32. Memory is imported (env.mem) so the index owns and grows it.
 * rowBytes must be a multiple of 32 (two 16-byte vectors per inner step).
 */
function kernelBytes(): Uint8Array {
  const get = 0x20, set = 0x21, tee = 0x22, simd = 0xfd;
  const v128load = [simd, 0x00, 2, 0]; // align 2^2, offset 0
  const f32x4mul = [simd, 0xe6, 0x01];
  const f32x4add = [simd, 0xe4, 0x01];
  const lane = (i: number): number[] => [simd, 0x1f, i]; // f32x4.extract_lane
  // params: 0 q, 1 data, 2 n, 3 rowBytes, 4 out; locals: 5 (spare) i32, 6 i i32, 7 row i32, 8 acc v128, 9 acc2 v128
  const code = [
    get, 1, set, 7, // row = data
    0x02, 0x40, // block
    0x03, 0x40, //   loop (rows)
    get, 2, 0x45, 0x0d, 1, //     if n == 0: break
    simd, 0x0c, ...new Array<number>(16).fill(0), set, 8, // acc = 0
    simd, 0x0c, ...new Array<number>(16).fill(0), set, 9, // acc2 = 0
    0x41, 0, set, 6, //     i = 0
    0x03, 0x40, //     loop (lanes)
    get, 8, get, 0, get, 6, 0x6a, ...v128load, get, 7, get, 6, 0x6a, ...v128load, ...f32x4mul, ...f32x4add, set, 8, // acc += q[i..] * row[i..]
    get, 9, get, 0, get, 6, 0x6a, ...v128load.slice(0, 3), 16, get, 7, get, 6, 0x6a, ...v128load.slice(0, 3), 16, ...f32x4mul, ...f32x4add, set, 9, // acc2 += the next four
    get, 6, 0x41, 32, 0x6a, tee, 6, get, 3, 0x49, 0x0d, 0, //       i += 32; continue while i < rowBytes
    0x0b, //     end
    get, 8, get, 9, ...f32x4add, set, 8,
    get, 4, get, 8, ...lane(0), get, 8, ...lane(1), 0x92, get, 8, ...lane(2), 0x92, get, 8, ...lane(3), 0x92, 0x38, 2, 0, // *out = sum of lanes
    get, 4, 0x41, 4, 0x6a, set, 4, // out += 4
    get, 7, get, 3, 0x6a, set, 7, // row += rowBytes
    get, 2, 0x41, 1, 0x6b, set, 2, // n -= 1
    0x0c, 0, //     continue
    0x0b, //   end
    0x0b, // end
    0x0b, // end of function
  ];
  const body = [0x02, 0x03, 0x7f, 0x02, 0x7b, ...code]; // locals: 3 x i32, 2 x v128
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

export class VectorIndex<M> {
  private readonly ids: string[] = [];
  private readonly metas: M[] = [];
  private readonly slots = new Map<string, number>();
  private capacity = 0;
  private memory: WasmMemory | undefined;
  private buffer: ArrayBuffer = new ArrayBuffer(0);
  private data = new Float32Array(0);
  private query = new Float32Array(0);
  private scores = new Float32Array(0);
  private kernel: Kernel;
  private readonly dataOffset: number;
  readonly usesSimd: boolean;

  /** dim: floats per vector; simd false forces the JavaScript loop. */
  constructor(
    readonly dim: number,
    opts: { simd?: boolean; initialCapacity?: number } = {},
  ) {
    if (!Number.isInteger(dim) || dim <= 0) throw new RangeError(`VectorIndex: dim must be a positive integer, not ${dim}`);
    const mod = opts.simd !== false && dim % 8 === 0 ? simdModule() : null;
    this.dataOffset = align16(dim * 4);
    if (mod) {
      this.memory = new wasm!.Memory({ initial: 1 });
      const scan = new wasm!.Instance(mod, { env: { mem: this.memory } }).exports.scan as (q: number, data: number, n: number, rowBytes: number, out: number) => void;
      this.kernel = (n) => scan(0, this.dataOffset, n, dim * 4, this.scores.byteOffset);
    } else {
      this.kernel = (n) => {
        const q = this.query;
        const d = this.data;
        const out = this.scores;
        for (let r = 0, o = 0; r < n; r++, o += dim) {
          let s0 = 0;
          let s1 = 0;
          let i = 0;
          for (; i + 1 < dim; i += 2) {
            s0 += q[i]! * d[o + i]!;
            s1 += q[i + 1]! * d[o + i + 1]!;
          }
          if (i < dim) s0 += q[i]! * d[o + i]!;
          out[r] = s0 + s1;
        }
      };
    }
    this.usesSimd = !!mod;
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
    let s = this.slots.get(id);
    if (s === undefined) {
      if (this.ids.length === this.capacity) this.grow(this.capacity * 2);
      s = this.ids.length;
      this.ids.push(id);
      this.metas.push(meta);
      this.slots.set(id, s);
    } else this.metas[s] = meta;
    const n = norm(vec);
    const row = this.data.subarray(s * this.dim, (s + 1) * this.dim);
    for (let i = 0; i < this.dim; i++) row[i] = n > 0 ? vec[i]! / n : 0;
  }

  /** Removes an id; the last row moves into its slot. False if it was not there. */
  remove(id: string): boolean {
    const s = this.slots.get(id);
    if (s === undefined) return false;
    const last = this.ids.length - 1;
    if (s !== last) {
      this.data.copyWithin(s * this.dim, last * this.dim, (last + 1) * this.dim);
      const moved = this.ids[last]!;
      this.ids[s] = moved;
      this.metas[s] = this.metas[last]!;
      this.slots.set(moved, s);
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
   * accepted by the filter, best first (ties by insertion slot, which is deterministic).
   */
  search(q: Float32Array, n: number, minScore: number, accept?: (meta: M, id: string) => boolean): Array<VectorHit<M>> {
    if (q.length !== this.dim) throw new RangeError(`VectorIndex: query of ${q.length} dimensions, index has ${this.dim}`);
    const count = this.ids.length;
    if (count === 0 || n <= 0) return [];
    const qn = norm(q);
    for (let i = 0; i < this.dim; i++) this.query[i] = qn > 0 ? q[i]! / qn : 0;
    this.kernel(count);
    const scores = this.scores;
    let top: Array<{ slot: number; score: number }> = [];
    let floor = minScore;
    for (let r = 0; r < count; r++) {
      const s = scores[r]!;
      if (!(s >= floor)) continue;
      if (accept && !accept(this.metas[r]!, this.ids[r]!)) continue;
      top.push({ slot: r, score: s });
      if (top.length >= n * 2) {
        top.sort(byScore);
        top = top.slice(0, n);
        floor = top[n - 1]!.score;
      }
    }
    top.sort(byScore);
    return top.slice(0, n).map((t) => ({ id: this.ids[t.slot]!, score: t.score, meta: this.metas[t.slot]! }));
  }

  /** Bytes the vectors occupy (capacity, not only live rows). */
  get bytes(): number {
    return this.buffer.byteLength;
  }

  private grow(capacity: number): void {
    const need = this.dataOffset + capacity * this.dim * 4 + capacity * 4;
    const keep = this.ids.length * this.dim;
    if (this.memory) {
      const have = this.memory.buffer.byteLength;
      if (need > have) this.memory.grow(Math.ceil((need - have) / PAGE));
      this.buffer = this.memory.buffer;
      // Rows stay where they are (the data region only extends); the scores move past it.
    } else {
      const old = this.data;
      this.buffer = new ArrayBuffer(need);
      new Float32Array(this.buffer, this.dataOffset, keep).set(old.subarray(0, keep));
    }
    this.capacity = capacity;
    this.query = new Float32Array(this.buffer, 0, this.dim);
    this.data = new Float32Array(this.buffer, this.dataOffset, capacity * this.dim);
    this.scores = new Float32Array(this.buffer, this.dataOffset + capacity * this.dim * 4, capacity);
  }
}

function byScore(a: { slot: number; score: number }, b: { slot: number; score: number }): number {
  return b.score - a.score || a.slot - b.slot;
}

function norm(v: Float32Array): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i]! * v[i]!;
  return Math.sqrt(s);
}
