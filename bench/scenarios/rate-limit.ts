/**
 * Scenario — the cost of rate limiting. One API process (`services/api/main.ts`, no encoder) on
 * a private Redis serves three collections that differ only in their `rateLimit`: none; a push
 * rule (identity bucket, a limit never reached, so every push runs the check and none is
 * refused); the push rule plus a per-app events budget (a second script call). Each takes the
 * same closed-loop load (a few connections pushing 10-event batches back to back), rounds
 * alternated, and the per-request latencies are measured here. Same process, same JIT, same
 * Redis connection: only the check differs. Also the raw round trip of one check (the Lua
 * script) next to a Redis PING, from this process.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request } from 'node:http';
import { RedisCounterStore } from '../../services/api/edge/counters.js';
import { startStack } from '../../services/stack.js';
import { DEFAULT_SYNC_CONFIG, parseEnv } from '../../shared/config.js';
import { rateLimitKey, rateLimitKeyPrefix } from '../../shared/redis/keyspace.js';
import { freePort, startRedisServer } from '../../test/helpers/redis-server.js';
import { bodyFactory, median, probeRedis, row, sleep, spawnService, waitHttp } from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';

const EVENTS_PER_BATCH = 10;
const CONNECTIONS = 4;
const NEVER = 1_000_000_000;

type Variant = 'off' | 'rule' | 'rule+app';

const VARIANTS: Variant[] = ['off', 'rule', 'rule+app'];
/** The collection (and route prefix) of each variant. */
const COLLECTION: Record<Variant, string> = { off: 'off', rule: 'rule', 'rule+app': 'both' };

function config(): unknown {
  const rateLimit = (v: Variant) =>
    v === 'off'
      ? undefined
      : {
          push: { windowMs: 60_000, maxRequests: NEVER, bucket: 'identity' },
          ...(v === 'rule+app' ? { appEvents: { windowMs: 1000, maxEvents: NEVER } } : {}),
        };
  return {
    version: 1,
    collections: VARIANTS.map((v) => ({
      ...DEFAULT_SYNC_CONFIG.collections[0],
      name: COLLECTION[v],
      storagePath: `${COLLECTION[v]}/{app}/{batchId}`,
      ...(rateLimit(v) ? { rateLimit: rateLimit(v) } : {}),
    })),
  };
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

/** `connections` loops pushing back to back for `ms`; returns every latency (ms) and the non-200 count. */
async function closedLoop(
  base: string,
  prefix: string,
  app: string,
  ms: number,
): Promise<{ lat: number[]; bad: number }> {
  const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  const body = bodyFactory(EVENTS_PER_BATCH);
  const url = new URL(base);
  const lat: number[] = [];
  let bad = 0;
  const until = performance.now() + ms;
  const one = (): Promise<void> =>
    new Promise((resolve, reject) => {
      const payload = body();
      const t0 = performance.now();
      const req = request(
        {
          agent,
          host: url.hostname,
          port: url.port,
          method: 'POST',
          path: `/push/${prefix}/${app}/x`,
          headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(payload) },
        },
        (res) => {
          res.resume();
          res.on('end', () => {
            lat.push(performance.now() - t0);
            if (res.statusCode !== 200) bad++;
            resolve();
          });
        },
      );
      req.on('error', reject);
      req.end(payload);
    });
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      for (let i = 0; i < 1_000_000 && performance.now() < until; i++) await one();
    }),
  );
  agent.destroy();
  return { lat, bad };
}

export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  const smoke = ctx.smoke;
  const runMs = smoke ? 500 : 8000;
  const rounds = smoke ? 1 : 3;
  const tmp = mkdtempSync(join(tmpdir(), 'ingest-bench-rl-'));
  const redisServer = await startRedisServer();
  const redis = probeRedis(redisServer.url);
  const stops: (() => Promise<void>)[] = [];
  try {
    const variants = VARIANTS;
    const port = await freePort();
    const configFile = join(tmp, 'config.json');
    writeFileSync(configFile, JSON.stringify(config()));
    const env = {
      PORT: String(port),
      HOST: '127.0.0.1',
      REDIS_URL: redisServer.url,
      QUEUE_NAME: 'bench-rl',
      DATA_DIR: join(tmp, 'data'),
      CONFIG_FILE: configFile,
      QUEUE_HIGH_WATER: '10000000',
      LOG_LEVEL: 'warn',
    };
    const base = `http://127.0.0.1:${port}`;
    ctx.progress('rate-limit: starting the API');
    if (smoke) {
      // The smoke run proves the harness: the API in this process spares a cold process start.
      const stack = await startStack(parseEnv({ ...env, LOG_LEVEL: 'silent' }), { api: true, encoder: false });
      stops.push(() => stack.close());
    } else {
      const proc = await spawnService('services/api/main', env);
      stops.push(() => proc.stop());
      await waitHttp(`${base}/healthz`, proc, 120_000);
    }

    for (const v of variants) {
      ctx.progress(`rate-limit: warm-up ${v}`);
      await closedLoop(base, COLLECTION[v], 'warmup', smoke ? 200 : 2000);
    }
    const lat: Record<Variant, number[]> = { off: [], rule: [], 'rule+app': [] };
    const p50s: Record<Variant, number[]> = { off: [], rule: [], 'rule+app': [] };
    const p99s: Record<Variant, number[]> = { off: [], rule: [], 'rule+app': [] };
    let bad = 0;
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0 ? variants : [...variants].reverse();
      for (const v of order) {
        ctx.progress(`rate-limit: round ${r + 1}/${rounds}, ${v} (${runMs} ms)`);
        const res = await closedLoop(base, COLLECTION[v], `r${r}`, runMs);
        const sorted = [...res.lat].sort((a, b) => a - b);
        p50s[v].push(percentile(sorted, 50));
        p99s[v].push(percentile(sorted, 99));
        lat[v].push(...res.lat);
        bad += res.bad;
        await sleep(smoke ? 50 : 500);
      }
    }

    // The check alone: one EVALSHA of the rate script vs one PING, sequential, from here.
    const store = new RedisCounterStore(redis);
    const n = smoke ? 200 : 5000;
    const ping: number[] = [];
    const check: number[] = [];
    const keyPrefix = rateLimitKeyPrefix('bench');
    await store.hit(rateLimitKey(keyPrefix, 'events', 'push', 's', 'warm'), 60_000);
    for (let i = 0; i < n; i++) {
      let t0 = performance.now();
      await redis.ping();
      ping.push(performance.now() - t0);
      t0 = performance.now();
      await store.hit(rateLimitKey(keyPrefix, 'events', 'push', 's', String(i % 64)), 60_000);
      check.push(performance.now() - t0);
    }
    ping.sort((a, b) => a - b);
    check.sort((a, b) => a - b);

    const desc = `${CONNECTIONS} conns closed loop, ${EVENTS_PER_BATCH}-event batches`;
    const rows: BenchRow[] = [];
    for (const v of variants) {
      const label =
        v === 'off'
          ? 'no rate limit'
          : v === 'rule'
            ? 'push rule (identity bucket)'
            : 'push rule + per-app events budget';
      rows.push(
        row({ scenario: 'rate-limit', metric: `push p50, ${label} (${desc})`, unit: 'ms', ours: median(p50s[v]) }),
      );
      rows.push(
        row({ scenario: 'rate-limit', metric: `push p99, ${label} (${desc})`, unit: 'ms', ours: median(p99s[v]) }),
      );
      rows.push(
        row({ scenario: 'rate-limit', metric: `pushes measured, ${label}`, unit: 'count', ours: lat[v].length }),
      );
    }
    rows.push(
      row({
        scenario: 'rate-limit',
        metric: 'push p50 added by the push rule (rule - off)',
        unit: 'ms',
        ours: median(p50s.rule) - median(p50s.off),
      }),
    );
    rows.push(
      row({
        scenario: 'rate-limit',
        metric: 'push p99 added by the push rule (rule - off)',
        unit: 'ms',
        ours: median(p99s.rule) - median(p99s.off),
      }),
    );
    rows.push({
      ...row({
        scenario: 'rate-limit',
        metric: 'non-200 answers (the limit is never reached)',
        unit: 'count',
        ours: bad,
      }),
      target: '= 0',
      pass: bad === 0,
    });
    rows.push(
      row({
        scenario: 'rate-limit',
        metric: 'one check (rate_check-1.lua) round trip p50, from Node',
        unit: 'ms',
        ours: percentile(check, 50),
      }),
    );
    rows.push(
      row({
        scenario: 'rate-limit',
        metric: 'one check (rate_check-1.lua) round trip p99, from Node',
        unit: 'ms',
        ours: percentile(check, 99),
      }),
    );
    rows.push(
      row({
        scenario: 'rate-limit',
        metric: 'Redis PING round trip p50 (baseline)',
        unit: 'ms',
        ours: percentile(ping, 50),
      }),
    );
    rows.push(
      row({
        scenario: 'rate-limit',
        metric: 'Redis PING round trip p99 (baseline)',
        unit: 'ms',
        ours: percentile(ping, 99),
      }),
    );
    return rows;
  } finally {
    ctx.progress('rate-limit: stopping');
    for (const stop of stops) await stop();
    redis.disconnect();
    await redisServer.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}
