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
 * The node flags a package.json script gives a compiled entry point: `npm start` is
 * `node --min-semi-space-size=16 dist/services/main.js`, so
 * `startFlags('<any build>/services/main.js')` is `['--min-semi-space-size=16']`. Tests and the
 * bench run a build with these flags, so they run the process `npm start` runs. `[]` for an entry
 * no script runs.
 */
export function startFlags(compiledEntry: string): string[] {
  const { scripts } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
    scripts: Record<string, string>;
  };
  for (const command of Object.values(scripts)) {
    const m = /^node((?: --[\w-]+(?:=\S+)?)*) dist\/(\S+\.js)$/.exec(command);
    if (m && compiledEntry.endsWith(`/${m[2] as string}`))
      return (m[1] as string).split(' ').filter((a) => a.length > 0);
  }
  return [];
}

/** The command line of a running process, as the kernel has it (`/proc/<pid>/cmdline`). */
export function commandLine(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8')
    .split('\0')
    .filter((s) => s.length > 0);
}

/** A running process's environment (Linux /proc/<pid>/environ), as it was when it started. */
export function processEnvOf(pid: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0')) {
    const eq = entry.indexOf('=');
    if (eq > 0) out[entry.slice(0, eq)] = entry.slice(eq + 1);
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
