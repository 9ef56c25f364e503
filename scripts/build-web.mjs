// Bundles the dashboard's front end (web/) into dist/web/ with esbuild: one ES module, one
// stylesheet (ours plus uPlot's), no source fetched from anywhere at run time.
import { build } from 'esbuild';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const out = join(root, 'dist/web');
mkdirSync(out, { recursive: true });
await build({
  entryPoints: [join(root, 'web/main.tsx')],
  bundle: true,
  format: 'esm',
  target: 'es2020',
  minify: true,
  sourcemap: true,
  jsx: 'automatic',
  jsxImportSource: 'preact',
  outfile: join(out, 'app.js'),
  logLevel: 'warning',
});
const css = readFileSync(join(root, 'node_modules/uplot/dist/uPlot.min.css'), 'utf8') + '\n' + readFileSync(join(root, 'web/app.css'), 'utf8');
writeFileSync(join(out, 'app.css'), css);
