/**
 * What the memory acceptance (scripts/memory-acceptance.ts, `npm run memory-acceptance`) and its
 * short form (test/integration/memory-budget.test.ts) share: push bodies of the shapes that cost
 * the most memory per body byte, concurrent pushes that collect every answer, and the RSS of a
 * service's process tree (`npm start`'s process and its encoder processes), read from /proc.
 */
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import { MAX_EVENTS_PER_BATCH_DEFAULT } from '../shared/config.js';

/** The default collection's maxBodyBytes: every body here is at most this long. */
export const BODY_LIMIT = 8_000_000;

/**
 * Body shapes, each of `BODY_LIMIT` bytes at most:
 * - `empty`: 2.66 M events `{}` (3 bytes each): over maxEventsPerBatch, so 413;
 * - the others: exactly maxEventsPerBatch (100,000) events of ~79 bytes each, the most rows a
 *   body may have, each row as costly as its shape makes it: `escaped` (every key written with a
 *   `\u` escape), `wide` (many one-digit unknown keys), `nested` (60 levels of objects),
 *   `fixed` (one long fixed column).
 */
export const SHAPES = ['escaped', 'wide', 'nested', 'fixed', 'empty'] as const;
export type Shape = (typeof SHAPES)[number];

/** One body's parts: a per-push head (so no two bodies are byte-identical), the shared bulk and the tail. */
export interface ShapedBody {
  head(i: number): Buffer;
  bulk: Buffer;
  tail: Buffer;
  /** Events in a whole body (head's one included). */
  events: number;
  bytes: number;
}

function eventOf(shape: Exclude<Shape, 'empty'>, size: number): string {
  let s = '{';
  const add = (member: string): boolean => {
    if (s.length + (s.length > 1 ? 1 : 0) + member.length + 1 > size) return false;
    s += `${s.length > 1 ? ',' : ''}${member}`;
    return true;
  };
  if (shape === 'escaped') for (let k = 0; k < 10_000 && add(`"\\u006b${k}":1`); k++);
  else if (shape === 'wide') for (let k = 0; k < 10_000 && add(`"k${k}":${k % 10}`); k++);
  else if (shape === 'nested') {
    const depth = Math.max(1, Math.min(60, Math.floor((size - 16) / 6)));
    add(`"properties":${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`);
  } else add(`"event":"${'e'.repeat(Math.max(1, size - 12))}"`);
  return `${s}}`;
}

/**
 * A body of `shape` (see SHAPES) of at most `limit` bytes: at most maxEventsPerBatch events, as
 * many as fit in `limit` when their shape allows (a 1 MiB body, which the API encodes itself,
 * gets 100,000 events of ~10 bytes).
 */
export function shapedBody(shape: Shape, limit = BODY_LIMIT): ShapedBody {
  const tail = Buffer.from(']},"baseHash":null}');
  const headOf = (i: number): Buffer => Buffer.from(`{"data":{"events":[{"event":"mem","distinct_id":"push-${i}"}`);
  const room = limit - headOf(999_999).length - tail.length;
  if (shape === 'empty') {
    const n = Math.floor(room / 3);
    return {
      head: headOf,
      bulk: Buffer.from(',{}'.repeat(n)),
      tail,
      events: n + 1,
      bytes: headOf(0).length + 3 * n + tail.length,
    };
  }
  // The smallest event of each shape, with its comma: a small body gets fewer, not emptier, events.
  const smallest = { escaped: 14, wide: 9, nested: 23, fixed: 14 }[shape];
  const n = Math.min(MAX_EVENTS_PER_BATCH_DEFAULT - 1, Math.floor(room / smallest));
  const event = eventOf(shape, Math.floor(room / n) - 1);
  const bulk = Buffer.from(`,${event}`.repeat(n));
  return { head: headOf, bulk, tail, events: n + 1, bytes: headOf(0).length + bulk.length + tail.length };
}

export interface Answer {
  status: number;
  retryAfter: string | undefined;
  body: string;
}

/** POSTs one body (head, bulk, tail) and collects the answer whole; a request that fails is answered status 0. */
export function pushBody(url: string, head: Buffer, bulk: Buffer, tail: Buffer, timeoutMs = 300_000): Promise<Answer> {
  return new Promise<Answer>((resolve) => {
    const req = http.request(url, {
      method: 'POST',
      agent: false,
      headers: {
        'Content-Type': 'application/json',
        'Content-Length': String(head.length + bulk.length + tail.length),
      },
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error('push timed out')));
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          retryAfter: res.headers['retry-after'],
          body: Buffer.concat(chunks).toString(),
        }),
      );
      res.on('error', (err) => resolve({ status: 0, retryAfter: undefined, body: err.message }));
    });
    // A server that answers early (413 from Content-Length, 503) may close before the upload ends.
    req.on('error', (err) => resolve({ status: 0, retryAfter: undefined, body: err.message }));
    req.write(head);
    req.write(bulk);
    req.end(tail);
  });
}

/** What is wrong with an answer of the burst: only 200, 503 + Retry-After with a reason, or 413 with a reason may come back. */
export function answerProblem(a: Answer): string | undefined {
  let error: unknown;
  try {
    error = (JSON.parse(a.body) as { error?: unknown }).error;
  } catch {
    error = undefined;
  }
  if (a.status === 200)
    return /"batchId":"[^"]+"/.test(a.body) ? undefined : `200 without a batchId: ${a.body.slice(0, 200)}`;
  if (a.status === 503)
    return typeof error === 'string' && error.length > 0 && /^\d+$/.test(a.retryAfter ?? '')
      ? undefined
      : `503 without a reason or Retry-After: ${a.body.slice(0, 200)}`;
  if (a.status === 413)
    return typeof error === 'string' && error.length > 0 ? undefined : `413 without a reason: ${a.body.slice(0, 200)}`;
  return `status ${a.status}: ${a.body.slice(0, 200)}`;
}

/** VmRSS of a process in bytes (0 once it is gone). */
export function rssOf(pid: number): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) * 1024;
  } catch {
    return 0;
  }
}

/** `pid` and every process below it (children, their children), from /proc/<n>/stat. */
export function processTree(pid: number): number[] {
  const parents = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      parents.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      /* ended while read */
    }
  }
  const out = [pid];
  for (let i = 0; i < out.length && i < 1000; i++)
    for (const [child, parent] of parents) if (parent === out[i]) out.push(child);
  return out;
}

/** RSS of a process tree summed, sampled every `everyMs`: the peak so far and the latest total. */
export class RssSampler {
  peak = 0;
  latest = 0;
  /** Peak RSS of each process of the tree. */
  readonly peaks = new Map<number, number>();
  private pids: number[];
  private readonly timer: NodeJS.Timeout;
  private readonly relist: NodeJS.Timeout;

  constructor(
    private readonly root: number,
    everyMs = 50,
  ) {
    this.pids = processTree(root);
    this.sample();
    this.timer = setInterval(() => this.sample(), everyMs);
    // Encoder processes may be restarted: the tree is listed again every second.
    this.relist = setInterval(() => (this.pids = processTree(this.root)), 1000);
  }

  sample(): number {
    let total = 0;
    for (const pid of this.pids) {
      const rss = rssOf(pid);
      total += rss;
      this.peaks.set(pid, Math.max(this.peaks.get(pid) ?? 0, rss));
    }
    this.latest = total;
    this.peak = Math.max(this.peak, this.latest);
    return this.latest;
  }

  /** RSS of each process of the tree now, `pid=RSS` for a progress line. */
  breakdown(): string {
    return this.pids.map((pid) => `${pid}=${MiB(rssOf(pid))}`).join(' ');
  }

  /** Starts a new peak from now. */
  resetPeak(): void {
    this.peaks.clear();
    this.peak = this.sample();
  }

  /** Each process' peak since the last reset, `pid=RSS`. */
  peakBreakdown(): string {
    return [...this.peaks].map(([pid, rss]) => `${pid}=${MiB(rss)}`).join(' ');
  }

  stop(): void {
    clearInterval(this.timer);
    clearInterval(this.relist);
  }
}

export const MiB = (bytes: number): string => `${(bytes / 2 ** 20).toFixed(0)} MiB`;

/** What {@link LoopWatch} saw: the API's own event-loop delay and the answers of /healthz from this process. */
export interface LoopFigures {
  /** Largest `nodejs_eventloop_lag_max_seconds` the API reported over the watch, in ms (NaN: never scraped). */
  loopMaxMs: number;
  /** Slowest /healthz answer in ms (a poll that got no answer within its timeout counts as its timeout). */
  healthzWorstMs: number;
  /** /healthz polls made, and how many did not answer 200. */
  polls: number;
  failed: number;
  /**
   * The event-loop delay max, in ms, of an idle node process run alongside (it does nothing but
   * measure): what the machine's scheduling alone costs any process, without the API's work.
   */
  idleLoopMaxMs: number;
}

/** The control of {@link LoopFigures.idleLoopMaxMs}: an idle process' event-loop delay max, printed when its stdin closes. */
const IDLE_LOOP_PROBE = `const h = require('node:perf_hooks').monitorEventLoopDelay({ resolution: 10 }); h.enable();
process.stdin.resume(); process.stdin.on('end', () => { h.disable(); process.stdout.write(String(h.max / 1e6)); });`;

/**
 * Watches an API's responsiveness from another process (issue 47, acceptance 3): /healthz polled
 * every `pollMs` (one poll at a time, each cut off at `timeoutMs`), and the API's own event-loop
 * delay read from its /metrics every `scrapeMs`. prom-client's `nodejs_eventloop_lag_max_seconds`
 * is the maximum since the previous scrape (its histogram is reset at each), so the maximum over
 * the scrapes is the maximum over the watch. Bounded: it stops at `stop()` or after `maxMs`.
 */
export class LoopWatch {
  private loopMax = Number.NaN;
  private worst = 0;
  private polls = 0;
  private failed = 0;
  private running = true;
  private readonly loops: Promise<void>[];
  private readonly probe = spawn(process.execPath, ['-e', IDLE_LOOP_PROBE], { stdio: ['pipe', 'pipe', 'ignore'] });
  private readonly probeOut: Promise<number>;

  constructor(
    private readonly url: string,
    opts: { pollMs?: number; scrapeMs?: number; timeoutMs?: number; maxMs?: number } = {},
  ) {
    const { pollMs = 25, scrapeMs = 1000, timeoutMs = 5000, maxMs = 900_000 } = opts;
    const until = performance.now() + maxMs;
    let out = '';
    this.probe.stdout?.on('data', (c: Buffer) => (out += c.toString()));
    this.probeOut = new Promise((resolve) => {
      this.probe.once('exit', () => resolve(Number(out) || Number.NaN));
      this.probe.once('error', () => resolve(Number.NaN));
    });
    const probeTimer = setTimeout(() => this.probe.kill(), maxMs);
    probeTimer.unref();
    const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
    const alive = (): boolean => this.running && performance.now() < until;
    // The scrape before the watch resets the API's histogram, so the figures are the watch's own.
    const scrape = async (): Promise<void> => {
      const text = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(timeoutMs) })
        .then((r) => r.text())
        .catch(() => '');
      const m = /^nodejs_eventloop_lag_max_seconds(?:\{[^}]*\})? (\S+)$/m.exec(text);
      if (m) this.loopMax = Math.max(Number.isNaN(this.loopMax) ? 0 : this.loopMax, Number(m[1]) * 1000);
    };
    this.loops = [
      (async () => {
        while (alive()) {
          const t0 = performance.now();
          const ok = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(timeoutMs) })
            .then(async (r) => (await r.arrayBuffer(), r.status === 200))
            .catch(() => false);
          this.worst = Math.max(this.worst, performance.now() - t0);
          this.polls++;
          if (!ok) this.failed++;
          await sleep(pollMs);
        }
      })(),
      (async () => {
        await scrape();
        this.loopMax = Number.NaN;
        while (alive()) {
          await sleep(scrapeMs);
          await scrape();
        }
      })(),
    ];
  }

  /** Stops both loops (after one last scrape) and gives the figures. */
  async stop(): Promise<LoopFigures> {
    this.running = false;
    await Promise.all(this.loops);
    this.probe.stdin?.end();
    const kill = setTimeout(() => this.probe.kill(), 5000);
    const idleLoopMaxMs = await this.probeOut;
    clearTimeout(kill);
    return {
      loopMaxMs: this.loopMax,
      healthzWorstMs: this.worst,
      polls: this.polls,
      failed: this.failed,
      idleLoopMaxMs,
    };
  }
}
