/**
 * `npm run memory-acceptance -- [--shape escaped] [--pushes 200] [--idle-seconds 60] [--body-bytes 8000000]`: issue 37's
 * memory acceptance in its long form. The compiled product (built into .tmp/test-dist by
 * test/helpers/dist.ts, as `npm run build` builds it) runs as `npm start` runs it (its script's
 * node flags, every memory setting at its default) against a private redis-server started here.
 * It takes `--pushes` concurrent 8 MB pushes of the chosen shape (scripts/memory-kit.ts, SHAPES;
 * `all` runs each shape in turn) while the RSS of its whole process tree (the API's process and
 * its encoder processes) is summed from /proc every 50 ms. It holds when:
 *   - the peak stays under 1 GiB (`--limit-mib`);
 *   - every answer is 200, 503 + Retry-After with a reason, or 413 with a reason;
 *   - every 200 is a file in the store holding all of its events;
 *   - `--idle-seconds` after the last file, the RSS is within 20% of the idle baseline taken
 *     before the burst;
 *   - from the first push until the last file is written, the API's own event-loop delay
 *     (`nodejs_eventloop_lag_max_seconds`, its maximum over the scrapes) stays under
 *     `--loop-limit-ms` (250) and /healthz, polled from this process, answers within
 *     `--healthz-limit-ms` (1000): issue 47's acceptance 3 (`--pushes 60`), LoopWatch in memory-kit.ts.
 * Progress goes to stderr, the figures to stdout; the exit code is 1 when any check fails.
 * The short form is test/integration/memory-budget.test.ts.
 */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import { PRIVATE_REDIS_ARGS } from '../shared/redis/private-server.js';
import { distEntry } from '../test/helpers/dist.js';
import { duckQuery, sqlString } from '../test/helpers/duckdb.js';
import { freePort, startRedisServer } from '../test/helpers/redis-server.js';
import { startService, waitFor, waitForHttp } from '../test/helpers/proc.js';
import {
  type Answer,
  LoopWatch,
  MiB,
  RssSampler,
  SHAPES,
  type Shape,
  answerProblem,
  pushBody,
  shapedBody,
} from './memory-kit.js';

const int =
  (min: number, max: number) =>
  (raw: string): number => {
    const n = Number(raw);
    if (!/^\d{1,9}$/.test(raw) || n < min || n > max)
      throw new InvalidArgumentError(`must be an integer from ${min} to ${max}`);
    return n;
  };
const shapeArg = (raw: string): Shape | 'all' => {
  if (raw === 'all' || (SHAPES as readonly string[]).includes(raw)) return raw as Shape | 'all';
  throw new InvalidArgumentError(`must be one of ${SHAPES.join(', ')} or all`);
};

const opts = new Command()
  .name('memory-acceptance')
  .description(
    '200 concurrent 8 MB pushes of the costliest shape against the compiled product with its defaults: peak RSS, answers, files, idle RSS',
  )
  .option('--shape <shape>', `body shape: ${SHAPES.join(', ')} or all`, shapeArg, 'escaped' as Shape | 'all')
  .option('--pushes <n>', 'concurrent pushes', int(1, 2000), 200)
  .option('--idle-seconds <n>', 'seconds to wait after the last file before the idle RSS is read', int(0, 3600), 60)
  .option('--limit-mib <n>', 'the bound on the peak RSS of all processes', int(64, 65_536), 1024)
  .option(
    '--body-bytes <n>',
    'bytes per body (at most the default maxBodyBytes, 8000000); 1048576 takes the path where the API encodes the file itself',
    int(1024, 8_000_000),
    8_000_000,
  )
  .option('--loop-limit-ms <n>', "the bound on the API's event-loop delay during the burst", int(1, 600_000), 250)
  .option('--healthz-limit-ms <n>', 'the bound on the slowest /healthz answer during the burst', int(1, 600_000), 1000)
  .parse()
  .opts<{
    shape: Shape | 'all';
    pushes: number;
    idleSeconds: number;
    limitMib: number;
    bodyBytes: number;
    loopLimitMs: number;
    healthzLimitMs: number;
  }>();

const say = (msg: string): void =>
  void process.stderr.write(`[memory-acceptance ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Outcome {
  shape: Shape;
  ok: boolean;
  lines: string[];
}

async function runShape(
  shape: Shape,
  url: string,
  dataDir: string,
  sampler: RssSampler,
  baseline: number,
): Promise<Outcome> {
  const lines: string[] = [];
  const problems: string[] = [];
  const body = shapedBody(shape, opts.bodyBytes);
  say(`${shape}: ${opts.pushes} concurrent pushes of ${(body.bytes / 1e6).toFixed(2)} MB, ${body.events} events each`);
  sampler.resetPeak();
  const watch = new LoopWatch(url);
  const t0 = performance.now();
  let answered = 0;
  const progress = setInterval(
    () =>
      say(`${shape}: ${answered}/${opts.pushes} answered, RSS now ${MiB(sampler.latest)}, peak ${MiB(sampler.peak)}`),
    2000,
  );
  let answers: Answer[];
  try {
    answers = await Promise.all(
      Array.from({ length: opts.pushes }, (_, i) =>
        pushBody(`${url}/push/events/mem-${shape}/any`, body.head(i), body.bulk, body.tail).then((a) => {
          answered++;
          return a;
        }),
      ),
    );
  } finally {
    clearInterval(progress);
  }
  const seconds = (performance.now() - t0) / 1000;
  const count = (status: number): number => answers.filter((a) => a.status === status).length;
  lines.push(
    `${shape}: ${opts.pushes} x ${(body.bytes / 1e6).toFixed(2)} MB (${body.events} events) answered in ${seconds.toFixed(1)} s: ${count(200)} x 200, ${count(503)} x 503, ${count(413)} x 413, ${answers.length - count(200) - count(503) - count(413)} other`,
  );
  const reasons = new Map<string, number>();
  for (const a of answers) {
    const p = answerProblem(a);
    if (p) problems.push(p);
    if (a.status !== 200) {
      const reason = `${a.status} ${(() => {
        try {
          return String((JSON.parse(a.body) as { error?: unknown }).error).replace(/\d+/g, 'N');
        } catch {
          return a.body.slice(0, 80);
        }
      })()}`;
      reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
    }
  }
  for (const [reason, n] of reasons) lines.push(`  ${n} x ${reason}`);

  const ids = answers.filter((a) => a.status === 200).map((a) => (JSON.parse(a.body) as { batchId: string }).batchId);
  const files = ids.map((id) => join(dataDir, 'events', `mem-${shape}`, `${id}.parquet`));
  say(`${shape}: waiting for ${files.length} files`);
  const written = setInterval(
    () =>
      say(
        `${shape}: ${files.filter((f) => existsSync(f)).length}/${files.length} files, RSS now ${MiB(sampler.latest)}, peak ${MiB(sampler.peak)}`,
      ),
    5000,
  );
  try {
    await waitFor(async () => files.every((f) => existsSync(f)), 600_000, `${files.length} batch files`);
  } catch (err) {
    problems.push((err as Error).message);
  } finally {
    clearInterval(written);
  }
  const loop = await watch.stop();
  lines.push(
    `  API event-loop delay max ${loop.loopMaxMs.toFixed(0)} ms (bound ${opts.loopLimitMs}); /healthz worst ${loop.healthzWorstMs.toFixed(0)} ms over ${loop.polls} polls, ${loop.failed} not 200 (bound ${opts.healthzLimitMs}); an idle process' loop delay max meanwhile ${loop.idleLoopMaxMs.toFixed(0)} ms (the machine's scheduling alone)`,
  );
  if (!(loop.loopMaxMs < opts.loopLimitMs))
    problems.push(`the API's event-loop delay reached ${loop.loopMaxMs.toFixed(0)} ms (bound ${opts.loopLimitMs})`);
  if (!(loop.healthzWorstMs < opts.healthzLimitMs) || loop.failed > 0)
    problems.push(
      `/healthz took up to ${loop.healthzWorstMs.toFixed(0)} ms, ${loop.failed} polls not 200 (bound ${opts.healthzLimitMs} ms)`,
    );
  if (files.length > 0 && files.every((f) => existsSync(f))) {
    const [row] = await duckQuery(
      `SELECT count(*)::BIGINT AS n FROM read_parquet([${files.map(sqlString).join(', ')}])`,
    );
    const rows = Number((row as { n: bigint | number }).n);
    lines.push(`  ${files.length} files written, ${rows} rows (expected ${files.length * body.events})`);
    if (rows !== files.length * body.events)
      problems.push(`the files hold ${rows} rows, the 200s promised ${files.length * body.events}`);
  }
  const peak = sampler.peak;
  lines.push(
    `  peak RSS of all processes ${MiB(peak)} (bound ${opts.limitMib} MiB); each process' own peak: ${sampler.peakBreakdown()}`,
  );
  if (peak >= opts.limitMib * 2 ** 20) problems.push(`peak RSS ${MiB(peak)} is not under ${opts.limitMib} MiB`);

  say(`${shape}: every file written; idle for ${opts.idleSeconds} s`);
  for (let s = 0; s < opts.idleSeconds; s += 10) {
    await sleep(Math.min(10, opts.idleSeconds - s) * 1000);
    say(
      `${shape}: idle ${Math.min(opts.idleSeconds, s + 10)} s, RSS ${MiB(sampler.latest)} (baseline ${MiB(baseline)}; by process ${sampler.breakdown()})`,
    );
  }
  const idle = await settledRss(sampler);
  say(`${shape}: heaps now: ${await heapFigures(url)}`);
  const ratio = idle / baseline;
  lines.push(
    `  idle RSS ${opts.idleSeconds} s later ${MiB(idle)}: ${(ratio * 100).toFixed(0)}% of the baseline ${MiB(baseline)} (bound 120%)`,
  );
  if (ratio > 1.2) problems.push(`idle RSS ${MiB(idle)} is more than 120% of the baseline ${MiB(baseline)}`);
  for (const p of problems.slice(0, 10)) lines.push(`  FAIL: ${p}`);
  if (problems.length > 10) lines.push(`  FAIL: ... and ${problems.length - 10} more`);
  return { shape, ok: problems.length === 0, lines };
}

/** V8 heap and external (Buffer) memory of the API and its encoder, from the API's /metrics (prom-client's default metrics). */
async function heapFigures(url: string): Promise<string> {
  const text = await (await fetch(`${url}/metrics`)).text().catch(() => '');
  const pick =
    /^(ingest_(?:encoder_)?)?(nodejs_heap_size_used_bytes|nodejs_heap_size_total_bytes|nodejs_external_memory_bytes)(?:\{[^}]*\})? (\S+)/gm;
  const out: string[] = [];
  for (const m of text.matchAll(pick)) out.push(`${m[1] ?? ''}${m[2] ?? ''}=${MiB(Number(m[3]))}`);
  return out.join(' ') || 'not exported';
}

/** The mean of a few samples a second apart (one sample can land on a collection). */
async function settledRss(sampler: RssSampler): Promise<number> {
  let sum = 0;
  for (let i = 0; i < 5; i++) {
    sum += sampler.sample();
    await sleep(1000);
  }
  return sum / 5;
}

async function main(): Promise<void> {
  say('building the product (test/helpers/dist.ts, as npm run build)');
  const entry = await distEntry('services/main.js');
  const tmp = mkdtempSync(join(tmpdir(), 'memory-acceptance-'));
  const redis = await startRedisServer({ args: PRIVATE_REDIS_ARGS, dir: tmp });
  const dataDir = join(tmp, 'data');
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  // Defaults for everything that sizes memory; only where to listen, which Redis and which folder.
  const proc = startService(entry, {
    PORT: String(port),
    HOST: '127.0.0.1',
    REDIS_URL: redis.url,
    DATA_DIR: dataDir,
    LOG_LEVEL: 'warn',
    ROLLUP: 'off',
  });
  let sampler: RssSampler | undefined;
  const outcomes: Outcome[] = [];
  try {
    await waitForHttp(`${url}/readyz`, 60_000, proc);
    await waitFor(
      async () => /^ingest_encoder_workers\{service="ingest"\} 1$/m.test(await (await fetch(`${url}/metrics`)).text()),
      60_000,
      'the encoder process',
    );
    sampler = new RssSampler(proc.pid, 50);
    // A small push first, so the baseline is a process that has taken a push, then a quiet moment.
    const warm = await fetch(`${url}/push/events/mem-warm/any`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: '{"data":{"events":[{"event":"warm"}]},"baseHash":null}',
    });
    if (warm.status !== 200) throw new Error(`the warm-up push got ${warm.status}: ${await warm.text()}`);
    await sleep(5000);
    const baseline = await settledRss(sampler);
    say(`baseline by process: ${sampler.breakdown()}`);
    say(`baseline: idle RSS of the service's process tree (pid ${proc.pid} and its children) ${MiB(baseline)}`);
    for (const shape of opts.shape === 'all' ? SHAPES : [opts.shape])
      outcomes.push(await runShape(shape, url, dataDir, sampler, baseline));
  } finally {
    sampler?.stop();
    await proc.stop('SIGTERM', 30_000).catch(() => undefined);
    await redis.stop().catch(() => undefined);
    rmSync(tmp, { recursive: true, force: true });
  }
  process.stdout.write(`\nmemory acceptance (${new Date().toISOString()}, node ${process.version}, defaults):\n`);
  for (const o of outcomes) process.stdout.write(`${o.lines.join('\n')}\n${o.ok ? '  PASS' : '  FAILED'}\n`);
  process.exitCode = outcomes.every((o) => o.ok) ? 0 : 1;
}

await main();
