/** Calls the daemon's method handlers directly, as its server would (the host-level daemon unit tests). */
import { expect } from 'vitest';
import { DaemonError, ReplyWithBody, type DaemonMethod, type ParamsOf, type ReplyOf } from '../../src/sandbox/daemon/protocol.js';
import type { CallContext } from '../../src/sandbox/daemon/server.js';

type Handler = (params: unknown, ctx: CallContext) => unknown;

/** `call` and `refusal` over the handler table `methods()` gives at call time (tables are made per test). */
export function methodCaller<T extends object>(methods: () => T) {
  const ctx = (): CallContext => ({ signal: new AbortController().signal, emit: () => true, drained: async () => undefined });

  /** One method with params as plain data; the reply typed from the protocol. */
  async function call<M extends DaemonMethod & keyof T>(method: M, params: ParamsOf<M>): Promise<ReplyOf<M>> {
    const reply = await (methods()[method] as unknown as Handler)(params, ctx());
    // fs.read sends its bytes as a raw body frame; decoded() is the reply as the runner's client sees it.
    return (reply instanceof ReplyWithBody ? reply.decoded() : reply) as ReplyOf<M>;
  }

  /** The DaemonError a call fails with. */
  async function refusal<M extends DaemonMethod & keyof T>(method: M, params: ParamsOf<M>): Promise<DaemonError> {
    try {
      await call(method, params);
    } catch (e) {
      expect(e).toBeInstanceOf(DaemonError);
      return e as DaemonError;
    }
    throw new Error(`${method} ${JSON.stringify(params).slice(0, 200)} succeeded; a refusal was expected`);
  }

  return { call, refusal };
}
