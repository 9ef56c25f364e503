/**
 * The socket tunnel's Pod end (`node /opt/atelier/daemon/tunnel.js`, started by the runner over a
 * Kubernetes exec stream for one short-lived operation: src/sandbox/kubernetes/tunnel.ts). It
 * reads a CONFIG frame from stdin, writes the small files it names (a CA bundle), listens where it
 * says (Unix sockets in the Pod's own /dev/shm/atelier, the one-host egress proxy on
 * 127.0.0.1:<port>), answers READY, then carries every accepted connection over stdin/stdout as
 * frames (tunnel-frames.ts). The runner decides where each connection goes: this end only names
 * the listener it came in on. Ends when stdin ends. Node built-ins only.
 */
import { mkdirSync, rmSync, chmodSync, constants as fsConstants, openSync, writeFileSync, closeSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import path from 'node:path';
import { FRAME, FrameReader, MAX_CONNECTIONS, Mux, frame, type TunnelConfig } from './tunnel-frames.js';

/** Where listeners and files may go: the Pod's own runtime directory. */
const ROOT = process.env.ATELIER_TUNNEL_ROOT || '/dev/shm/atelier';

const servers: Server[] = [];
let nextId = 1;
let configured = false;

/** Frames to the runner; false while stdout is behind (the Mux stops reading sockets until 'drain'). */
const out = (b: Buffer): boolean => process.stdout.write(b);
const die = (reason: string): never => {
  process.stderr.write(`atelier tunnel: ${reason}\n`);
  mux.destroyAll();
  process.exit(1);
};
const mux = new Mux(out, die);
process.stdout.on('drain', () => mux.drained());
process.stdout.on('error', () => die('stdout closed'));

function inside(p: string): string {
  const r = path.resolve(p);
  if (!r.startsWith(ROOT + '/')) throw new Error(`${p} is outside ${ROOT}`);
  return r;
}

async function configure(cfg: TunnelConfig): Promise<void> {
  for (const f of cfg.files) {
    const p = inside(f.path);
    mkdirSync(path.dirname(p), { recursive: true, mode: 0o700 });
    const fd = openSync(p, fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW, f.mode & 0o644);
    try {
      // writeFileSync on a descriptor writes it all (one write(2) may write less).
      writeFileSync(fd, Buffer.from(f.b64, 'base64'));
    } finally {
      closeSync(fd);
    }
  }
  for (const l of cfg.listen) {
    const server = createServer({ allowHalfOpen: true, pauseOnConnect: false }, (sock) => {
      if (mux.conns.size >= MAX_CONNECTIONS) return void sock.destroy();
      const id = nextId++;
      out(frame(FRAME.OPEN, id, l.tag));
      mux.attach(id, sock);
    });
    servers.push(server);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      if ('path' in l) {
        const p = inside(l.path);
        mkdirSync(path.dirname(p), { recursive: true, mode: 0o700 });
        rmSync(p, { force: true });
        server.listen(p, () => {
          chmodSync(p, 0o600);
          resolve();
        });
      } else {
        server.listen(l.port, '127.0.0.1', () => resolve());
      }
    });
  }
}

const reader = new FrameReader((type, id, payload) => {
  switch (type) {
    case FRAME.CONFIG:
      if (configured) return die('a second CONFIG');
      configured = true;
      configure(JSON.parse(payload.toString('utf8')) as TunnelConfig).then(
        () => out(frame(FRAME.READY, 0, JSON.stringify({ ok: true }))),
        (err: unknown) => out(frame(FRAME.READY, 0, JSON.stringify({ error: err instanceof Error ? err.message : String(err) }))),
      );
      return;
    case FRAME.DATA:
      return mux.onData(id, payload);
    case FRAME.ACK:
      return mux.onAck(id, payload);
    case FRAME.CLOSE:
      // The runner refused or ended the connection: end it here (a refused one is destroyed).
      if (payload.length > 0) mux.conns.get(id)?.sock.destroy();
      return mux.onClose(id);
    default:
      return die(`unexpected frame type ${type}`);
  }
});

process.stdin.on('data', (chunk: Buffer) => {
  try {
    reader.push(chunk);
  } catch (err) {
    die(err instanceof Error ? err.message : String(err));
  }
});
process.stdin.on('end', () => {
  for (const s of servers) s.close();
  mux.destroyAll();
  process.exit(0);
});
