/**
 * The soak run shared by test/integration/soak.test.ts (short form) and `npm run soak` (long
 * form): the product's own stack (API + encoder in this process, filesystem store) against a
 * Redis of its own, fed distinct batches for many app names, then drained; Redis `used_memory`
 * and `DBSIZE` are read before, at the peak, once drained, and after the windows have passed.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openQueue, queueAddress } from '../shared/redis/queues.js';
import { Redis } from 'ioredis';
import { startStack } from '../services/stack.js';
import { parseEnv } from '../shared/config.js';
import { LEGACY_QUEUE_PREFIX, hashTag, keyFamily, queueKey } from '../shared/redis/keyspace.js';
import { BatchLedger } from '../shared/ledger/ledger.js';
import { createLogger } from '../shared/logger.js';

export interface RedisFigures {
  usedMemory: number;
  dbsize: number;
  /** Parts of used_memory that are not keys: the Lua script cache and client buffers. */
  scripts: number;
  clients: number;
}

/** Bytes and entries of one key family of the ledger (MEMORY USAGE of each key, so key overhead included). */
export interface FamilyFootprint {
  keys: number;
  entries: number;
  bytes: number;
}

export interface SoakResult {
  pushes: number;
  /** Distinct batch ids answered 200. */
  batches: number;
  deduplicated: number;
  apps: number;
  files: number;
  pushSeconds: number;
  before: RedisFigures;
  peak: RedisFigures;
  /** Queue drained, every id written; the windows still hold their entries. */
  drained: RedisFigures;
  /** After the windows passed (or the settle bound ran out). */
  after: RedisFigures;
  /** Footprint of each ledger key family once drained, by family name (shared/redis/keyspace.ts). */
  families: Record<string, FamilyFootprint>;
  /** BullMQ's events stream (capped by BullMQ at about 10,000 entries) once drained. */
  eventsStream: FamilyFootprint;
  settledSeconds: number;
}

export interface SoakOptions {
  redisUrl: string;
  /** Environment of the stack (windows etc.); QUEUE_NAME defaults to `soak`. */
  env?: Record<string, string>;
  /** Stop after this many pushes, or after `durationMs`, whichever comes first. */
  batches?: number;
  durationMs?: number;
  apps: number;
  parallel?: number;
  /** How long to wait, at most, for Redis to come back to its starting figures. */
  settleMs: number;
  /** Wait at least this long after draining (the longest lifetime of an entry) before judging. */
  minSettleMs?: number;
  /** Used_memory and DBSIZE may stay this far above the start (BullMQ's capped stream, the clock). */
  slack?: { bytes: number; keys: number };
  log?: (line: string) => void;
}

export async function redisFigures(redis: Redis): Promise<RedisFigures> {
  const info = await redis.info('memory');
  const field = (name: string): number => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)?.[1] ?? 0);
  return {
    usedMemory: field('used_memory'),
    dbsize: await redis.dbsize(),
    scripts: field('used_memory_scripts'),
    clients: field('mem_clients_normal'),
  };
}

/** MEMORY USAGE and entry counts of every key under the ledger's tag `{ns}`, grouped by family (shared/redis/keyspace.ts; `unknown` for a key it does not name). */
export async function ledgerFootprint(redis: Redis, ns: string): Promise<Record<string, FamilyFootprint>> {
  const out: Record<string, FamilyFootprint> = {};
  let cursor = '0';
  for (let round = 0; round < 100_000; round++) {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${hashTag(ns)}:*`, 'COUNT', 1000);
    for (const key of keys) {
      const [bytes, type] = await Promise.all([redis.memory('USAGE', key, 'SAMPLES', 0), redis.type(key)]);
      const entries =
        type === 'hash'
          ? await redis.hlen(key)
          : type === 'zset'
            ? await redis.zcard(key)
            : type === 'set'
              ? await redis.scard(key)
              : 1;
      const f = (out[keyFamily(key) ?? 'unknown'] ??= { keys: 0, entries: 0, bytes: 0 });
      f.keys++;
      f.entries += entries;
      f.bytes += Number(bytes ?? 0);
    }
    cursor = next;
    if (cursor === '0') break;
  }
  return out;
}

async function streamFootprint(redis: Redis, queueName: string): Promise<FamilyFootprint> {
  const key = queueKey(LEGACY_QUEUE_PREFIX, queueName, 'events');
  const [len, bytes] = await Promise.all([
    redis.xlen(key).catch(() => 0),
    redis.memory('USAGE', key, 'SAMPLES', 0).catch(() => 0),
  ]);
  return { keys: len > 0 ? 1 : 0, entries: len, bytes: Number(bytes ?? 0) };
}

function countFiles(dir: string): number {
  try {
    return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.parquet')).length;
  } catch {
    return 0;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One small, distinct batch: a unique message_id per push, so no two keyless bodies are alike. */
function soakBody(i: number): string {
  const e = {
    event_type: 'track',
    event: 'soak',
    distinct_id: `d-${i % 977}`,
    message_id: randomUUID(),
    ts: new Date().toISOString(),
    properties: { i, step: i % 13 },
  };
  return JSON.stringify({ data: { events: [e, { ...e, message_id: randomUUID(), event: 'soak-2' }] }, baseHash: null });
}

/**
 * Pushes distinct batches (every other one with its own Idempotency-Key, every 25th a retry of
 * the previous keyed push) to `apps` app names with the encoder running, then waits for the
 * queue to drain and for Redis to come back within `slack` of where it started.
 */
export async function runSoak(o: SoakOptions): Promise<SoakResult> {
  const log = o.log ?? (() => undefined);
  const queueName = o.env?.QUEUE_NAME ?? 'soak';
  const dataDir = mkdtempSync(join(tmpdir(), 'ingest-soak-'));
  const env = parseEnv({
    PORT: '0',
    HOST: '127.0.0.1',
    METRICS_PORT: '0',
    REDIS_URL: o.redisUrl,
    DATA_DIR: dataDir,
    QUEUE_NAME: queueName,
    LOG_LEVEL: 'silent',
    ...o.env,
  });
  const probe = new Redis(o.redisUrl, { maxRetriesPerRequest: null });
  const queue = openQueue(queueAddress.push({ queueName }), probe);
  const ledger = new BatchLedger(probe, queueName);
  const stack = await startStack(
    env,
    { api: true, encoder: true },
    createLogger({ level: env.LOG_LEVEL, name: 'soak' }),
  );
  const slack = o.slack ?? { bytes: 4 * 1024 * 1024, keys: 6 };
  try {
    const url = stack.api?.server.url ?? '';
    await sleep(300);
    const before = await redisFigures(probe);
    const peak = { ...before };
    log(
      `before: used_memory ${before.usedMemory} B (scripts ${before.scripts} B, clients ${before.clients} B), DBSIZE ${before.dbsize}`,
    );
    const ids = new Set<string>();
    let pushes = 0;
    let deduplicated = 0;
    let next = 0;
    const limit = o.batches ?? Number.MAX_SAFE_INTEGER;
    const stopAt = Date.now() + (o.durationMs ?? 24 * 3600_000);
    const t0 = performance.now();
    let lastKeyed: { body: string; key: string; app: string } | undefined;
    const post = async (app: string, body: string, key?: string): Promise<string> => {
      for (let attempt = 0; attempt < 20; attempt++) {
        const r = await fetch(`${url}/push/events/${app}/x`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
          body,
        });
        const text = await r.text();
        if (r.status === 200) return (JSON.parse(text) as { batchId: string }).batchId;
        if (r.status !== 503) throw new Error(`push answered ${r.status}: ${text}`);
        await sleep(200);
      }
      throw new Error('push kept answering 503');
    };
    const keysBefore = new Set(await probe.keys('*'));
    const sampler = setInterval(() => {
      void redisFigures(probe).then(
        (f) => {
          peak.usedMemory = Math.max(peak.usedMemory, f.usedMemory);
          peak.dbsize = Math.max(peak.dbsize, f.dbsize);
        },
        () => undefined,
      );
    }, 500);
    const worker = async (): Promise<void> => {
      while (next < limit && Date.now() < stopAt) {
        const i = next++;
        const app = `soak-app-${i % o.apps}`;
        if (i % 25 === 24 && lastKeyed) {
          // A client retry: same key, same body, same app → the first answer, nothing new.
          const retried = lastKeyed;
          const id = await post(retried.app, retried.body, retried.key);
          if (!ids.has(id)) throw new Error(`retry of ${retried.key} answered a new id`);
          deduplicated++;
          pushes++;
          continue;
        }
        const body = soakBody(i);
        const key = i % 2 === 0 ? `soak-${randomUUID()}` : undefined;
        const id = await post(app, body, key);
        if (ids.has(id)) throw new Error(`distinct batch ${i} answered an existing id`);
        ids.add(id);
        if (key) lastKeyed = { body, key, app };
        pushes++;
        if (pushes % 1000 === 0) log(`${pushes} pushes`);
      }
    };
    try {
      await Promise.all(Array.from({ length: o.parallel ?? 16 }, worker));
    } finally {
      clearInterval(sampler);
    }
    const pushSeconds = (performance.now() - t0) / 1000;
    log(
      `${pushes} pushes (${ids.size} batches, ${deduplicated} retries) to ${Math.min(o.apps, pushes)} apps in ${pushSeconds.toFixed(1)} s`,
    );

    const drainBound = Date.now() + 240_000;
    for (;;) {
      const c = await queue.getJobCounts('waiting', 'active', 'delayed', 'prioritized');
      const backlog = (c.waiting ?? 0) + (c.active ?? 0) + (c.delayed ?? 0) + (c.prioritized ?? 0);
      if (backlog === 0 && (await ledger.prefixes()).length === 0) break;
      if (Date.now() > drainBound) throw new Error(`queue not drained in 240 s (${backlog} jobs left)`);
      await sleep(250);
    }
    const drained = await redisFigures(probe);
    const families = await ledgerFootprint(probe, queueName);
    const eventsStream = await streamFootprint(probe, queueName);
    peak.usedMemory = Math.max(peak.usedMemory, drained.usedMemory);
    peak.dbsize = Math.max(peak.dbsize, drained.dbsize);
    log(
      `drained: used_memory ${drained.usedMemory} B, DBSIZE ${drained.dbsize} (peak ${peak.usedMemory} B, ${peak.dbsize} keys)`,
    );
    for (const [name, f] of Object.entries(families))
      log(
        `  ${name}: ${f.keys} keys, ${f.entries} entries, ${f.bytes} B (${(f.bytes / Math.max(1, f.entries)).toFixed(1)} B/entry)`,
      );
    log(`  BullMQ events stream: ${eventsStream.entries} entries, ${eventsStream.bytes} B`);

    const t1 = performance.now();
    const settleBound = Date.now() + o.settleMs;
    let after = drained;
    if (o.settleMs > 0) await sleep(o.minSettleMs ?? 0);
    for (; o.settleMs > 0;) {
      after = await redisFigures(probe);
      if (
        (after.dbsize <= before.dbsize + slack.keys && after.usedMemory <= before.usedMemory + slack.bytes) ||
        Date.now() > settleBound
      )
        break;
      await sleep(500);
    }
    const settledSeconds = (performance.now() - t1) / 1000;
    if (o.settleMs > 0) {
      const left = (await probe.keys('*')).filter((k) => !keysBefore.has(k));
      log(`keys left that were not there before: ${left.length <= 20 ? left.join(', ') : `${left.length} keys`}`);
    }
    const signed = (n: number): string => `${n >= 0 ? '+' : ''}${n}`;
    if (o.settleMs > 0) {
      log(
        `after the windows (${settledSeconds.toFixed(1)} s): used_memory ${after.usedMemory} B (${signed(after.usedMemory - before.usedMemory)}; scripts ${signed(after.scripts - before.scripts)}, clients ${signed(after.clients - before.clients)}), DBSIZE ${after.dbsize} (${signed(after.dbsize - before.dbsize)})`,
      );
    }
    return {
      pushes,
      batches: ids.size,
      deduplicated,
      apps: Math.min(o.apps, pushes),
      files: countFiles(join(dataDir, 'events')),
      pushSeconds,
      before,
      peak,
      drained,
      after,
      families,
      eventsStream,
      settledSeconds,
    };
  } finally {
    await stack.close();
    await queue.close().catch(() => undefined);
    probe.disconnect();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
