/**
 * `npm run soak -- [--minutes N] [--apps N] [--window S]`: the long form of
 * test/integration/soak.test.ts. Pushes distinct batches for N minutes (default 10) to many app
 * names with the encoder running, against a private redis-server, with short windows (default
 * 5 s); then waits for the queue to drain and the windows to pass, prints Redis used_memory and
 * DBSIZE before / peak / drained / after, and exits 1 unless Redis came back within a small
 * constant of where it started.
 */
import { Command } from 'commander';
import { startRedisServer } from '../test/helpers/redis-server.js';
import { runSoak } from './soak-lib.js';

const opts = new Command()
  .name('soak')
  .option('--minutes <n>', 'how long to push', '10')
  .option('--apps <n>', 'distinct app names', '1000')
  .option('--window <s>', 'IDEMPOTENCY_WINDOW_SECONDS, LIST_INDEX_SECONDS and BODY_DEDUP_WINDOW_SECONDS', '5')
  .parse()
  .opts<{ minutes: string; apps: string; window: string }>();

async function main(): Promise<number> {
  const minutes = Number(opts.minutes);
  const apps = Number(opts.apps);
  const window = Number(opts.window);
  if (!(minutes > 0) || !Number.isInteger(apps) || apps < 1 || !Number.isInteger(window) || window < 1) {
    process.stderr.write('--minutes must be > 0, --apps and --window positive integers\n');
    return 2;
  }
  const redis = await startRedisServer();
  try {
    const w = String(window);
    const r = await runSoak({
      redisUrl: redis.url,
      env: {
        QUEUE_NAME: 'soak-long',
        IDEMPOTENCY_WINDOW_SECONDS: w,
        LIST_INDEX_SECONDS: w,
        BODY_DEDUP_WINDOW_SECONDS: w,
      },
      durationMs: minutes * 60_000,
      apps,
      settleMs: (window * 2 + 60) * 1000,
      minSettleMs: (window * 2 + 2) * 1000,
      log: (line) => void process.stdout.write(`${line}\n`),
    });
    const ok =
      r.files === r.batches &&
      r.after.dbsize - r.before.dbsize <= 4 &&
      r.after.usedMemory - r.before.usedMemory < 4 * 1024 * 1024;
    process.stdout.write(
      `${ok ? 'PASS' : 'FAIL'}: ${r.batches} batches (${r.files} files) to ${r.apps} apps in ${r.pushSeconds.toFixed(0)} s; used_memory ${r.before.usedMemory} -> peak ${r.peak.usedMemory} -> ${r.after.usedMemory} B; DBSIZE ${r.before.dbsize} -> peak ${r.peak.dbsize} -> ${r.after.dbsize}\n`,
    );
    return ok ? 0 : 1;
  } finally {
    await redis.stop();
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`soak failed: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
