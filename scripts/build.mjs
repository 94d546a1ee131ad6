#!/usr/bin/env node
// `npm run build`: tsc (tsconfig.build.json) into dist/, then the files tsc does not emit but the
// code reads at run time (Lua scripts, found next to the module that loads them via import.meta.url).
//   node scripts/build.mjs [--out <dir>] [--if-typescript]
// --if-typescript (the `prepare` hook): a production install (`npm ci --omit=dev`) has no
// TypeScript; then say so and leave dist/ as it is instead of failing the install.
import { spawnSync } from 'node:child_process';
import { cpSync, readdirSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const outAt = args.indexOf('--out');
const out = path.resolve(root, outAt >= 0 ? args[outAt + 1] : 'dist');

let tsc;
try {
  tsc = createRequire(path.join(root, 'package.json')).resolve('typescript/bin/tsc');
} catch {
  if (args.includes('--if-typescript')) {
    process.stdout.write('events-ingest: typescript is not installed (production install); not building dist/\n');
    process.exit(0);
  }
  process.stderr.write('events-ingest: the build needs the dev dependencies (npm ci)\n');
  process.exit(1);
}

rmSync(out, { recursive: true, force: true });
const r = spawnSync(process.execPath, [tsc, '-p', path.join(root, 'tsconfig.build.json'), '--outDir', out], {
  cwd: root,
  stdio: 'inherit',
});
if (r.status !== 0) process.exit(r.status ?? 1);

/** Non-TypeScript files the code loads relative to its own module: every Lua script (every script of shared/redis/scripts/). */
const SOURCE_DIRS = ['shared', 'services', 'cli'];
const copyLua = (dir) => {
  for (const name of readdirSync(path.join(root, dir))) {
    const rel = path.join(dir, name);
    const from = path.join(root, rel);
    if (statSync(from).isDirectory()) copyLua(rel);
    else if (name.endsWith('.lua')) cpSync(from, path.join(out, rel));
  }
};
for (const dir of SOURCE_DIRS) copyLua(dir);
