/**
 * Queue shards on one Redis: changing QUEUE_SHARDS (refused while the old layout holds work,
 * taken over once drained), and upkeep that costs one Redis call per shard with 10,000 prefixes.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ConfigError } from '../../shared/config.js';
import { batchIdMs } from '../../shared/ids.js';
import { BatchLedger, shardOfBatchId } from '../../shared/ledger/ledger.js';
import { periodStart } from '../../shared/rollup/layout.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import { storeRootUrl } from '../../shared/duckdb.js';
import { duckQuery } from '../helpers/duckdb.js';
import {
  expectManifestMatchesStore,
  expectViewEqualsBatches,
  viewCount,
  waitForRetentionPast,
} from '../helpers/rollup.js';
import { reapOnce } from '../../shared/ledger/reaper.js';
import { shardIndex, shardLayouts } from '../../shared/redis/shards.js';
import { ShardSet, ensureShardLayout } from '../../shared/ledger/shard-set.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';
import { uniqueName } from '../helpers/names.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { type RedisServer, startRedisServer } from '../helpers/redis-server.js';
import { waitFor } from '../helpers/proc.js';
import { retryWhile503 } from '../helpers/wait.js';
import { createEncoder } from '../../services/encoder/worker.js';
import { createLogger } from '../../shared/logger.js';
import { createRegistry } from '../../shared/metrics.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import type { ObjectStore } from '../../shared/store/types.js';

describe('changing QUEUE_SHARDS', () => {
  let redis: Redis;
  beforeAll(() => {
    redis = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
  });
  afterAll(() => {
    redis.disconnect();
  });

  it('is refused while the old layout has a batch in flight, and taken over once drained, ids of a prefix still increasing', async () => {
    const name = uniqueName('reshard');
    const one = shardLayouts(name, 1, false);
    expect(await ensureShardLayout(redis, name, one)).toEqual({});
    const old = new BatchLedger(redis, name);
    // Minted a minute ahead of the clock (as if the old shard's Redis clock ran ahead).
    const { batchId: first } = await old.mint('events/a/', { clockMs: Date.now() + 60_000 });

    const six = shardLayouts(name, 6, false);
    const refused = await ensureShardLayout(redis, name, six).then(
      () => null,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as Error).message).toMatch(
      /QUEUE_SHARDS=6, but Redis holds queues laid out for QUEUE_SHARDS=1 with work in them/,
    );
    // Still refused by a whole process: it does not start.
    await expect(
      startTestStack({ QUEUE_NAME: name, QUEUE_SHARDS: '6', ROLLUP: 'off' }, { api: true, encoder: false }),
    ).rejects.toThrow(/QUEUE_SHARDS=6/);

    // Drained: the new layout is recorded and its clocks start after the old one.
    expect(await old.release('events/a/', first)).toBe(true);
    expect(await ensureShardLayout(redis, name, six)).toEqual({ changedFrom: 1 });
    expect(await ensureShardLayout(redis, name, six)).toEqual({});
    const set = ShardSet.open(redis, six);
    try {
      const shard = set.forPrefix('events/a/');
      const { batchId: second } = await shard.ledger.mint('events/a/');
      expect(second > first).toBe(true);
      expect(shardOfBatchId(second, 6)).toBe(shardIndex('events/a/', 6));
      await shard.ledger.release('events/a/', second);
    } finally {
      await set.close();
    }
    // And going back to one shard is refused the same way while a sharded batch is in flight.
    const set2 = ShardSet.open(redis, six);
    try {
      const s = set2.forPrefix('events/b/');
      const { batchId } = await s.ledger.mint('events/b/');
      await expect(ensureShardLayout(redis, name, one)).rejects.toThrow(
        /QUEUE_SHARDS=1, but Redis holds queues laid out for QUEUE_SHARDS=6/,
      );
      await s.ledger.release('events/b/', batchId);
    } finally {
      await set2.close();
    }
  });
});

describe('rollups with QUEUE_SHARDS=3 on one Redis (API + encoder + rollup service in process, 2 s periods)', () => {
  const SHARDS = 3;
  let stack: TestStack | undefined;
  let redis: Redis;
  beforeAll(() => {
    redis = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
  });
  afterAll(async () => {
    redis.disconnect();
    await stack?.shutdown();
  });

  it('rolls every closed period of apps on every shard; the view equals the acknowledged events; a replay on shard 2 is re-rolled once', async () => {
    stack = await startTestStack(
      { QUEUE_SHARDS: String(SHARDS), ROLLUP_PERIOD_SECONDS: '2', ROLLUP_DELAY_SECONDS: '0' },
      { api: true, encoder: true, rollup: true },
    );
    const s = stack;
    // Two apps per shard, so the planner has to read every shard's ledger and clock.
    const apps: string[] = [];
    const perShard = new Map<number, number>();
    for (let i = 0; apps.length < 2 * SHARDS && i < 1000; i++) {
      const app = `rs${i}`;
      const k = shardIndex(`events/${app}/`, SHARDS);
      if ((perShard.get(k) ?? 0) >= 2) continue;
      perShard.set(k, (perShard.get(k) ?? 0) + 1);
      apps.push(app);
    }
    expect([...perShard.keys()].sort()).toEqual([0, 1, 2]);

    const acked = new Map<string, number>(apps.map((a) => [a, 0]));
    const lastId = new Map<string, string>();
    const until = Date.now() + 5000;
    for (let i = 0; Date.now() < until; i++) {
      const app = apps[i % apps.length] as string;
      const n = 5 + (i % 11);
      const r = await fetch(`${s.url}/push/events/${app}/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(n, sampleEvent),
      });
      expect(r.status).toBe(200);
      const { batchId } = (await r.json()) as { batchId: string };
      expect(shardOfBatchId(batchId, SHARDS)).toBe(shardIndex(`events/${app}/`, SHARDS));
      acked.set(app, (acked.get(app) ?? 0) + n);
      lastId.set(app, batchId);
      await new Promise((res) => setTimeout(res, 15));
    }
    // Every period up to the one holding each app's last batch is rolled (the watermark only moves in order).
    const endOf = (app: string): number => periodStart(batchIdMs(lastId.get(app) as string), 2000) + 2000;
    for (const app of apps) {
      await waitFor(
        async () => ((await readManifest(s.store, `events/${app}/`))?.watermarkMs ?? 0) >= endOf(app),
        30_000,
        `rollup of ${app} through ${endOf(app)}`,
      );
    }
    const { rootUrl } = storeRootUrl(s.store);
    let total = 0;
    for (const app of apps) {
      const m = (await readManifest(s.store, `events/${app}/`))!;
      await expectManifestMatchesStore(s.store, m, rootUrl);
      // Every acknowledged event of the app is in its rollup files (all its batches are below the watermark)...
      const files = m.periods.flatMap((p) => p.files).map((f) => `'${rootUrl}${f.key}'`);
      const [row] = await duckQuery(`SELECT count(*)::BIGINT AS n FROM read_parquet([${files.join(',')}])`);
      expect(Number(row?.n)).toBe(acked.get(app));
      // ...and the view shows each exactly once.
      expect(await expectViewEqualsBatches(s.store, app)).toBe(acked.get(app));
      total += acked.get(app) ?? 0;
    }
    expect(await viewCount(s.store, '*')).toBe(total);
    // One Redis: the rollup queue keeps its names (`bull:<QUEUE_NAME>-rollup:…`).
    expect(await redis.zcard(`bull:${s.queueName}-rollup:completed`)).toBeGreaterThan(0);

    // A batch of an app on shard 2 dead-lettered, then replayed (admin route, which routes by the
    // id's shard) into its already-rolled period: the replay note is read from shard 2's keys.
    const app = apps.find((a) => shardIndex(`events/${a}/`, SHARDS) === 2) as string;
    const shard = ShardSet.open(redis, shardLayouts(s.queueName, SHARDS, false));
    try {
      const { queue } = shard.forPrefix(`events/${app}/`);
      rmSync(join(s.dataDir, 'events', app), { recursive: true, force: true });
      writeFileSync(join(s.dataDir, 'events', app), 'not a folder');
      const r = await fetch(`${s.url}/push/events/${app}/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(7, sampleEvent),
      });
      const { batchId: dead } = (await r.json()) as { batchId: string };
      await waitFor(async () => (await queue.getJobState(dead)) === 'failed', 30_000, 'dead-lettered');
      rmSync(join(s.dataDir, 'events', app));
      mkdirSync(join(s.dataDir, 'events', app));
      const deadEnd = periodStart(batchIdMs(dead), 2000) + 2000;
      const r2 = await fetch(`${s.url}/push/events/${app}/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(5, sampleEvent),
      });
      const { batchId: after } = (await r2.json()) as { batchId: string };
      await waitFor(
        async () => ((await readManifest(s.store, `events/${app}/`))?.watermarkMs ?? 0) > batchIdMs(after),
        30_000,
        'rolled past the dead letter',
      );
      const w = (await readManifest(s.store, `events/${app}/`))!.watermarkMs;
      expect(w).toBeGreaterThanOrEqual(deadEnd);
      const before = acked.get(app) ?? 0;
      expect(await viewCount(s.store, app)).toBe(before + 5);

      const replay = await fetch(`${s.url}/admin/replay/${dead}`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${ADMIN_TOKEN}` },
      });
      expect(replay.status).toBe(200);
      expect(((await replay.json()) as { outcome: string }).outcome).toBe('replayed');
      await waitFor(async () => (await viewCount(s.store, app)) === before + 12, 30_000, 're-rolled');
      const m = (await readManifest(s.store, `events/${app}/`))!;
      expect(m.watermarkMs).toBeGreaterThanOrEqual(w);
      await expectManifestMatchesStore(s.store, m, rootUrl);
      expect(await viewCount(s.store, app)).toBe(before + 12);
      expect(await viewCount(s.store, '*')).toBe(total + 12);
    } finally {
      await shard.close();
    }
  }, 60_000);

  it('start:rollup with a QUEUE_SHARDS other than the one Redis is laid out for refuses to start', () => {
    const s = stack as TestStack;
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'services/rollup/main.ts'], {
      cwd: join(import.meta.dirname, '../..'),
      env: {
        ...process.env,
        REDIS_URL: inject('redisUrl'),
        QUEUE_NAME: s.queueName,
        QUEUE_SHARDS: '2',
        DATA_DIR: s.dataDir,
        METRICS_PORT: '0',
        LOG_LEVEL: 'silent',
      },
      encoding: 'utf8',
      timeout: 30_000,
    });
    expect(run.status).not.toBe(0);
    expect(run.status).not.toBeNull();
    expect(run.stderr).toMatch(/QUEUE_SHARDS: is 2, but Redis holds queues laid out for QUEUE_SHARDS=3/);
  }, 40_000);

  it('a rollup service running with another QUEUE_SHARDS than the recorded layout rolls nothing', async () => {
    const s = stack as TestStack;
    // Only the wrong-count rollup service plans from here on.
    await s.rollup?.close();
    const app = 'rs-wrong';
    const r = await fetch(`${s.url}/push/events/${app}/x`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: batchBody(4, sampleEvent),
    });
    const { batchId } = (await r.json()) as { batchId: string };
    await waitFor(
      async () => existsSync(join(s.dataDir, 'events', app, `${batchId}.parquet`)),
      20_000,
      'batch written',
    );
    const endMs = periodStart(batchIdMs(batchId), 2000) + 2000;
    await new Promise((res) => setTimeout(res, Math.max(0, endMs - Date.now()) + 300));
    const wrong = await startTestStack(
      {
        QUEUE_NAME: s.queueName,
        QUEUE_SHARDS: '2',
        DATA_DIR: s.dataDir,
        ROLLUP_PERIOD_SECONDS: '2',
        ROLLUP_DELAY_SECONDS: '0',
      },
      { api: false, encoder: false, rollup: true },
    );
    try {
      expect(wrong.rollup).toBeDefined();
      for (let i = 0; i < 3; i++) {
        await wrong.rollup?.planOnce();
        await new Promise((res) => setTimeout(res, 1000));
      }
      // Its 2-shard ledgers hold nothing of the app: without the layout check the period would look final and be rolled.
      expect(await readManifest(s.store, `events/${app}/`)).toBeNull();
      const jobs = (await wrong.rollup?.queue.getJobs(['waiting', 'active', 'completed', 'delayed', 'failed'])) ?? [];
      expect(jobs.filter((j) => (j.data as { prefix?: string }).prefix === `events/${app}/`)).toEqual([]);
    } finally {
      await wrong.close();
    }
  }, 40_000);
});

describe('raw retention with QUEUE_SHARDS=3 on one Redis (2 s periods, RAW_RETENTION_SECONDS=8)', () => {
  const SHARDS = 3;
  let stack: TestStack | undefined;
  afterAll(async () => {
    await stack?.shutdown();
  });

  it('deletes batch files of apps on every shard only once rolled; list never shows a deleted batch and answers 410 below the mark; the view stays exact', async () => {
    stack = await startTestStack(
      {
        QUEUE_SHARDS: String(SHARDS),
        ROLLUP_PERIOD_SECONDS: '2',
        ROLLUP_DELAY_SECONDS: '0',
        RAW_RETENTION_SECONDS: '8',
        LIST_INDEX_SECONDS: '2',
      },
      { api: true, encoder: true, rollup: true },
    );
    // Retention waits min(60 s, RAW_RETENTION_SECONDS) after a rollup is listed before deleting its
    // batch files: the time a view query that read the previous manifest may take. With 3 s a view
    // query on a loaded CI machine outlasted it once (DuckDB: cannot open a deleted batch file).
    const s = stack;
    // One app per shard: retention reads each app's ledger on its own shard.
    const apps: string[] = [];
    for (let i = 0; apps.length < SHARDS && i < 1000; i++) {
      const app = `rr${i}`;
      if (!apps.some((a) => shardIndex(`events/${a}/`, SHARDS) === shardIndex(`events/${app}/`, SHARDS)))
        apps.push(app);
    }
    expect(apps.map((a) => shardIndex(`events/${a}/`, SHARDS)).sort()).toEqual([0, 1, 2]);
    const pushed = new Map<string, string[]>(apps.map((a) => [a, []]));
    const until = Date.now() + 9000;
    for (let i = 0; Date.now() < until; i++) {
      const app = apps[i % apps.length] as string;
      const r = await fetch(`${s.url}/push/events/${app}/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(4, sampleEvent),
      });
      expect(r.status).toBe(200);
      pushed.get(app)?.push(((await r.json()) as { batchId: string }).batchId);
      await new Promise((res) => setTimeout(res, 40));
    }
    const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };
    const { rootUrl } = storeRootUrl(s.store);
    for (const app of apps) {
      const prefix = `events/${app}/`;
      const ids = pushed.get(app) as string[];
      // Every batch written and in the view first, so a file missing below is a deleted one.
      await waitFor(async () => (await viewCount(s.store, app)) === ids.length * 4, 30_000, `view of ${app} exact`);
      const m = await waitFor(
        async () => {
          const read = await readManifest(s.store, prefix);
          return read?.periods.some((p) => p.rawDeletedThrough !== '') ? read : null;
        },
        30_000,
        `a pruned period of ${app}`,
      );
      const present = new Set(
        (await s.store.listKeys(prefix))
          .filter((k) => k.endsWith('.parquet'))
          .map((k) => k.slice(prefix.length, -'.parquet'.length)),
      );
      const gone = ids.filter((id) => !present.has(id));
      expect(gone.length, app).toBeGreaterThan(0);
      const rolled = new Set(
        (
          await duckQuery(
            `SELECT DISTINCT batch_id FROM read_parquet([${m.periods
              .flatMap((p) => p.files)
              .map((f) => `'${rootUrl}${f.key}'`)
              .join(',')}])`,
          )
        ).map((r) => String(r.batch_id)),
      );
      for (const id of gone) expect(rolled.has(id), `${app} ${id} deleted before its rollup`).toBe(true);
      const list = await fetch(`${s.url}/list/events/${app}?limit=1000`, { headers: auth });
      expect(list.status).toBe(200);
      for (const item of ((await list.json()) as { items: string[] }).items)
        expect(present.has(item.slice(0, -'.parquet'.length)), item).toBe(true);
      // 410 is for a cursor strictly below the mark (the largest deleted id); when the first pass
      // deleted only the app's first batch, the mark is that id and nothing after it was skipped.
      const first = ids[0] as string;
      await waitForRetentionPast(s.store, prefix, first);
      expect((await fetch(`${s.url}/list/events/${app}?after=${first}`, { headers: auth })).status).toBe(410);
      expect(await viewCount(s.store, app)).toBe(ids.length * 4);
    }
  }, 90_000);
});

describe('upkeep with 10,000 prefixes', () => {
  const PREFIXES = 10_000;
  let redis: Redis;
  let stack: TestStack | undefined;
  beforeAll(() => {
    redis = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
  });
  afterAll(async () => {
    await stack?.shutdown();
    redis.disconnect();
  });

  async function mintMany(ledger: BatchLedger, nowMs: number): Promise<string> {
    let oldest = '';
    for (let start = 0; start < PREFIXES; start += 500) {
      const ids = await Promise.all(
        Array.from({ length: 500 }, (_, k) =>
          ledger.mint(`events/app${start + k}/`, { clockMs: nowMs - 120_000 + start + k }),
        ),
      );
      if (start === 0) oldest = ids[0]?.batchId ?? '';
    }
    return oldest;
  }

  it('one pass reads the lag and reaps orphans of every prefix in one call per shard', async () => {
    const name = uniqueName('upkeep');
    const ledger = new BatchLedger(redis, name);
    const queue = new Queue(name, { connection: redis });
    try {
      const now = Date.now();
      const oldest = await mintMany(ledger, now);
      expect(await ledger.scanPending()).toEqual({ orphans: 0, dead: 0, oldest, prefixes: PREFIXES });
      const t0 = performance.now();
      const lag = await ledger.maxLagMs(now);
      const lagMs = performance.now() - t0;
      expect(lag).toBe(120_000);
      // Every id is an orphan (no job) past a 60 s grace: one pass releases them all.
      const t1 = performance.now();
      const reaped = await reapOnce(ledger, queue, 60_000, now);
      const reapMs = performance.now() - t1;
      expect(reaped).toEqual({ orphans: PREFIXES, dead: 0 });
      expect(await ledger.prefixes()).toEqual([]);
      expect(await ledger.maxLagMs()).toBe(0);
      console.info(
        `upkeep, ${PREFIXES} prefixes: lag read ${lagMs.toFixed(1)} ms, reaper pass ${reapMs.toFixed(1)} ms (one Redis call each)`,
      );
    } finally {
      await queue.obliterate({ force: true }).catch(() => undefined);
      await queue.close();
    }
  });

  it('/readyz answers with the lag of 10,000 prefixes, and the per-shard queue gauge names each shard', async () => {
    stack = await startTestStack(
      { QUEUE_SHARDS: '4', ROLLUP: 'off', ORPHAN_GRACE_SECONDS: '3600' },
      { api: true, encoder: false },
    );
    const layouts = shardLayouts(stack.queueName, 4, false);
    const set = ShardSet.open(redis, layouts);
    try {
      const now = Date.now();
      for (let start = 0; start < PREFIXES; start += 500) {
        await Promise.all(
          Array.from({ length: 500 }, (_, k) =>
            set.forPrefix(`events/app${start + k}/`).ledger.mint(`events/app${start + k}/`, { clockMs: now - 30_000 }),
          ),
        );
      }
      const times: number[] = [];
      let body: { ok?: boolean; watermarkLagSeconds?: number } = {};
      for (let i = 0; i < 5; i++) {
        const t0 = performance.now();
        const r = await fetch(`${stack.url}/readyz`);
        body = (await r.json()) as typeof body;
        times.push(performance.now() - t0);
        expect(r.status).toBe(200);
      }
      expect(body.watermarkLagSeconds).toBeGreaterThanOrEqual(30);
      times.sort((a, b) => a - b);
      console.info(
        `/readyz with ${PREFIXES} prefixes over 4 shards: median ${times[2]?.toFixed(1)} ms, max ${times[4]?.toFixed(1)} ms`,
      );

      // A push lands on its app's shard; the gauge shows it under that shard only.
      const r = await fetch(`${stack.url}/push/events/gauge-app/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(2, sampleEvent),
      });
      expect(r.status).toBe(200);
      const metrics = await (
        await fetch(`${stack.url}/metrics`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } })
      ).text();
      const shard = shardIndex('events/gauge-app/', 4);
      for (let k = 0; k < 4; k++) {
        const m = new RegExp(
          `^ingest_queue_shard_jobs\\{[^}]*shard="${k}"[^}]*state="waiting"[^}]*\\} (\\d+)`,
          'm',
        ).exec(metrics);
        expect(m?.[1], `shard ${k}`).toBe(k === shard ? '1' : '0');
      }
      expect(metrics).toMatch(/^ingest_queue_jobs\{[^}]*state="waiting"[^}]*\} 1$/m);
    } finally {
      await set.close();
    }
  });
});

describe('REDIS_WAIT_REPLICAS on one Redis', () => {
  it('answers 503 + Retry-After until a replica has the batch; the retry with the same key then gets 200 and one batch is written', async () => {
    const master = await startRedisServer();
    let replica: RedisServer | undefined;
    let stack: TestStack | undefined;
    const probe = new Redis(master.url, { maxRetriesPerRequest: null });
    try {
      stack = await startTestStack(
        { REDIS_URL: master.url, REDIS_WAIT_REPLICAS: '1', REDIS_WAIT_TIMEOUT_MS: '200', ROLLUP: 'off' },
        { api: true, encoder: true },
      );
      const url = stack.url;
      const body = batchBody(3, sampleEvent);
      const push = (): Promise<Response> =>
        fetch(`${url}/push/events/waitapp/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'Idempotency-Key': 'wait-k1' },
          body,
        });
      const first = await push();
      expect(first.status).toBe(503);
      expect(first.headers.get('retry-after')).toBe('1');
      expect(((await first.json()) as { error: string }).error).toMatch(/not yet replicated \(REDIS_WAIT_REPLICAS\)/);

      replica = await startRedisServer({ args: ['--replicaof', '127.0.0.1', String(master.port)] });
      await waitFor(
        async () => /slave0:.*state=online/.test(await probe.info('replication')),
        20_000,
        'the replica to sync',
      );
      // Retried as an SDK retries: on a busy machine the replica's acknowledgement may come after the
      // 200 ms WAIT once more (CI saw it), which must again be a 503, never a second batch.
      const second = await retryWhile503(push);
      expect(second.status).toBe(200);
      const { batchId } = (await second.json()) as { batchId: string };
      // Both pushes are one batch: the one the first push enqueued before its WAIT timed out.
      const listed = await waitFor(
        async () => {
          const r = await fetch(`${url}/list/events/waitapp`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } });
          const page = (await r.json()) as { items: string[] };
          return page.items.length > 0 ? page.items : null;
        },
        20_000,
        'the batch to be listed',
      );
      expect(listed).toEqual([`${batchId}.parquet`]);
    } finally {
      await stack?.shutdown();
      probe.disconnect();
      await replica?.stop();
      await master.stop();
    }
  });
});

describe('an encoder with QUEUE_SHARDS=4', () => {
  it('consumes every shard, with at most ENCODER_CONCURRENCY jobs at once in the whole process', async () => {
    const stack = await startTestStack(
      { QUEUE_SHARDS: '4', ROLLUP: 'off', ORPHAN_GRACE_SECONDS: '3600' },
      { api: true, encoder: false },
    );
    const conn = new Redis(inject('redisUrl'), { maxRetriesPerRequest: null });
    const fsStore = new FilesystemObjectStore({ root: stack.dataDir });
    let writing = 0;
    let most = 0;
    // The store's writes are slowed down, so jobs of several shards overlap if the gate lets them.
    const store = new Proxy(fsStore, {
      get(target, prop) {
        if (prop === 'putBytes') {
          return async (...args: Parameters<ObjectStore['putBytes']>) => {
            writing++;
            most = Math.max(most, writing);
            try {
              await new Promise((r) => setTimeout(r, 150));
              return await target.putBytes(...args);
            } finally {
              writing--;
            }
          };
        }
        const v = Reflect.get(target, prop) as unknown;
        return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    const layouts = shardLayouts(stack.queueName, 4, false);
    const encoder = createEncoder({
      queueName: stack.queueName,
      connection: conn,
      ledger: new BatchLedger(conn, stack.queueName),
      shards: layouts.map((l) => ({
        queueName: l.queueName,
        prefix: l.queuePrefix,
        ledger: new BatchLedger(conn, l.namespace, { shard: { index: l.index, count: l.count } }),
      })),
      store,
      registry: createRegistry('shards', false),
      logger: createLogger({ level: 'silent', name: 'shards' }),
      concurrency: 2,
    });
    try {
      expect(encoder.workers).toHaveLength(4);
      const apps = Array.from({ length: 16 }, (_, i) => `gate${i}`);
      expect(new Set(apps.map((a) => shardIndex(`events/${a}/`, 4))).size).toBe(4);
      for (const app of apps) {
        const r = await fetch(`${stack.url}/push/events/${app}/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: batchBody(2, sampleEvent),
        });
        expect(r.status).toBe(200);
      }
      await waitFor(
        async () => (await fsStore.listKeys('events/')).filter((k) => k.endsWith('.parquet')).length === apps.length,
        30_000,
        'every batch written',
      );
      expect(most).toBe(2);
    } finally {
      await encoder.close(5000);
      conn.disconnect();
      await stack.shutdown();
    }
  });
});

describe('dead letters with QUEUE_SHARDS=3', () => {
  it('are listed over every shard and replayed on their own shard, by the admin route and by npm run replay --all', async () => {
    const stack = await startTestStack(
      { QUEUE_SHARDS: '3', ROLLUP: 'off', ORPHAN_GRACE_SECONDS: '3600' },
      { api: true, encoder: true },
    );
    const auth = { Authorization: `Bearer ${ADMIN_TOKEN}` };
    try {
      // Two apps on different shards; a file where their folder should be fails their writes for good.
      const apps = ['dlA', 'dlB', 'dlC', 'dlD', 'dlE', 'dlF'];
      const a = apps[0] as string;
      const b = apps.find((x) => shardIndex(`events/${x}/`, 3) !== shardIndex(`events/${a}/`, 3)) as string;
      mkdirSync(join(stack.dataDir, 'events'), { recursive: true });
      const ids: string[] = [];
      for (const app of [a, b]) {
        writeFileSync(join(stack.dataDir, 'events', app), 'not a folder');
        const r = await fetch(`${stack.url}/push/events/${app}/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: batchBody(2, sampleEvent),
        });
        expect(r.status).toBe(200);
        ids.push(((await r.json()) as { batchId: string }).batchId);
      }
      const failed = await waitFor(
        async () => {
          const f = (await (await fetch(`${stack.url}/admin/failed`, { headers: auth })).json()) as {
            total: number;
            items: { batchId: string }[];
          };
          return f.total === 2 ? f : null;
        },
        30_000,
        'both batches dead-lettered',
      );
      expect(failed.items.map((i) => i.batchId).sort()).toEqual([...ids].sort());
      for (const app of [a, b]) rmSync(join(stack.dataDir, 'events', app));

      const r = await fetch(`${stack.url}/admin/replay/${ids[0]}`, { method: 'POST', headers: auth });
      expect(((await r.json()) as { outcome: string }).outcome).toBe('replayed');
      await waitFor(
        async () => existsSync(join(stack.dataDir, 'events', a, `${ids[0]}.parquet`)),
        30_000,
        'replayed batch written',
      );

      const run = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/replay.ts', '--all'], {
        cwd: join(import.meta.dirname, '../..'),
        env: { ...process.env, REDIS_URL: inject('redisUrl'), QUEUE_NAME: stack.queueName, QUEUE_SHARDS: '3' },
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(run.status, run.stdout + run.stderr).toBe(0);
      expect(run.stdout).toMatch(new RegExp(`${ids[1]}\treplayed`));
      await waitFor(
        async () => existsSync(join(stack.dataDir, 'events', b, `${ids[1]}.parquet`)),
        30_000,
        'batch replayed by the script written',
      );
      // The file is fsync'd before the id is released into the list index: the listing can lag the file by a moment.
      let listed: string[] = [];
      await waitFor(
        async () => {
          listed = (
            (await (await fetch(`${stack.url}/list/events/${b}`, { headers: auth })).json()) as { items: string[] }
          ).items;
          return listed.length > 0;
        },
        10_000,
        'replayed batch listed',
      );
      expect(listed).toEqual([`${ids[1]}.parquet`]);
    } finally {
      await stack.shutdown();
    }
  });
});
