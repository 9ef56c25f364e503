/**
 * git credential helper used inside short-lived git sandboxes:
 *   credential.helper = "!/usr/bin/node /opt/atelier/daemon/credhelper.js"
 * Forwards git's request to the broker socket mounted at /run/atelier-cred/cred.sock and prints
 * the answer. It stores nothing and only answers "get".
 */
import { connect } from 'node:net';

const action = process.argv[2];
if (action !== 'get') process.exit(0);

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => (input += d));
process.stdin.on('end', () => {
  const sock = connect('/run/atelier-cred/cred.sock');
  let out = '';
  sock.setTimeout(10_000, () => sock.destroy());
  sock.on('connect', () => sock.write(`get\n${input.replace(/\n*$/, '')}\n\n`));
  sock.on('data', (d) => (out += d.toString('utf8')));
  sock.on('close', () => {
    process.stdout.write(out.replace(/\n*$/, '\n'));
  });
  sock.on('error', () => process.exit(0));
});
