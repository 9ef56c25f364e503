/**
 * The runner's side of a preview relay (src/sandbox/relay.ts) reads one reply line from the
 * sandbox's daemon before the bytes flow (issue #42 item 1): whatever that line is, a bad one
 * rejects that relay (UNAVAILABLE) and nothing throws in the socket's callbacks. A daemon socket
 * on a Unix path answers each hostile line here, as the sandbox's daemon would.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openRelay } from '../../src/sandbox/relay.js';

let dir: string;
let server: Server;
let answer = '';
const path = () => join(dir, 'daemon.sock');

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'relay-reply-'));
  server = createServer((s) => {
    s.on('error', () => undefined);
    s.once('data', () => s.write(answer));
  });
  await new Promise<void>((r) => server.listen(path(), r));
});

afterAll(() => {
  server?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the daemon\'s relay reply', () => {
  const hostile = ['null\n', '[]\n', '"relayed"\n', '42\n', '{"error":null}\n', '{"error":"x"}\n', '{"error":{"code":5,"message":"m"}}\n', '{"error":{"code":"INTERNAL"}}\n', '{"id":1,"result":null}\n', '{"id":1}\n', 'not json\n', `${'x'.repeat(20_000)}`];
  for (const line of hostile) {
    it(`rejects ${JSON.stringify(line.slice(0, 40))} with UNAVAILABLE, nothing thrown`, async () => {
      answer = line;
      await expect(openRelay(path(), 8080, 5_000)).rejects.toMatchObject({ code: 'UNAVAILABLE' });
    });
  }

  it('a daemon error reply with a known code keeps it; a relayed reply gives the socket with the bytes after the line', async () => {
    answer = '{"id":1,"error":{"code":"FAILED_PRECONDITION","message":"port: nothing listens","details":{"field":"port"}}}\n';
    await expect(openRelay(path(), 8080, 5_000)).rejects.toMatchObject({ code: 'FAILED_PRECONDITION', details: { field: 'port' } });
    answer = '{"id":1,"result":{"relayed":true,"address":"127.0.0.1"}}\nHTTP/1.1';
    const s = await openRelay(path(), 8080, 5_000);
    const first = await new Promise<string>((r) => {
      s.once('data', (d: Buffer) => r(d.toString()));
      s.resume();
    });
    expect(first).toBe('HTTP/1.1');
    s.destroy();
  });
});
