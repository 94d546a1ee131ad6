import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
/** Inside the repository, so the compiled code finds node_modules the way dist/ does. */
const OUT = join(ROOT, '.tmp', 'test-dist');
const LOCK = join(ROOT, '.tmp', 'test-dist.lock');
const STAMP = join(OUT, '.sources-sha256');
/** A build takes ~20 s on a loaded 2-core machine; a stale lock (a killed run) is broken after this. */
const LOCK_STALE_MS = 180_000;

/** What the build reads: a change to any of these means a rebuild. */
function sourcesDigest(): string {
  const h = createHash('sha256');
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (/\.(ts|lua|mjs)$/.test(name)) h.update(relative(ROOT, p)).update('\0').update(readFileSync(p));
    }
  };
  for (const d of ['shared', 'services', 'cli']) walk(join(ROOT, d));
  for (const f of ['index.ts', 'tsconfig.json', 'tsconfig.build.json', 'scripts/build.mjs', 'package-lock.json'])
    h.update(f).update(readFileSync(join(ROOT, f)));
  return h.digest('hex');
}

/**
 * Compiles the product with `npm run build`'s script into `.tmp/test-dist` once per source state
 * (test files in parallel workers share one build through a lock folder) and returns the path of
 * a compiled entry, e.g. `distEntry('services/main.js')`.
 */
export async function distEntry(entry: `${string}.js`): Promise<`${string}.js`> {
  const digest = sourcesDigest();
  const deadline = Date.now() + 2 * LOCK_STALE_MS;
  mkdirSync(join(ROOT, '.tmp'), { recursive: true });
  for (;;) {
    try {
      mkdirSync(LOCK);
      break;
    } catch {
      const held = statSync(LOCK, { throwIfNoEntry: false });
      if (held && Date.now() - held.mtimeMs > LOCK_STALE_MS) rmSync(LOCK, { recursive: true, force: true });
      if (Date.now() > deadline) throw new Error('timed out waiting for another test to build dist');
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  try {
    if (!existsSync(STAMP) || readFileSync(STAMP, 'utf8') !== digest) {
      const r = spawnSync(process.execPath, [join(ROOT, 'scripts/build.mjs'), '--out', OUT], {
        cwd: ROOT,
        encoding: 'utf8',
        timeout: LOCK_STALE_MS,
      });
      if (r.status !== 0) throw new Error(`build failed (${String(r.status)}):\n${r.stdout}\n${r.stderr}`);
      writeFileSync(STAMP, digest);
    }
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
  return join(OUT, entry) as `${string}.js`;
}

/**
 * How a package.json script runs a compiled entry point: `npm start` is
 * `MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-1048576} node --min-semi-space-size=16 dist/services/main.js`,
 * so `startCommand('<any build>/services/main.js')` is `{ env: { MALLOC_MMAP_THRESHOLD_: '1048576' },
 * flags: ['--min-semi-space-size=16'] }`: the environment's defaults (a variable already set wins, as in
 * the shell) and the node flags. Tests and the bench run a build this way, so they run the process
 * `npm start` runs. Empty for an entry no script runs.
 */
export function startCommand(compiledEntry: string): { env: Record<string, string>; flags: string[] } {
  const { scripts } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
    scripts: Record<string, string>;
  };
  for (const command of Object.values(scripts)) {
    const m = /^((?:\w+=\$\{\w+:-[^}\s]*\} )*)node((?: --[\w-]+(?:=\S+)?)*) dist\/(\S+\.js)$/.exec(command);
    if (!m || !compiledEntry.endsWith(`/${m[3] as string}`)) continue;
    const env: Record<string, string> = {};
    for (const [, name, fallback] of (m[1] as string).matchAll(/(\w+)=\$\{(?:\w+):-([^}\s]*)\}/g))
      env[name as string] = fallback as string;
    return { env, flags: (m[2] as string).split(' ').filter((a) => a.length > 0) };
  }
  return { env: {}, flags: [] };
}

/** The node flags of startCommand. */
export function startFlags(compiledEntry: string): string[] {
  return startCommand(compiledEntry).flags;
}

/** The environment a script gives a compiled entry: its defaults under `base` (a variable set in `base` wins). */
export function startEnv(compiledEntry: string, base: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, fallback] of Object.entries(startCommand(compiledEntry).env)) out[name] = base[name] ?? fallback;
  return out;
}

/** The command line of a running process, as the kernel has it (`/proc/<pid>/cmdline`). */
export function commandLine(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8')
    .split('\0')
    .filter((s) => s.length > 0);
}

/** The environment a running process started with, as the kernel has it (`/proc/<pid>/environ`). */
export function processEnv(pid: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')) {
    const at = pair.indexOf('=');
    if (at > 0) out[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return out;
}

/**
 * The Node child processes of `pid` (`npm start`'s encoder processes; a private redis-server is
 * not one), from the parent field and process name of every /proc/<pid>/stat. Empty elsewhere.
 */
export function childNodePids(pid: number): number[] {
  const out: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return out;
  }
  for (const name of entries) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      // Node 20 leaves the process name `node`; Node 24 names its main thread `MainThread`.
      if (ppid === pid && (comm === 'node' || comm === 'MainThread')) out.push(Number(name));
    } catch {
      /* the process ended while we read */
    }
  }
  return out;
}
