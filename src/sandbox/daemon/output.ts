/**
 * Bounded capture of a process output stream: the first half of the budget is kept as the head,
 * the last half as a rolling tail, and whatever fell between them is replaced by a marker.
 * Memory use stays at about `limit` bytes, however much the process writes and however it cuts it
 * up: the head is one buffer (grown by doubling up to its half), the tail one circular buffer.
 * (Kept as lists of the chunks read, a program writing a byte at a time, a test runner's dots,
 * made half a million 1-byte Buffers of a 1 MiB budget, about 100 MiB of V8 heap: more than the
 * daemon's whole heap, issue #35.)
 */
export class HeadTailCapture {
  private readonly headLimit: number;
  private readonly tailLimit: number;
  private headBuf: Buffer | undefined;
  private headBytes = 0;
  /** Circular: the tail's bytes end at tailEnd (mod tailLimit). */
  private tailBuf: Buffer | undefined;
  private tailBytes = 0;
  private tailEnd = 0;
  private total = 0;

  constructor(limit: number) {
    this.headLimit = Math.ceil(limit / 2);
    this.tailLimit = Math.floor(limit / 2);
  }

  push(chunk: Buffer): void {
    this.total += chunk.length;
    if (this.headBytes < this.headLimit) {
      const take = Math.min(this.headLimit - this.headBytes, chunk.length);
      const need = this.headBytes + take;
      if (!this.headBuf || this.headBuf.length < need) {
        const grown = Buffer.allocUnsafeSlow(Math.min(this.headLimit, Math.max(need, 2 * (this.headBuf?.length ?? 0), 256)));
        this.headBuf?.copy(grown, 0, 0, this.headBytes);
        this.headBuf = grown;
      }
      chunk.copy(this.headBuf, this.headBytes, 0, take);
      this.headBytes += take;
      chunk = chunk.subarray(take);
    }
    if (chunk.length === 0 || this.tailLimit === 0) return;
    const cap = this.tailLimit;
    const buf = (this.tailBuf ??= Buffer.allocUnsafeSlow(cap));
    const src = chunk.length > cap ? chunk.subarray(chunk.length - cap) : chunk;
    const first = Math.min(src.length, cap - this.tailEnd);
    src.copy(buf, this.tailEnd, 0, first);
    if (first < src.length) src.copy(buf, 0, first);
    this.tailEnd = (this.tailEnd + src.length) % cap;
    this.tailBytes = Math.min(cap, this.tailBytes + src.length);
  }

  private get head(): Buffer {
    return this.headBuf ? this.headBuf.subarray(0, this.headBytes) : Buffer.alloc(0);
  }

  /** The tail's bytes in order (a copy). */
  private get tail(): Buffer {
    if (!this.tailBuf || this.tailBytes === 0) return Buffer.alloc(0);
    const start = (this.tailEnd - this.tailBytes + this.tailLimit) % this.tailLimit;
    if (start + this.tailBytes <= this.tailLimit) return Buffer.from(this.tailBuf.subarray(start, start + this.tailBytes));
    return Buffer.concat([this.tailBuf.subarray(start), this.tailBuf.subarray(0, this.tailEnd)], this.tailBytes);
  }

  /** Bytes the stream produced in total. */
  get totalBytes(): number {
    return this.total;
  }

  get truncated(): boolean {
    return this.total > this.headBytes + this.tailBytes;
  }

  /**
   * The kept text. Head and tail are cut back to UTF-8 character boundaries so the marker never
   * splits a character; the omitted count includes those few bytes.
   */
  text(): string {
    const cut = this.cut();
    if (!cut) return Buffer.concat([this.head, this.tail], this.keptBytes).toString('utf8');
    return `${cut.head.toString('utf8')}${cut.marker}${cut.tail.toString('utf8')}`;
  }

  /** Bytes kept (head and tail), before any marker. */
  get keptBytes(): number {
    return this.headBytes + this.tailBytes;
  }

  /**
   * The kept text as bytes whose UTF-8 decoding is exactly text(): the head, the marker and the
   * tail side by side. (The marker is ASCII and starts and ends with a newline, so a UTF-8 decoder
   * is in its initial state on each side of it: decoding the whole equals decoding the parts, the
   * replacement of invalid bytes included; test/sandbox/output.test.ts checks it.)
   */
  bytes(): Buffer {
    const cut = this.cut();
    if (!cut) return Buffer.concat([this.head, this.tail], this.keptBytes);
    return Buffer.concat([cut.head, Buffer.from(cut.marker), cut.tail]);
  }

  /** When output was omitted: head and tail cut back to character boundaries, and the marker between them. */
  private cut(): { head: Buffer; marker: string; tail: Buffer } | undefined {
    if (!this.truncated) return undefined;
    const head = this.head;
    const tail = this.tail;
    const h = head.subarray(0, utf8HeadCut(head));
    const t = tail.subarray(utf8TailCut(tail));
    return { head: h, marker: `\n[... ${this.total - h.length - t.length} bytes omitted ...]\n`, tail: t };
  }
}

/** Length of `buf` without a trailing incomplete UTF-8 sequence. */
function utf8HeadCut(buf: Buffer): number {
  let i = buf.length - 1;
  let back = 0;
  while (i >= 0 && back < 3 && (buf[i]! & 0xc0) === 0x80) {
    i--;
    back++;
  }
  if (i < 0) return buf.length;
  const lead = buf[i]!;
  const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return buf.length - i >= need ? buf.length : i;
}

/** Offset of the first byte in `buf` that does not continue a character started before it. */
function utf8TailCut(buf: Buffer): number {
  let i = 0;
  while (i < buf.length && i < 3 && (buf[i]! & 0xc0) === 0x80) i++;
  return i;
}
