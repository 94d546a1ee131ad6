/**
 * `npm run replay -- <batchId...|--all> [--reissue] [--list]`: moves dead-lettered batches
 * (BullMQ's failed set) back to the queue. Reads REDIS_URL (or REDIS_CLUSTER_NODES), QUEUE_NAME
 * and QUEUE_SHARDS like the services; with several shards every shard's failed set is used.
 */
import { Command } from 'commander';
import { type ReplayOutcome, listFailed, replayFailed } from '../services/api/admin.js';
import { ConfigError, parseEnv } from '../shared/config.js';
import { isBatchId } from '../shared/ids.js';
import { isGroupJobId } from '../shared/redis/jobs/push.js';
import { closeRedis, createRedisClient, redisTarget, waitReady } from '../shared/redis/connection.js';
import { shardLayouts } from '../shared/redis/shards.js';
import { ShardSet } from '../shared/ledger/shard-set.js';

const program = new Command()
  .name('replay')
  .description('Replay dead-lettered batches (failed jobs) once the cause is fixed')
  .argument('[batchIds...]', 'batch ids to replay')
  .option('--all', 'replay every failed batch (oldest first, at most 1000 per run)')
  .option('--reissue', 'queue the body again under a NEW batch id (clients already past the old id will see it)')
  .option('--list', 'only list the failed batches')
  .parse();

const opts = program.opts<{ all?: boolean; reissue?: boolean; list?: boolean }>();
const ids = program.args;

async function main(): Promise<number> {
  let env;
  try {
    env = parseEnv();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`configuration error: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  if (!opts.list && !opts.all && ids.length === 0) {
    process.stderr.write('give batch ids, --all, or --list\n');
    return 2;
  }
  const bad = ids.filter((id) => !isBatchId(id) && !isGroupJobId(id));
  if (bad.length > 0) {
    process.stderr.write(`not batch ids (or group job ids, g-<batch id>): ${bad.join(', ')}\n`);
    return 2;
  }
  const target = redisTarget(env);
  const redis = createRedisClient(target, 'worker');
  const shards = ShardSet.open(redis, shardLayouts(env.QUEUE_NAME, env.QUEUE_SHARDS, target.kind === 'cluster'));
  try {
    await waitReady(redis, 15_000);
    if (opts.list) {
      for (const shard of shards.shards) {
        const { total, items } = await listFailed(shard.queue, 1000);
        process.stdout.write(
          `${total} failed batch(es) in queue ${env.QUEUE_NAME}${shards.count > 1 ? ` shard ${shard.layout.index}` : ''}\n`,
        );
        for (const f of items)
          process.stdout.write(
            `${f.batchId}\t${f.key ?? (f.members ? `group of ${f.members.length}: ${f.members.join(',')}` : '?')}\tattempts=${f.attemptsMade}\t${f.failedReason}\n`,
          );
      }
      return 0;
    }
    const results: ReplayOutcome[] = [];
    if (opts.all)
      for (const s of shards.shards)
        results.push(...(await replayFailed(s.queue, s.ledger, 'all', { reissue: opts.reissue })));
    for (const id of opts.all ? [] : ids) {
      const s = shards.forBatchId(id);
      results.push(...(await replayFailed(s.queue, s.ledger, [id], { reissue: opts.reissue })));
    }
    for (const r of results)
      process.stdout.write(
        `${r.batchId}\t${r.outcome}${r.newBatchId ? `\t${r.newBatchId}` : ''}${r.detail ? `\t${r.detail}` : ''}\n`,
      );
    const done = results.filter((r) => r.outcome === 'replayed' || r.outcome === 'reissued').length;
    process.stdout.write(`${done} of ${results.length} batch(es) back in the queue\n`);
    // Asking for a specific id that is not failed is an error worth an exit code; --all of nothing is not.
    return results.every((r) => r.outcome === 'replayed' || r.outcome === 'reissued') ? 0 : 1;
  } finally {
    await shards.close();
    await closeRedis(redis, 1000);
  }
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`replay failed: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
