/**
 * Shared plumbing for the bench scenarios: child processes, CPU accounting, load generation,
 * file counting. Everything talks to 127.0.0.1 only, and every wait is bounded.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { type FSWatcher, existsSync, readFileSync, readdirSync, statSync, watch } from 'node:fs';
import http from 'node:http';
import { join, resolve } from 'node:path';
import autocannon, { type AutocannonResult } from 'autocannon';
import { Redis } from 'ioredis';
import { distEntry, startFlags } from '../test/helpers/dist.js';
import { sampleEvent } from '../test/helpers/events.js';
import type { BenchRow } from './types.js';

export const ROOT = resolve(import.meta.dirname, '..');

/** Median of a non-empty list (mean of the middle two for even lengths). */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A row with its ratio and pass/fail filled in from a `>=`/`<=` target on the ratio. */
/**
 * The durable events/s a machine's cores give when every one of them is busy for the whole run
 * at a measured CPU per batch: the most any scheduling of the same work could reach. Against the
 * reference's rate it says whether a throughput target is reachable without making a batch
 * cheaper (docs/performance.md, issue 47). NaN when the CPU per batch is not a positive number.
 */
export function coreCeilingEventsPerSec(cores: number, cpuMsPerBatch: number, eventsPerBatch: number): number {
  if (!(cpuMsPerBatch > 0) || !(cores > 0)) return Number.NaN;
  return ((cores * 1000) / cpuMsPerBatch) * eventsPerBatch;
}

export function row(
  r: Omit<BenchRow, 'ratio' | 'pass'> & { ratioTarget?: { op: '>=' | '<='; value: number } },
): BenchRow {
  const { ratioTarget, ...rest } = r;
  const out: BenchRow = { ...rest };
  if (r.reference !== undefined && Number.isFinite(r.reference) && r.reference !== 0) out.ratio = r.ours / r.reference;
  if (ratioTarget) {
    out.target = `${ratioTarget.op} ${ratioTarget.value}×`;
    out.pass =
      out.ratio !== undefined &&
      (ratioTarget.op === '>=' ? out.ratio >= ratioTarget.value : out.ratio <= ratioTarget.value);
  }
  return out;
}

export interface Child {
  child: ChildProcess;
  pid: number;
  output(): string;
  /** SIGTERM, then SIGKILL after `ms`; resolves when the process is gone. Idempotent. */
  stop(ms?: number): Promise<void>;
}

/**
 * Runs one of our services the way `npm start` does: compiled JavaScript with plain `node` and
 * the node flags of the package.json script that runs that entry, no tsx (`services/main` →
 * `node --min-semi-space-size=16 <build>/services/main.js`). The build is the tests' own
 * (`test/helpers/dist.ts`: `npm run build`'s script into `.tmp/test-dist`, redone only when a
 * source changed), so a bench run never rewrites the `dist/` a running `npm start` uses.
 */
export async function spawnService(
  entry: string,
  env: Record<string, string>,
  /** Node flags added to the script's (e.g. `--cpu-prof`); its child processes inherit them. */
  extraFlags: readonly string[] = [],
): Promise<Child> {
  const compiled = await distEntry(`${entry}.js`);
  return spawnNode([...startFlags(compiled), ...extraFlags, compiled], env);
}

/**
 * Runs a TypeScript entry point as `node --import tsx <entry>` (one process, so its pid is the
 * one doing the work and /proc CPU figures are its own, unlike the `tsx` CLI which forks).
 * Output is kept (bounded) for error messages only; it is never printed while the bench runs.
 */
export function spawnTs(entry: string, env: Record<string, string>): Child {
  return spawnNode(['--import', 'tsx', entry], env);
}

function spawnNode(args: string[], env: Record<string, string>): Child {
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const keep = (d: Buffer): void => {
    out = (out + d.toString()).slice(-20_000);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  let stopping: Promise<void> | undefined;
  return {
    child,
    pid: child.pid ?? -1,
    output: () => out,
    stop(ms = 15_000) {
      stopping ??= (async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), ms);
        await exited;
        clearTimeout(t);
      })();
      return stopping;
    },
  };
}

/** Polls `url` until it answers 200, failing early if `proc` exits. */
export async function waitHttp(url: string, proc?: Child, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (proc && proc.child.exitCode !== null)
      throw new Error(`process exited (${proc.child.exitCode}) before ${url} answered:\n${proc.output().slice(-3000)}`);
    try {
      const r = await fetch(url);
      await r.arrayBuffer();
      if (r.ok) return;
    } catch {
      /* not up yet */
    }
    await sleep(100);
  }
  throw new Error(`${url} did not answer within ${ms} ms${proc ? `:\n${proc.output().slice(-3000)}` : ''}`);
}

const CLK_TCK = 100;

/** User + system CPU seconds a process has used so far (Linux /proc; NaN elsewhere). */
export function processCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th fields.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
  } catch {
    return Number.NaN;
  }
}

/** One thread's CPU so far: user + system seconds and its niceness (Linux /proc). */
export interface ThreadCpu {
  cpu: number;
  nice: number;
}

/**
 * CPU seconds of every thread of `pid`, by thread id (/proc/<pid>/task/<tid>/stat; empty
 * elsewhere). A thread that exited between two samples drops out, so callers sum the deltas of
 * the threads present in both and report the rest of the process total as "other".
 */
export function threadCpuSeconds(pid: number): Map<number, ThreadCpu> {
  const out = new Map<number, ThreadCpu>();
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      // utime, stime and nice are the 14th, 15th and 19th fields.
      out.set(Number(tid), { cpu: (Number(fields[11]) + Number(fields[12])) / CLK_TCK, nice: Number(fields[16]) });
    } catch {
      /* the thread ended while we read */
    }
  }
  return out;
}

/** CPU seconds of a service: `pid` and the Node child processes it had when `pids` was taken. */
export function serviceCpuSeconds(pids: readonly number[]): number {
  return pids.reduce((sum, p) => sum + (processCpuSeconds(p) || 0), 0);
}

/** Every thread's CPU of `pids` (see threadCpuSeconds), by process. */
export function serviceThreadCpu(pids: readonly number[]): Map<number, Map<number, ThreadCpu>> {
  return new Map(pids.map((p) => [p, threadCpuSeconds(p)]));
}

/**
 * CPU seconds per role of `npm start` between two samples (`pids[0]` the API's process, the rest
 * its encoder processes): `main` is the API's event loop (the thread whose id is the API's pid),
 * `encoder` the encoder processes' event loops (each the thread whose id is its pid), `other` the
 * rest of the total: both processes' libuv pools (fs calls, zlib, sha256), V8's GC and compiler
 * threads, the API's encode thread, and threads that came and went between the samples.
 */
export function splitServiceCpu(
  pids: readonly number[],
  before: Map<number, Map<number, ThreadCpu>>,
  after: Map<number, Map<number, ThreadCpu>>,
  total: number,
): { main: number; encoder: number; other: number } {
  const loop = (p: number): number => (after.get(p)?.get(p)?.cpu ?? 0) - (before.get(p)?.get(p)?.cpu ?? 0);
  const [api, ...encoders] = pids;
  const main = api === undefined ? 0 : loop(api);
  const encoder = encoders.reduce((sum, p) => sum + loop(p), 0);
  return { main, encoder, other: Math.max(0, total - main - encoder) };
}

/** Redis server CPU seconds (user + sys, main thread and helpers) from INFO cpu. */
export async function redisCpuSeconds(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const f = (name: string): number => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? Number.NaN);
  return f('used_cpu_user') + f('used_cpu_sys');
}

/** Redis `total_forks` (INFO stats): each AOF rewrite (or RDB save) forks the server once. */
export async function redisForks(redis: Redis): Promise<number> {
  return Number(/^total_forks:(\d+)/m.exec(await redis.info('stats'))?.[1] ?? Number.NaN);
}

/** Redis `used_memory` in bytes. */
export async function redisUsedMemory(redis: Redis): Promise<number> {
  const info = await redis.info('memory');
  return Number(/^used_memory:(\d+)/m.exec(info)?.[1] ?? Number.NaN);
}

/** Number and total size of finished `.parquet` files directly under `dir` (temp files excluded). */
export function parquetFiles(dir: string): { files: number; bytes: number; paths: string[] } {
  if (!existsSync(dir)) return { files: 0, bytes: 0, paths: [] };
  const paths = readdirSync(dir)
    .filter((n) => n.endsWith('.parquet') && !n.startsWith('.'))
    .sort()
    .map((n) => join(dir, n));
  let bytes = 0;
  for (const p of paths) bytes += statSync(p).size;
  return { files: paths.length, bytes, paths };
}

/** Count of finished `.parquet` files under `dir` (cheap: no stat). */
export function countParquet(dir: string): number {
  if (!existsSync(dir)) return 0;
  let n = 0;
  for (const name of readdirSync(dir)) if (isParquetName(name)) n++;
  return n;
}

/** A finished Parquet file's name (temp files and sidecars start with a dot). */
const isParquetName = (name: string): boolean => name.endsWith('.parquet') && !name.startsWith('.');

/** How often {@link waitForFiles} re-reads the whole folder (progress, and a safety net for the watch). */
const FILES_RECOUNT_MS = 1000;
/** How often {@link waitForFiles} asks a `count` callback, and lists the folder meanwhile. */
const COUNT_POLL_MS = 50;
const COUNT_RELIST_MS = 5000;

/**
 * Waits until `dir` holds at least `want` finished Parquet files; resolves with the time the
 * count was first seen complete (ms, performance.now) or rejects after `ms`.
 *
 * The wait must not take CPU from the drain it times: a listing of 20,000 names costs this
 * process about 17 ms of CPU on the bench machine, so the 50 ms poll this replaced took a fifth
 * of a core from the drain (docs/decisions/0003-written-index-for-list.md). So, from cheapest:
 * - with `count` (e.g. a `ZCARD` of the service's index of written ids), that is asked every
 *   50 ms, and one listing confirms it at the end;
 * - otherwise the folder's renames are followed through `fs.watch` (inotify; about 10 µs per
 *   event here, four events per file) and one listing confirms the watch's count.
 * A watched folder is also listed once a second (progress, and in case the kernel's event
 * queue overflowed); a counted one every 5 s (in case the counter falls behind).
 */
export async function waitForFiles(
  dir: string,
  want: number,
  ms: number,
  onProgress?: (have: number) => void,
  opts: { count?: () => Promise<number> } = {},
): Promise<number> {
  if (opts.count) return waitForCount(dir, want, ms, opts.count, onProgress);
  const deadline = Date.now() + ms;
  const seen = new Set<string>();
  let watcher: FSWatcher | undefined;
  let wake: (() => void) | undefined;
  let reachedAt: number | undefined;
  /** Cleared if a listing ever disagrees with the watch: from then on only the listing counts. */
  let trustWatch = true;
  const startWatch = (): void => {
    if (watcher || !existsSync(dir)) return;
    watcher = watch(dir, (event, name) => {
      if (event !== 'rename' || !name || !isParquetName(name)) return;
      seen.add(name);
      if (trustWatch && reachedAt === undefined && seen.size >= want) {
        reachedAt = performance.now();
        wake?.();
      }
    });
    watcher.on('error', () => {
      watcher?.close();
      watcher = undefined;
    });
  };
  try {
    for (;;) {
      startWatch();
      // A listing after the watch began: it holds the files renamed in before the watch did.
      const before = reachedAt;
      let have = 0;
      if (existsSync(dir)) {
        for (const name of readdirSync(dir)) {
          if (!isParquetName(name)) continue;
          have++;
          seen.add(name);
        }
      }
      if (have >= want) return before ?? performance.now();
      if (before !== undefined) trustWatch = false;
      reachedAt = undefined;
      onProgress?.(have);
      if (Date.now() > deadline) throw new Error(`only ${have}/${want} files in ${dir} after ${ms} ms`);
      // A folder not made yet is polled quickly (listing it is free); a watched one once a second,
      // or at once when the watch has counted `want` files.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(
          resolve,
          Math.max(0, Math.min(watcher ? FILES_RECOUNT_MS : 50, deadline + 1 - Date.now())),
        );
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
        if (trustWatch && seen.size >= want) {
          reachedAt ??= performance.now();
          wake();
        }
      });
      wake = undefined;
    }
  } finally {
    watcher?.close();
  }
}

/**
 * {@link waitForFiles} with a cheap counter; a listing has the last word. The folder is listed
 * only when the counter has reached `want`, and every 5 s in case the counter falls behind.
 */
async function waitForCount(
  dir: string,
  want: number,
  ms: number,
  count: () => Promise<number>,
  onProgress?: (have: number) => void,
): Promise<number> {
  const deadline = Date.now() + ms;
  let listedAt = performance.now();
  /** Cleared if a listing ever has fewer files than the counter said: then only listings count. */
  let trustCount = true;
  for (;;) {
    const n = await count();
    const at = performance.now();
    const counted = trustCount && n >= want;
    if (counted || at - listedAt >= COUNT_RELIST_MS) {
      listedAt = at;
      const have = countParquet(dir);
      if (have >= want) return counted ? at : performance.now();
      if (counted) trustCount = false;
    }
    onProgress?.(n);
    if (Date.now() > deadline)
      throw new Error(`only ${countParquet(dir)}/${want} files in ${dir} after ${ms} ms (the counter said ${n})`);
    await sleep(COUNT_POLL_MS);
  }
}

/**
 * Push bodies that are all different (the service deduplicates byte-identical bodies within its
 * idempotency window, and the bench must not measure that shortcut): one base batch per slot,
 * with the first event's message_id replaced by a fresh sequence number per request.
 */
export function bodyFactory(eventsPerBatch: number, distinct = 16): () => string {
  const MARK = '__bench_seq__';
  const parts = Array.from({ length: distinct }, () => {
    // One device sends a batch, so one distinct_id per batch (as an SDK's batch has).
    const device = randomUUID();
    const events = Array.from({ length: eventsPerBatch }, (_, i) => sampleEvent(i, device));
    events[0].message_id = MARK;
    const text = JSON.stringify({ data: { events }, baseHash: null });
    const at = text.indexOf(MARK);
    return [text.slice(0, at), text.slice(at + MARK.length)] as const;
  });
  const run = randomUUID().slice(0, 8);
  let seq = 0;
  return () => {
    const [a, b] = parts[seq % parts.length];
    return `${a}${run}-${seq++}${b}`;
  };
}

export interface LoadOptions {
  url: string;
  path: () => string;
  body: () => string;
  connections: number;
  durationSec: number;
  /** Fixed offered load in requests/s across all connections; omit for saturation. */
  overallRate?: number;
  /** More request headers (a Segment write key's Authorization). */
  headers?: Record<string, string>;
}

/** One autocannon run of JSON pushes; each request gets a fresh body and path. */
export function loadTest(o: LoadOptions): Promise<AutocannonResult> {
  return new Promise((resolvePromise, reject) => {
    autocannon(
      {
        url: o.url,
        connections: o.connections,
        duration: o.durationSec,
        ...(o.overallRate !== undefined ? { overallRate: o.overallRate } : {}),
        timeout: 30,
        requests: [
          {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...o.headers },
            setupRequest: (req) => ({ ...req, path: o.path(), body: o.body() }),
          },
        ],
      },
      (err, result) => (err ? reject(err) : resolvePromise(result)),
    );
  });
}

/** What {@link pacedLoad} measured: latencies in ms from each request's scheduled start. */
export interface PacedResult {
  sent: number;
  ok: number;
  /** Answers other than 2xx. */
  non2xx: number;
  /** Connection errors and requests past the timeout. */
  errors: number;
  /** Requests never sent because `maxInFlight` were already waiting (the server fell behind). */
  skipped: number;
  /** What the non-2xx answers and errors were: `503`, `ECONNRESET`, `timeout`, … with counts. */
  failures: Record<string, number>;
  latency: { p50: number; p99: number; max: number };
}

/**
 * An open-loop load at a fixed rate: request i is due at start + i / rate, whatever happened to
 * the ones before it, and its latency runs from that due time to the end of its answer (so a
 * generator that falls behind adds to the latency instead of hiding it). Keep-alive connections,
 * as many as are in flight (at most `maxInFlight`; a request due beyond that is skipped and
 * counted). autocannon's `overallRate` is not this: each connection sends its per-second quota
 * back to back at the start of every second, so its percentiles measure a burst.
 */
export async function pacedLoad(o: {
  url: string;
  path: () => string;
  body: () => string;
  rate: number;
  durationSec: number;
  maxInFlight?: number;
  timeoutMs?: number;
}): Promise<PacedResult> {
  const total = Math.max(1, Math.round(o.rate * o.durationSec));
  const maxInFlight = o.maxInFlight ?? 256;
  const timeoutMs = o.timeoutMs ?? 30_000;
  const target = new URL(o.url);
  // FIFO: every open connection is used in turn, so none sits idle long enough for the server's
  // keep-alive timeout to close it just as a request is written to it (a reset that is the
  // generator's, not the server's).
  const agent = new http.Agent({ keepAlive: true, maxSockets: maxInFlight, scheduling: 'fifo' });
  const latencies: number[] = [];
  const out = { sent: 0, ok: 0, non2xx: 0, errors: 0, skipped: 0, failures: {} as Record<string, number> };
  const fail = (what: string): void => {
    out.failures[what] = (out.failures[what] ?? 0) + 1;
  };
  let inFlight = 0;
  const one = (due: number): Promise<void> =>
    new Promise((done) => {
      const body = Buffer.from(o.body());
      const req = http.request(
        {
          host: target.hostname,
          port: target.port,
          path: o.path(),
          method: 'POST',
          agent,
          timeout: timeoutMs,
          headers: { 'content-type': 'application/json', 'content-length': body.length },
        },
        (res) => {
          res.on('data', () => undefined);
          res.on('end', () => {
            latencies.push(performance.now() - due);
            if (res.statusCode !== undefined && res.statusCode >= 200 && res.statusCode < 300) out.ok++;
            else {
              out.non2xx++;
              fail(String(res.statusCode));
            }
            done();
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', (err: NodeJS.ErrnoException) => {
        out.errors++;
        fail(err.code ?? err.message);
        done();
      });
      req.end(body);
    });
  const pending: Promise<void>[] = [];
  const start = performance.now();
  const intervalMs = 1000 / o.rate;
  for (let i = 0; i < total;) {
    const now = performance.now();
    // Every request whose time has come goes now; then sleep until the next one is due.
    while (i < total && start + i * intervalMs <= now) {
      const due = start + i * intervalMs;
      i++;
      if (inFlight >= maxInFlight) {
        out.skipped++;
        continue;
      }
      inFlight++;
      out.sent++;
      pending.push(one(due).finally(() => inFlight--));
    }
    if (i < total) await sleep(Math.max(0, start + i * intervalMs - performance.now()));
  }
  await Promise.all(pending);
  agent.destroy();
  const sorted = latencies.sort((a, b) => a - b);
  const at = (q: number): number =>
    sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] : Number.NaN;
  return { ...out, latency: { p50: at(0.5), p99: at(0.99), max: sorted[sorted.length - 1] ?? Number.NaN } };
}

/**
 * A counter of the batches the service has written under one list prefix: `ZCARD` of its index
 * of written ids (`{<namespace>}:written:<prefix>`, shared/ledger), which a batch joins after its
 * file is fsync'd and renamed into place. The keys are found by one whole `SCAN` once any exists
 * (one per shard with QUEUE_SHARDS > 1; a shard whose first file comes after that scan is not
 * counted, and the wait then ends on its slower listing instead). Costs Redis a few microseconds
 * a call, where listing the folder costs milliseconds.
 */
export function writtenIndexCounter(redis: Redis, prefix: string): () => Promise<number> {
  let keys: string[] = [];
  return async () => {
    if (keys.length === 0) {
      const found = new Set<string>();
      let cursor = '0';
      for (let i = 0; i < 100_000; i++) {
        const [next, batch] = await redis.scan(cursor, 'MATCH', `{*}:written:${prefix}`, 'COUNT', 1000);
        for (const k of batch) if (k.endsWith(`}:written:${prefix}`)) found.add(k);
        cursor = next;
        if (cursor === '0') break;
      }
      keys = [...found];
      if (keys.length === 0) return 0;
    }
    if (keys.length === 1) return redis.zcard(keys[0] as string);
    const counts = await Promise.all(keys.map((k) => redis.zcard(k)));
    return counts.reduce((a, b) => a + b, 0);
  };
}

/** A Redis client for the bench's own probes (no retries: a dead Redis is a bench failure). */
export function probeRedis(url: string): Redis {
  const r = new Redis(url, { maxRetriesPerRequest: 1, enableOfflineQueue: true });
  r.on('error', () => undefined);
  return r;
}

/**
 * Sum and count of each `label` value of a histogram on a service's /metrics (Prometheus text),
 * e.g. `ingest_push_step_duration_seconds` by `step`. Empty when the service does not serve it.
 */
export async function histogramTotals(
  metricsUrl: string,
  name: string,
  label: string,
): Promise<Map<string, { sum: number; count: number }>> {
  const out = new Map<string, { sum: number; count: number }>();
  const res = await fetch(metricsUrl);
  if (!res.ok) return out;
  const line = new RegExp(`^${name}_(sum|count)\\{(?:[^}]*,)?${label}="([^"]*)"[^}]*\\} (\\S+)$`);
  for (const text of (await res.text()).split('\n')) {
    const m = line.exec(text);
    if (!m) continue;
    const [, kind, value, n] = m as unknown as [string, 'sum' | 'count', string, string];
    const at = out.get(value) ?? { sum: 0, count: 0 };
    at[kind] += Number(n);
    out.set(value, at);
  }
  return out;
}
