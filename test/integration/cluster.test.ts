/**
 * Acceptance 1 of "Scale past one Redis": a real Redis Cluster (3 masters + 3 replicas, Debian's
 * redis-server with --cluster-enabled), 2 API and 2 encoder processes with QUEUE_SHARDS=6,
 * pushes to 48 apps from several clients, and a poller per app that keeps only its last id.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import calculateSlot from 'cluster-key-slot';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BATCH_ID_RE, batchIdMs } from '../../shared/ids.js';
import { shardOfBatchId } from '../../shared/ledger/ledger.js';
import { periodStart } from '../../shared/rollup/layout.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import { storeRootUrl } from '../../shared/duckdb.js';
import { shardIndex, shardLayouts } from '../../shared/redis/shards.js';
import { FilesystemObjectStore } from '../../shared/store/filesystem/index.js';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { type ServiceProcess, startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { type RedisCluster, clusterView, startRedisCluster } from '../helpers/redis-cluster.js';
import { expectManifestMatchesStore, viewCount } from '../helpers/rollup.js';
import { freePort } from '../helpers/redis-server.js';

const TOKEN = 'cluster-admin-token-0123456789';
const SHARDS = 6;
const APPS = 48;
const BATCHES = 720;
const CLIENTS = 6;

interface ListPage {
  items: string[];
  hasMore: boolean;
}

async function listPage(base: string, app: string, after: string | undefined): Promise<ListPage> {
  const q = new URLSearchParams({ limit: '20' });
  if (after !== undefined) q.set('after', after);
  const r = await fetch(`${base}/list/events/${app}?${q.toString()}`, {
    headers: { Authorization: `Bearer ${TOKEN}` },
  });
  if (r.status !== 200) throw new Error(`list ${app} answered ${r.status}: ${await r.text()}`);
  return (await r.json()) as ListPage;
}

/** Which master owns `slot`, from one node's CLUSTER NODES. */
async function ownerOf(cluster: RedisCluster, slot: number): Promise<number> {
  const view = await clusterView(cluster.all[0]?.port ?? 0);
  for (const m of view.filter((v) => v.master)) {
    for (const range of m.slots) {
      const [lo, hi] = range.split('-').map(Number);
      if (lo !== undefined && slot >= lo && slot <= (hi ?? lo)) return m.port;
    }
  }
  throw new Error(`no master owns slot ${slot}`);
}

describe('Redis Cluster: 3 masters + 3 replicas, QUEUE_SHARDS=6, 2 API and 2 encoder processes', () => {
  let cluster: RedisCluster | undefined;
  const procs: ServiceProcess[] = [];
  const apis: string[] = [];
  let dataDir = '';
  const queueName = uniqueName('cl');

  beforeAll(async () => {
    cluster = await startRedisCluster({ masters: 3, replicas: 1 });
    dataDir = mkdtempSync(join(tmpdir(), 'ingest-cluster-data-'));
    const common = {
      HOST: '127.0.0.1',
      REDIS_CLUSTER_NODES: cluster.nodes,
      QUEUE_SHARDS: String(SHARDS),
      QUEUE_NAME: queueName,
      DATA_DIR: dataDir,
      ADMIN_TOKEN: TOKEN,
      ORPHAN_GRACE_SECONDS: '3600',
      LOG_LEVEL: 'warn',
    };
    for (let i = 0; i < 2; i++) {
      const port = await freePort();
      procs.push(startService('services/api/main.ts', { ...common, PORT: String(port) }));
      apis.push(`http://127.0.0.1:${port}`);
    }
    const encoders = [0, 1].map(async () =>
      startService('services/encoder/main.ts', {
        ...common,
        ENCODER_CONCURRENCY: '2',
        METRICS_PORT: String(await freePort()),
      }),
    );
    procs.push(...(await Promise.all(encoders)));
    await Promise.all(apis.map((u, i) => waitForHttp(`${u}/readyz`, 60_000, procs[i])));
  }, 120_000);

  afterAll(async () => {
    await Promise.all(procs.map((p) => p.stop('SIGTERM', 10_000)));
    await cluster?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('lists every acknowledged batch exactly once per app, in increasing order; every master holds a shard', async () => {
    const apps = Array.from({ length: APPS }, (_, i) => `app${String(i).padStart(2, '0')}`);
    const acked = new Map<string, string[]>(apps.map((a) => [a, []]));
    let events = 0;
    let next = 0;
    const client = async (c: number): Promise<void> => {
      for (let turn = 0; next < BATCHES && turn < BATCHES; turn++) {
        const i = next++;
        const app = apps[i % APPS] as string;
        const n = 1 + (i % 7);
        const r = await fetch(`${apis[(i + c) % apis.length]}/push/events/${app}/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: batchBody(n, sampleEvent),
        });
        const json = (await r.json()) as { batchId?: string; error?: string };
        if (r.status !== 200) throw new Error(`push ${i} answered ${r.status}: ${json.error ?? ''}`);
        expect(json.batchId).toMatch(BATCH_ID_RE);
        acked.get(app)?.push(json.batchId as string);
        events += n;
      }
    };

    let pushesDone = false;
    const seen = new Map<string, string[]>(apps.map((a) => [a, []]));
    let polls = 0;
    const poller = async (app: string, k: number): Promise<void> => {
      let last: string | undefined;
      const mine = seen.get(app) as string[];
      const deadline = Date.now() + 90_000;
      for (let p = 0; p < 5000 && Date.now() < deadline; p++) {
        if (pushesDone && mine.length >= (acked.get(app)?.length ?? 0)) return;
        const page = await listPage(apis[(k + p) % apis.length] as string, app, last);
        polls++;
        for (const name of page.items) {
          const id = name.replace(/\.parquet$/, '');
          if (last !== undefined && !(id > last)) throw new Error(`${app}: ${id} listed after cursor ${last}`);
          mine.push(id);
          last = id;
        }
        if (!page.hasMore) await new Promise((r) => setTimeout(r, 250));
      }
    };

    const polling = Promise.all(apps.map((a, k) => poller(a, k)));
    const pushing = await Promise.allSettled(Array.from({ length: CLIENTS }, (_, c) => client(c)));
    pushesDone = true;
    const failed = pushing.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    await polling;

    let total = 0;
    for (const app of apps) {
      const a = acked.get(app) as string[];
      const s = seen.get(app) as string[];
      total += a.length;
      expect(new Set(a).size).toBe(a.length);
      // Exactly once, in increasing order, nothing missed, nothing extra.
      expect(s).toEqual([...a].sort());
      // Every id of an app was minted on the app's shard (the shard is kept in the id suffix).
      const shard = shardIndex(`events/${app}/`, SHARDS);
      for (const id of a) expect(shardOfBatchId(id, SHARDS)).toBe(shard);
    }
    expect(total).toBe(BATCHES);

    // The files: one per acknowledged batch, holding every event, as DuckDB reads them.
    const glob = sqlString(join(dataDir, 'events', '*', '*.parquet'));
    const [row] = await duckQuery(
      `SELECT count(*)::INTEGER AS n, count(DISTINCT filename)::INTEGER AS files FROM read_parquet(${glob}, filename = true)`,
    );
    expect(row).toEqual({ n: events, files: BATCHES });

    // The shards spread over the cluster: each master owns the slot of, and holds keys of, at least one shard.
    const c = cluster as RedisCluster;
    const masters = await c.masterPorts();
    expect(masters).toHaveLength(3);
    const holding = new Set<number>();
    for (const layout of shardLayouts(queueName, SHARDS, true)) {
      const slot = calculateSlot(layout.tag);
      const owner = await ownerOf(c, slot);
      const node = new Redis(owner, '127.0.0.1', {
        lazyConnect: true,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
      });
      node.on('error', () => undefined);
      try {
        await node.connect();
        if (Number(await node.call('CLUSTER', 'COUNTKEYSINSLOT', String(slot))) > 0) holding.add(owner);
      } finally {
        node.disconnect();
      }
    }
    expect([...holding].sort()).toEqual([...masters].sort());
    console.info(`cluster: ${BATCHES} batches over ${APPS} apps and ${SHARDS} shards, ${polls} polls`);
  }, 120_000);

  it('npm start (API + encoder process) runs on the cluster too, starting no private Redis', async () => {
    const c = cluster as RedisCluster;
    const dir = mkdtempSync(join(tmpdir(), 'ingest-cluster-start-'));
    const port = await freePort();
    const proc = startService('services/main.ts', {
      HOST: '127.0.0.1',
      PORT: String(port),
      REDIS_CLUSTER_NODES: c.nodes,
      QUEUE_SHARDS: '3',
      QUEUE_NAME: uniqueName('clstart'),
      DATA_DIR: dir,
      ADMIN_TOKEN: TOKEN,
      ROLLUP: 'off',
      LOG_LEVEL: 'info',
    });
    try {
      const base = `http://127.0.0.1:${port}`;
      await waitForHttp(`${base}/readyz`, 60_000, proc);
      const r = await fetch(`${base}/push/events/start-app/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(3, sampleEvent),
      });
      expect(r.status).toBe(200);
      const { batchId } = (await r.json()) as { batchId: string };
      const deadline = Date.now() + 30_000;
      let items: string[] = [];
      while (Date.now() < deadline && items.length === 0) {
        items = (await listPage(base, 'start-app', undefined)).items;
        if (items.length === 0) await new Promise((res) => setTimeout(res, 200));
      }
      expect(items).toEqual([`${batchId}.parquet`]);
      expect(proc.output()).not.toMatch(/private redis-server|using the Redis already running/);
    } finally {
      await proc.stop('SIGTERM', 10_000);
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);

  it('npm start with rollups on the cluster: every closed period of apps on every shard rolled, the view equals the acknowledged events', async () => {
    const c = cluster as RedisCluster;
    const dir = mkdtempSync(join(tmpdir(), 'ingest-cluster-rollup-'));
    const port = await freePort();
    const name = uniqueName('clroll');
    const shards = 3;
    const proc = startService('services/main.ts', {
      HOST: '127.0.0.1',
      PORT: String(port),
      REDIS_CLUSTER_NODES: c.nodes,
      QUEUE_SHARDS: String(shards),
      QUEUE_NAME: name,
      DATA_DIR: dir,
      ADMIN_TOKEN: TOKEN,
      ROLLUP_PERIOD_SECONDS: '2',
      ROLLUP_DELAY_SECONDS: '0',
      LOG_LEVEL: 'info',
    });
    const client = new Cluster(
      c.nodes.split(',').map((hp) => ({ host: '127.0.0.1', port: Number(hp.split(':')[1]) })),
      { redisOptions: { maxRetriesPerRequest: 2 } },
    );
    client.on('error', () => undefined);
    try {
      const base = `http://127.0.0.1:${port}`;
      await waitForHttp(`${base}/readyz`, 60_000, proc);
      const apps = ['cr0', 'cr1', 'cr2', 'cr3', 'cr4', 'cr5'];
      expect(new Set(apps.map((a) => shardIndex(`events/${a}/`, shards))).size).toBeGreaterThan(1);
      const acked = new Map<string, number>();
      const lastId = new Map<string, string>();
      const until = Date.now() + 4000;
      for (let i = 0; Date.now() < until; i++) {
        const app = apps[i % apps.length] as string;
        const n = 3 + (i % 9);
        const r = await fetch(`${base}/push/events/${app}/x`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json' },
          body: batchBody(n, sampleEvent),
        });
        expect(r.status).toBe(200);
        acked.set(app, (acked.get(app) ?? 0) + n);
        lastId.set(app, ((await r.json()) as { batchId: string }).batchId);
        await new Promise((res) => setTimeout(res, 20));
      }
      const store = new FilesystemObjectStore({ root: dir });
      for (const app of apps) {
        const endMs = periodStart(batchIdMs(lastId.get(app) as string), 2000) + 2000;
        await waitFor(
          async () => ((await readManifest(store, `events/${app}/`))?.watermarkMs ?? 0) >= endMs,
          30_000,
          `rollup of ${app} on the cluster`,
        );
      }
      const { rootUrl } = storeRootUrl(store);
      let total = 0;
      for (const app of apps) {
        const m = (await readManifest(store, `events/${app}/`))!;
        await expectManifestMatchesStore(store, m, rootUrl);
        const files = m.periods.flatMap((p) => p.files).map((f) => `'${rootUrl}${f.key}'`);
        expect(files.length).toBeGreaterThan(0);
        const [row] = await duckQuery(`SELECT count(*)::BIGINT AS n FROM read_parquet([${files.join(',')}])`);
        expect(Number(row?.n)).toBe(acked.get(app));
        expect(await viewCount(store, app)).toBe(acked.get(app));
        total += acked.get(app) ?? 0;
      }
      expect(await viewCount(store, '*')).toBe(total);
      // The rollup queue lives under the deployment's hash tag on a Cluster.
      expect(await client.zcard(`{${name}}:${name}-rollup:completed`)).toBeGreaterThan(0);

      // A dead-lettered batch replayed into an already-rolled period (its replay note is written
      // under its shard's tag, on the master that owns it) is in the view once after the re-roll.
      const app = apps.find((a) => shardIndex(`events/${a}/`, shards) !== 0) as string;
      const auth = { Authorization: `Bearer ${TOKEN}` };
      rmSync(join(dir, 'events', app), { recursive: true, force: true });
      writeFileSync(join(dir, 'events', app), 'not a folder');
      const dr = await fetch(`${base}/push/events/${app}/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(7, sampleEvent),
      });
      expect(dr.status).toBe(200);
      const { batchId: dead } = (await dr.json()) as { batchId: string };
      await waitFor(
        async () =>
          (
            (await (await fetch(`${base}/admin/failed`, { headers: auth })).json()) as { items: { batchId: string }[] }
          ).items.some((i) => i.batchId === dead),
        30_000,
        'dead-lettered on the cluster',
      );
      rmSync(join(dir, 'events', app));
      mkdirSync(join(dir, 'events', app));
      const ar = await fetch(`${base}/push/events/${app}/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(5, sampleEvent),
      });
      const { batchId: after } = (await ar.json()) as { batchId: string };
      await waitFor(
        async () => ((await readManifest(store, `events/${app}/`))?.watermarkMs ?? 0) > batchIdMs(after),
        30_000,
        'rolled past the dead letter',
      );
      expect((await readManifest(store, `events/${app}/`))!.watermarkMs).toBeGreaterThan(batchIdMs(dead));
      const before = acked.get(app) ?? 0;
      expect(await viewCount(store, app)).toBe(before + 5);
      const replay = await fetch(`${base}/admin/replay/${dead}`, { method: 'POST', headers: auth });
      expect(((await replay.json()) as { outcome: string }).outcome).toBe('replayed');
      await waitFor(async () => (await viewCount(store, app)) === before + 12, 30_000, 're-rolled on the cluster');
      await expectManifestMatchesStore(store, (await readManifest(store, `events/${app}/`))!, rootUrl);
      expect(await viewCount(store, '*')).toBe(total + 12);
      expect(proc.output()).not.toMatch(
        /rollup planning (pass )?failed|rollup job dead-lettered|rollup job will be retried/,
      );
    } finally {
      client.disconnect();
      await proc.stop('SIGTERM', 10_000);
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);

  it('load shedding on a cluster: one master past the memory mark sheds pushes with 503 + Retry-After and /readyz says so; pushes pass again once it is back', async () => {
    const c = cluster as RedisCluster;
    const [port] = await c.masterPorts();
    const node = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 2 });
    const push = async () =>
      fetch(`${apis[0]}/push/events/shed-app/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: batchBody(2, sampleEvent),
      });
    const shedding = async () =>
      ((await (await fetch(`${apis[0]}/readyz`)).json()) as { shedding: string | null }).shedding;
    try {
      expect(await shedding()).toBeNull();
      // maxmemory just above what the node uses: 90% full, past the default 0.8 mark, room left for writes.
      const used = Number(/^used_memory:(\d+)/m.exec(await node.info('memory'))?.[1]);
      await node.config('SET', 'maxmemory', String(Math.ceil(used / 0.9)));
      const reason = await waitFor(shedding, 10_000, 'the API sheds');
      expect(reason).toMatch(/Redis memory at \d+% of maxmemory/);
      const r = await push();
      expect(r.status).toBe(503);
      expect(r.headers.get('retry-after')).toBeTruthy();
      expect(((await r.json()) as { error: string }).error).toMatch(/^overloaded: Redis memory/);
    } finally {
      await node.config('SET', 'maxmemory', '0');
      node.disconnect();
    }
    await waitFor(async () => (await shedding()) === null, 10_000, 'shedding over');
    expect((await push()).status).toBe(200);
  }, 60_000);
});
