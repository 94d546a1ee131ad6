/**
 * List latency as the store grows: `list(limit=100, after=<cursor>)` through the real list
 * path (the events plugin with a BatchLedger on a private Redis) on one prefix holding a
 * small and a large number of files, for the filesystem store and for S3: s3rver, and Ceph's
 * RADOS Gateway (a real S3 implementation with an indexed `StartAfter`, test/helpers/rgw.ts).
 * "Flat" means the large prefix costs at most twice the small one.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Queue } from 'bullmq';
import { openQueue, queueAddress } from '../../shared/redis/queues.js';
import { Redis } from 'ioredis';
import { createEventsServerPlugin } from '../../services/api/plugin.js';
import { BatchLedger } from '../../shared/ledger/ledger.js';
import { createStore } from '../../shared/store/create.js';
import type { ObjectStore } from '../../shared/store/types.js';
import { startRedisServer } from '../../test/helpers/redis-server.js';
import { rgwStoreFor, startRgw } from '../../test/helpers/rgw.js';
import { s3StoreFor, startS3Server } from '../../test/helpers/s3.js';
import type { BenchRow, Scenario } from '../types.js';

const APP = 'bench';
const PREFIX = `events/${APP}/`;
const PAGE = 100;
const RATIO_TARGET = 2.0;
/** Bounded parallelism for writing fixture files: enough to keep the disk busy, not the fd table. */
const WRITE_PARALLELISM = 64;
/** PUTs in flight while filling RGW: below the gateway's 64 worker threads and the SDK's 50 sockets. */
const PUT_PARALLELISM = 32;

/** `n` well-formed ids, strictly increasing, all from the past (a day ago and earlier). */
function fixtureIds(n: number): string[] {
  const base = Date.now() - 86_400_000 - n;
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const ms = String(base + Math.floor(i / 10)).padStart(13, '0');
    ids.push(`${ms}-${String(i % 10).padStart(4, '0')}-${randomBytes(3).toString('hex')}`);
  }
  return ids;
}

async function forEachBounded<T>(
  items: readonly T[],
  fn: (item: T) => Promise<void>,
  onProgress?: (done: number) => void,
  parallelism = WRITE_PARALLELISM,
): Promise<void> {
  let next = 0;
  let done = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++] as T;
      await fn(item);
      done++;
      if (onProgress && done % 10_000 === 0) onProgress(done);
    }
  };
  await Promise.all(Array.from({ length: Math.min(parallelism, items.length) }, lane));
}

/** Tiny stand-in bytes: listing never reads a file, so content size does not matter. */
const FIXTURE = Buffer.from('PAR1bench');
const FIXTURE_MD5 = createHash('md5').update(FIXTURE).digest('hex');

interface OpenedStore {
  store: ObjectStore;
  /** Fills the prefix with `ids`, directly on disk. */
  populate(ids: readonly string[], progress: (m: string) => void): Promise<void>;
  /** Runs before each timed call (e.g. a write landing in the prefix between two polls). */
  beforeCall?(k: number): Promise<void>;
  close(): Promise<void>;
}

interface Backend {
  name: string;
  /** A fresh, empty store. */
  open(): Promise<OpenedStore>;
}

/**
 * The filesystem store. `busy`: a file lands in the prefix before every call, as when batches
 * are written between two polls; otherwise the prefix has been quiet for a while (its folder
 * is backdated an hour, which is what waiting would do, without the wait).
 */
function filesystem(busy: boolean): Backend {
  return {
    name: busy ? 'fs (prefix written between polls)' : 'fs (quiet prefix)',
    async open() {
      const root = await mkdtemp(join(tmpdir(), 'bench-list-fs-'));
      const dir = join(root, 'events', APP);
      return {
        store: createStore({ kind: 'filesystem', root }),
        async populate(ids, progress) {
          await mkdir(dir, { recursive: true });
          // Same file names the store writes (key -> path), without the per-file fsyncs.
          await forEachBounded(
            ids,
            (id) => writeFile(join(dir, `${id}.parquet`), FIXTURE),
            (d) => progress(`list: fs: wrote ${d}/${ids.length} files`),
          );
          const old = new Date(Date.now() - 3_600_000);
          await utimes(dir, old, old);
        },
        // A temp-named file: it changes the folder like a real write but is never listed, so
        // every call still has a known right answer.
        beforeCall: busy ? (k) => writeFile(join(dir, `.tmp-bench-${k}`), FIXTURE) : undefined,
        close: () => rm(root, { recursive: true, force: true }),
      };
    },
  };
}

const s3: Backend = {
  name: 's3 (s3rver)',
  async open() {
    const server = await startS3Server();
    return {
      store: s3StoreFor(server),
      async populate(ids, progress) {
        // s3rver's own on-disk layout for an object (what its PUT writes: the bytes, their
        // md5 and a metadata file), far faster than 100,000 HTTP PUTs on a shared machine.
        const dir = join(server.dir, server.bucket, 'events', APP);
        await mkdir(dir, { recursive: true });
        const meta = JSON.stringify({ 'content-type': 'application/vnd.apache.parquet' });
        await forEachBounded(
          ids,
          async (id) => {
            const base = join(dir, `${id}.parquet._S3rver_`);
            await writeFile(`${base}object`, FIXTURE);
            await writeFile(`${base}object.md5`, FIXTURE_MD5);
            await writeFile(`${base}metadata.json`, meta);
          },
          (d) => progress(`list: s3: wrote ${d}/${ids.length} objects`),
        );
      },
      close: () => server.close(),
    };
  },
};

/**
 * A private Ceph RGW (one mon, one memstore OSD, radosgw). Filled through the S3 API, since its
 * bucket index is what a listing reads: a fresh cluster per size, so each size is measured on a
 * bucket holding exactly that many objects.
 */
const rgw: Backend = {
  name: 's3 (Ceph RGW)',
  async open() {
    const server = await startRgw();
    const store = rgwStoreFor(server);
    return {
      store,
      async populate(ids, progress) {
        const started = performance.now();
        await forEachBounded(
          ids,
          (id) => store.putBytes(`${PREFIX}${id}.parquet`, FIXTURE, { contentType: 'application/vnd.apache.parquet' }),
          (d) =>
            progress(
              `list: rgw: put ${d}/${ids.length} objects (${Math.round(d / ((performance.now() - started) / 1000))}/s)`,
            ),
          PUT_PARALLELISM,
        );
      },
      async close() {
        store.destroy();
        await server.close();
      },
    };
  },
};

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/**
 * p50 latency (ms) of `list(limit=100, after=cursor)` over `calls` cursors spread evenly
 * over the prefix, after one warm-up call. Every answer is checked to be the right page, so
 * a fast but wrong listing cannot pass for a fast one.
 */
async function measure(
  ledger: BatchLedger,
  queue: Queue,
  opened: OpenedStore,
  ids: readonly string[],
  calls: number,
): Promise<number> {
  const plugin = createEventsServerPlugin({
    store: opened.store,
    collection: 'events',
    storagePath: 'events/{app}/{batchId}',
    queue: { queue, ledger },
  });
  const params = { app: APP };
  await plugin.list(params, ids[0], PAGE);
  const times: number[] = [];
  for (let k = 0; k < calls; k++) {
    // Cursors from the start to the last full page, so early and late positions both count.
    const at = Math.floor(((ids.length - PAGE - 1) * k) / Math.max(1, calls - 1));
    const cursor = ids[at] as string;
    await opened.beforeCall?.(k);
    const t0 = performance.now();
    const page = await plugin.list(params, cursor, PAGE);
    times.push(performance.now() - t0);
    if (
      page.items.length !== PAGE ||
      page.items[0] !== `${ids[at + 1]}.parquet` ||
      page.items[PAGE - 1] !== `${ids[at + PAGE]}.parquet`
    ) {
      throw new Error(`list after ${cursor} returned a wrong page (${page.items.length} items)`);
    }
  }
  return median(times);
}

/** The list scenario (see the file comment). */
export const run: Scenario = async (ctx) => {
  const sizes = ctx.smoke ? ([1000, 2000] as const) : ([10_000, 100_000] as const);
  const calls = ctx.smoke ? 5 : 25;
  const redisServer = await startRedisServer();
  const redis = new Redis(redisServer.url, { maxRetriesPerRequest: null });
  const queue = openQueue(queueAddress.push({ queueName: `bench-list-${randomBytes(4).toString('hex')}` }), redis);
  const rows: BenchRow[] = [];
  try {
    // Each run gets its own ledger namespace. `indexed`: every file went through the pipeline, so
    // Redis' index of written ids covers the cursors (the route's path for a poller that keeps
    // up); otherwise the cursor is older than the index and the store is listed.
    const variants = [
      { backend: filesystem(true), indexed: true },
      { backend: s3, indexed: true },
      { backend: filesystem(false), indexed: false },
      { backend: filesystem(true), indexed: false },
      { backend: s3, indexed: false },
      // Starting Ceph twice and filling it costs ~25 s on a loaded machine: not in the smoke run
      // `npm test` does (the conformance suite covers RGW listings), unless asked for by name.
      ...(ctx.smoke && process.env.BENCH_LIST_ONLY === undefined ? [] : [{ backend: rgw, indexed: false }]),
    ];
    // BENCH_LIST_ONLY=<text>: only the variants whose store name contains it (e.g. `rgw`), since
    // filling every store to 100,000 files takes minutes each.
    const only = process.env.BENCH_LIST_ONLY?.toLowerCase();
    const chosen = only ? variants.filter((v) => v.backend.name.toLowerCase().includes(only)) : variants;
    if (chosen.length === 0)
      throw new Error(
        `BENCH_LIST_ONLY=${only ?? ''} matches no store (${variants.map((v) => v.backend.name).join(', ')})`,
      );
    for (const { backend, indexed } of chosen) {
      const p50: number[] = [];
      for (const n of sizes) {
        const ids = fixtureIds(n);
        const ledger = new BatchLedger(redis, `${queue.name}-${randomBytes(3).toString('hex')}`);
        // Steady state of a live prefix: one newer batch is still in flight, so every call also
        // reads the watermark from Redis, exactly as the route does.
        await ledger.mint(PREFIX);
        if (indexed) {
          // What markWritten leaves behind for a prefix whose every batch went through the encoder.
          await redis.set(ledger.floorKey(PREFIX), '0');
          for (let i = 0; i < ids.length; i += 10_000) {
            await redis.zadd(ledger.writtenKey(PREFIX), ...ids.slice(i, i + 10_000).flatMap((id) => ['0', id]));
          }
        }
        const opened = await backend.open();
        try {
          ctx.progress(`list: ${backend.name}: populating ${n} files`);
          await opened.populate(ids, ctx.progress);
          ctx.progress(`list: ${backend.name}: ${calls} lists of ${PAGE} on ${n} files`);
          p50.push(await measure(ledger, queue, opened, ids, calls));
        } finally {
          await opened.close();
        }
      }
      const [small, large] = p50 as [number, number];
      const ratio = large / small;
      rows.push({
        scenario: 'list',
        metric: `${backend.name}, ${indexed ? 'recent cursor (Redis index of written ids)' : 'cursor older than the index (store listing)'}: p50 list(limit=${PAGE}, after=cursor), ${sizes[1]} vs ${sizes[0]} files on one prefix`,
        unit: 'ms',
        ours: Number(large.toFixed(2)),
        reference: Number(small.toFixed(2)),
        ratio: Number(ratio.toFixed(2)),
        target: `<= ${RATIO_TARGET} (flat as the prefix grows)`,
        pass: ratio <= RATIO_TARGET,
      });
    }
  } finally {
    await queue.close().catch(() => undefined);
    redis.disconnect();
    await redisServer.stop();
  }
  return rows;
};
