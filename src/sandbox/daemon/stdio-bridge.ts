/**
 * The daemon's door in a Kubernetes Pod: `node stdio-bridge.js /run/atelier/d.sock` pipes its
 * stdin and stdout to one connection to the daemon's socket, so the runner reaches the daemon
 * over the Kubernetes exec stream with its newline-delimited protocol unchanged
 * (src/sandbox/kubernetes/relay.ts). Ends when either side ends. Node built-ins only (this
 * directory is bound read-only into sandboxes and copied into the workspace image).
 */
import { connect } from 'node:net';

const socketPath = process.argv[2];
if (!socketPath) {
  process.stderr.write('usage: stdio-bridge.js SOCKET\n');
  process.exit(2);
}
const sock = connect(socketPath);
sock.on('error', (err) => {
  process.stderr.write(`atelier stdio-bridge: ${err.message}\n`);
  process.exit(1);
});
process.stdin.pipe(sock);
sock.pipe(process.stdout);
process.stdin.on('end', () => sock.end());
// Exit once what was piped to stdout has been written (an exit straight away can drop the last bytes of a reply).
sock.on('close', () => process.stdout.write('', () => process.exit(0)));
