/**
 * `npm run profile [-- --size 100] [-- --seconds 8] [-- --rate <pushes/s>] [-- --top 15] [-- --out <dir>] [-- --gc]`:
 * CPU profiles of `npm start`'s processes under a load, and where their time went.
 *
 * Starts a private Redis and the compiled service the way the bench does (`npm start`'s node
 * flags, plus `--cpu-prof`; the encoder processes inherit the flags), warms it up for 2 s, then
 * pushes `--size`-event batches for `--seconds`: at saturation (autocannon, 32 connections) or at
 * a fixed `--rate` (an open-loop paced load). It waits until every accepted batch is written,
 * prints the CPU per batch of each part (the API's event loop, the encoders' event loops, the
 * other threads, Redis), stops the service, and summarizes each process's profile over the
 * measured window only: self time by module and by function. The `.cpuprofile` files stay in
 * `--out` (default `bench/results/profile-<time>/`) for Chrome DevTools or speedscope. With `--gc`
 * the service also runs with `--trace-gc-nvp`, and each process's collections in the measured
 * window are summarized (./gc-trace.ts): scavenges, their mean pause and bytes promoted, full
 * collections, the longest pause.
 */
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { PRIVATE_REDIS_ARGS } from '../shared/redis/private-server.js';
import { childNodePids } from '../test/helpers/dist.js';
import { freePort, startRedisServer } from '../test/helpers/redis-server.js';
import { type CpuProfile, formatSummary, summarizeProfile } from './cpuprofile.js';
import { type GcEvent, formatGcSummary, parseGcLine, summarizeGc } from './gc-trace.js';
import {
  ROOT,
  bodyFactory,
  loadTest,
  pacedLoad,
  probeRedis,
  redisCpuSeconds,
  serviceCpuSeconds,
  serviceThreadCpu,
  sleep,
  spawnService,
  splitServiceCpu,
  waitForFiles,
  waitHttp,
  writtenIndexCounter,
} from './lib.js';

interface Args {
  size: number;
  seconds: number;
  rate: number | undefined;
  top: number;
  out: string;
  gc: boolean;
}

const USAGE =
  'usage: npm run profile [-- --size <events per batch, 1-10000>] [-- --seconds <1-120>] [-- --rate <pushes/s>] [-- --top <n>] [-- --out <dir>] [-- --gc]';

function parseArgs(argv: string[]): Args {
  const args: Args = {
    size: 100,
    seconds: 8,
    rate: undefined,
    top: 15,
    out: join(ROOT, 'bench', 'results', `profile-${new Date().toISOString().replace(/[:.]/g, '-')}`),
    gc: false,
  };
  const num = (flag: string, v: string | undefined, min: number, max: number): number => {
    const n = Number(v);
    if (v === undefined || !Number.isFinite(n) || n < min || n > max)
      throw new Error(`${flag}: expected a number from ${min} to ${max}, got ${v ?? 'nothing'}\n${USAGE}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--size') args.size = Math.round(num(a, argv[++i], 1, 10_000));
    else if (a === '--seconds') args.seconds = num(a, argv[++i], 1, 120);
    else if (a === '--rate') args.rate = num(a, argv[++i], 1, 100_000);
    else if (a === '--top') args.top = Math.round(num(a, argv[++i], 1, 200));
    else if (a === '--out') args.out = resolve(argv[++i] ?? '');
    else if (a === '--gc') args.gc = true;
    else if (a === '--help' || a === '-h') {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    } else throw new Error(`unknown argument ${a}\n${USAGE}`);
  }
  return args;
}

const progress = (text: string): void => void process.stderr.write(`[profile] ${text}\n`);
const nowUs = (): number => Number(process.hrtime.bigint() / 1000n);

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  mkdirSync(args.out, { recursive: true });
  const tmp = mkdtempSync(join(tmpdir(), 'ingest-profile-'));
  const redisServer = await startRedisServer({ args: [...PRIVATE_REDIS_ARGS] });
  const redis = probeRedis(redisServer.url);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const service = await spawnService(
    'services/main',
    {
      PORT: String(port),
      HOST: '127.0.0.1',
      REDIS_URL: redisServer.url,
      DATA_DIR: join(tmp, 'data'),
      QUEUE_NAME: 'profile',
    },
    ['--cpu-prof', `--cpu-prof-dir=${args.out}`, ...(args.gc ? ['--trace-gc-nvp'] : [])],
  );
  const apiPid = service.pid;
  // --gc: V8's lines, kept only while `gcWindow` is open (the measured load and its drain).
  const gcEvents: GcEvent[] = [];
  let gcWindow = false;
  let partial = '';
  service.child.stdout?.on('data', (d: Buffer) => {
    if (!args.gc) return;
    const lines = (partial + d.toString()).split('\n');
    partial = lines.pop() ?? '';
    if (partial.length > 65_536) partial = '';
    for (const line of lines) {
      const e = gcWindow ? parseGcLine(line) : undefined;
      if (e) gcEvents.push(e);
    }
  });
  let encoderPids: number[] = [];
  try {
    await waitHttp(`${url}/healthz`, service);
    encoderPids = childNodePids(apiPid);
    const load = (app: string, seconds: number, rate: number | undefined) =>
      rate === undefined
        ? loadTest({
            url,
            path: () => `/push/events/${app}/x`,
            body: bodyFactory(args.size),
            connections: 32,
            durationSec: seconds,
          }).then((r) => ({
            accepted: r['2xx'],
            bad: r.non2xx + r.errors + r.timeouts,
            p50: r.latency.p50,
            p99: r.latency.p99,
          }))
        : pacedLoad({
            url,
            path: () => `/push/events/${app}/x`,
            body: bodyFactory(args.size),
            rate,
            durationSec: seconds,
          }).then((r) => ({
            accepted: r.ok,
            bad: r.non2xx + r.errors + r.skipped,
            p50: r.latency.p50,
            p99: r.latency.p99,
          }));
    const drain = (app: string, accepted: number): Promise<number> =>
      waitForFiles(join(tmp, 'data', 'events', app), accepted, 180_000, undefined, {
        count: writtenIndexCounter(redis, `events/${app}/`),
      });

    progress(`warm-up: 2 s of ${args.size}-event batches at saturation`);
    const warm = await load('warmup', 2, undefined);
    await drain('warmup', warm.accepted);
    await sleep(500);

    const what = args.rate === undefined ? 'saturation (32 connections)' : `${args.rate} pushes/s`;
    progress(`measuring: ${args.seconds} s of ${args.size}-event batches at ${what}`);
    const pids = [apiPid, ...encoderPids];
    const cpu0 = serviceCpuSeconds(pids);
    const threads0 = serviceThreadCpu(pids);
    const redis0 = await redisCpuSeconds(redis);
    const fromUs = nowUs();
    const t0 = performance.now();
    gcWindow = true;
    const r = await load('measured', args.seconds, args.rate);
    const tLoad = performance.now();
    progress(`load done: ${r.accepted} accepted, ${r.bad} failed; waiting until every batch is written`);
    const tDurable = await drain('measured', r.accepted);
    gcWindow = false;
    const toUs = nowUs();
    const cpu = serviceCpuSeconds(pids) - cpu0;
    const split = splitServiceCpu(pids, threads0, serviceThreadCpu(pids), cpu);
    const redisCpu = (await redisCpuSeconds(redis)) - redis0;
    const perBatch = (s: number): string => ((s * 1000) / Math.max(1, r.accepted)).toFixed(3);
    const lines = [
      `${args.size}-event batches at ${what}, ${args.seconds} s: ${r.accepted} accepted (${(r.accepted / ((tLoad - t0) / 1000)).toFixed(0)}/s), ${r.bad} failed, push p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(1)} ms`,
      `durable ${((r.accepted * args.size) / ((tDurable - t0) / 1000)).toFixed(0)} events/s (the last batch written ${((tDurable - tLoad) / 1000).toFixed(2)} s after the load ended)`,
      `CPU per batch (ms): all ${perBatch(cpu + redisCpu)} = API event loop ${perBatch(split.main)} + encoders' event loops ${perBatch(split.encoder)} + other threads ${perBatch(split.other)} + Redis ${perBatch(redisCpu)}`,
    ];

    const roleOf = (pid: number): string =>
      pid === apiPid
        ? 'API process'
        : encoderPids.includes(pid)
          ? `encoder process ${encoderPids.indexOf(pid) + 1}`
          : `process ${pid}`;
    if (args.gc) {
      const gc = summarizeGc(gcEvents);
      lines.push('', 'garbage collection over the measured window (--trace-gc-nvp):');
      for (const s of gc) lines.push(`  ${formatGcSummary(s, roleOf(s.pid))}`);
      if (gc.length === 0) lines.push('  no collections were traced');
    }

    progress('stopping the service (it writes its profiles as it exits)');
    await service.stop(30_000);

    const files = readdirSync(args.out).filter((f) => f.endsWith('.cpuprofile'));
    for (const f of files.sort()) {
      // CPU.<date>.<time>.<pid>.<thread>.<seq>.cpuprofile; thread 0 is the process's main thread.
      const [, , , pid, thread] = f.split('.');
      const profile = JSON.parse(readFileSync(join(args.out, f), 'utf8')) as CpuProfile;
      const summary = summarizeProfile(profile, { top: args.top, root: ROOT, window: { fromUs, toUs } });
      const title = `${roleOf(Number(pid))}${thread === '0' ? '' : `, thread ${thread}`} (${f})`;
      lines.push('', ...formatSummary(title, summary));
    }
    if (files.length === 0) lines.push('', 'no profiles were written (did the service exit cleanly?)');
    lines.push('', `profiles: ${args.out}`);
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    await service.stop();
    redis.disconnect();
    await redisServer.stop();
    rmSync(tmp, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`profile: ${(err as Error).message}\n`);
  process.exit(1);
});
