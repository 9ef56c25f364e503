/**
 * The daemon's relay mode (preview URLs, issue #33): the daemon's own socket server on the host,
 * with the runner's openRelay against it. Bytes flow both ways raw; the relay is only ever the
 * first and only request of a fresh connection, never to the egress bridge's port, never to a
 * port out of range; nothing listening is FAILED_PRECONDITION naming the port.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer } from '../../src/sandbox/daemon/server.js';
import { openRelay } from '../../src/sandbox/relay.js';
import { ServiceError } from '../../src/core/errors.js';
import { confineCookie } from '../../src/services/previews/http-gate.js';

let dir: string;
let sock: string;
let daemon: Server;
let echo: Server;
let echoPort: number;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'relay-'));
  sock = join(dir, 'd.sock');
  echo = createServer((s) => s.on('data', (d) => s.write(Buffer.concat([Buffer.from('echo:'), d]))));
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
  echoPort = (echo.address() as { port: number }).port;
  daemon = await startServer(sock, { ping: () => ({ pid: 1, uid: 1, version: '3' }) }, { relay: { forbiddenPorts: [3128] } });
});

afterAll(async () => {
  daemon?.close();
  echo?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Raw lines from a connection to the daemon after writing `text`. */
function raw(text: string): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(sock, () => s.write(text));
    let out = '';
    s.on('data', (d) => (out += d));
    s.on('close', () => resolve(out));
    setTimeout(() => s.end(), 500).unref();
  });
}

describe('daemon relay mode', () => {
  it('relays raw bytes both ways, binary included', async () => {
    const s: Socket = await openRelay(sock, echoPort);
    s.resume();
    const got = new Promise<Buffer>((resolve) => s.once('data', resolve));
    const bytes = Buffer.from([0, 10, 255, 123, 10, 34]);
    s.write(bytes);
    expect(Buffer.compare(await got, Buffer.concat([Buffer.from('echo:'), bytes]))).toBe(0);
    s.destroy();
  });

  it('refuses the egress bridge port and ports out of range, naming the field', async () => {
    for (const port of [3128, 0, 65536, 1.5]) {
      const err = await openRelay(sock, port).catch((e: unknown) => e);
      expect(err, String(port)).toBeInstanceOf(ServiceError);
      expect((err as ServiceError).code).toBe('INVALID_ARGUMENT');
      expect((err as ServiceError).details.field).toBe('port');
    }
  });

  it('says nothing listens, naming the port', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as { port: number }).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const err = (await openRelay(sock, port).catch((e: unknown) => e)) as ServiceError;
    expect(err.code).toBe('FAILED_PRECONDITION');
    expect(err.message).toContain(String(port));
  });

  it('is only the first and only request of a connection, with nothing after its line', async () => {
    const second = await raw(`{"id":1,"method":"ping"}\n{"id":2,"method":"relay","params":{"port":${echoPort}}}\n`);
    expect(second).toContain('relay must be the first and only request');
    expect(second).not.toContain('echo:');
    const trailing = await raw(`{"id":1,"method":"relay","params":{"port":${echoPort}}}\nGET / HTTP/1.1\r\n`);
    expect(trailing).toContain('relay must be the first and only request');
    expect(trailing).not.toContain('echo:');
    const twoLines = await raw(`{"id":1,"method":"relay","params":{"port":${echoPort}}}\n{"id":2,"method":"ping"}\n`);
    expect(twoLines).toContain('relay must be the first and only request');
  });
});

describe('cookies a preview sets', () => {
  it('are kept to the link\'s path; this origin\'s own names and __Host- cookies are dropped', () => {
    expect(confineCookie('a=1; Path=/app; Domain=evil.example; HttpOnly', '/p/x.y')).toBe('a=1; Path=/p/x.y/app; HttpOnly');
    expect(confineCookie('a=1', '/p/x.y')).toBe('a=1; Path=/p/x.y/');
    expect(confineCookie('a=1; path=relative', '/p/x.y')).toBe('a=1; Path=/p/x.y/');
    expect(confineCookie('atelier_session=evil; Path=/', '/p/x.y')).toBeNull();
    expect(confineCookie('ATELIER_session=evil; Path=/', '/p/x.y')).toBeNull();
    expect(confineCookie('__Host-x=1; Path=/; Secure', '/p/x.y')).toBeNull();
  });
});
