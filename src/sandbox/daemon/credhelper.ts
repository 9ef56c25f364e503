/**
 * git's credential helper in short-lived Kubernetes Pods
 * (`credential.helper = !node /opt/atelier/daemon/credhelper.js <socket>`): the same as the
 * bubblewrap driver's native helper (src/sandbox/native.ts CREDHELPER_C). Answers "get" only, by
 * forwarding git's request to the credential broker's socket (there: the socket tunnel's listener,
 * carried to the runner's broker of this operation) and printing its answer; stores nothing.
 * Node built-ins only.
 */
import { connect } from 'node:net';

const [socketPath, action] = process.argv.slice(2);
if (!socketPath || action !== 'get') process.exit(0);
const input: Buffer[] = [];
process.stdin.on('data', (c: Buffer) => void (input.length < 256 && input.push(c)));
process.stdin.on('end', () => {
  const request = Buffer.concat(input).toString('utf8').replace(/\n+$/, '');
  const sock = connect(socketPath);
  const answer: Buffer[] = [];
  sock.setTimeout(10_000, () => sock.destroy());
  sock.on('connect', () => sock.write(`get\n${request}\n\n`));
  sock.on('data', (c: Buffer) => void (answer.length < 256 && answer.push(c)));
  sock.on('error', () => process.exit(0));
  sock.on('close', () => {
    const text = Buffer.concat(answer).toString('utf8').replace(/\n+$/, '');
    process.stdout.write(text + '\n', () => process.exit(0));
  });
});
