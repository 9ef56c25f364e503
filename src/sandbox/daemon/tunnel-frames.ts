/**
 * The socket tunnel's framing (both ends: the Pod's tunnel.ts and the runner's
 * src/sandbox/kubernetes/tunnel.ts). One byte stream (a Kubernetes exec stream's stdin and
 * stdout) carries many connections as frames:
 *
 *   type (1 byte) | connection id (4 bytes, big-endian) | payload length (4 bytes) | payload
 *
 *   CONFIG  runner → Pod, id 0: JSON { listen: [{ tag, path } | { tag, port }], files: [{ path, b64, mode }] }
 *   READY   Pod → runner, id 0: JSON { ok: true } or { error }
 *   OPEN    Pod → runner: a connection accepted on the listener `tag` (payload); ids are the Pod's, fresh
 *   DATA    both ways: bytes of one connection, at most MAX_PAYLOAD per frame
 *   CLOSE   both ways: the connection ended (payload: a reason, may be empty)
 *   ACK     both ways: 4-byte count of DATA bytes the receiver has written on to its socket
 *
 * Back-pressure, both ways and at both ends (issue #42 item 7):
 *   - a sender stops reading a connection's socket once WINDOW DATA bytes of it are
 *     unacknowledged (one socket read, at most 64 KiB, may overshoot) until ACKs come;
 *   - an ACK advances the window only over bytes this end really sent on that connection and
 *     has not seen acknowledged: a peer acknowledging more (bytes it was never sent, so bytes it
 *     cannot have read) ends the tunnel;
 *   - whatever the ACKs say, a sender stops reading every connection's socket while the stream
 *     itself is behind (its write returned false: the bytes wait in this end's memory, not yet
 *     handed on) and reads again once the stream drains. So a peer that acknowledges and never
 *     reads holds at most one stream buffer plus one read per connection of this end's memory.
 * A receiver that is sent more than RECEIVE_LIMIT unacknowledged bytes, a frame longer than
 * MAX_PAYLOAD, a malformed ACK or an unknown type ends the tunnel (the stream cannot be trusted
 * after that); DATA for a connection the peer already closed is dropped. Node built-ins only.
 */
export const FRAME = { CONFIG: 1, READY: 2, OPEN: 3, DATA: 4, CLOSE: 5, ACK: 6 } as const;
export const HEADER = 9;
export const MAX_PAYLOAD = 64 * 1024;
/** CONFIG may carry small files (a CA bundle): larger, once. */
export const MAX_CONFIG = 2 * 1024 * 1024;
export const WINDOW = 256 * 1024;
/** What a receiver holds for one connection before it calls the peer misbehaving (the window plus overshoot). */
export const RECEIVE_LIMIT = 2 * WINDOW;
export const MAX_CONNECTIONS = 32;

export interface TunnelConfig {
  listen: Array<{ tag: string; path: string } | { tag: string; port: number }>;
  files: Array<{ path: string; b64: string; mode: number }>;
}

export function frame(type: number, id: number, payload: Buffer | string = Buffer.alloc(0)): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
  const h = Buffer.allocUnsafe(HEADER);
  h.writeUInt8(type, 0);
  h.writeUInt32BE(id, 1);
  h.writeUInt32BE(body.length, 5);
  return Buffer.concat([h, body]);
}

export function ackFrame(id: number, n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(n, 0);
  return frame(FRAME.ACK, id, b);
}

/** Splits a byte stream into frames; throws on a frame it must not accept (the caller ends the tunnel). */
export class FrameReader {
  private buf: Buffer = Buffer.alloc(0);
  constructor(private readonly onFrame: (type: number, id: number, payload: Buffer) => void) {}

  push(chunk: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    while (this.buf.length >= HEADER) {
      const type = this.buf.readUInt8(0);
      const id = this.buf.readUInt32BE(1);
      const len = this.buf.readUInt32BE(5);
      if (type < FRAME.CONFIG || type > FRAME.ACK) throw new Error(`unknown frame type ${type}`);
      const max = type === FRAME.CONFIG ? MAX_CONFIG : MAX_PAYLOAD;
      if (len > max) throw new Error(`frame of ${len} bytes is over the limit of ${max}`);
      if (this.buf.length < HEADER + len) return;
      const payload = this.buf.subarray(HEADER, HEADER + len);
      this.buf = this.buf.subarray(HEADER + len);
      this.onFrame(type, id, payload);
    }
  }
}

interface Conn {
  sock: import('node:net').Socket;
  /** DATA bytes sent and not yet acknowledged. */
  inflight: number;
  /** DATA bytes received and not yet written on. */
  pending: number;
  sentClose: boolean;
  /** The peer sent CLOSE: nothing more of it is written on. */
  peerClosed: boolean;
}

/** What one tunnel end's connections carried (both ends keep them; the runner's are in its counters). */
export interface MuxStats {
  /** DATA bytes sent, and acknowledged by the peer. */
  sent: number;
  acked: number;
  /** Times every socket was paused because the stream was behind. */
  streamPauses: number;
  /** DATA frames dropped: for a connection the peer had closed. */
  dropped: number;
}

/**
 * The connections of one tunnel end: DATA both ways within the window, half-closes as CLOSE.
 * `send` writes a frame to the stream; `fail` ends the whole tunnel (a protocol violation).
 */
export class Mux {
  readonly conns = new Map<number, Conn>();
  /**
   * The highest connection id seen: the Pod end numbers connections 1, 2, 3... so every id up to
   * it was opened (late frames for one that ended are dropped) and none above it was.
   */
  private highest = 0;
  /** The stream is behind (its last write returned false): no socket is read until drained(). */
  private blocked = false;

  /**
   * `send` writes a frame to the stream and returns false when the stream is behind (a
   * Writable's write); the owner calls drained() on the stream's 'drain'. `stats` is counted
   * into (the runner end gives its counters).
   */
  constructor(
    private readonly send: (b: Buffer) => boolean,
    private readonly fail: (reason: string) => void,
    readonly stats: MuxStats = { sent: 0, acked: 0, streamPauses: 0, dropped: 0 },
  ) {}

  private out(b: Buffer): void {
    if (this.send(b) !== false || this.blocked) return;
    this.blocked = true;
    this.stats.streamPauses++;
    for (const c of this.conns.values()) c.sock.pause();
  }

  /** The stream caught up: sockets whose window is open are read again. */
  drained(): void {
    if (!this.blocked) return;
    this.blocked = false;
    for (const c of this.conns.values()) if (c.inflight < WINDOW) c.sock.resume();
  }

  attach(id: number, sock: import('node:net').Socket): void {
    this.note(id);
    const c: Conn = { sock, inflight: 0, pending: 0, sentClose: false, peerClosed: false };
    this.conns.set(id, c);
    sock.setNoDelay?.(true);
    if (this.blocked) sock.pause();
    sock.on('data', (chunk: Buffer) => {
      for (let off = 0; off < chunk.length; off += MAX_PAYLOAD) {
        const part = chunk.subarray(off, off + MAX_PAYLOAD);
        c.inflight += part.length;
        this.stats.sent += part.length;
        this.out(frame(FRAME.DATA, id, part));
      }
      if (c.inflight >= WINDOW || this.blocked) sock.pause();
    });
    const sendClose = (reason = ''): void => {
      if (c.sentClose) return;
      c.sentClose = true;
      this.out(frame(FRAME.CLOSE, id, reason));
    };
    sock.on('end', () => sendClose());
    sock.on('error', () => undefined);
    sock.on('close', () => {
      sendClose();
      this.conns.delete(id);
    });
  }

  /** An id now opened (or refused at its opening). */
  note(id: number): void {
    if (id > this.highest) this.highest = id;
  }

  /** Whether the id is new: above every id opened so far. */
  isNew(id: number): boolean {
    return id > this.highest;
  }

  /** false: the id is not a connection of this tunnel (never opened). */
  known(id: number): boolean {
    return id > 0 && id <= this.highest;
  }

  onData(id: number, payload: Buffer): void {
    const c = this.conns.get(id);
    if (!c) return; // ended here: the peer had not seen the CLOSE yet
    if (c.peerClosed) return void this.stats.dropped++; // after its own CLOSE: nothing more is written on
    c.pending += payload.length;
    if (c.pending > RECEIVE_LIMIT) return this.fail(`connection ${id}: more than ${RECEIVE_LIMIT} bytes unacknowledged`);
    c.sock.write(payload, (err) => {
      c.pending -= payload.length;
      if (!err) this.out(ackFrame(id, payload.length));
    });
  }

  onAck(id: number, payload: Buffer): void {
    if (payload.length !== 4) return this.fail(`connection ${id}: an ACK of ${payload.length} bytes (it is 4)`);
    const c = this.conns.get(id);
    if (!c) return; // ended here: late
    const n = payload.readUInt32BE(0);
    // Only bytes this end really sent, and not yet acknowledged, can have been read there.
    if (n > c.inflight) return this.fail(`connection ${id}: ${n} bytes acknowledged, but only ${c.inflight} were sent and not yet acknowledged`);
    c.inflight -= n;
    this.stats.acked += n;
    if (c.inflight < WINDOW && !this.blocked && c.sock.isPaused()) c.sock.resume();
  }

  /** The peer sent its last byte of this connection. */
  onClose(id: number): void {
    const c = this.conns.get(id);
    if (!c) return;
    c.peerClosed = true;
    c.sock.end();
  }

  /** Refuses one connection (a frame naming it is answered with CLOSE). */
  refuse(id: number, reason: string): void {
    this.out(frame(FRAME.CLOSE, id, reason));
  }

  destroyAll(): void {
    for (const c of this.conns.values()) c.sock.destroy();
  }
}
