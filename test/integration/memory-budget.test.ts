/**
 * Acceptance: a burst of 200 concurrent 7.9 MB pushes against `npm start` with default settings
 * stays under 1 GB of RSS; every push is answered 200 or 503 + Retry-After, and every 200 is
 * written; 20 pushes of the costliest shape (rows at maxEventsPerBatch) too, and its idle RSS
 * comes back (the long form is `npm run memory-acceptance`). The service is a real child (services/main.ts, which forks its encoder process); its
 * memory, read from /proc, is the sum over both processes.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { duckQuery, sqlString } from '../helpers/duckdb.js';
import { batchBody, sampleEvent } from '../helpers/events.js';
import { uniqueName } from '../helpers/names.js';
import { type ServiceProcess, startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';
import { childNodePids } from '../helpers/dist.js';
import { type TestStack, startTestStack } from '../helpers/stack.js';
import { ENCODER_MAX_INFLIGHT_BYTES_DEFAULT, MAX_EVENTS_PER_BATCH_DEFAULT } from '../../shared/config.js';
import { LoopWatch, RssSampler, answerProblem, pushBody, shapedBody } from '../../scripts/memory-kit.js';

const PUSHES = 200;
const BODY_BYTES = 7_900_000;
const GB = 1024 * 1024 * 1024;
/** Bounds on the API's event-loop delay and the slowest /healthz during the costliest-shape burst (see that test). */
const LOOP_BOUND_MS = 250;
const HEALTHZ_BOUND_MS = 1000;
/** An idle process whose loop is held longer than this is on a machine too busy to judge the bounds above. */
const QUIET_MACHINE_MS = 50;

/** VmRSS and VmHWM (peak RSS) of a process, in bytes. */
function memoryOf(pid: number): { rss: number; hwm: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string): number =>
    Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0) * 1024;
  return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
}

/**
 * `npm start`'s memory: its process and its encoder processes, summed (each one's peak summed is
 * at least the peak of the sum). The encoders are listed once, after start.
 */
function serviceMemory(pids: readonly number[]): { rss: number; hwm: number } {
  return pids.map(memoryOf).reduce((a, b) => ({ rss: a.rss + b.rss, hwm: a.hwm + b.hwm }), { rss: 0, hwm: 0 });
}

/**
 * The bulk of every body: events joined by commas, ~7.9 MB in all. Each push adds its own first
 * event, so no two bodies are byte-identical (a retry window would merge them otherwise) while
 * the test process holds one copy of the bulk, not 200.
 */
function bulkEvents(targetBytes: number): { bulk: Buffer; events: number } {
  const parts: string[] = [];
  let size = 0;
  for (let i = 0; size < targetBytes; i++) {
    const text = JSON.stringify(sampleEvent(i));
    parts.push(text);
    size += text.length + 1;
  }
  return { bulk: Buffer.from(parts.join(',')), events: parts.length };
}

interface Answer {
  status: number;
  retryAfter: string | undefined;
  body: string;
}

/** The answer to a request, collected whole. */
function answerOf(req: http.ClientRequest): Promise<Answer> {
  return new Promise<Answer>((resolve, reject) => {
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
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

function push(url: string, head: Buffer, bulk: Buffer, tail: Buffer): Promise<Answer> {
  const req = http.request(`${url}/push/events/burst/any`, {
    method: 'POST',
    agent: false,
    headers: { 'Content-Type': 'application/json', 'Content-Length': String(head.length + bulk.length + tail.length) },
  });
  req.setTimeout(120_000, () => req.destroy(new Error('push timed out')));
  const answer = answerOf(req);
  req.write(head);
  req.write(bulk);
  req.end(tail);
  return answer;
}

describe('memory budget of npm start', () => {
  let proc: ServiceProcess;
  let url: string;
  let dataDir: string;
  /** The service's idle RSS before its first burst (set by the first test). */
  let baselineRss: number | undefined;

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'ingest-burst-'));
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    // Defaults for everything that sizes memory; only where to listen, which Redis and which folder.
    proc = startService('services/main.ts', {
      PORT: String(port),
      HOST: '127.0.0.1',
      REDIS_URL: inject('redisUrl'),
      DATA_DIR: dataDir,
      QUEUE_NAME: uniqueName('burst'),
      LOG_LEVEL: 'warn',
    });
    await waitForHttp(`${url}/readyz`, 30_000, proc);
  });

  afterAll(async () => {
    await proc?.stop('SIGTERM', 20_000);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it(`${PUSHES} concurrent ${BODY_BYTES / 1e6} MB pushes: RSS under 1 GB, every push 200 or 503 + Retry-After, every 200 written`, async () => {
    const { bulk, events } = bulkEvents(BODY_BYTES - 200);
    const tail = Buffer.from(']},"baseHash":null}');
    // LOG_LEVEL=warn: the encoder process is up once its worker shows in the API's /metrics.
    await waitFor(
      async () => /^ingest_encoder_workers\{service="ingest"\} 1$/m.test(await (await fetch(`${url}/metrics`)).text()),
      60_000,
      'the encoder process',
    );
    const pids = [proc.pid, ...childNodePids(proc.pid)];
    expect(pids.length, 'npm start runs one encoder process').toBe(2);
    const before = serviceMemory(pids);
    baselineRss = before.rss;
    let peakRss = before.rss;
    const sampler = setInterval(() => {
      try {
        peakRss = Math.max(peakRss, serviceMemory(pids).rss);
      } catch {
        /* the process is gone: the assertions below say so */
      }
    }, 20);
    const t0 = performance.now();
    let answers: Answer[];
    try {
      answers = await Promise.all(
        Array.from({ length: PUSHES }, (_, i) =>
          push(
            url,
            Buffer.from(`{"data":{"events":[${JSON.stringify({ event: 'burst', distinct_id: `push-${i}` })},`),
            bulk,
            tail,
          ),
        ),
      );
    } finally {
      clearInterval(sampler);
    }
    const seconds = (performance.now() - t0) / 1000;
    let after = serviceMemory(pids);
    const accepted = answers.filter((a) => a.status === 200);
    const shed = answers.filter((a) => a.status === 503);
    console.log(
      `burst: ${PUSHES} x ${(bulk.length / 1e6).toFixed(2)} MB in ${seconds.toFixed(1)} s: ${accepted.length} x 200, ${shed.length} x 503; ` +
        `RSS before ${(before.rss / 2 ** 20).toFixed(0)} MiB, peak sampled ${(peakRss / 2 ** 20).toFixed(0)} MiB, VmHWM ${(after.hwm / 2 ** 20).toFixed(0)} MiB`,
    );
    for (const a of answers) {
      expect([200, 503], a.body).toContain(a.status);
      if (a.status === 503) expect(a.retryAfter, a.body).toMatch(/^\d+$/);
    }
    expect(after.hwm).toBeLessThan(GB);
    expect(accepted.length).toBeGreaterThan(0);

    // Every 200 ends up as a file holding all of its events.
    const ids = accepted.map((a) => (JSON.parse(a.body) as { batchId: string }).batchId);
    expect(new Set(ids).size).toBe(ids.length);
    const files = ids.map((id) => join(dataDir, 'events', 'burst', `${id}.parquet`));
    await waitFor(async () => files.every((f) => existsSync(f)), 120_000, `${files.length} batch files`);
    const [row] = await duckQuery(
      `SELECT count(*)::INTEGER AS n, count(DISTINCT filename)::INTEGER AS f FROM read_parquet([${files.map(sqlString).join(', ')}], filename = true)`,
    );
    expect(row).toEqual({ n: ids.length * (events + 1), f: ids.length });
    // The encoder's share peaks while it works off the burst, after the last push was answered.
    after = serviceMemory(pids);
    console.log(
      `burst written: VmHWM of the API and encoder processes together ${(after.hwm / 2 ** 20).toFixed(0)} MiB`,
    );
    expect(after.hwm).toBeLessThan(GB);

    // Every 503 is counted: most for the body budget; on a loaded machine a few may instead be an
    // enqueue that timed out (outcome "unavailable"), also 503 + Retry-After.
    const metrics = await (await fetch(`${url}/metrics`)).text();
    const sample = (re: RegExp): number => Number(re.exec(metrics)?.[1] ?? Number.NaN);
    const shedForBytes = sample(/^ingest_push_shed_total\{[^}]*reason="inflight_bytes"[^}]*\} (\d+)/m);
    const shedAll = sample(/^ingest_pushes_total\{[^}]*outcome="shed"[^}]*\} (\d+)/m);
    const unavailable = sample(/^ingest_pushes_total\{[^}]*outcome="unavailable"[^}]*\} (\d+)/m);
    expect(shedForBytes).toBeGreaterThan(0);
    expect(shedAll + unavailable).toBe(shed.length);
    expect(shedForBytes).toBeGreaterThanOrEqual(shed.length - unavailable);
  }, 240_000);

  // The short form of scripts/memory-acceptance.ts (`npm run memory-acceptance`): the costliest
  // shape found, 100,000 events (maxEventsPerBatch) of ~74 bytes with \u-escaped keys per 7.4 MB body.
  it('20 concurrent pushes of the costliest shape at maxEventsPerBatch: peak bounded, every answer 200/503/413 with a reason, every 200 written, idle RSS comes back', async () => {
    const body = shapedBody('escaped');
    expect(body.events).toBe(MAX_EVENTS_PER_BATCH_DEFAULT);
    await waitFor(
      async () => /^ingest_encoder_workers\{service="ingest"\} 1$/m.test(await (await fetch(`${url}/metrics`)).text()),
      60_000,
      'the encoder process',
    );
    const pids = [proc.pid, ...childNodePids(proc.pid)];
    // The idle RSS before any burst (the test above measured it; alone, this one measures it now).
    const idleBefore = baselineRss ?? serviceMemory(pids).rss;
    const sampler = new RssSampler(proc.pid, 50);
    // Issue 47's acceptance 3 in short: the API's own event-loop delay and /healthz from this
    // process while the burst is checked (the long form: memory-acceptance --pushes 60).
    const watch = new LoopWatch(url);
    let answers;
    try {
      answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          pushBody(`${url}/push/events/worst/any`, body.head(i), body.bulk, body.tail, 120_000),
        ),
      );
    } finally {
      sampler.stop();
    }
    const loop = await watch.stop();
    console.log(
      `worst shape: API event-loop delay max ${loop.loopMaxMs.toFixed(0)} ms, /healthz worst ${loop.healthzWorstMs.toFixed(0)} ms over ${loop.polls} polls; an idle process' loop delay max ${loop.idleLoopMaxMs.toFixed(0)} ms`,
    );
    expect(loop.failed).toBe(0);
    expect(loop.polls).toBeGreaterThan(3);
    // The acceptance's bounds (250 ms, 1 s) judge the API, not the machine: on a machine so busy
    // that an idle process' own loop is held past QUIET_MACHINE_MS, any process waits that long
    // for a core and the figures are only printed. Before the scan thread (0024) a quiet machine
    // saw 0.78-0.91 s of loop delay and 1.5-1.6 s /healthz answers from these bursts.
    if (loop.idleLoopMaxMs < QUIET_MACHINE_MS) {
      expect(loop.loopMaxMs).toBeLessThan(LOOP_BOUND_MS);
      expect(loop.healthzWorstMs).toBeLessThan(HEALTHZ_BOUND_MS);
    }
    for (const a of answers) expect(answerProblem(a), a.body).toBeUndefined();
    const ids = answers.filter((a) => a.status === 200).map((a) => (JSON.parse(a.body) as { batchId: string }).batchId);
    expect(ids.length).toBeGreaterThan(0);
    const files = ids.map((id) => join(dataDir, 'events', 'worst', `${id}.parquet`));
    await waitFor(async () => files.every((f) => existsSync(f)), 180_000, `${files.length} batch files`);
    const [row] = await duckQuery(
      `SELECT count(*)::INTEGER AS n FROM read_parquet([${files.map(sqlString).join(', ')}])`,
    );
    expect(row).toEqual({ n: ids.length * body.events });
    console.log(
      `worst shape: 20 x ${(body.bytes / 1e6).toFixed(2)} MB: ${ids.length} x 200; RSS idle ${(idleBefore / 2 ** 20).toFixed(0)} MiB, peak sampled ${(sampler.peak / 2 ** 20).toFixed(0)} MiB`,
    );
    expect(sampler.peak).toBeLessThan(GB);
    // Builders shrink, the encode thread is retired and a drained burst is collected: the idle
    // RSS comes back (generous bound: the acceptance script's is 20%).
    await waitFor(
      async () => serviceMemory(pids).rss < idleBefore * 1.5,
      60_000,
      `RSS back under 150% of ${(idleBefore / 2 ** 20).toFixed(0)} MiB`,
    );
    // The dead bodies are collected once the burst drained (an idle V8 would keep them): the
    // Buffers of both processes (prom-client's nodejs_external_memory_bytes) back under 64 MiB.
    const external = async (): Promise<number[]> =>
      [
        ...(await (await fetch(`${url}/metrics`)).text()).matchAll(
          /^(?:ingest_encoder_)?nodejs_external_memory_bytes(?:\{[^}]*\})? (\S+)$/gm,
        ),
      ].map((m) => Number(m[1]));
    await waitFor(
      async () => {
        const values = await external();
        return values.length === 2 && values.every((v) => v < 64 * 2 ** 20);
      },
      30_000,
      'the external memory of both processes back under 64 MiB',
    );
  }, 300_000);
});

/**
 * The figures docs/operations.md ("Memory") quotes: RSS of the API per byte of push bodies in
 * flight, and of an encoder per byte of its job budget, each in its own process.
 */
describe('RSS per in-flight byte (API and encoder as separate processes)', () => {
  const PUSHES_AT_ONCE = 12;
  let api: ServiceProcess;
  let encoder: ServiceProcess | undefined;
  let dataDir: string;
  let url: string;
  const env: Record<string, string> = {};

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'ingest-rss-'));
    const port = await freePort();
    url = `http://127.0.0.1:${port}`;
    Object.assign(env, {
      HOST: '127.0.0.1',
      REDIS_URL: inject('redisUrl'),
      DATA_DIR: dataDir,
      QUEUE_NAME: uniqueName('rss'),
      LOG_LEVEL: 'warn',
    });
    // A budget that sheds nothing, so every body of the burst is in flight at once.
    api = startService('services/api/main.ts', { ...env, PORT: String(port), MAX_INFLIGHT_BYTES: String(4 * GB) });
    await waitForHttp(`${url}/readyz`, 30_000, api);
  });

  afterAll(async () => {
    await encoder?.stop('SIGTERM', 20_000);
    await api?.stop('SIGTERM', 20_000);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it(`${PUSHES_AT_ONCE} concurrent ${BODY_BYTES / 1e6} MB pushes to the API, then an encoder with the default ENCODER_MAX_INFLIGHT_BYTES drains them`, async () => {
    const { bulk, events } = bulkEvents(BODY_BYTES - 200);
    const tail = Buffer.from(']},"baseHash":null}');
    const warm = await push(url, Buffer.from('{"data":{"events":['), Buffer.from('{"event":"warm"}'), tail);
    expect(warm.status, warm.body).toBe(200);
    const apiBefore = memoryOf(api.pid).rss;
    let apiPeak = apiBefore;
    const apiSampler = setInterval(() => (apiPeak = Math.max(apiPeak, memoryOf(api.pid).rss)), 10);
    let answers: Answer[];
    try {
      answers = await Promise.all(
        Array.from({ length: PUSHES_AT_ONCE }, (_, i) =>
          push(url, Buffer.from(`{"data":{"events":[{"event":"rss","distinct_id":"p${i}"},`), bulk, tail),
        ),
      );
    } finally {
      clearInterval(apiSampler);
    }
    for (const a of answers) expect(a.status, a.body).toBe(200);
    const inFlight = PUSHES_AT_ONCE * (bulk.length + 60);
    const apiRatio = (apiPeak - apiBefore) / inFlight;

    // The encoder starts once the queue holds every batch, so it works at its budget from the start.
    const metricsPort = await freePort();
    encoder = startService('services/encoder/main.ts', { ...env, METRICS_PORT: String(metricsPort) });
    await waitForHttp(`http://127.0.0.1:${metricsPort}/healthz`, 30_000, encoder);
    const encBefore = memoryOf(encoder.pid).rss;
    let encPeak = encBefore;
    const encSampler = setInterval(() => {
      try {
        encPeak = Math.max(encPeak, memoryOf(encoder!.pid).rss);
      } catch {
        /* exited: the wait below fails */
      }
    }, 10);
    // The encoder's own account of the bytes it works on, scraped while it drains.
    const metricsText = async (): Promise<string> =>
      (await fetch(`http://127.0.0.1:${metricsPort}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
    const gaugeOf = (text: string, name: string): number =>
      Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)`, 'm').exec(text)?.[1] ?? Number.NaN);
    let maxInflight = 0;
    let scraping = true;
    const scraper = (async () => {
      while (scraping) {
        maxInflight = Math.max(
          maxInflight,
          gaugeOf(await metricsText().catch(() => ''), 'ingest_encoder_inflight_bytes') || 0,
        );
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    const ids = answers.map((a) => (JSON.parse(a.body) as { batchId: string }).batchId);
    try {
      await waitFor(
        async () => ids.every((id) => existsSync(join(dataDir, 'events', 'burst', `${id}.parquet`))),
        180_000,
        'every batch written',
      );
    } finally {
      clearInterval(encSampler);
      scraping = false;
      await scraper;
    }
    const finalMetrics = await metricsText();
    // Eight slots but room for four 7.9 MB bodies: some jobs waited for bytes, and the bytes never passed the budget.
    expect(maxInflight).toBeGreaterThan(0);
    expect(maxInflight).toBeLessThanOrEqual(ENCODER_MAX_INFLIGHT_BYTES_DEFAULT);
    expect(gaugeOf(finalMetrics, 'ingest_encoder_inflight_bytes_limit')).toBe(ENCODER_MAX_INFLIGHT_BYTES_DEFAULT);
    expect(gaugeOf(finalMetrics, 'ingest_encoder_budget_wait_seconds_sum')).toBeGreaterThan(0);
    // The last file is durable a moment before its job gives its bytes back (markWritten comes first).
    await waitFor(
      async () => gaugeOf(await metricsText(), 'ingest_encoder_inflight_bytes') === 0,
      10_000,
      'the encoder to hold no bytes',
    );
    const encRatio = (encPeak - encBefore) / ENCODER_MAX_INFLIGHT_BYTES_DEFAULT;
    console.log(
      `API: ${PUSHES_AT_ONCE} x ${(bulk.length / 1e6).toFixed(2)} MB in flight, RSS ${(apiBefore / 2 ** 20).toFixed(0)} -> ${(apiPeak / 2 ** 20).toFixed(0)} MiB: ${apiRatio.toFixed(2)} bytes of RSS per in-flight body byte; ` +
        `encoder: RSS ${(encBefore / 2 ** 20).toFixed(0)} -> ${(encPeak / 2 ** 20).toFixed(0)} MiB with ENCODER_MAX_INFLIGHT_BYTES ${ENCODER_MAX_INFLIGHT_BYTES_DEFAULT / 2 ** 20} MiB: ${encRatio.toFixed(2)} per budget byte`,
    );
    const [row] = await duckQuery(
      `SELECT count(*)::INTEGER AS n FROM read_parquet([${ids.map((id) => sqlString(join(dataDir, 'events', 'burst', `${id}.parquet`))).join(', ')}])`,
    );
    expect(row).toEqual({ n: ids.length * (events + 1) });
    // Loose bounds around the documented figures: a regression that holds another copy of every body fails them.
    expect(apiRatio).toBeLessThan(4);
    expect(encRatio).toBeLessThan(10);
  }, 300_000);
});

/** POST with every header and byte under the test's control; `body` undefined leaves the request open for the caller. */
function rawPost(
  url: string,
  headers: Record<string, string>,
  body?: Buffer,
): { req: http.ClientRequest; answer: Promise<Answer> } {
  const req = http.request(`${url}/push/events/budget/any`, {
    method: 'POST',
    agent: false,
    headers: { 'Content-Type': 'application/json', ...headers },
  });
  req.setTimeout(60_000, () => req.destroy(new Error('push timed out')));
  const answer = answerOf(req);
  if (body) {
    // In pieces, so a chunked upload really streams.
    for (let i = 0; i < body.length; i += 64 * 1024) req.write(body.subarray(i, i + 64 * 1024));
    req.end();
  }
  return { req, answer };
}

describe('maxEventsPerBatch (in-process stack, defaults)', () => {
  let s: TestStack;
  beforeAll(async () => {
    s = await startTestStack({});
  });
  afterAll(async () => {
    await s.shutdown();
  });

  it('an 8 MB body of 2.66 M empty events gets 413 naming the cap; a body at the cap is accepted', async () => {
    const body = shapedBody('empty');
    expect(body.bytes).toBeLessThanOrEqual(8_000_000);
    const over = await pushBody(`${s.url}/push/events/cap/any`, body.head(0), body.bulk, body.tail, 120_000);
    expect(over.status, over.body).toBe(413);
    expect(JSON.parse(over.body)).toEqual({
      error: `data.events has ${body.events} events; this collection's maxEventsPerBatch is ${MAX_EVENTS_PER_BATCH_DEFAULT}`,
      code: 'too_large',
    });
    const rejected = (await s.api!.app.metrics.rejections.get()).values.find(
      (v) => v.labels.reason === 'too_large',
    )?.value;
    expect(rejected).toBe(1);
    const at = Buffer.from(`{"data":{"events":[${'{},'.repeat(MAX_EVENTS_PER_BATCH_DEFAULT - 1)}{}]},"baseHash":null}`);
    const ok = await pushBody(`${s.url}/push/events/cap/any`, Buffer.alloc(0), at, Buffer.alloc(0));
    expect(ok.status, ok.body).toBe(200);
  }, 120_000);
});

describe('MAX_INFLIGHT_BYTES (in-process stack, 1 MiB budget)', () => {
  let s: TestStack;
  const limit = 1024 * 1024;
  let first: Buffer;
  let other: Buffer;
  let big: Buffer;

  beforeAll(async () => {
    // Built before the stack starts, so this process' event loop is free while the stack's Redis connections start.
    [first, other, big] = [2200, 1100, 5500].map((n) => Buffer.from(batchBody(n))) as [Buffer, Buffer, Buffer];
    s = await startTestStack({ MAX_INFLIGHT_BYTES: String(limit) });
  });
  afterAll(async () => {
    await s.shutdown();
  });

  const gauge = async (): Promise<number> => (await s.api!.app.metrics.inflightBytes.get()).values[0]?.value ?? 0;
  const shedCount = async (): Promise<number> =>
    (await s.api!.app.metrics.shed.get()).values.find((v) => v.labels.reason === 'inflight_bytes')?.value ?? 0;

  it('declared, chunked and decoded bytes past the budget get 503 + Retry-After; a body alone may exceed it', async () => {
    const open = rawPost(s.url, { 'Content-Length': String(first.length) });
    open.req.write(first.subarray(0, 700_000));
    await waitFor(async () => (await gauge()) >= 700_000, 10_000, 'the first body to be held');
    const shedBefore = await shedCount();

    expect(other.length + 700_000).toBeGreaterThan(limit);
    // Content-Length known: refused from the header.
    const declared = await rawPost(s.url, { 'Content-Length': String(other.length) }, other).answer;
    // No Content-Length: refused once the bytes read pass the budget.
    const chunked = await rawPost(s.url, {}, other).answer;
    // Compressed: the decoded bytes count.
    const gz = gzipSync(other);
    expect(gz.length + 700_000).toBeLessThan(limit);
    const decoded = await rawPost(s.url, { 'Content-Length': String(gz.length), 'Content-Encoding': 'gzip' }, gz)
      .answer;
    for (const a of [declared, chunked, decoded]) {
      expect(a.status, a.body).toBe(503);
      expect(a.retryAfter).toBe('1');
      expect(JSON.parse(a.body).error).toMatch(/MAX_INFLIGHT_BYTES/);
    }
    expect((await shedCount()) - shedBefore).toBe(3);

    open.req.end(first.subarray(700_000));
    const finished = await open.answer;
    expect(finished.status, finished.body).toBe(200);
    expect(await gauge()).toBe(0);

    // Alone, a body bigger than the whole budget is taken: with a Content-Length and without.
    expect(big.length).toBeGreaterThan(2 * limit);
    for (const headers of [{ 'Content-Length': String(big.length) }, {}] as Record<string, string>[]) {
      const a = await rawPost(s.url, { ...headers, 'Idempotency-Key': `big-${Object.keys(headers).length}` }, big)
        .answer;
      expect(a.status, a.body).toBe(200);
    }
    expect(await gauge()).toBe(0);
    expect((await s.api!.app.metrics.inflightBytesLimit.get()).values[0]?.value).toBe(limit);
  });

  it('counts rows: a body whose bytes fit beside another but whose 100,000 events do not gets 503', async () => {
    // Another body in flight, streamed without a Content-Length so it holds only what has arrived.
    const open = rawPost(s.url, {});
    open.req.write(first.subarray(0, 600_000));
    await waitFor(async () => (await gauge()) >= 600_000, 10_000, 'the other body to be held');
    const tiny = Buffer.from(
      `{"data":{"events":[${'{},'.repeat(MAX_EVENTS_PER_BATCH_DEFAULT - 1)}{}]},"baseHash":null}`,
    );
    // By bytes it fits; by rows (at least API_QUEUED_ROW_BYTES each) it does not.
    expect((await gauge()) + tiny.length).toBeLessThan(limit);
    const shedBefore = await shedCount();
    const a = await rawPost(s.url, { 'Content-Length': String(tiny.length) }, tiny).answer;
    expect(a.status, a.body).toBe(503);
    expect(a.retryAfter).toBe('1');
    expect(JSON.parse(a.body).error).toMatch(/100000 events .*MAX_INFLIGHT_BYTES/);
    expect((await shedCount()) - shedBefore).toBe(1);
    open.req.end(first.subarray(600_000));
    expect((await open.answer).status).toBe(200);
    expect(await gauge()).toBe(0);
    // Alone, the same body is taken (a push bigger than the whole budget runs when nothing else is held).
    const alone = await rawPost(s.url, { 'Content-Length': String(tiny.length) }, tiny).answer;
    expect(alone.status, alone.body).toBe(200);
    expect(await gauge()).toBe(0);
  });
});
