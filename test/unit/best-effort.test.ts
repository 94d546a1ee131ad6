import { Registry } from 'prom-client';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BEST_EFFORT_FAILURES, BEST_EFFORT_LOG_MS, bestEffort, bestEffortCounter } from '../../shared/best-effort.js';
import { createLogger } from '../../shared/logger.js';
import type { RedisClient } from '../../shared/redis/connection.js';
import { LOCK_TTL_MS, acquirePrefixLock } from '../../shared/redis/rollup-keys.js';

/** A logger whose JSON lines land in `lines` (pino writes to a custom stream synchronously). */
function capture(): { logger: ReturnType<typeof createLogger>; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger({
    level: 'info',
    name: 'test',
    destination: { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) },
  });
  return { logger, lines };
}

async function failures(registry: Registry): Promise<Record<string, number>> {
  const m = (await registry.getMetricsAsJSON()).find((x) => x.name === BEST_EFFORT_FAILURES);
  return Object.fromEntries((m?.values ?? []).map((v) => [String(v.labels.what), v.value]));
}

describe('bestEffort: failed best-effort work is logged (throttled) and counted, never thrown', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('resolves whatever the work does; a failure counts once under its what', async () => {
    const registry = new Registry();
    const counter = bestEffortCounter(registry, ['dead_letter_release']);
    const { logger, lines } = capture();
    await expect(
      bestEffort('dead_letter_release', Promise.resolve('done'), { logger, counter }),
    ).resolves.toBeUndefined();
    expect(await failures(registry)).toEqual({ dead_letter_release: 0 });
    expect(lines).toHaveLength(0);

    await expect(
      bestEffort('dead_letter_release', Promise.reject(new Error('Connection is closed.')), { logger, counter }),
    ).resolves.toBeUndefined();
    await bestEffort('queue_gauges', Promise.reject(new Error('boom')), { logger, counter });
    expect(await failures(registry)).toEqual({ dead_letter_release: 1, queue_gauges: 1 });
    expect(lines.map((l) => [l.level, l.msg, l.what, l.err, l.count])).toEqual([
      [40, 'best-effort work failed', 'dead_letter_release', 'Error: Connection is closed.', 1],
      [40, 'best-effort work failed', 'queue_gauges', 'Error: boom', 1],
    ]);
  });

  it('logs one line per interval per what, carrying the count since the previous line', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(1_000_000);
    const registry = new Registry();
    const counter = bestEffortCounter(registry);
    const { logger, lines } = capture();
    const fail = (what: string): Promise<void> =>
      bestEffort(what, Promise.reject(new Error('down')), { logger, counter });
    for (let i = 0; i < 5; i++) await fail('replay_release');
    await fail('replay_remove_old_job');
    expect(lines.map((l) => [l.what, l.count])).toEqual([
      ['replay_release', 1],
      ['replay_remove_old_job', 1],
    ]);
    vi.setSystemTime(1_000_000 + BEST_EFFORT_LOG_MS - 1);
    await fail('replay_release');
    expect(lines).toHaveLength(2);
    vi.setSystemTime(1_000_000 + BEST_EFFORT_LOG_MS);
    await fail('replay_release');
    expect(lines.map((l) => [l.what, l.count])).toEqual([
      ['replay_release', 1],
      ['replay_remove_old_job', 1],
      ['replay_release', 6],
    ]);
    // Every failure is counted, logged or not.
    expect(await failures(registry)).toEqual({ replay_release: 7, replay_remove_old_job: 1 });
  });

  it('never logs more than the error name and a bounded message', async () => {
    const { logger, lines } = capture();
    await bestEffort('queue_gauges', Promise.reject(new TypeError('x'.repeat(1000))), { logger });
    await bestEffort('plan_after_roll', Promise.reject({ distinct_id: 'someone' }), { logger });
    expect(lines[0]?.err).toBe(`TypeError: ${'x'.repeat(200)}`);
    expect(lines[1]?.err).toBe('unknown');
    expect(JSON.stringify(lines)).not.toContain('someone');
  });

  it('one counter per registry, however many services register it', () => {
    const registry = new Registry();
    const a = bestEffortCounter(registry, ['dead_letter_release']);
    const b = bestEffortCounter(registry, ['queue_gauges']);
    expect(b).toBe(a);
    expect(registry.getMetricsAsArray().filter((m) => m.name === BEST_EFFORT_FAILURES)).toHaveLength(1);
  });
});

describe('the rollup prefix lock: a failed renewal or release is logged and counted', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('counts rollup_lock_renew and rollup_lock_release when Redis fails them, and release still resolves', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    const registry = new Registry();
    const counter = bestEffortCounter(registry, ['rollup_lock_renew', 'rollup_lock_release']);
    const { logger, lines } = capture();
    const calls: string[] = [];
    // Pure logic over a stand-in: SET NX succeeds, every script call fails as a closed connection does.
    // The scripts module defines its commands on it (shared/redis/scripts.ts); the lock's two fail.
    const stand: Record<string, unknown> = {
      set: () => Promise.resolve('OK'),
      defineCommand: (name: string) => {
        stand[name] = () => {
          calls.push(name === 'ingestLockRenew' ? 'renew' : name === 'ingestLockRelease' ? 'release' : name);
          return Promise.reject(new Error('Connection is closed.'));
        };
      },
    };
    const redis = stand as unknown as RedisClient;
    const lock = await acquirePrefixLock(redis, 'q', 'events/app=a', 'job-1', { logger, counter });
    expect(lock).not.toBeNull();
    vi.advanceTimersByTime(Math.floor(LOCK_TTL_MS / 3));
    await vi.waitFor(async () => expect((await failures(registry)).rollup_lock_renew).toBe(1));
    await expect(lock!.release()).resolves.toBeUndefined();
    expect(calls).toEqual(['renew', 'release']);
    expect(await failures(registry)).toEqual({ rollup_lock_renew: 1, rollup_lock_release: 1 });
    expect(lines.map((l) => l.what)).toEqual(['rollup_lock_renew', 'rollup_lock_release']);
  });
});
