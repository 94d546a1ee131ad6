/**
 * `npm run chaos [-- --short] [-- --store rgw] [-- --redis cluster]`: the whole pipeline as separate processes (Redis
 * with AOF, the API, two encoders, an S3 server) under continuous pushes, while processes are
 * killed with SIGKILL and the store fails. The S3 server is s3rver behind a fault-injecting proxy
 * (503s, then connection resets), or with `--store rgw` a private Ceph RADOS Gateway
 * (test/helpers/rgw.ts) whose `radosgw` is killed with SIGKILL and started again. Then it drains the backlog, reads every
 * file back with DuckDB and prints: acknowledged, written, lost, duplicated, refused. Exits 1
 * unless nothing acknowledged was lost and nothing was written twice.
 *
 * With `--redis cluster` (`npm run chaos:cluster`) Redis is a real Redis Cluster (3 masters + 3
 * replicas, AOF with appendfsync always) with QUEUE_SHARDS=3 and REDIS_WAIT_REPLICAS=1, and the Redis
 * fault is a kill -9 of the master serving the pushed app's shard: its replica takes over, then the
 * killed node is started again and rejoins as a replica.
 *
 * Bounded: under 5 minutes (`--short` or CHAOS_SHORT=1: about 60-90 s on an idle machine, hard stop at 240 s). Everything it starts
 * listens on 127.0.0.1 and is stopped on exit. Prints ids and counts only, never event contents.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Queue } from 'bullmq';
import { openQueue, queueAddress } from '../shared/redis/queues.js';
import calculateSlot from 'cluster-key-slot';
import type { Redis } from 'ioredis';
import { type RedisClient, createRedis, createRedisClient } from '../shared/redis/connection.js';
import { shardLayouts } from '../shared/redis/shards.js';
import { ShardSet } from '../shared/ledger/shard-set.js';
import { type RedisCluster, clusterView, startRedisCluster } from '../test/helpers/redis-cluster.js';
import type { ObjectStore } from '../shared/store/types.js';
import { duckQuery, sqlString } from '../test/helpers/duckdb.js';
import { type RedisServer, freePort, startRedisServer } from '../test/helpers/redis-server.js';
import { type RgwServer, rgwEnv, rgwStoreFor, startRgw } from '../test/helpers/rgw.js';
import { S3RVER_CREDENTIALS, type S3TestServer, s3StoreFor, startS3Server } from '../test/helpers/s3.js';
import { FaultProxy, type Service, sleep, spawnService, waitHttpOk } from './chaos-kit.js';

const SHORT = process.argv.includes('--short') || process.env.CHAOS_SHORT === '1';

/** `--<name> <value>` or `--<name>=<value>`, one of `choices` (the first is the default); anything else exits 2. */
function choiceArg<T extends string>(argv: readonly string[], name: string, choices: readonly [T, ...T[]]): T {
  const flag = `--${name}`;
  const i = argv.indexOf(flag);
  const value = i >= 0 ? argv[i + 1] : argv.find((a) => a.startsWith(`${flag}=`))?.slice(flag.length + 1);
  if (value === undefined) return choices[0];
  const found = choices.find((c) => c === value);
  if (found !== undefined) return found;
  process.stderr.write(`${flag}: expected ${choices.join(' or ')}, got ${JSON.stringify(value)}\n`);
  process.exit(2);
}
/** `--store s3rver` (default) or `--store rgw` (also `--store=rgw`). */
const STORE_KIND = choiceArg(process.argv, 'store', ['s3rver', 'rgw']);
/** `--redis single` (default) or `--redis cluster`. */
const REDIS_KIND = choiceArg(process.argv, 'redis', ['single', 'cluster']);
const CLUSTER_SHARDS = 3;
const PROFILE = SHORT
  ? {
      clients: 3,
      pauseMs: 150,
      quietMs: 2000,
      drainMs: 60_000,
      bigEvents: 6000,
      outageMs: 10_000,
      hardLimitMs: 240_000,
    }
  : {
      clients: 4,
      pauseMs: 30,
      quietMs: 12_000,
      drainMs: 90_000,
      bigEvents: 12_000,
      outageMs: 10_000,
      hardLimitMs: 295_000,
    };
const APP = 'chaos';
const QUEUE = 'chaos';
const TOKEN = `chaos-admin-${randomBytes(8).toString('hex')}`;
const RUN = randomBytes(4).toString('hex');
/** A logical push is retried (same Idempotency-Key) for at most this long before the client gives up. */
const PUSH_DEADLINE_MS = 90_000;
/** Downloads in flight while reading every file back for the check. */
const VERIFY_PARALLELISM = 8;
/** Recovery after a killed encoder is about 1.5× this; short keeps the run short. */
const LOCK_SECONDS = SHORT ? 5 : 8;

const t0 = Date.now();
function progress(msg: string): void {
  process.stdout.write(`[chaos ${((Date.now() - t0) / 1000).toFixed(1).padStart(6)}s] ${msg}\n`);
}

interface LogicalPush {
  id: string;
  events: number;
  batchIds: Set<string>;
}

const pushes = new Map<string, LogicalPush>();
const counters = { requests: 0, refused: 0, noAnswer: 0, statuses: new Map<number, number>() };

/** Events carry a per-push marker (`message_id = <push>:<i>`) so files can be traced back to pushes. */
function bodyFor(id: string, n: number, padBytes = 0): string {
  const pad = padBytes > 0 ? 'x'.repeat(padBytes) : undefined;
  const events = Array.from({ length: n }, (_, i) => ({
    event_type: 'track',
    event: 'chaos',
    distinct_id: 'chaos-user',
    message_id: `${id}:${i}`,
    properties: pad ? { i, pad } : { i },
  }));
  return JSON.stringify({ data: { events }, baseHash: null });
}

let apiUrl = '';

/** Pushes one logical batch until it is acknowledged, retrying with the same Idempotency-Key. */
async function pushLogical(id: string, n: number, padBytes = 0): Promise<LogicalPush> {
  const rec: LogicalPush = { id, events: n, batchIds: new Set() };
  pushes.set(id, rec);
  const body = bodyFor(id, n, padBytes);
  const deadline = Date.now() + PUSH_DEADLINE_MS;
  for (let attempt = 0; attempt < 1000 && Date.now() < deadline; attempt++) {
    let status: number;
    let retryAfter = 0;
    try {
      const r = await fetch(`${apiUrl}/push/events/${APP}/any`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', 'Idempotency-Key': `${RUN}-${id}` },
        body,
        signal: AbortSignal.timeout(15_000),
      });
      counters.requests++;
      status = r.status;
      counters.statuses.set(status, (counters.statuses.get(status) ?? 0) + 1);
      if (status === 200) {
        const j = (await r.json()) as { batchId?: string };
        if (typeof j.batchId === 'string') rec.batchIds.add(j.batchId);
        return rec;
      }
      retryAfter = Number(r.headers.get('retry-after') ?? 0);
      await r.arrayBuffer().catch(() => undefined);
    } catch {
      counters.noAnswer++;
      await sleep(300);
      continue;
    }
    counters.refused++;
    // 4xx other than 408/429 means the push itself is wrong: retrying cannot help.
    if (status < 500 && status !== 408 && status !== 429) return rec;
    await sleep(Math.min(2000, Math.max(200, retryAfter * 1000)));
  }
  return rec;
}

let stopClients = false;
async function clientLoop(c: number): Promise<void> {
  for (let seq = 0; !stopClients && seq < 100_000; seq++) {
    // Every 20th push is ~157 KB (300 events with padded properties): the API encodes those to
    // Parquet itself and queues the file (API_ENCODE_MAX_BYTES), so both payloads meet the faults.
    if (seq % 20 === 10) await pushLogical(`c${c}-${seq}`, 300, 400);
    else await pushLogical(`c${c}-${seq}`, 1 + Math.floor(Math.random() * 150));
    await sleep(PROFILE.pauseMs + Math.floor(Math.random() * 60));
  }
}

// ---------------------------------------------------------------- processes

const tmp = mkdtempSync(join(tmpdir(), 'ingest-chaos-'));
const redisDir = join(tmp, 'redis');
mkdirSync(redisDir);
const REDIS_ARGS = ['--appendonly', 'yes', '--appendfsync', 'always', '--maxmemory-policy', 'noeviction'];
let redis: RedisServer | undefined;
let cluster: RedisCluster | undefined;
let clusterShards: ShardSet | undefined;
let clusterConn: RedisClient | undefined;
let s3: S3TestServer | undefined;
let rgw: RgwServer | undefined;
let proxy: FaultProxy | undefined;
let api: Service | undefined;
const encoders: (Service | undefined)[] = [undefined, undefined];
let monitorConn: Redis | undefined;
let monitor: Queue | undefined;
let apiPort = 0;
const encoderPorts: number[] = [];
let common: Record<string, string> = {};

async function startApi(): Promise<void> {
  api = spawnService('services/api/main.ts', { ...common, PORT: String(apiPort) });
  await waitHttpOk(`${apiUrl}/healthz`, 60_000, api);
}

async function startEncoder(i: number): Promise<void> {
  const p = spawnService('services/encoder/main.ts', { ...common, METRICS_PORT: String(encoderPorts[i]) });
  encoders[i] = p;
  await waitHttpOk(`http://127.0.0.1:${encoderPorts[i]}/healthz`, 60_000, p);
}

async function kill9(p: Service | undefined): Promise<void> {
  if (p) await p.stop('SIGKILL', 5000);
}

async function startRedis(): Promise<void> {
  if (REDIS_KIND === 'cluster') {
    cluster ??= await startRedisCluster({ masters: 3, replicas: 1, nodeTimeoutMs: 1000, args: REDIS_ARGS });
    return;
  }
  redis = await startRedisServer({ port: redis?.port, dir: redisDir, args: REDIS_ARGS });
}

/** Cluster mode: kill -9 the master serving the app's shard, wait for its replica to take over, start it again. */
async function failoverShardMaster(): Promise<void> {
  const c = cluster as RedisCluster;
  const layout = clusterShards?.forPrefix(`events/${APP}/`).layout;
  const slot = calculateSlot(layout?.tag ?? '');
  const view = await clusterView(c.all[0]?.port ?? 0);
  const victim = view.find(
    (v) =>
      v.master &&
      v.slots.some((r) => {
        const [lo, hi] = r.split('-').map(Number);
        return lo !== undefined && slot >= lo && slot <= (hi ?? lo);
      }),
  )?.port;
  if (victim === undefined) return progress('  no master found for the shard; skipping');
  await c.kill(victim);
  const t = Date.now();
  await waitUntil(
    'a replica to take over',
    30_000,
    async () => (await c.masterPorts()).filter((p) => p !== victim).length === 3,
  );
  progress(`  master :${victim} killed; its replica took over after ${Date.now() - t} ms`);
  await sleep(1500);
  await c.restart(victim);
  progress(`  :${victim} started again (rejoins as a replica)`);
}

async function killRedis(): Promise<void> {
  const r = redis;
  if (!r) return;
  const exited = new Promise((res) => r.process.once('exit', res));
  r.process.kill('SIGKILL');
  await exited;
}

async function cleanup(): Promise<void> {
  stopClients = true;
  for (const p of [api, ...encoders]) await p?.stop('SIGKILL', 5000).catch(() => undefined);
  await monitor?.close().catch(() => undefined);
  monitorConn?.disconnect();
  await proxy?.close().catch(() => undefined);
  await s3?.close().catch(() => undefined);
  await rgw?.close().catch(() => undefined);
  await clusterShards?.close().catch(() => undefined);
  clusterConn?.disconnect();
  await redis?.stop().catch(() => undefined);
  await cluster?.stop().catch(() => undefined);
  rmSync(tmp, { recursive: true, force: true });
}

// ---------------------------------------------------------------- faults

async function jobInfo(id: string): Promise<{ state: string; processedOn: number | undefined }> {
  const q = monitor as Queue;
  const state = await q.getJobState(id);
  const job = state === 'unknown' ? undefined : await q.getJob(id);
  return { state, processedOn: job?.processedOn };
}

async function waitUntil<T>(
  what: string,
  ms: number,
  fn: () => Promise<T | undefined | false>,
): Promise<T | undefined> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const v = await fn().catch(() => undefined);
    if (v) return v;
    await sleep(50);
  }
  progress(`  (gave up waiting for ${what})`);
  return undefined;
}

/** Kills both encoders while a big job is active, restarts them, and kills them again once the same job is active again. */
async function doubleKillOnOneJob(): Promise<void> {
  progress(`pushing a big batch (${PROFILE.bigEvents} events) for the double kill`);
  const big = await pushLogical('big-0', PROFILE.bigEvents, 400);
  const id = [...big.batchIds][0];
  if (!id) return progress('  big batch was not acknowledged; skipping the double kill');
  const first = await waitUntil('big job active', 30_000, async () => {
    const j = await jobInfo(id);
    return j.state === 'active' && j.processedOn ? j.processedOn : undefined;
  });
  if (first === undefined) return;
  progress(`kill -9 both encoders while batch ${id} is active`);
  await Promise.all(encoders.map(kill9));
  await Promise.all([startEncoder(0), startEncoder(1)]);
  progress('encoders restarted; waiting for the same job to be picked up again (lock expiry + stalled check)');
  const again = await waitUntil('big job active again', LOCK_SECONDS * 1000 * 3 + 10_000, async () => {
    const j = await jobInfo(id);
    if (j.state === 'completed' || j.state === 'unknown') return 'done';
    return j.state === 'active' && j.processedOn && j.processedOn !== first ? 'active' : undefined;
  });
  if (again === 'active') {
    progress(`kill -9 both encoders again on the same batch ${id}`);
    await Promise.all(encoders.map(kill9));
    await Promise.all([startEncoder(0), startEncoder(1)]);
    progress('encoders restarted');
  } else progress('  the big job finished before the second kill');
}

async function phase(name: string, fn: () => Promise<void>): Promise<void> {
  progress(`▶ ${name}`);
  await fn();
  progress(`  acknowledged so far: ${[...pushes.values()].filter((p) => p.batchIds.size > 0).length}`);
  await sleep(PROFILE.quietMs);
}

// ---------------------------------------------------------------- verification

interface Report {
  pushes: number;
  acknowledged: number;
  written: number;
  lost: number;
  duplicated: number;
  incomplete: number;
  refused: number;
  noAnswer: number;
  gaveUp: number;
  files: number;
  listed: number;
  listInOrder: boolean;
  deadLettered: number;
}

async function listAll(): Promise<string[]> {
  const out: string[] = [];
  let after = '';
  for (let page = 0; page < 1000; page++) {
    const r = await fetch(`${apiUrl}/list/events/${APP}?limit=1000${after ? `&after=${after}` : ''}`, {
      headers: { Authorization: `Bearer ${TOKEN}` },
      signal: AbortSignal.timeout(10_000),
    });
    if (r.status !== 200) throw new Error(`list answered ${r.status}`);
    const j = (await r.json()) as { items: string[]; hasMore: boolean };
    out.push(...j.items);
    if (!j.hasMore || j.items.length === 0) break;
    after = j.items[j.items.length - 1] as string;
  }
  return out;
}

async function drained(store: ObjectStore, ackedIds: Set<string>): Promise<boolean> {
  const counts = await (monitor as Queue).getJobCounts('waiting', 'active', 'delayed', 'prioritized');
  if (Object.values(counts).some((n) => n > 0)) return false;
  const keys = new Set(await store.listKeys(`events/${APP}/`));
  for (const id of ackedIds) if (!keys.has(`events/${APP}/${id}.parquet`)) return false;
  return (await listAll()).length >= keys.size;
}

async function verify(store: ObjectStore): Promise<Report> {
  const keys = await store.listKeys(`events/${APP}/`);
  const pulled = join(tmp, 'pulled');
  mkdirSync(pulled);
  // A few downloads at once: thousands of files one by one took ~25 s of the run's time budget.
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < keys.length) {
      const key = keys[next++] as string;
      const obj = await store.getBytes(key);
      if (obj) writeFileSync(join(pulled, key.split('/').pop() as string), obj.body);
    }
  };
  await Promise.all(Array.from({ length: VERIFY_PARALLELISM }, lane));
  // Per file: which logical pushes its rows came from, and how many rows of each.
  const rows =
    keys.length === 0
      ? []
      : await duckQuery(
          `SELECT parse_filename(filename, true) AS batch, split_part(message_id, ':', 1) AS push, count(*)::INTEGER AS n FROM read_parquet(${sqlString(join(pulled, '*.parquet'))}, filename = true) GROUP BY ALL`,
        );
  const filesOfPush = new Map<string, { batch: string; n: number }[]>();
  for (const r of rows) {
    const push = String(r.push);
    filesOfPush.set(push, [...(filesOfPush.get(push) ?? []), { batch: String(r.batch), n: Number(r.n) }]);
  }
  let acknowledged = 0;
  let written = 0;
  let lost = 0;
  let duplicated = 0;
  let incomplete = 0;
  let gaveUp = 0;
  for (const p of pushes.values()) {
    if (p.batchIds.size === 0) {
      gaveUp++;
      continue;
    }
    acknowledged++;
    const files = filesOfPush.get(p.id) ?? [];
    const answered = files.filter((f) => p.batchIds.has(f.batch));
    if (answered.length === 0) lost++;
    else written++;
    // Two files carrying one logical push = one push written twice, whatever their ids.
    if (files.length > 1 || p.batchIds.size > 1) duplicated++;
    if (answered.some((f) => f.n !== p.events)) incomplete++;
  }
  const listed = await listAll();
  const ids = listed.map((n) => n.replace(/\.parquet$/, ''));
  return {
    pushes: pushes.size,
    acknowledged,
    written,
    lost,
    duplicated,
    incomplete,
    refused: counters.refused,
    noAnswer: counters.noAnswer,
    gaveUp,
    files: keys.length,
    listed: listed.length,
    listInOrder: ids.every((id, i) => i === 0 || (ids[i - 1] as string) < id),
    deadLettered: await (monitor as Queue).getFailedCount(),
  };
}

function printTable(r: Report): void {
  const rows: [string, string | number][] = [
    ['logical pushes', r.pushes],
    ['acknowledged', r.acknowledged],
    ['written', r.written],
    ['lost', r.lost],
    ['duplicated', r.duplicated],
    ['incomplete files', r.incomplete],
    ['refused (non-2xx answers)', r.refused],
    ['no answer (reset/timeout)', r.noAnswer],
    ['never acknowledged (gave up)', r.gaveUp],
    ['files in the store', r.files],
    ['listed via ?after=', `${r.listed}${r.listInOrder ? ' (ascending)' : ' (OUT OF ORDER)'}`],
    ['dead-lettered', r.deadLettered],
  ];
  const w = Math.max(...rows.map(([k]) => k.length));
  const v = Math.max(...rows.map(([, x]) => String(x).length));
  const line = `+${'-'.repeat(w + 2)}+${'-'.repeat(v + 2)}+`;
  process.stdout.write(`${line}\n`);
  for (const [k, x] of rows) process.stdout.write(`| ${k.padEnd(w)} | ${String(x).padStart(v)} |\n`);
  process.stdout.write(`${line}\n`);
  const statuses = [...counters.statuses]
    .sort(([a], [b]) => a - b)
    .map(([s, n]) => `${s}×${n}`)
    .join(' ');
  process.stdout.write(`HTTP answers: ${statuses} (${counters.requests} requests)\n`);
}

// ---------------------------------------------------------------- main

async function main(): Promise<number> {
  progress(`${SHORT ? 'short' : 'full'} run ${RUN} on ${STORE_KIND}; temp dir ${tmp}`);
  await startRedis();
  if (cluster)
    progress(
      `Redis Cluster of 3 masters + 3 replicas on ${cluster.nodes} (appendonly yes, appendfsync always, noeviction); QUEUE_SHARDS=${CLUSTER_SHARDS}, REDIS_WAIT_REPLICAS=1`,
    );
  else progress(`redis-server on ${(redis as RedisServer).url} (appendonly yes, appendfsync always, noeviction)`);
  let storeEnv: Record<string, string>;
  if (STORE_KIND === 'rgw') {
    rgw = await startRgw();
    const m = rgw.memory();
    progress(
      `Ceph RGW on ${rgw.endpoint} (started in ${rgw.startupMs.toFixed(0)} ms; RSS ${(m.total / 1048576).toFixed(0)} MB: mon ${(m.mon / 1048576).toFixed(0)}, osd ${(m.osd / 1048576).toFixed(0)}, radosgw ${(m.rgw / 1048576).toFixed(0)})`,
    );
    storeEnv = rgwEnv(rgw);
  } else {
    s3 = await startS3Server();
    proxy = await FaultProxy.start(Number(new URL(s3.endpoint).port));
    progress(`s3rver on ${s3.endpoint}, fault proxy on ${proxy.url}`);
    storeEnv = {
      STORE: 's3',
      S3_BUCKET: s3.bucket,
      S3_ENDPOINT: proxy.url,
      S3_FORCE_PATH_STYLE: 'true',
      S3_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
    };
  }
  apiPort = await freePort();
  apiUrl = `http://127.0.0.1:${apiPort}`;
  encoderPorts.push(await freePort(), await freePort());
  common = {
    HOST: '127.0.0.1',
    ...storeEnv,
    ...(cluster
      ? { REDIS_CLUSTER_NODES: cluster.nodes, QUEUE_SHARDS: String(CLUSTER_SHARDS), REDIS_WAIT_REPLICAS: '1' }
      : { REDIS_URL: (redis as RedisServer).url }),
    QUEUE_NAME: QUEUE,
    ADMIN_TOKEN: TOKEN,
    LOG_LEVEL: 'warn',
    ENCODER_CONCURRENCY: '2',
    ENCODER_LOCK_SECONDS: String(LOCK_SECONDS),
    ORPHAN_GRACE_SECONDS: '10',
  };
  await Promise.all([startApi(), startEncoder(0), startEncoder(1)]);
  if (cluster) {
    // Every push goes to one app, so one shard: its queue is the one to watch.
    clusterConn = createRedisClient(
      { kind: 'cluster', nodes: cluster.all.map((n) => ({ host: '127.0.0.1', port: n.port })) },
      'worker',
    );
    clusterShards = ShardSet.open(clusterConn, shardLayouts(QUEUE, CLUSTER_SHARDS, true));
    monitor = clusterShards.forPrefix(`events/${APP}/`).queue;
  } else {
    monitorConn = createRedis((redis as RedisServer).url, 'worker');
    monitor = openQueue(queueAddress.push({ queueName: QUEUE }), monitorConn);
    monitor.on('error', () => undefined);
  }
  progress(`API on ${apiUrl}; two encoders up; ${PROFILE.clients} clients pushing`);

  const clients = Array.from({ length: PROFILE.clients }, (_, c) => clientLoop(c));
  await sleep(PROFILE.quietMs);

  await phase('kill -9 encoder 1, restart', async () => {
    await kill9(encoders[0]);
    await sleep(1000);
    await startEncoder(0);
  });
  if (!SHORT) {
    await phase('kill -9 encoder 2, restart', async () => {
      await kill9(encoders[1]);
      await sleep(1000);
      await startEncoder(1);
    });
  }
  await phase('kill -9 twice in a row on the same job', doubleKillOnOneJob);
  if (cluster) await phase("kill -9 the Redis master of the app's shard, failover, restart it", failoverShardMaster);
  else {
    await phase('kill -9 redis-server, restart from its AOF', async () => {
      await killRedis();
      await sleep(1500);
      await startRedis();
    });
  }
  await phase('kill -9 the API, restart', async () => {
    await kill9(api);
    await sleep(1000);
    await startApi();
  });
  if (rgw) {
    const gateway = rgw;
    await phase(`store outage of ${PROFILE.outageMs / 1000} s (kill -9 radosgw, restart it)`, async () => {
      const pid = gateway.pids().rgw;
      await gateway.killGateway();
      progress(`  radosgw (pid ${pid}) killed`);
      await sleep(PROFILE.outageMs);
      const t = Date.now();
      await gateway.restartGateway();
      progress(`  store back: radosgw pid ${gateway.pids().rgw} answering after ${Date.now() - t} ms`);
    });
  } else {
    await phase(`store outage of ${PROFILE.outageMs / 1000} s (503s, then connection resets)`, async () => {
      proxy?.setMode('http503');
      await sleep(PROFILE.outageMs / 2);
      proxy?.setMode('reset');
      await sleep(PROFILE.outageMs / 2);
      proxy?.setMode('pass');
      progress(`  store back (${proxy?.faults ?? 0} connections answered with a fault)`);
    });
  }
  if (!SHORT) {
    if (cluster) await phase("kill -9 the shard's Redis master again under load", failoverShardMaster);
    else {
      await phase('kill -9 redis-server again under load', async () => {
        await killRedis();
        await sleep(1000);
        await startRedis();
      });
    }
  }

  progress('stopping the clients (each finishes its current push)');
  stopClients = true;
  await Promise.all(clients);

  const direct = rgw ? rgwStoreFor(rgw) : s3StoreFor(s3 as S3TestServer);
  const ackedIds = new Set([...pushes.values()].flatMap((p) => [...p.batchIds]));
  progress(
    `draining: ${ackedIds.size} acknowledged batches must reach the store (at most ${PROFILE.drainMs / 1000} s)`,
  );
  const deadline = Date.now() + PROFILE.drainMs;
  let ok = false;
  for (let i = 0; Date.now() < deadline; i++) {
    ok = await drained(direct, ackedIds).catch(() => false);
    if (ok) break;
    if (i % 20 === 0) {
      const c = await (monitor as Queue).getJobCounts('waiting', 'active', 'delayed', 'failed').catch(() => ({}));
      progress(`  queue ${JSON.stringify(c)}`);
    }
    await sleep(500);
  }
  progress(ok ? 'backlog drained' : 'drain deadline passed; counting what is there');
  // How much of the load went as group jobs (QUEUE_GROUP_MAX), since the API's last start.
  const metricsText = await fetch(`${apiUrl}/metrics`, { signal: AbortSignal.timeout(5000) })
    .then((r) => r.text())
    .catch(() => '');
  // Every series carries the process's default labels (`service`, …): match the name and any label given.
  const metric = (name: string, label = ''): string =>
    metricsText
      .split('\n')
      .find((l) => (l.startsWith(`${name}{`) || l.startsWith(`${name} `)) && l.includes(label))
      ?.split(' ')
      .pop() ?? '?';
  progress(
    `since the API's last start: ${metric('ingest_pushes_total', 'outcome="accepted"')} pushes accepted; ${metric('ingest_enqueue_group_batches_count')} group jobs carried ${metric('ingest_enqueue_group_batches_sum')} of their batches`,
  );

  const report = await verify(direct);
  direct.destroy();
  const exits = await Promise.all(
    [api, ...encoders].map((p) => (p ? p.stop('SIGTERM', 20_000) : Promise.resolve(null))),
  );
  progress(`SIGTERM exit codes: api ${exits[0]}, encoders ${exits[1]} ${exits[2]}`);
  printTable(report);
  process.stdout.write(`CHAOS_RESULT ${JSON.stringify(report)}\n`);
  const pass =
    report.lost === 0 &&
    report.duplicated === 0 &&
    report.incomplete === 0 &&
    report.deadLettered === 0 &&
    report.listInOrder &&
    report.listed === report.files;
  progress(pass ? 'PASS: nothing acknowledged was lost or written twice' : 'FAIL');
  return pass ? 0 : 1;
}

const hardStop = setTimeout(() => {
  progress(`hard time limit of ${PROFILE.hardLimitMs / 1000} s reached; stopping`);
  void cleanup().finally(() => process.exit(3));
}, PROFILE.hardLimitMs);
hardStop.unref();
process.once('SIGINT', () => void cleanup().finally(() => process.exit(130)));
process.once('SIGTERM', () => void cleanup().finally(() => process.exit(143)));

void main()
  .catch((err: unknown) => {
    progress(`error: ${err instanceof Error ? err.message : String(err)}`);
    return 2;
  })
  .then(async (code) => {
    await cleanup();
    process.exit(code);
  });
