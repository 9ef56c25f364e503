/**
 * The model gateway against a provider whose answers node's HTTP client parses but its server
 * cannot write back (found while checking issue #42 item 1's surfaces: the same failure as the
 * preview relay's, one process over). The real `atelier gateway` process, a raw provider on
 * loopback: a status outside 200-599 (`HTTP/1.1 042`, `999`, `700`, a 1xx as the final answer) is a
 * 502 to that request only; before, `res.writeHead` threw in the 'response' callback and the
 * gateway process ended (every agent's model requests with it). The gateway keeps its pid and
 * answers the next request.
 */
import { createServer, type Server } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { route, startGatewayProc, type GatewayProc } from './gateway-harness.js';

let gw: GatewayProc;
let raw: Server;
let rawUrl = '';
/** What the raw provider answers the next request with. */
let answer = '';
const AGENT = 'agent_' + 'h'.repeat(24);

const GOOD = JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: 'm', choices: [{ index: 0, message: { role: 'assistant', content: 'fine' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });

beforeAll(async () => {
  raw = createServer((sock) => {
    sock.on('error', () => undefined);
    let head = '';
    sock.on('data', (d) => {
      head += d.toString('latin1');
      // Answer once the request's body has come (its length is in the head).
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      const len = Number(/content-length: (\d+)/i.exec(head.slice(0, end))?.[1] ?? 0);
      if (head.length - end - 4 < len) return;
      sock.end(answer);
      head = '';
    });
  });
  await new Promise<void>((r) => raw.listen(0, '127.0.0.1', r));
  rawUrl = `http://127.0.0.1:${(raw.address() as AddressInfo).port}`;
  gw = await startGatewayProc();
  await gw.push({
    generation: 1,
    providers: {},
    routes: [route('raw', 'custom', 'chat-completions', 'KEY-R', { upstreamUrl: `${rawUrl}/v1/chat/completions`, credential: { authHeader: 'x-api-key' } })],
    policies: { dailyCapMicros: null, monthlyCapMicros: null, perAgentCapMicros: null },
  });
});

afterAll(async () => {
  await gw?.stop();
  await new Promise((r) => raw?.close(r));
});

async function chat(token: string): Promise<{ status: number; body: any }> {
  const r = await fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
  });
  return { status: r.status, body: await r.json().catch(() => null) };
}

describe('a provider answer the gateway cannot relay', () => {
  const pid = () => gw.proc.pid;
  for (const status of ['042 x', '999 Whatever', '700 Seven', '199 Early']) {
    it(`HTTP/1.1 ${status}: 502 to that request, the gateway keeps serving`, async () => {
      const before = pid();
      const l = await gw.lease({ agentId: AGENT, profileId: 'raw' });
      answer = `HTTP/1.1 ${status}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`;
      const r = await chat(l.token);
      expect(r.status).toBe(502);
      // A 1xx is informational to node's client: the answer then ends without a final one.
      expect(r.body?.error?.code).toBe(status.startsWith('1') ? 'upstream_unreachable' : 'upstream_invalid_response');
      expect(gw.proc.exitCode).toBeNull();
      expect(pid()).toBe(before);
      expect((await fetch(`${gw.url}/healthz`)).status).toBe(200);
      // The next, well-formed answer goes through.
      answer = `HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(GOOD)}\r\n\r\n${GOOD}`;
      const good = await chat(l.token);
      expect(good.status).toBe(200);
      expect(good.body.choices[0].message.content).toBe('fine');
    });
  }
});
