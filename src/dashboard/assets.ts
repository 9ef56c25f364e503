/**
 * The dashboard's built front end (web/, bundled by scripts/build-web.mjs into dist/web/): served
 * from this repository's own files only, nothing from another origin. Files are read once at start.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { FastifyInstance } from 'fastify';

export const CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const TYPES: Record<string, string> = { '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.map': 'application/json', '.svg': 'image/svg+xml', '.png': 'image/png' };

/** dist/dashboard/assets.js -> dist/web */
export const WEB_DIR = resolve(import.meta.dirname, '../web');

export function registerAssets(f: FastifyInstance, dir = WEB_DIR): void {
  const files = new Map<string, { type: string; body: Buffer }>();
  if (existsSync(dir)) {
    for (const name of readdirSync(dir)) {
      const ext = name.slice(name.lastIndexOf('.'));
      if (!TYPES[ext] || !/^[A-Za-z0-9._-]+$/.test(name)) continue;
      files.set(name, { type: TYPES[ext]!, body: readFileSync(join(dir, name)) });
    }
  }
  f.get<{ Params: { name: string } }>('/assets/:name', async (req, reply) => {
    const file = files.get(req.params.name);
    if (!file) {
      const missing = files.size === 0 ? ' (the dashboard is not built: run `npm run build`)' : '';
      return reply.code(404).header('content-type', 'text/plain; charset=utf-8').send(`no asset ${req.params.name}${missing}`);
    }
    return reply.header('content-type', file.type).header('cache-control', 'no-cache').send(file.body);
  });
}
