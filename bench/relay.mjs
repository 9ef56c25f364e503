// Reference relays for bench/gateway.mjs: the floor of what any separate-process hop adds on this
// machine. Neither meters, authenticates nor routes.
//   node bench/relay.mjs tcp HOST:PORT    copies bytes both ways (no HTTP at all)
//   node bench/relay.mjs http HOST:PORT   the smallest node:http proxy: reads the request, sends it
//                                         upstream on a keep-alive agent, streams the answer back
// Prints "listening at http://127.0.0.1:N".
import { Agent, createServer as httpServer, request } from 'node:http';
import { connect, createServer as tcpServer } from 'node:net';

const [mode, target] = process.argv.slice(2);
const [host, port] = target.split(':');
let server;
if (mode === 'tcp') {
  server = tcpServer({ noDelay: true }, (client) => {
    const up = connect({ host, port: Number(port), noDelay: true });
    client.pipe(up).pipe(client);
    const end = () => {
      client.destroy();
      up.destroy();
    };
    client.on('error', end).on('close', end);
    up.on('error', end).on('close', end);
  });
} else {
  const agent = new Agent({ keepAlive: true, maxSockets: 1024 });
  server = httpServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const headers = { ...req.headers, host: target, 'content-length': body.length };
      delete headers.connection;
      const up = request({ host, port: Number(port), path: req.url, method: req.method, agent, headers }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
      up.on('error', () => res.destroy());
      up.end(body);
    });
  });
}
server.listen(0, '127.0.0.1', () => console.log(`listening at http://127.0.0.1:${server.address().port}`));
