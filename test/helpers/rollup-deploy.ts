/**
 * The rollup acceptance tests' deployment: the product's real processes (`start:api`,
 * `start:encoder`, `start:rollup` from the sources), the test's redis-server, and the
 * `events-ingest` CLI run as a user runs it. Every process and folder is removed by `cleanupAll`.
 */
import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { inject } from 'vitest';
import { runQuery } from '../../cli/query.js';
import { type Service, spawnService, waitHttpOk } from '../../scripts/chaos-kit.js';
import { parseEnv } from '../../shared/config.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { batchBody, sampleEvent } from './events.js';
import { uniqueName } from './names.js';
import { freePort } from './redis-server.js';

export const TOKEN = 'rollup-admin-token-0123456789';
const ROOT = resolve(import.meta.dirname, '../..');

const procs: Service[] = [];
const cleanups: (() => Promise<void> | void)[] = [];

/** Runs `fn` in `cleanupAll` (after every process is killed). */
export function onCleanup(fn: () => Promise<void> | void): void {
  cleanups.push(fn);
}

/** Kills every process started here, then runs the clean-ups; for `afterAll`. */
export async function cleanupAll(): Promise<void> {
  for (const p of procs.splice(0)) await p.stop('SIGKILL');
  for (const c of cleanups.splice(0)) await c();
}

export interface Deployment {
  common: Record<string, string>;
  store: ObjectStore;
  url: string;
  startRollup(): Promise<Service>;
}

/**
 * Starts a service on a free port and waits for `path` there. Another test file's process can take
 * the port between freePort() and the service's listen; then it starts again on another port
 * (at most three tries).
 */
async function onFreePort(start: (port: number) => Service, path: string): Promise<{ svc: Service; port: number }> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const svc = start(port);
    procs.push(svc);
    try {
      await waitHttpOk(`http://127.0.0.1:${port}${path}`, 60_000, svc);
      return { svc, port };
    } catch (err) {
      if (attempt >= 3 || !svc.output().includes('EADDRINUSE')) throw err;
    }
  }
}

export async function deploy(
  storeEnv: Record<string, string>,
  store: ObjectStore,
  periodSeconds: number,
  delaySeconds: number,
  extra: Record<string, string> = {},
): Promise<Deployment> {
  const common = {
    HOST: '127.0.0.1',
    REDIS_URL: inject('redisUrl'),
    QUEUE_NAME: uniqueName('roll'),
    ADMIN_TOKEN: TOKEN,
    ROLLUP_PERIOD_SECONDS: String(periodSeconds),
    ROLLUP_DELAY_SECONDS: String(delaySeconds),
    LOG_LEVEL: 'info',
    // Rollups and retention on their own (the Iceberg tests turn it on).
    ICEBERG: 'off',
    ...storeEnv,
    ...extra,
  };
  const { port: apiPort } = await onFreePort(
    (port) => spawnService('services/api/main.ts', { ...common, PORT: String(port) }),
    '/readyz',
  );
  await onFreePort(
    (port) => spawnService('services/encoder/main.ts', { ...common, METRICS_PORT: String(port) }),
    '/metrics',
  );
  const url = `http://127.0.0.1:${apiPort}`;
  return {
    common,
    store,
    url,
    async startRollup() {
      return (
        await onFreePort(
          (port) => spawnService('services/rollup/main.ts', { ...common, METRICS_PORT: String(port) }),
          '/metrics',
        )
      ).svc;
    },
  };
}

export async function push(url: string, app: string, n: number): Promise<string | null> {
  try {
    const r = await fetch(`${url}/push/events/${app}/x`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: batchBody(n, (i) => sampleEvent(i)),
      signal: AbortSignal.timeout(10_000),
    });
    if (r.status !== 200) return null;
    return ((await r.json()) as { batchId: string }).batchId;
  } catch {
    return null;
  }
}

/** Runs the `events-ingest` CLI as a user would (one node process, the checkout's sources). */
export function runCli(
  args: string[],
  env: Record<string, string>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ['bin/events-ingest.mjs', ...args], {
      cwd: ROOT,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    // Decoded as a stream: a multi-byte character split across two chunks stays one character.
    child.stdout.setEncoding('utf8');
    child.stderr.setEncoding('utf8');
    child.stdout.on('data', (b: string) => (stdout += b));
    child.stderr.on('data', (b: string) => (stderr += b));
    const kill = setTimeout(() => child.kill('SIGKILL'), 90_000);
    child.on('close', (code) => {
      clearTimeout(kill);
      done({ code, stdout, stderr });
    });
  });
}

/**
 * `query --store` code path (cli/query.ts): the count over the exact view, every app. With
 * `copy`, on S3, it reads through the CLI's local copy (`--copy --cache-dir <cacheDir>`).
 */
export async function storeCount(env: Record<string, string>, copy?: { cacheDir: string }): Promise<number> {
  const source = {
    kind: 'store',
    env: parseEnv(env),
    ...(copy ? { copy: true, cacheDir: copy.cacheDir } : {}),
  } as const;
  const result = await runQuery('SELECT count(*)::BIGINT AS n FROM events', source);
  return Number(result.rows[0]?.[0] ?? 0);
}

/** Watermark of every app has passed `endMs`. */
export async function rolledThrough(
  store: ObjectStore,
  apps: readonly string[],
  endMs: (app: string) => number,
): Promise<boolean> {
  for (const app of apps) {
    const m = await readManifest(store, `events/${app}/`);
    if (!m || m.watermarkMs < endMs(app)) return false;
  }
  return true;
}
