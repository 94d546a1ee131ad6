/**
 * Scenario 2 — end to end on one machine. The reference server (bench/reference-server.ts) and
 * `npm start` (services/main.ts: the API and its encoder child process, a private AOF redis-server started
 * here, a filesystem store) each run as their own process and take the same autocannon load:
 * 32 connections, alternated ours/reference, at 100-, 1,000-, 10- and 1-event batches (the last
 * two are what browser and mobile SDKs flush). Measured per run: accepted pushes/s, durable
 * events/s (ours: until every accepted batch is a file, counted from the ledger's index of written
 * ids and confirmed by a listing; the reference encodes inside the push, so accepted = durable),
 * CPU per batch of each service (and of ours per thread: API event loop, encoder process's event
 * loop, the rest). At 100-event batches also: latency at saturation, bytes per event on disk,
 * DuckDB query time. At 100-, 1,000- and 10-event batches: latency and non-2xx at 60% of the
 * reference's saturation rate at that size.
 */
import { linkSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { PRIVATE_REDIS_ARGS } from '../../shared/redis/private-server.js';
import { unixSocketUrl } from '../../shared/redis/url.js';
import { freePort, startRedisServer } from '../../test/helpers/redis-server.js';
import { childNodePids } from '../../test/helpers/dist.js';
import {
  type Child,
  bodyFactory,
  coreCeilingEventsPerSec,
  loadTest,
  median,
  histogramTotals,
  pacedLoad,
  parquetFiles,
  probeRedis,
  redisCpuSeconds,
  redisForks,
  row,
  serviceCpuSeconds,
  serviceThreadCpu,
  sleep,
  spawnService,
  spawnTs,
  splitServiceCpu,
  waitForFiles,
  waitHttp,
  writtenIndexCounter,
} from '../lib.js';
import type { BenchContext, BenchRow } from '../types.js';

/** Batch sizes of the saturation runs; the first is the one the latency, bytes and DuckDB rows use. */
export const E2E_BATCH_SIZES = [100, 1000, 10, 1] as const;
const EVENTS_PER_BATCH = E2E_BATCH_SIZES[0];
const CONNECTIONS = 32;
/** Cores both sides share: the ceiling rows' count. */
const CORES = availableParallelism();
/** Durable events/s targets on the ratio at each size (issue 47). */
const DURABLE_TARGET: Partial<Record<number, number>> = { 100: 1.5, 1000: 2, 10: 1.2 };
/**
 * Sizes with a paced run at 60% of the reference's saturation rate at that size (issue 47 asks
 * for the push p99 there at each): the first is the one the rows without a size name report.
 */
const PACED_SIZES = [100, 1000, 10] as const;
/** Push p99 at 60% load, ratio target at each paced size (issue 47). */
const P99_TARGET = 0.5;

/**
 * Ours reaches that Redis over loopback TCP, like every earlier run of this scenario.
 * `BENCH_REDIS_SOCKET=1` uses its unix socket instead, as `npm start` does with the private
 * Redis it starts (shared/redis/private-server.ts); docs/decisions/0018-private-redis-settings.md
 * compares the two.
 */
const OVER_TCP = process.env.BENCH_REDIS_SOCKET !== '1';

interface Side {
  name: 'ours' | 'ref';
  url: string;
  dataDir: string;
  proc: Child;
}

interface RunResult {
  acceptedPerSec: number;
  durableEventsPerSec: number;
  p50: number;
  p99: number;
  bad: number;
  accepted: number;
  nodeCpuMsPerBatch: number;
  /** Ours only: the API's event loop, the encoder process's, the rest of both (libuv pools, GC). */
  threadsMsPerBatch: { main: number; encoder: number; other: number };
  redisCpuMsPerBatch: number;
  /** Forks of ours' Redis during the run (AOF rewrites); 0 for the reference. */
  redisForks: number;
  dir: string;
  /** Paced runs: what the failed requests got (`503`, `ECONNRESET`, …) with counts. */
  failures?: Record<string, number>;
  /** Ours' paced runs: each push step's mean time in ms (`ingest_push_step_duration_seconds`), in step order. */
  stepMeanMs?: [string, number][];
}

const STEP_METRIC = 'ingest_push_step_duration_seconds';

/** Each step's mean in ms between two readings of the step histogram, steps in the order first seen. */
function stepMeans(
  before: Map<string, { sum: number; count: number }>,
  after: Map<string, { sum: number; count: number }>,
): [string, number][] {
  const out: [string, number][] = [];
  for (const [step, a] of after) {
    const b = before.get(step) ?? { sum: 0, count: 0 };
    if (a.count > b.count) out.push([step, ((a.sum - b.sum) / (a.count - b.count)) * 1000]);
  }
  return out;
}

/** ` (ours: 503×2; ref: ECONNRESET×1)`: what the failed paced requests got, or '' when none failed. */
function failureSummary(runs: Record<Side['name'], RunResult[]>): string {
  const parts: string[] = [];
  for (const name of ['ours', 'ref'] as const) {
    const sum: Record<string, number> = {};
    for (const r of runs[name]) for (const [k, n] of Object.entries(r.failures ?? {})) sum[k] = (sum[k] ?? 0) + n;
    const text = Object.entries(sum)
      .map(([k, n]) => `${k}×${n}`)
      .join(', ');
    if (text) parts.push(`${name}: ${text}`);
  }
  return parts.length ? ` (${parts.join('; ')})` : '';
}

export async function run(ctx: BenchContext): Promise<BenchRow[]> {
  const smoke = ctx.smoke;
  const satSec = smoke ? 1 : 12;
  const rateSec = smoke ? 1 : 10;
  const rounds = smoke ? 1 : 2;
  const tmp = mkdtempSync(join(tmpdir(), 'ingest-bench-e2e-'));
  const socket = join(tmp, 'redis.sock');
  const redisServer = await startRedisServer({
    args: [...PRIVATE_REDIS_ARGS, ...(OVER_TCP ? [] : ['--unixsocket', socket, '--unixsocketperm', '700'])],
  });
  const redis = probeRedis(redisServer.url);
  const procs: Child[] = [];
  try {
    const oursDir = join(tmp, 'ours');
    const refDir = join(tmp, 'ref');
    const [oursPort, refPort] = [await freePort(), await freePort()];
    const ours: Side = {
      name: 'ours',
      url: `http://127.0.0.1:${oursPort}`,
      dataDir: oursDir,
      // LOG_LEVEL as `npm start` has it unless the caller overrides, so the bench measures the default.
      proc: await spawnService('services/main', {
        PORT: String(oursPort),
        HOST: '127.0.0.1',
        REDIS_URL: OVER_TCP ? redisServer.url : unixSocketUrl(socket),
        DATA_DIR: oursDir,
        QUEUE_NAME: 'bench-e2e',
        ...(process.env.BENCH_LOG_LEVEL ? { LOG_LEVEL: process.env.BENCH_LOG_LEVEL } : {}),
      }),
    };
    const ref: Side = {
      name: 'ref',
      url: `http://127.0.0.1:${refPort}`,
      dataDir: refDir,
      proc: spawnTs('bench/reference-server.ts', { PORT: String(refPort), DATA_DIR: refDir }),
    };
    procs.push(ours.proc, ref.proc);
    ctx.progress(`e2e: starting both servers (ours reaches Redis over ${OVER_TCP ? 'loopback TCP' : 'a unix socket'})`);
    await Promise.all([waitHttp(`${ours.url}/healthz`, ours.proc), waitHttp(`${ref.url}/healthz`, ref.proc)]);

    let runNo = 0;
    const oneRun = async (
      side: Side,
      label: string,
      size: number,
      durationSec: number,
      overallRate?: number,
    ): Promise<RunResult> => {
      const app = `${label}-${size}-${runNo++}`;
      const dir = join(side.dataDir, 'events', app);
      const body = bodyFactory(size);
      // Ours: the API's process and its encoder processes (npm start forks them); ref: one process.
      const pids = [side.proc.pid, ...(side.name === 'ours' ? childNodePids(side.proc.pid) : [])];
      const cpu0 = serviceCpuSeconds(pids);
      const threads0 = serviceThreadCpu(pids);
      const rcpu0 = side.name === 'ours' ? await redisCpuSeconds(redis) : 0;
      const forks0 = side.name === 'ours' ? await redisForks(redis) : 0;
      const steps = side.name === 'ours' && overallRate !== undefined;
      const steps0 = steps ? await histogramTotals(`${side.url}/metrics`, STEP_METRIC, 'step') : undefined;
      const t0 = performance.now();
      const path = (): string => `/push/events/${app}/x`;
      // Saturation: autocannon, 32 connections back to back. A fixed rate: an open-loop paced load
      // (bench/lib.ts pacedLoad; autocannon's overallRate sends each second's quota as a burst).
      const result =
        overallRate === undefined
          ? await loadTest({ url: side.url, path, body, connections: CONNECTIONS, durationSec }).then((r) => ({
              accepted: r['2xx'],
              p50: r.latency.p50,
              p99: r.latency.p99,
              bad: r.non2xx + r.errors + r.timeouts,
              failures: undefined,
            }))
          : await pacedLoad({ url: side.url, path, body, rate: overallRate, durationSec }).then((r) => ({
              accepted: r.ok,
              p50: r.latency.p50,
              p99: r.latency.p99,
              bad: r.non2xx + r.errors + r.skipped,
              failures: { ...r.failures, ...(r.skipped ? { 'not sent': r.skipped } : {}) },
            }));
      const tLoad = performance.now();
      const steps1 = steps0 ? await histogramTotals(`${side.url}/metrics`, STEP_METRIC, 'step') : undefined;
      const accepted = result.accepted;
      let tDurable = tLoad;
      if (side.name === 'ours') {
        // Counted from the service's index of written ids, confirmed by one listing of the folder
        // (listing it every 50 ms cost a fifth of a core during the drain:
        // docs/decisions/0003-written-index-for-list.md).
        const count = writtenIndexCounter(redis, `events/${app}/`);
        tDurable = await waitForFiles(
          dir,
          accepted,
          180_000,
          (have) => ctx.progress(`e2e: ${side.name} ${label} ${size}-event: draining, ${have}/${accepted} files`),
          { count },
        );
      }
      const cpu = serviceCpuSeconds(pids) - cpu0;
      const threads = splitServiceCpu(pids, threads0, serviceThreadCpu(pids), cpu);
      const rcpu = side.name === 'ours' ? (await redisCpuSeconds(redis)) - rcpu0 : 0;
      const forks = side.name === 'ours' ? (await redisForks(redis)) - forks0 : 0;
      const perBatch = (seconds: number): number => (seconds * 1000) / Math.max(1, accepted);
      return {
        acceptedPerSec: accepted / ((tLoad - t0) / 1000),
        durableEventsPerSec: (accepted * size) / ((tDurable - t0) / 1000),
        p50: result.p50,
        p99: result.p99,
        bad: result.bad,
        accepted,
        nodeCpuMsPerBatch: perBatch(cpu),
        threadsMsPerBatch: {
          main: perBatch(threads.main),
          encoder: perBatch(threads.encoder),
          other: perBatch(threads.other),
        },
        redisCpuMsPerBatch: perBatch(rcpu),
        redisForks: forks,
        dir,
        ...(result.failures ? { failures: result.failures } : {}),
        ...(steps0 && steps1 ? { stepMeanMs: stepMeans(steps0, steps1) } : {}),
      };
    };

    // Warm-up: JIT, connection pools, wasm; not measured.
    for (const side of [ref, ours]) {
      ctx.progress(`e2e: warm-up ${side.name}`);
      await oneRun(side, 'warmup', EVENTS_PER_BATCH, smoke ? 0.5 : 2);
    }

    const satBySize = new Map<number, Record<Side['name'], RunResult[]>>();
    for (const size of E2E_BATCH_SIZES) {
      const runs: Record<Side['name'], RunResult[]> = { ours: [], ref: [] };
      satBySize.set(size, runs);
      // --smoke only proves the small sizes run: half a second each keeps `npm test` short.
      const seconds = smoke && size !== EVENTS_PER_BATCH ? 0.5 : satSec;
      for (let r = 0; r < rounds; r++) {
        for (const side of r % 2 === 0 ? [ref, ours] : [ours, ref]) {
          ctx.progress(`e2e: ${size}-event batches, saturation round ${r + 1}/${rounds}, ${side.name} (${seconds} s)`);
          runs[side.name].push(await oneRun(side, 'sat', size, seconds));
          await sleep(smoke ? 100 : 1000);
        }
      }
    }
    const sat = satBySize.get(EVENTS_PER_BATCH) as Record<Side['name'], RunResult[]>;
    // Paced runs at each size, at 60% of the reference's median saturation rate at that size;
    // --smoke paces only the first size.
    const pacedBySize = new Map<number, { offered: number; runs: Record<Side['name'], RunResult[]> }>();
    for (const size of smoke ? PACED_SIZES.slice(0, 1) : PACED_SIZES) {
      const satRuns = satBySize.get(size) as Record<Side['name'], RunResult[]>;
      const offered = Math.max(1, Math.round(median(satRuns.ref.map((x) => x.acceptedPerSec)) * 0.6));
      const runs: Record<Side['name'], RunResult[]> = { ours: [], ref: [] };
      pacedBySize.set(size, { offered, runs });
      for (let r = 0; r < rounds; r++) {
        for (const side of r % 2 === 0 ? [ours, ref] : [ref, ours]) {
          const what = `e2e: ${size}-event batches, fixed ${offered} pushes/s round ${r + 1}/${rounds}, ${side.name}`;
          ctx.progress(`${what} (${rateSec} s)`);
          const run = await oneRun(side, 'fixed', size, rateSec, offered);
          runs[side.name].push(run);
          // Ours' Redis forks once per AOF rewrite; a rewrite during a paced round competes for the cores.
          const forks = side.name === 'ours' ? `, Redis forks (AOF rewrites) ${run.redisForks}` : '';
          // Where ours' push time went: each step's mean (the API's own histogram, read before and after).
          const steps = run.stepMeanMs?.length
            ? `; steps (mean ms): ${run.stepMeanMs.map(([s, ms]) => `${s} ${ms.toFixed(2)}`).join(', ')}`
            : '';
          ctx.progress(`${what}: p50 ${run.p50.toFixed(2)} ms, p99 ${run.p99.toFixed(1)} ms${forks}${steps}`, {
            keep: true,
          });
          await sleep(smoke ? 100 : 1000);
        }
      }
    }
    const { offered, runs: fixed } = pacedBySize.get(EVENTS_PER_BATCH) as {
      offered: number;
      runs: Record<Side['name'], RunResult[]>;
    };

    // The fair size comparison (issue 15): the reference with `properties`/`context` kept as their
    // JSON text, so its files hold what ours hold. A separate process, used for bytes only.
    const refTextPort = await freePort();
    const refText: Side = {
      name: 'ref',
      url: `http://127.0.0.1:${refTextPort}`,
      dataDir: join(tmp, 'ref-text'),
      proc: spawnTs('bench/reference-server.ts', {
        PORT: String(refTextPort),
        DATA_DIR: join(tmp, 'ref-text'),
        REF_OBJECTS_AS_TEXT: '1',
      }),
    };
    procs.push(refText.proc);
    ctx.progress('e2e: reference keeping properties/context as text, for bytes on disk');
    await waitHttp(`${refText.url}/healthz`, refText.proc);
    const refTextRun = await oneRun(refText, 'text', EVENTS_PER_BATCH, smoke ? 0.5 : 3);
    const refTextFiles = parquetFiles(refTextRun.dir);
    await refText.proc.stop();

    // On-disk size and DuckDB time over equal numbers of files (and so of events).
    const oursFiles = parquetFiles(sat.ours[0].dir);
    const refFiles = parquetFiles(sat.ref[0].dir);
    const k = Math.min(oursFiles.files, refFiles.files, smoke ? 200 : 3000);
    const duckDirs = { ours: join(tmp, 'duck-ours'), ref: join(tmp, 'duck-ref') };
    for (const [name, files] of [
      ['ours', oursFiles],
      ['ref', refFiles],
    ] as const) {
      mkdirSync(duckDirs[name], { recursive: true });
      for (const p of files.paths.slice(0, k)) linkSync(p, join(duckDirs[name], basename(p)));
    }
    const duck = await DuckDBInstance.create(':memory:');
    const query = async (dir: string): Promise<number> => {
      const conn = await duck.connect();
      try {
        const t0 = performance.now();
        const reader = await conn.runAndReadAll(
          `SELECT event_type, count(*) AS n FROM read_parquet('${join(dir, '**', '*.parquet').replaceAll("'", "''")}') GROUP BY 1`,
        );
        const total = reader.getRowObjectsJson().reduce((s, r) => s + Number(r.n), 0);
        if (total !== k * EVENTS_PER_BATCH)
          throw new Error(`DuckDB counted ${total} events in ${dir}, expected ${k * EVENTS_PER_BATCH}`);
        return performance.now() - t0;
      } finally {
        conn.closeSync();
      }
    };
    {
      // The fair variant must really hold the objects' text, or its size row compares nothing.
      const conn = await duck.connect();
      try {
        const file = refTextFiles.paths[0];
        if (!file) throw new Error('the reference keeping text wrote no file');
        const r = await conn.runAndReadAll(
          `SELECT count(*) FILTER (WHERE properties LIKE '{%') AS text, count(*) AS n FROM read_parquet('${file.replaceAll("'", "''")}')`,
        );
        const [c] = r.getRowObjectsJson() as { text: string | number; n: string | number }[];
        if (!c || Number(c.n) === 0 || Number(c.text) !== Number(c.n))
          throw new Error(
            `the reference keeping text stored properties as text in ${String(c?.text)} of ${String(c?.n)} rows`,
          );
      } finally {
        conn.closeSync();
      }
    }
    const duckMs: Record<Side['name'], number[]> = { ours: [], ref: [] };
    const duckRounds = smoke ? 2 : 7;
    await query(duckDirs.ours);
    await query(duckDirs.ref);
    for (let r = 0; r < duckRounds; r++) {
      ctx.progress(`e2e: DuckDB query over ${k} files each, round ${r + 1}/${duckRounds}`);
      for (const name of r % 2 === 0 ? (['ours', 'ref'] as const) : (['ref', 'ours'] as const))
        duckMs[name].push(await query(duckDirs[name]));
    }

    const m = (xs: RunResult[], f: (x: RunResult) => number): number => median(xs.map(f));
    const total = (xs: RunResult[]): number => xs.reduce((s, x) => s + x.bad, 0);
    const rows: BenchRow[] = [
      row({
        scenario: 'e2e',
        metric: 'accepted pushes/s at saturation (32 conns, 100-event batches)',
        unit: 'pushes/s',
        ours: m(sat.ours, (x) => x.acceptedPerSec),
        reference: m(sat.ref, (x) => x.acceptedPerSec),
      }),
      row({
        scenario: 'e2e',
        metric: 'durable events/s at saturation',
        unit: 'events/s',
        ours: m(sat.ours, (x) => x.durableEventsPerSec),
        reference: m(sat.ref, (x) => x.durableEventsPerSec),
        ratioTarget: { op: '>=', value: DURABLE_TARGET[EVENTS_PER_BATCH] ?? 1 },
      }),
      row({
        scenario: 'e2e',
        metric: 'push p50 latency at saturation',
        unit: 'ms',
        ours: m(sat.ours, (x) => x.p50),
        reference: m(sat.ref, (x) => x.p50),
      }),
      row({
        scenario: 'e2e',
        metric: 'push p99 latency at saturation',
        unit: 'ms',
        ours: m(sat.ours, (x) => x.p99),
        reference: m(sat.ref, (x) => x.p99),
      }),
      row({
        scenario: 'e2e',
        metric: 'non-2xx/errors at saturation',
        unit: 'count',
        ours: total(sat.ours),
        reference: total(sat.ref),
      }),
      row({
        scenario: 'e2e',
        metric: `offered load (60% of ref saturation; open loop, evenly paced)`,
        unit: 'pushes/s',
        ours: offered,
      }),
      row({
        scenario: 'e2e',
        metric: 'push p50 latency at 60% load',
        unit: 'ms',
        ours: m(fixed.ours, (x) => x.p50),
        reference: m(fixed.ref, (x) => x.p50),
      }),
      row({
        scenario: 'e2e',
        metric: 'push p99 latency at 60% load',
        unit: 'ms',
        ours: m(fixed.ours, (x) => x.p99),
        reference: m(fixed.ref, (x) => x.p99),
        ratioTarget: { op: '<=', value: P99_TARGET },
      }),
      {
        ...row({
          scenario: 'e2e',
          metric: `non-2xx/errors at 60% load${failureSummary(fixed)}`,
          unit: 'count',
          ours: total(fixed.ours),
          reference: total(fixed.ref),
        }),
        target: 'ours = 0',
        pass: total(fixed.ours) === 0,
      },
      row({
        scenario: 'e2e',
        metric: 'bytes per event on disk (reference keeping properties/context as JSON text: same information)',
        unit: 'B',
        ours: oursFiles.bytes / (oursFiles.files * EVENTS_PER_BATCH),
        reference: refTextFiles.bytes / (refTextFiles.files * EVENTS_PER_BATCH),
        ratioTarget: { op: '<=', value: 0.35 },
      }),
      row({
        scenario: 'e2e',
        metric: 'bytes per event on disk (reference as shipped: properties/context stored as "[object Object]")',
        unit: 'B',
        ours: oursFiles.bytes / (oursFiles.files * EVENTS_PER_BATCH),
        reference: refFiles.bytes / (refFiles.files * EVENTS_PER_BATCH),
      }),
      row({
        scenario: 'e2e',
        metric: `DuckDB GROUP BY event_type over ${k * EVENTS_PER_BATCH} events (${k} files)`,
        unit: 'ms',
        ours: median(duckMs.ours),
        reference: median(duckMs.ref),
        ratioTarget: { op: '<=', value: 0.7 },
      }),
    ];
    for (const size of E2E_BATCH_SIZES) {
      const runs = satBySize.get(size) as Record<Side['name'], RunResult[]>;
      const at = `at saturation, ${size}-event batches`;
      const target = DURABLE_TARGET[size];
      const all = (x: RunResult): number => x.nodeCpuMsPerBatch + x.redisCpuMsPerBatch;
      const paced = pacedBySize.get(size);
      if (size !== EVENTS_PER_BATCH && paced) {
        rows.push(
          row({
            scenario: 'e2e',
            metric: `push p99 latency at 60% load (${paced.offered} pushes/s), ${size}-event batches`,
            unit: 'ms',
            ours: m(paced.runs.ours, (x) => x.p99),
            reference: m(paced.runs.ref, (x) => x.p99),
            ratioTarget: { op: '<=', value: P99_TARGET },
          }),
          {
            ...row({
              scenario: 'e2e',
              metric: `non-2xx/errors at 60% load, ${size}-event batches${failureSummary(paced.runs)}`,
              unit: 'count',
              ours: total(paced.runs.ours),
              reference: total(paced.runs.ref),
            }),
            target: 'ours = 0',
            pass: total(paced.runs.ours) === 0,
          },
        );
      }
      // At a steady 60% load nothing shares a wake-up or a group, so a batch costs more than at
      // saturation on both sides; the push tail there is the wait for a core (docs/performance.md).
      if (paced)
        rows.push(
          row({
            scenario: 'e2e',
            metric: `CPU per batch at 60% load (${paced.offered} pushes/s), ${size}-event batches: all processes (ours: server + Redis)`,
            unit: 'ms',
            ours: m(paced.runs.ours, all),
            reference: m(paced.runs.ref, all),
          }),
        );
      if (size !== EVENTS_PER_BATCH) {
        rows.push(
          row({
            scenario: 'e2e',
            metric: `accepted pushes/s ${at}`,
            unit: 'pushes/s',
            ours: m(runs.ours, (x) => x.acceptedPerSec),
            reference: m(runs.ref, (x) => x.acceptedPerSec),
          }),
          row({
            scenario: 'e2e',
            metric: `durable events/s ${at}`,
            unit: 'events/s',
            ours: m(runs.ours, (x) => x.durableEventsPerSec),
            reference: m(runs.ref, (x) => x.durableEventsPerSec),
            ...(target === undefined ? {} : { ratioTarget: { op: '>=' as const, value: target } }),
          }),
          row({
            scenario: 'e2e',
            metric: `non-2xx/errors ${at}`,
            unit: 'count',
            ours: total(runs.ours),
            reference: total(runs.ref),
          }),
        );
      }
      rows.push(
        row({
          scenario: 'e2e',
          metric: `CPU per batch ${at}: server processes (ours: API + encoder process; ref: whole push)`,
          unit: 'ms',
          ours: m(runs.ours, (x) => x.nodeCpuMsPerBatch),
          reference: m(runs.ref, (x) => x.nodeCpuMsPerBatch),
        }),
        row({
          scenario: 'e2e',
          metric: `CPU per batch ${at}: ours, API thread (HTTP, validate, mint, enqueue)`,
          unit: 'ms',
          ours: m(runs.ours, (x) => x.threadsMsPerBatch.main),
        }),
        row({
          scenario: 'e2e',
          metric: `CPU per batch ${at}: ours, encoder process's event loop (dequeue, encode, write, release)`,
          unit: 'ms',
          ours: m(runs.ours, (x) => x.threadsMsPerBatch.encoder),
        }),
        row({
          scenario: 'e2e',
          metric: `CPU per batch ${at}: ours, other threads of both (libuv pools: fs, zlib; V8 GC/JIT; the API's encode thread)`,
          unit: 'ms',
          ours: m(runs.ours, (x) => x.threadsMsPerBatch.other),
        }),
        row({
          scenario: 'e2e',
          metric: `CPU per batch ${at}: Redis${OVER_TCP ? '' : ' (reached over its unix socket)'}`,
          unit: 'ms',
          ours: m(runs.ours, (x) => x.redisCpuMsPerBatch),
          reference: 0,
        }),
        row({
          scenario: 'e2e',
          metric: `CPU per batch ${at}: all processes (ours: server + Redis)`,
          unit: 'ms',
          ours: m(runs.ours, all),
          reference: m(runs.ref, all),
        }),
        // Ours at that CPU per batch with every core busy throughout, against the reference's
        // measured rate: a durable-rate target above this ratio needs a cheaper batch.
        row({
          scenario: 'e2e',
          metric: `ceiling ${at}: durable events/s ${CORES} cores give at ours' CPU per batch (all processes), against the reference's durable rate`,
          unit: 'events/s',
          ours: coreCeilingEventsPerSec(CORES, m(runs.ours, all), size),
          reference: m(runs.ref, (x) => x.durableEventsPerSec),
        }),
      );
    }
    return rows;
  } finally {
    ctx.progress('e2e: stopping servers');
    await Promise.all(procs.map((p) => p.stop()));
    redis.disconnect();
    await redisServer.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}
