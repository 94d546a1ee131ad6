/**
 * Issue 46 — the Segment door against the Starfish push, in one run of one `npm start`
 * (services/main.ts: the API and its encoder child process, a private AOF redis-server started
 * here, a filesystem store) with a write keys file. Both sides take the same autocannon load,
 * 32 connections, alternated: 100-event batches to `/v1/batch` (a write key as HTTP Basic user,
 * every event with its own `messageId`, so each request is also an idempotency key) and to
 * `/push/events/<app>/x`. Measured: durable events/s (until every accepted batch is a file,
 * counted from the written index as bench/scenarios/e2e.ts does). Target: Segment ≥ 0.9× Starfish.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PRIVATE_REDIS_ARGS } from '../../shared/redis/private-server.js';
import { sampleEvent } from '../../test/helpers/events.js';
import { freePort, startRedisServer } from '../../test/helpers/redis-server.js';
import {
  type Child,
  bodyFactory,
  loadTest,
  median,
  probeRedis,
  row,
  sleep,
  spawnService,
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

    let runNo = 0;
    const oneRun = async (side: SideName, durationSec: number): Promise<Run> => {
      const n = runNo++;
      if (n >= KEYS) throw new Error(`segment: more than ${KEYS} runs`);
      const app = side === 'segment' ? `seg-${n}` : `sf-${n}`;
      const auth = `Basic ${Buffer.from(`${keyOf(n)}:`).toString('base64')}`;
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
      return {
        durableEventsPerSec: (accepted * EVENTS_PER_BATCH) / ((tDurable - t0) / 1000),
        bad: r.non2xx + r.errors + r.timeouts,
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
    const m = (side: SideName): number => median(runs[side].map((x) => x.durableEventsPerSec));
    const bad = (side: SideName): number => runs[side].reduce((s, x) => s + x.bad, 0);
    return [
      row({
        scenario: 'segment',
        metric: 'durable events/s, /v1/batch (ours) vs Starfish push (reference), 100-event batches, 32 conns',
        unit: 'events/s',
        ours: m('segment'),
        reference: m('starfish'),
        ratioTarget: { op: '>=', value: 0.9 },
      }),
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
