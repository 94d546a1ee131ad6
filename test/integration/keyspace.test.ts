/**
 * Every key the product writes is named by shared/redis/keyspace.ts. The whole stack (API, encoder,
 * rollup service) runs in this process against a redis-server of this file's own, with every
 * feature that writes keys on: two queue shards, rollups, rate limits (request buckets and an app
 * budget), Idempotency-Key and body dedup, group jobs, a dead letter and its replay, cap-signed
 * requests (nonces). Redis is SCANned all along and at the end; any key `keyFamily` does not name
 * fails the test, printed. The BullMQ adapter's contract (shared/redis/bullmq-keys.ts: a job's hash is
 * `jobKeyPrefix + id` while the job lives, the failed set holds the dead letter's id) is checked
 * against the real BullMQ here too.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ed25519Suite, signRequest, userIdFromPubHex } from '@drakkar.software/starfish-protocol';
import { mintDeviceCap, scopes } from '@drakkar.software/starfish-identities';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jobKeysOf } from '../../shared/redis/bullmq-keys.js';
import { DEFAULT_SYNC_CONFIG } from '../../shared/config.js';
import { batchIdMs } from '../../shared/ids.js';
import { KEY_FAMILIES, type KeyFamilyName, keyFamily, ledgerKeys } from '../../shared/redis/keyspace.js';
import { readManifest } from '../../shared/rollup/manifest.js';
import { shardIndex, shardLayouts } from '../../shared/redis/shards.js';
import { ShardSet } from '../../shared/ledger/shard-set.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { type RedisServer, startRedisServer } from '../helpers/redis-server.js';
import { ADMIN_TOKEN, type TestStack, startTestStack } from '../helpers/stack.js';
import { waitFor } from '../helpers/wait.js';

const SHARDS = 2;
const WINDOW_MS = 60_000;

/** Every key in the db (SCAN, bounded). */
async function scanAll(redis: Redis): Promise<string[]> {
  const out: string[] = [];
  let cursor = '0';
  for (let round = 0; round < 10_000; round++) {
    const [next, keys] = await redis.scan(cursor, 'COUNT', 1000);
    out.push(...keys);
    cursor = next;
    if (cursor === '0') break;
  }
  return out;
}

describe('keyspace: every key the stack writes is named by shared/redis/keyspace.ts', () => {
  let server: RedisServer;
  let redis: Redis;
  let stack: TestStack | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'ingest-keyspace-'));
  const queueName = uniqueName('ks');
  const seen = new Set<string>();
  let sampler: NodeJS.Timeout | undefined;
  let sampling: Promise<void> = Promise.resolve();

  beforeAll(async () => {
    server = await startRedisServer();
    redis = new Redis(server.url, { maxRetriesPerRequest: null });
  });
  afterAll(async () => {
    if (sampler) clearInterval(sampler);
    await sampling;
    await stack?.shutdown();
    redis?.disconnect();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('runs every feature, then finds no key outside the keyspace', { timeout: 150_000 }, async () => {
    const ed = ed25519Suite.generateSignerKeypair();
    const userId = userIdFromPubHex(ed.pubHex);
    const configFile = join(dir, 'config.json');
    writeFileSync(
      configFile,
      JSON.stringify({
        version: 1,
        collections: [
          {
            ...DEFAULT_SYNC_CONFIG.collections[0],
            rateLimit: {
              push: { windowMs: WINDOW_MS, maxRequests: 100_000 },
              list: {
                identity: { windowMs: WINDOW_MS, maxRequests: 100_000 },
                ip: { windowMs: WINDOW_MS, maxRequests: 100_000 },
              },
              appEvents: { windowMs: WINDOW_MS, maxEvents: 10_000_000 },
            },
          },
        ],
      }),
    );
    stack = await startTestStack(
      {
        REDIS_URL: server.url,
        QUEUE_NAME: queueName,
        QUEUE_SHARDS: String(SHARDS),
        CONFIG_FILE: configFile,
        ROLLUP_PERIOD_SECONDS: '1',
        ROLLUP_DELAY_SECONDS: '0',
        CAP_AUTH: 'on',
        CAP_ADMINS: userId,
      },
      { api: true, encoder: true, rollup: true },
    );
    const s = stack;
    // Keys that live briefly (locks, group entries, in-flight ids) are caught by sampling the db.
    sampler = setInterval(() => {
      sampling = sampling.then(
        async () => {
          for (const k of await scanAll(redis)) seen.add(k);
        },
        () => undefined,
      );
    }, 100);

    // Apps on both shards.
    const apps: string[] = [];
    for (let i = 0; apps.length < 4 && i < 1000; i++) {
      const app = `ks${i}`;
      if (apps.filter((a) => shardIndex(`events/${a}/`, SHARDS) === shardIndex(`events/${app}/`, SHARDS)).length < 2)
        apps.push(app);
    }
    expect(new Set(apps.map((a) => shardIndex(`events/${a}/`, SHARDS))).size).toBe(SHARDS);
    /** The last batch id answered per app: its period is the last one the app's rollup must reach. */
    const last = new Map<string, string>();
    const push = async (app: string, body: string, headers: Record<string, string> = {}): Promise<string> => {
      const r = await fetch(`${s.url}/push/events/${app}/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', ...headers },
        body,
      });
      expect(r.status).toBe(200);
      const { batchId } = (await r.json()) as { batchId: string };
      if (batchId > (last.get(app) ?? '')) last.set(app, batchId);
      return batchId;
    };

    // Pushes: keyless with message_ids (body dedup), keyed (Idempotency-Key) and its retry, and a
    // burst of concurrent ones (group jobs), on every app; the rate-limit and app-budget counters count them.
    const ids: string[] = [];
    for (const app of apps) {
      ids.push(await push(app, batchBody(3, sampleEvent)));
      const keyed = batchBody(2, sampleEvent);
      const first = await push(app, keyed, { 'Idempotency-Key': `ks-${app}` });
      expect(await push(app, keyed, { 'Idempotency-Key': `ks-${app}` })).toBe(first);
      ids.push(first);
    }
    // With the encoders paused, pushes that arrive together (on one shard's queue) ride in group
    // jobs and stay in flight while the db is read once more. Whether arrivals overlap an add is up
    // to timing, so the burst is repeated (at most 5 times) until a group was formed.
    const workers = [...(s.encoder?.workers ?? [])];
    await Promise.all(workers.map((w) => w.pause()));
    const grouped = (): boolean => [...seen].some((k) => keyFamily(k) === 'groups');
    for (let burst = 0; burst < 5 && !grouped(); burst++) {
      ids.push(
        ...(await Promise.all(
          Array.from({ length: 40 }, () => push(apps[burst % apps.length] as string, batchBody(2, sampleEvent))),
        )),
      );
      for (const k of await scanAll(redis)) seen.add(k);
    }
    await Promise.all(workers.map((w) => w.resume()));

    // A cap-signed list (a nonce) and a bearer one (request buckets of both sub-limits).
    const cap = await mintDeviceCap(
      ed.privHex,
      ed.pubHex,
      { edPubHex: ed.pubHex, kemPubHex: ed25519Suite.generateKemKeypair().pubHex },
      scopes.rootAll(),
    );
    const path = `/list/events/${apps[0]}`;
    const signed = await signRequest({ method: 'GET', pathAndQuery: path, host: new URL(s.url).host }, ed.privHex);
    const capList = await fetch(`${s.url}${path}`, {
      headers: {
        Authorization: `Cap ${Buffer.from(JSON.stringify(cap)).toString('base64')}`,
        'X-Starfish-Sig': signed.sig,
        'X-Starfish-Ts': String(signed.ts),
        'X-Starfish-Nonce': signed.nonce,
      },
    });
    expect(capList.status).toBe(200);
    expect((await fetch(`${s.url}${path}`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } })).status).toBe(200);

    // A dead letter: an app of its own whose folder is a file, so the write fails for good.
    const deadApp = 'ks-dead';
    const shards = ShardSet.open(redis, shardLayouts(queueName, SHARDS, false));
    try {
      const deadDir = join(s.dataDir, 'events', deadApp);
      writeFileSync(deadDir, 'not a folder');
      const dead = await push(deadApp, batchBody(2, sampleEvent));
      const { queue } = shards.forBatchId(dead);
      await waitFor(async () => (await queue.getJobState(dead)) === 'failed', 20_000, 'the batch dead-lettered');

      // The adapter's contract, as scan_pending-2.lua reads it: a failed job's hash is
      // jobKeyPrefix + id and the failed set holds its id; a written (removed) job has no hash.
      const jobs = jobKeysOf(queue);
      expect(await redis.exists(`${jobs.jobKeyPrefix}${dead}`)).toBe(1);
      expect(await redis.zscore(jobs.failed, dead)).not.toBeNull();
      const written = ids[0] as string;
      const writtenJobs = jobKeysOf(shards.forBatchId(written).queue);
      await waitFor(
        async () => (await redis.exists(`${writtenJobs.jobKeyPrefix}${written}`)) === 0,
        20_000,
        "a written batch's job removed",
      );

      // Replay it once fixed (a replay marker, a replay note for the rollup planner).
      rmSync(deadDir, { force: true });
      const replayed = await fetch(`${s.url}/admin/replay/${dead}`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${ADMIN_TOKEN}` },
      });
      expect(replayed.status).toBe(200);
      await waitFor(
        async () => (await s.store.getBytes(`events/${deadApp}/${dead}.parquet`).catch(() => null)) !== null,
        20_000,
        'the replayed batch written',
      );
    } finally {
      await shards.close();
    }

    // Rollups: every app's closed periods rolled (locks, the rollup queue, replay notes read).
    const endOf = (app: string): number => Math.floor(batchIdMs(last.get(app) as string) / 1000) * 1000 + 1000;
    // One bound for all apps: a loaded machine has made a rollup wait well past 30 s (rollup.test.ts).
    const deadline = Date.now() + 60_000;
    for (const app of apps) {
      await waitFor(
        async () => ((await readManifest(s.store, `events/${app}/`))?.watermarkMs ?? 0) >= endOf(app),
        Math.max(1000, deadline - Date.now()),
        `rollup of ${app}`,
      );
    }
    // An erasure (its job on the erase queue, the prefix lock), run to completion.
    const erase = await fetch(`${s.url}/admin/erase/events/${apps[0] as string}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${ADMIN_TOKEN}`, 'Content-Type': 'application/json' },
      body: '{"distinct_ids":["nobody"]}',
    });
    expect(erase.status).toBe(202);
    const eraseId = ((await erase.json()) as { id: string }).id;
    await waitFor(
      async () =>
        (
          (await (
            await fetch(`${s.url}/admin/erase/${eraseId}`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } })
          ).json()) as { state: string }
        ).state === 'completed',
      60_000,
      'the erasure',
    );
    // Nothing left in flight, then one last look at the whole db.
    await waitFor(
      async () => {
        for (const l of shardLayouts(queueName, SHARDS, false))
          if ((await redis.scard(ledgerKeys.prefixes(l.namespace))) > 0) return false;
        return true;
      },
      20_000,
      'no batch in flight',
    );
    clearInterval(sampler);
    await sampling;
    for (const k of await scanAll(redis)) seen.add(k);

    const families = new Map<KeyFamilyName, number>();
    const unknown: string[] = [];
    for (const key of seen) {
      const f = keyFamily(key, { queueName });
      if (f) families.set(f, (families.get(f) ?? 0) + 1);
      else unknown.push(key);
    }
    process.stdout.write(
      `[keyspace] ${seen.size} keys seen: ${[...families].map(([f, n]) => `${f} ${n}`).join(', ')}\n`,
    );
    if (unknown.length > 0)
      process.stdout.write(
        `[keyspace] keys no family names:\n${unknown
          .sort()
          .map((k) => `  ${k}`)
          .join('\n')}\n`,
      );
    expect(unknown.sort()).toEqual([]);
    // The run did write what it meant to: every family but the briefly-lived ones a 100 ms sample may miss.
    const mayMiss: KeyFamilyName[] = ['rollup:lock', 'rollup:dirty'];
    const expected = (Object.keys(KEY_FAMILIES) as KeyFamilyName[]).filter((f) => !mayMiss.includes(f));
    expect(expected.filter((f) => !families.has(f))).toEqual([]);
  });
});
