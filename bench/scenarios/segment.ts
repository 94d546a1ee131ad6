/**
 * Issue 46 — the Segment door against the Starfish push, in one run of one `npm start`
 * (services/main.ts: the API and its encoder child process, a private AOF redis-server started
 * here, a filesystem store) with a write keys file. Both sides take the same autocannon load,
 * 32 connections, alternated: 100-event batches to `/v1/batch` (a write key as HTTP Basic user,
 * every event with its own `messageId`, so each request is also an idempotency key) and to
 * `/push/events/<app>/x`. Measured: durable events/s (until every accepted batch is a file,
 * counted from the written index as bench/scenarios/e2e.ts does). Target: Segment ≥ 0.9× Starfish.
 *
 * Both sides carry an idempotency claim, as their clients send them: the Segment body's messageIds
 * make each request an Idempotency-Key (sha256 of the sorted ids), and every event of the Starfish
 * body has a message_id, so each push is claimed by its body hash (BODY_DEDUP_WINDOW_SECONDS).
 * Either claim is looked up and written inside the one id-minting script (mint_batches-n.lua), so
 * neither costs a Redis round trip more; the rows below show the Redis calls per batch to prove it,
 * and the CPU per batch of the API's event loop (where the Segment body is translated) and of the
 * whole service.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { PRIVATE_REDIS_ARGS } from '../../shared/redis/private-server.js';
import { childNodePids } from '../../test/helpers/dist.js';
import { sampleEvent } from '../../test/helpers/events.js';
import { freePort, startRedisServer } from '../../test/helpers/redis-server.js';
import {
  type Child,
  bodyFactory,
  loadTest,
  median,
  probeRedis,
  redisCpuSeconds,
  row,
  serviceCpuSeconds,
  serviceThreadCpu,
  sleep,
  spawnService,
  splitServiceCpu,
  waitForFiles,
  waitHttp,
  writtenIndexCounter,
} from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';

const EVENTS_PER_BATCH = 100;
const CONNECTIONS = 32;
/** One write key (and so one app, one folder) per measured run; more than any run count uses. */
const KEYS = 12;
const keyOf = (n: number): string => `bench-segment-key-${String(n).padStart(4, '0')}`;

type SideName = 'segment' | 'starfish';

/**
 * `/v1/batch` bodies that are all different: `distinct` base batches (one device each, the same
 * sample events as the Starfish bodies, in Segment's shape), every messageId made fresh per request.
 */
function segmentBodyFactory(eventsPerBatch: number, distinct = 16): () => string {
  const MARK = '__bench_seq__';
  const parts = Array.from({ length: distinct }, () => {
    const device = randomUUID();
    const batch = Array.from({ length: eventsPerBatch }, (_, i) => {
      const e = sampleEvent(i, device);
      const type = String(e.event_type);
      return {
        type,
        [type === 'screen' ? 'name' : 'event']: e.event,
        userId: e.distinct_id,
        anonymousId: e.anonymous_id,
        timestamp: e.ts,
        messageId: `${MARK}-${i}`,
        properties: e.properties,
        context: e.context,
        sentAt: e.ts,
      };
    });
    return JSON.stringify({ batch }).split(MARK);
  });
  const run = randomUUID().slice(0, 8);
  let seq = 0;
  return () => (parts[seq % parts.length] as string[]).join(`${run}-${seq++}`);
}

interface Run {
  durableEventsPerSec: number;
  bad: number;
  /** Per accepted batch: the API's event loop, the whole service (API, encoder), Redis; ms of CPU. */
  apiLoopMs: number;
  serviceMs: number;
  redisMs: number;
  /** Redis commands per accepted batch (INFO commandstats; scripts count as one EVALSHA). */
  redisCalls: number;
}

/** Commands Redis has run so far (the sum of INFO commandstats' calls). */
async function redisCommands(redis: ReturnType<typeof probeRedis>): Promise<number> {
  const info = await redis.info('commandstats');
  let n = 0;
  for (const m of info.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)) n += Number(m[1]);
  return n;
}

export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  const smoke = ctx.smoke;
  const satSec = smoke ? 1 : 12;
  const rounds = smoke ? 1 : 2;
  const tmp = mkdtempSync(join(tmpdir(), 'ingest-bench-segment-'));
  const redisServer = await startRedisServer({ args: [...PRIVATE_REDIS_ARGS] });
  const redis = probeRedis(redisServer.url);
  let proc: Child | undefined;
  try {
    const keysFile = join(tmp, 'keys.json');
    const keys = Object.fromEntries(Array.from({ length: KEYS }, (_, n) => [keyOf(n), { app: `seg-${n}` }]));
    writeFileSync(keysFile, JSON.stringify(keys));
    const dataDir = join(tmp, 'data');
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    proc = await spawnService('services/main', {
      PORT: String(port),
      HOST: '127.0.0.1',
      REDIS_URL: redisServer.url,
      DATA_DIR: dataDir,
      QUEUE_NAME: 'bench-segment',
      SEGMENT_WRITE_KEYS_FILE: keysFile,
      ...(process.env.BENCH_LOG_LEVEL ? { LOG_LEVEL: process.env.BENCH_LOG_LEVEL } : {}),
    });
    ctx.progress('segment: starting npm start with a write keys file');
    await waitHttp(`${url}/healthz`, proc);
    const apiPid = proc.pid;

    let runNo = 0;
    const oneRun = async (side: SideName, durationSec: number): Promise<Run> => {
      const n = runNo++;
      if (n >= KEYS) throw new Error(`segment: more than ${KEYS} runs`);
      const app = side === 'segment' ? `seg-${n}` : `sf-${n}`;
      const auth = `Basic ${Buffer.from(`${keyOf(n)}:`).toString('base64')}`;
      const pids = [apiPid, ...childNodePids(apiPid)];
      const cpu0 = serviceCpuSeconds(pids);
      const threads0 = serviceThreadCpu(pids);
      const redisCpu0 = await redisCpuSeconds(redis);
      const calls0 = await redisCommands(redis);
      const t0 = performance.now();
      const r = await loadTest({
        url,
        path: () => (side === 'segment' ? '/v1/batch' : `/push/events/${app}/x`),
        body: side === 'segment' ? segmentBodyFactory(EVENTS_PER_BATCH) : bodyFactory(EVENTS_PER_BATCH),
        headers: side === 'segment' ? { authorization: auth } : {},
        connections: CONNECTIONS,
        durationSec,
      });
      const accepted = r['2xx'];
      if (accepted === 0) throw new Error(`segment: ${side} accepted no request (non-2xx ${r.non2xx})`);
      const count = writtenIndexCounter(redis, `events/${app}/`);
      const tDurable = await waitForFiles(
        join(dataDir, 'events', app),
        accepted,
        180_000,
        (have) => ctx.progress(`segment: ${side} draining, ${have}/${accepted} files`),
        { count },
      );
      const cpu = serviceCpuSeconds(pids) - cpu0;
      const threads = splitServiceCpu(pids, threads0, serviceThreadCpu(pids), cpu);
      const perBatch = (seconds: number): number => (seconds * 1000) / accepted;
      return {
        durableEventsPerSec: (accepted * EVENTS_PER_BATCH) / ((tDurable - t0) / 1000),
        bad: r.non2xx + r.errors + r.timeouts,
        apiLoopMs: perBatch(threads.main),
        serviceMs: perBatch(cpu),
        redisMs: perBatch((await redisCpuSeconds(redis)) - redisCpu0),
        // The probe's own ZCARD polls while draining are a few a second: noise next to thousands of batches.
        redisCalls: ((await redisCommands(redis)) - calls0) / accepted,
      };
    };

    // Warm-up: JIT, connection pools, wasm; not measured.
    for (const side of ['starfish', 'segment'] as const) {
      ctx.progress(`segment: warm-up ${side}`);
      await oneRun(side, smoke ? 0.5 : 2);
    }
    const runs: Record<SideName, Run[]> = { segment: [], starfish: [] };
    for (let r = 0; r < rounds; r++) {
      for (const side of r % 2 === 0 ? (['starfish', 'segment'] as const) : (['segment', 'starfish'] as const)) {
        ctx.progress(`segment: round ${r + 1}/${rounds}, ${side} (${satSec} s)`);
        runs[side].push(await oneRun(side, satSec));
        await sleep(smoke ? 100 : 1000);
      }
    }
    const m = (side: SideName, of: (x: Run) => number = (x) => x.durableEventsPerSec): number =>
      median(runs[side].map(of));
    const bad = (side: SideName): number => runs[side].reduce((s, x) => s + x.bad, 0);
    const load = loadavg()[0] ?? Number.NaN;
    const perBatch = (metric: string, unit: string, of: (x: Run) => number): BenchRow =>
      row({ scenario: 'segment', metric, unit, ours: m('segment', of), reference: m('starfish', of) });
    return [
      row({
        scenario: 'segment',
        metric: `durable events/s, /v1/batch (ours) vs Starfish push (reference), 100-event batches, 32 conns, both with an idempotency claim (messageIds key / body hash); load average ${load.toFixed(1)} at the end`,
        unit: 'events/s',
        ours: m('segment'),
        reference: m('starfish'),
        ratioTarget: { op: '>=', value: 0.9 },
      }),
      perBatch(
        'CPU of the API event loop per batch (translation included), /v1/batch vs Starfish',
        'ms',
        (x) => x.apiLoopMs,
      ),
      perBatch('CPU of the service (API + encoder) per batch, /v1/batch vs Starfish', 'ms', (x) => x.serviceMs),
      perBatch('Redis CPU per batch, /v1/batch vs Starfish', 'ms', (x) => x.redisMs),
      perBatch('Redis commands per batch (a script is one), /v1/batch vs Starfish', 'count', (x) => x.redisCalls),
      row({
        scenario: 'segment',
        metric: 'non-2xx/errors at saturation, /v1/batch (ours) vs Starfish push (reference)',
        unit: 'count',
        ours: bad('segment'),
        reference: bad('starfish'),
      }),
    ];
  } finally {
    ctx.progress('segment: stopping');
    await proc?.stop();
    redis.disconnect();
    await redisServer.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}
