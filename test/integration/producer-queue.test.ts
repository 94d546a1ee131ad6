import type { Queue } from 'bullmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openQueue } from '../../shared/redis/queues.js';
import { createRedis } from '../../shared/redis/connection.js';
import { type RedisServer, startRedisServer } from '../helpers/redis-server.js';

// Holds the server (single-threaded) in a Lua loop for `ms`: every client's command waits.
const BUSY = `local t0 = redis.call('TIME'); local start = t0[1] * 1000 + t0[2] / 1000
while true do local t = redis.call('TIME'); if t[1] * 1000 + t[2] / 1000 - start > tonumber(ARGV[1]) then break end end
return 1`;

/** The queue factory's producer queue (shared/redis/queues.ts, openQueue with `producer`). */
describe('producer queue', () => {
  let server: RedisServer;
  beforeAll(async () => {
    // Its own server: the busy script would stall every other test on the shared one.
    server = await startRedisServer();
  });
  afterAll(async () => {
    await server?.stop();
  });

  async function addAfterSlowStart(
    make: (conn: ReturnType<typeof createRedis>) => Queue,
  ): Promise<PromiseSettledResult<unknown>> {
    const producer = createRedis(server.url, 'producer');
    const blocker = createRedis(server.url, 'worker');
    try {
      if (producer.status !== 'ready') await new Promise((r) => producer.once('ready', r));
      await blocker.ping();
      const busy = blocker.eval(BUSY, 0, '3000');
      // Time for the script to be running before the queue is built, with room for a loaded machine.
      await new Promise((r) => setTimeout(r, 300));
      // Built while Redis is stalled for longer than the producer's 2 s command timeout (2.7 s left).
      const queue = make(producer);
      queue.on('error', () => undefined);
      await busy;
      const [added] = await Promise.allSettled([queue.add('x', { n: 1 }, { jobId: 'j1' })]);
      await queue.close().catch(() => undefined);
      return added;
    } finally {
      producer.disconnect();
      blocker.disconnect();
    }
  }

  it('accepts jobs once Redis answers again, though Redis stalled while the queue was built', async () => {
    const added = await addAfterSlowStart((conn) =>
      openQueue({ name: `pq-${Date.now()}`, prefix: 'bull' }, conn, { producer: true }),
    );
    expect(added.status).toBe('fulfilled');
  });

  it('(control) a queue built with the version check stays broken after the same stall', async () => {
    const added = await addAfterSlowStart((conn) =>
      openQueue({ name: `pq-control-${Date.now()}`, prefix: 'bull' }, conn),
    );
    expect(added.status).toBe('rejected');
  });
});
