/**
 * Streamable HTTP served on node:http's own request and response objects, for the exchange every
 * 2025-era client makes on each call: one POST carrying one JSON-RPC request, answered statelessly.
 * The SDK's entry (createMcpHandler behind toNodeHandler) converts each such request to a web
 * Request, clones it, reads it through a web stream, and answers with a web Response whose SSE body
 * is another web stream copied back to the socket; under load that conversion was most of the
 * endpoint's time (docs/architecture.md, "Transport"). Here the body is read once, checked by the
 * same SDK predicates, handed to the same per-request Server, and the answer is written straight to
 * the ServerResponse. A plain tools/call (plainToolCall: what every client sends for a tool) skips
 * the per-request Server too and goes to its handler directly (serveToolCall), with the same answers.
 *
 * The answer is JSON (application/json, one JSON.stringify, one buffer) when the result is the first
 * thing the server sends; as soon as anything else has to go first (a progress or log notification,
 * or the keep-alive comment of a call still running after keepAliveMs) it becomes an SSE stream and
 * the result is its last event: the transport spec lets the server choose either per request, both
 * official clients read both, and it is what the SDK's own 2026-07-28 per-request transport does.
 *
 * Anything else (GET, DELETE, batches, notifications, posted responses, 2026-07-28 requests, and every
 * request the SDK would refuse) goes to the SDK's handler unchanged, so its answers stay the SDK's own.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import {
  isInitializeRequest,
  isJsonContentType,
  parseJSONRPCMessage,
  PROTOCOL_VERSION_META_KEY,
  ProtocolErrorCode,
  SdkError,
  SdkErrorCode,
  SUPPORTED_PROTOCOL_VERSIONS,
  type JSONRPCMessage,
  type MessageExtraInfo,
  type Transport,
  type TransportSendOptions,
} from '@modelcontextprotocol/server';
import type { WireText } from './wire-text.js';
import type { ClientRequests, LegacySessions } from './legacy-sessions.js';

const SSE_HEADERS = {
  'content-type': 'text/event-stream',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  'x-accel-buffering': 'no',
};

type RequestId = string | number;
type Node = (req: IncomingMessage, res: ServerResponse) => Promise<void>;

/** A single-exchange Transport whose answer is written to a node:http response. */
export class NodeResponseTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: Transport['onmessage'];
  /** The response has been ended (answered, or closed without an answer). */
  answered = false;
  private sse = false;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly deferred = new Map<string, WireText>();

  constructor(
    private readonly res: ServerResponse,
    private readonly requestId: RequestId,
    private readonly keepAliveMs: number,
  ) {}

  async start(): Promise<void> {}

  /**
   * Takes a large result's text block (src/mcp/wire-text.ts) and returns the stand-in the result
   * carries through the SDK (which validates it as a string); send() writes the pieces in its place.
   */
  deferText(text: WireText): string {
    const token = `atelier-wire-text-${randomBytes(16).toString('hex')}`;
    this.deferred.set(token, text);
    return token;
  }

  /** The answer's JSON with each stand-in replaced by its pieces, as parts to write in order (and the texts used); undefined when none is in it. */
  private splice(json: string): { parts: Buffer[]; texts: WireText[] } | undefined {
    const found: Array<{ at: number; token: string; text: WireText }> = [];
    for (const [token, text] of this.deferred) {
      // The stand-in is a whole JSON string of its own (the text block's value); it is random, so found only there.
      const at = json.indexOf(`"${token}"`);
      if (at >= 0) found.push({ at: at + 1, token, text });
    }
    this.deferred.clear();
    if (found.length === 0) return undefined;
    found.sort((a, b) => a.at - b.at);
    const parts: Buffer[] = [];
    let from = 0;
    for (const f of found) {
      parts.push(Buffer.from(json.slice(from, f.at)), ...f.text.pieces);
      from = f.at + f.token.length;
    }
    parts.push(Buffer.from(json.slice(from)));
    return { parts, texts: found.map((f) => f.text) };
  }

  /** Delivers the request to the connected server; its answer goes to the response. */
  dispatch(message: JSONRPCMessage, extra: MessageExtraInfo): void {
    this.startKeepAlive();
    this.onmessage!(message, extra);
  }

  /** A call still running after keepAliveMs turns the answer into an SSE stream with keep-alive comments. */
  startKeepAlive(): void {
    if (this.keepAliveMs > 0) {
      this.timer = setTimeout(() => {
        this.timer = setInterval(() => this.keepAlive(), this.keepAliveMs).unref();
        this.keepAlive();
      }, this.keepAliveMs).unref();
    }
  }

  async send(message: JSONRPCMessage, options?: TransportSendOptions): Promise<void> {
    if (this.answered) return;
    const m = message as { id?: RequestId; result?: unknown; error?: unknown };
    const isResponse = m.id !== undefined && (m.result !== undefined || m.error !== undefined);
    const related = isResponse ? m.id : options?.relatedRequestId;
    if (related !== this.requestId) {
      // As the SDK's stateless transport: messages not about this request have nowhere to go.
      if (isResponse) this.onerror?.(new Error(`Received a response for an unknown request id: ${String(m.id)}`));
      return;
    }
    const json = JSON.stringify(message);
    if (!isResponse) {
      this.toSse();
      this.res.write(`event: message\ndata: ${json}\n\n`);
      return;
    }
    this.answered = true;
    this.stopTimer();
    const spliced = this.deferred.size > 0 ? this.splice(json) : undefined;
    if (spliced) {
      const { parts, texts } = spliced;
      // Once the response is flushed, the pieces' memory may serve the next large result.
      this.res.once('finish', () => {
        for (const t of texts) t.release();
      });
      // A large result's text block, written from its pieces (src/mcp/wire-text.ts).
      if (this.sse) {
        parts.unshift(Buffer.from('event: message\ndata: '));
        parts.push(Buffer.from('\n\n'));
      } else {
        let length = 0;
        for (const p of parts) length += p.length;
        this.res.writeHead(200, { 'content-type': 'application/json', 'content-length': length });
      }
      this.res.cork();
      for (const p of parts) this.res.write(p);
      this.res.end(); // end() uncorks: the parts go out in one writev
    } else if (this.sse) this.res.end(`event: message\ndata: ${json}\n\n`);
    else {
      const body = Buffer.from(json);
      this.res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
      this.res.end(body);
    }
    // The exchange is over and nothing of it is pending (one request, answered), so the per-request
    // Server is simply dropped: closing it would only build a ConnectionClosed error to reject
    // nothing, measured at a few percent of a call. A close before the answer (the client gone,
    // shutdown) still runs the Protocol's close, which aborts the handler.
    this.closed = true;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopTimer();
    if (!this.answered) {
      // Closed before an answer (server shutdown): like the SDK, an SSE stream that ends without one.
      this.answered = true;
      if (!this.res.destroyed) {
        this.toSse();
        this.res.end();
      }
    }
    this.onclose?.();
  }

  private keepAlive(): void {
    if (this.answered) return this.stopTimer();
    this.toSse();
    this.res.write(': keepalive\n\n');
  }

  private toSse(): void {
    if (this.sse) return;
    this.sse = true;
    this.res.writeHead(200, SSE_HEADERS);
  }

  private stopTimer(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }
}

/** A tools/call's params in the one shape the direct path serves without a per-request Server (plainToolCall). */
export interface PlainToolCall {
  name: string;
  arguments?: Record<string, unknown>;
  _meta?: { progressToken?: string | number };
}

/** What a plain tools/call is served with on the direct path: what the SDK's handler context would give it. */
export interface PlainCallContext {
  authInfo: MessageExtraInfo['authInfo'];
  /** Aborted when the client goes away before the answer (as the SDK's Protocol does on close). */
  signal: AbortSignal;
  /** Sends a notification about this request (progress, log): the answer becomes an SSE stream. */
  notify(notification: { method: string; params?: Record<string, unknown> }): Promise<void>;
  /** The direct path's transport (its deferText takes a large result's text block). */
  transport: NodeResponseTransport;
  /** The capabilities the client declared in its initialize, when its session is known (legacy-sessions.ts); undefined otherwise. */
  clientCapabilities?: Record<string, unknown>;
  /** Sends a request to the client on this call's stream and waits for its answer (when the path has ClientRequests). */
  request?: (method: string, params: Record<string, unknown>, signal: AbortSignal, timeoutMs: number) => Promise<Record<string, unknown>>;
}

/** What the direct path needs: the per-request Server factory and the SDK's handler for everything else. */
export interface DirectPathOptions {
  /**
   * Serves a plain tools/call (plainToolCall) without a per-request Server. Its result must be what
   * the Server's tools/call handler would return after the SDK's projection, and a well-formed
   * CallToolResult (the SDK validates the Server's result; this one is sent as given).
   */
  toolCall?: (params: PlainToolCall, ctx: PlainCallContext) => Promise<object>;
  /**
   * The per-request Server; given the direct path's transport, whose deferText the tools/call
   * handler may use, and what the request's 2025-era session says of its client (its declared
   * capabilities, and a way to ask it something on this request's stream: a 2025-11-25 task's
   * input, delivered through tasks/result).
   */
  factory: (transport?: NodeResponseTransport, client?: Pick<PlainCallContext, 'clientCapabilities' | 'request' | 'authInfo'>) => { connect(t: Transport): Promise<void>; close(): Promise<void> };
  sdk: Node;
  /**
   * Runs the SDK's handler for a request it serves; `text` is the body when this path read it first
   * (the dynamic mode files a subscriptions/listen stream under its caller: src/mcp/dynamic-toolsets.ts).
   */
  aroundSdk?: (req: IncomingMessage, text: string | undefined, serve: () => Promise<void>) => Promise<void>;
  maxBodyBytes: number;
  keepAliveMs: number;
  /** Sessions of the 2025-era clients (legacy-sessions.ts): what each declared in its initialize. */
  sessions?: LegacySessions;
  /** Requests to clients in the middle of a call, and their POSTed answers (legacy-sessions.ts). */
  clientRequests?: ClientRequests;
}

interface ReadBody {
  chunks: Buffer[];
  bytes: number;
  over: boolean;
  error?: Error;
}

function readBody(req: IncomingMessage, max: number): Promise<ReadBody> {
  return new Promise((resolve) => {
    const out: ReadBody = { chunks: [], bytes: 0, over: false };
    const done = () => {
      req.off('data', onData).off('end', done).off('error', onError).off('aborted', onAborted);
      resolve(out);
    };
    const onData = (c: Buffer) => {
      out.chunks.push(c);
      out.bytes += c.length;
      if (out.bytes > max) {
        out.over = true;
        req.pause();
        done();
      }
    };
    const onError = (e: Error) => {
      out.error = e;
      done();
    };
    const onAborted = () => onError(new Error('request aborted'));
    req.on('data', onData).on('end', done).on('error', onError).on('aborted', onAborted);
  });
}

/** The request as the SDK's adapter reads it (it is duck-typed): the same headers, the bytes already read. */
function replay(req: IncomingMessage, body: ReadBody): IncomingMessage {
  const r = Readable.from(
    (async function* () {
      for (const c of body.chunks) yield c;
      if (body.error) throw body.error;
    })(),
  ) as Readable & Record<string, unknown>;
  r.method = req.method;
  r.url = req.url;
  r.headers = req.headers;
  r.auth = (req as IncomingMessage & { auth?: unknown }).auth;
  return r as unknown as IncomingMessage;
}

const header = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v.join(', ') : v);

const isPlainObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

function parseOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * Whether the SDK's entry routes this POST to its 2025-era stateless leg as a single request
 * (classifyInboundRequest: legacy, "no-claim" or "initialize"), decided without the SDK's schema
 * checks that fail on every request (is it a result? an error?), which cost more than the rest of the
 * routing together. A subset of what the SDK calls legacy: anything unusual returns false and the
 * SDK decides. test/unit/mcp-node-transport.test.ts checks it against the SDK's classifier.
 */
export function plainLegacyRequest(body: unknown, protocolVersionHeader: string | undefined): boolean {
  if (!isPlainObject(body) || body.jsonrpc !== '2.0' || typeof body.method !== 'string') return false;
  if (typeof body.id !== 'string' && !Number.isInteger(body.id)) return false;
  if ('result' in body || 'error' in body) return false;
  // A 2026-07-28 request names its revision in params._meta (the envelope claim) and in the header.
  if (body.params !== undefined) {
    if (!isPlainObject(body.params)) return false;
    const meta = body.params._meta;
    if (isPlainObject(meta) && PROTOCOL_VERSION_META_KEY in meta) return false;
  }
  return protocolVersionHeader === undefined || SUPPORTED_PROTOCOL_VERSIONS.includes(protocolVersionHeader.trim());
}

/**
 * The single request this POST carries when the direct path may serve it, exactly as the SDK's
 * stateless leg would accept it (its JSON-RPC schema, its protocol-version check); undefined when
 * the SDK must answer (it then answers as before).
 */
export function servableRequest(text: string, protocolVersionHeader: string | undefined): (JSONRPCMessage & { id: RequestId; method: string }) | undefined {
  if (text.length === 0) return undefined;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!plainLegacyRequest(body, protocolVersionHeader)) return undefined;
  let message: JSONRPCMessage;
  try {
    message = parseJSONRPCMessage(body);
  } catch {
    return undefined;
  }
  const m = message as { id?: unknown; method?: unknown };
  if (m.id === undefined || typeof m.method !== 'string') return undefined;
  // The stateless transport checks the header on everything but initialize; initialize negotiates.
  if (m.method === 'initialize' && !isInitializeRequest(message)) return undefined;
  return message as JSONRPCMessage & { id: RequestId; method: string };
}

/**
 * The /mcp handler for an authenticated request (req.auth set): the direct path where it applies,
 * the SDK's handler otherwise.
 */
export function directPath(opts: DirectPathOptions): Node {
  const sdk = (req: IncomingMessage, res: ServerResponse, text?: string): Promise<void> => (opts.aroundSdk ? opts.aroundSdk(req, text, () => opts.sdk(req, res)) : opts.sdk(req, res));
  return async (req, res) => {
    if (opts.sessions) {
      const principal = (req as IncomingMessage & { auth?: MessageExtraInfo['authInfo'] }).auth?.clientId ?? '';
      const sessionId = header(req.headers['mcp-session-id']);
      // A session its principal ended: 404, so the client starts a new one (2025-11-25 transport).
      if (opts.sessions.ended(sessionId, principal)) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found: it was ended with DELETE; initialize a new one' } }));
        req.resume();
        return;
      }
      // DELETE ends a 2025-era session of this principal (legacy-sessions.ts); any other goes to the SDK (405).
      if (req.method === 'DELETE' && opts.sessions.close(sessionId, principal)) {
        res.writeHead(200).end();
        return;
      }
    }
    const accept = header(req.headers.accept);
    if (req.method !== 'POST' || !isJsonContentType(header(req.headers['content-type']) ?? null) || !accept?.includes('application/json') || !accept.includes('text/event-stream')) {
      return sdk(req, res);
    }
    // A declared length over the bound: the SDK refuses it without reading anything.
    if (Number(header(req.headers['content-length'])) > opts.maxBodyBytes) return sdk(req, res);
    const body = await readBody(req, opts.maxBodyBytes);
    const authInfo = (req as IncomingMessage & { auth?: MessageExtraInfo['authInfo'] }).auth;
    const principal = authInfo?.clientId ?? '';
    const text = body.over || body.error ? '' : Buffer.concat(body.chunks, body.bytes).toString('utf8');
    // A client's answer to a request this path sent it in the middle of a call (looked for only while one waits).
    if (opts.clientRequests?.waiting && text && opts.clientRequests.take(parseOrUndefined(text), principal)) {
      res.writeHead(202).end();
      return;
    }
    const message = text ? servableRequest(text, header(req.headers['mcp-protocol-version'])) : undefined;
    if (!message) return sdk(replay(req, body), res, text);

    const transport = new NodeResponseTransport(res, message.id, opts.keepAliveMs);
    if (message.method === 'initialize' && opts.sessions) {
      res.setHeader('mcp-session-id', opts.sessions.open(principal, ((message as { params?: { capabilities?: unknown } }).params ?? {}).capabilities));
    }
    const extra: Pick<PlainCallContext, 'clientCapabilities' | 'request'> = {
      clientCapabilities: opts.sessions?.capabilities(header(req.headers['mcp-session-id']), principal),
      request: opts.clientRequests
        ? (method, params, signal, timeoutMs) =>
            opts.clientRequests!.request((m) => transport.send(m as JSONRPCMessage, { relatedRequestId: message.id }), principal, method, params, signal, timeoutMs)
        : undefined,
    };
    const plain = opts.toolCall && message.method === 'tools/call' ? plainToolCall((message as { params?: unknown }).params) : undefined;
    if (plain) return serveToolCall(opts.toolCall!, plain, message.id, transport, res, authInfo, extra);
    const server = opts.factory(transport, { ...extra, authInfo });
    await server.connect(transport);
    // The client went away before the answer: close the exchange, which aborts the handler's signal.
    res.once('close', () => {
      if (!transport.answered) void server.close();
    });
    if (res.destroyed) return void server.close();
    transport.dispatch(message, { authInfo });
  };
}

/**
 * The params of a tools/call in the shape the direct path serves without a per-request Server: a name,
 * optional arguments (an object) and optional _meta holding only a progress token (a string or an
 * integer). Every such request passes the SDK's own tools/call check, so the SDK's Server would
 * hand it to the same handler; anything else (other keys, a task, other _meta) returns undefined
 * and the Server serves it, with its own checks and answers. test/unit/mcp-node-transport.test.ts
 * checks both against the SDK.
 */
export function plainToolCall(params: unknown): PlainToolCall | undefined {
  if (!isPlainObject(params) || typeof params.name !== 'string') return undefined;
  for (const k of Object.keys(params)) if (k !== 'name' && k !== 'arguments' && k !== '_meta') return undefined;
  if (params.arguments !== undefined && !isPlainObject(params.arguments)) return undefined;
  const meta = params._meta;
  if (meta !== undefined) {
    if (!isPlainObject(meta)) return undefined;
    for (const k of Object.keys(meta)) if (k !== 'progressToken') return undefined;
    const t = meta.progressToken;
    if (t !== undefined && typeof t !== 'string' && !Number.isSafeInteger(t)) return undefined;
  }
  return params as unknown as PlainToolCall;
}

/**
 * A plain tools/call answered without a per-request Server: the SDK's Server would build one, register
 * its handlers, validate the request and the result with its schemas and route the answer through
 * its Protocol, about a third of a millisecond of every call (issue #21 item 3); the handler and the
 * answer are the same. A client that goes away first aborts the handler with the reason the SDK
 * gives (ConnectionClosed); a handler that throws is answered as the SDK answers it (InternalError).
 */
async function serveToolCall(
  toolCall: NonNullable<DirectPathOptions['toolCall']>,
  params: PlainToolCall,
  id: RequestId,
  transport: NodeResponseTransport,
  res: ServerResponse,
  authInfo: MessageExtraInfo['authInfo'],
  extra: Pick<PlainCallContext, 'clientCapabilities' | 'request'> = {},
): Promise<void> {
  const controller = new AbortController();
  res.once('close', () => {
    if (transport.answered) return;
    controller.abort(new SdkError(SdkErrorCode.ConnectionClosed, 'Connection closed'));
    void transport.close();
  });
  if (res.destroyed) return;
  transport.startKeepAlive();
  const notify = (n: { method: string; params?: Record<string, unknown> }): Promise<void> => transport.send({ jsonrpc: '2.0', ...n } as JSONRPCMessage, { relatedRequestId: id });
  let answer: JSONRPCMessage;
  try {
    const result = await toolCall(params, { authInfo, signal: controller.signal, notify, transport, ...extra });
    answer = { result, jsonrpc: '2.0', id } as JSONRPCMessage;
  } catch (error) {
    const e = error as { code?: unknown; message?: string; data?: unknown };
    const thrown = Number.isSafeInteger(e?.code) ? (e.code as number) : ProtocolErrorCode.InternalError;
    const code = thrown === -32002 ? ProtocolErrorCode.InvalidParams : thrown; // the 2025 codec's mapping
    answer = { jsonrpc: '2.0', id, error: { code, message: e?.message ?? 'Internal error', ...(e?.data !== undefined ? { data: e.data } : {}) } } as JSONRPCMessage;
  }
  if (controller.signal.aborted) return;
  await transport.send(answer);
}
