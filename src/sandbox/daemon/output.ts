/**
 * Bounded capture of a process output stream: the first half of the budget is kept as the head,
 * the last half as a rolling tail, and whatever fell between them is replaced by a marker.
 * Memory use stays at about `limit` bytes plus one chunk, however much the process writes.
 */
export class HeadTailCapture {
  private readonly headLimit: number;
  private readonly tailLimit: number;
  private head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;
  private total = 0;

  constructor(limit: number) {
    this.headLimit = Math.ceil(limit / 2);
    this.tailLimit = Math.floor(limit / 2);
  }

  push(chunk: Buffer): void {
    this.total += chunk.length;
    if (this.headBytes < this.headLimit) {
      const take = Math.min(this.headLimit - this.headBytes, chunk.length);
      this.head.push(chunk.subarray(0, take));
      this.headBytes += take;
      chunk = chunk.subarray(take);
    }
    if (chunk.length === 0 || this.tailLimit === 0) return;
    if (chunk.length >= this.tailLimit) {
      this.tail = [Buffer.from(chunk.subarray(chunk.length - this.tailLimit))];
      this.tailBytes = this.tailLimit;
      return;
    }
    // Copy: the caller's chunk may be a view into a pooled buffer.
    this.tail.push(Buffer.from(chunk));
    this.tailBytes += chunk.length;
    while (this.tailBytes > this.tailLimit) {
      const first = this.tail[0]!;
      const excess = this.tailBytes - this.tailLimit;
      if (first.length <= excess) {
        this.tail.shift();
        this.tailBytes -= first.length;
      } else {
        this.tail[0] = first.subarray(excess);
        this.tailBytes -= excess;
      }
    }
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
    if (!cut) return Buffer.concat([...this.head, ...this.tail], this.keptBytes).toString('utf8');
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
    if (!cut) return Buffer.concat([...this.head, ...this.tail], this.keptBytes);
    return Buffer.concat([cut.head, Buffer.from(cut.marker), cut.tail]);
  }

  /** When output was omitted: head and tail cut back to character boundaries, and the marker between them. */
  private cut(): { head: Buffer; marker: string; tail: Buffer } | undefined {
    if (!this.truncated) return undefined;
    const head = Buffer.concat(this.head);
    const tail = Buffer.concat(this.tail);
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
