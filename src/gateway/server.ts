/**
 * The model gateway: raw node:http, no framework. Agents call POST /v1/chat/completions and
 * POST /v1/responses with their lease token; the runner drives /admin/* with a shared secret.
 * Bodies stream through (only the request JSON is parsed: to route, reserve and clamp). See
 * docs/gateway.md for the whole contract.
 *
 * This file is the wiring only; the parts live beside it:
 *   routing.ts   which endpoint, which lease, which route (profile revision → provider, key, prices)
 *   metering.ts  request bounds, the provider rewrite, usage and overrun meters (pure)
 *   budget.ts    leases, reservations and settlement, windows and policies (synchronous)
 *   usage.ts     reading usage out of provider bytes
 *   proxy.ts     the upstream call and the relay of Chat Completions and Responses, streamed or not
 *   admin.ts     the runner's /admin/* API
 *   http.ts      JSON answers, the error body, the capped body reader
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomToken } from '../core/ids.js';
import { handleAdmin } from './admin.js';
import { Budget, type Lease } from './budget.js';
import type { GatewayContext, GatewayLog } from './context.js';
import { sendError, sendJson } from './http.js';
import { proxyRequest } from './proxy.js';
import { adminAuthorizer, classifyRequest, splitTarget, UpstreamAgents } from './routing.js';

export interface GatewayOptions {
  host: string;
  port: number;
  adminSecret: string;
  /** Request JSON cap in bytes. */
  maxBodyBytes?: number;
  /** After a client disconnects, how long upstream is still read for its usage. */
  drainMs?: number;
  /** Default MODEL_GATEWAY_SESSION_HEADER (a snapshot may set it too). */
  sessionHeader?: string | null;
  now?: () => number;
  log?: GatewayLog;
}

export interface RunningGateway {
  url: string;
  port: number;
  bootId: string;
  budget: Budget;
  close(): Promise<void>;
}

export async function startGateway(opts: GatewayOptions): Promise<RunningGateway> {
  const now = opts.now ?? Date.now;
  const defaultSessionHeader = opts.sessionHeader?.toLowerCase() || null;
  const ctx: GatewayContext = {
    bootId: 'boot_' + randomToken(16),
    startedAt: new Date().toISOString(),
    budget: new Budget(now),
    agents: new UpstreamAgents(),
    now,
    log: opts.log ?? (() => undefined),
    maxBodyBytes: opts.maxBodyBytes ?? 32 * 1024 * 1024,
    drainMs: opts.drainMs ?? 120_000,
    defaultSessionHeader,
    adminAuthorized: adminAuthorizer(opts.adminSecret),
    routes: new Map(),
    generation: null,
    sessionHeader: defaultSessionHeader,
    inflight: 0,
  };

  const server: Server = createServer({ keepAliveTimeout: 65_000, headersTimeout: 30_000, requestTimeout: 300_000 }, (req, res) => {
    const { path, query } = splitTarget(req.url ?? '/');
    const handle = async () => {
      const endpoint = classifyRequest(req.method, path);
      switch (endpoint.kind) {
        case 'proxy':
          return proxyRequest(ctx, req, res, endpoint.mode);
        case 'admin':
          return handleAdmin(ctx, req, res, path, query);
        case 'health':
          return sendJson(res, 200, { status: 'ok', bootId: ctx.bootId });
        case 'not_found':
          req.resume();
          return sendError(res, 404, 'not_found', `the gateway serves POST /v1/chat/completions and POST /v1/responses only (got ${req.method} ${path})`);
      }
    };
    handle().catch((err) => {
      ctx.log('error', 'gateway request failed', { err: String(err?.stack ?? err) });
      sendError(res, 500, 'internal', 'internal gateway error');
    });
  });
  const sweeper = setInterval(() => ctx.budget.sweep(), 600_000);
  sweeper.unref();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  return {
    url: `http://${host}:${port}`,
    port,
    bootId: ctx.bootId,
    budget: ctx.budget,
    async close() {
      clearInterval(sweeper);
      await new Promise<void>((r) => {
        server.close(() => r());
        server.closeIdleConnections();
        setTimeout(() => {
          server.closeAllConnections();
          r();
        }, 2000).unref();
      });
      ctx.agents.destroyAll();
    },
  };
}

export type { Lease };
