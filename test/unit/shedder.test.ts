import { describe, expect, it } from 'vitest';
import type { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import { LoadShedder } from '../../services/api/shedder.js';

/** A Redis that answers INFO memory with whatever `used` holds now. */
function fakes(state: { used: number; max: number; waiting?: number }) {
  const redis = {
    info: async () => `# Memory\r\nused_memory:${state.used}\r\nmaxmemory:${state.max}\r\n`,
  } as unknown as Redis;
  const queue = {
    getJobCounts: async () => ({ waiting: state.waiting ?? 0, prioritized: 0, delayed: 0 }),
  } as unknown as Queue;
  return { redis, queue };
}

describe('LoadShedder', () => {
  it('sheds on the sampled memory ratio and on the backlog', async () => {
    const state = { used: 70, max: 100, waiting: 0 };
    const s = new LoadShedder({ ...fakes(state), maxWaiting: 10, maxMemoryRatio: 0.8 });
    await s.sample();
    expect(s.shedReason()).toBeNull();
    state.used = 85;
    await s.sample();
    expect(s.shedReason()).toMatch(/Redis memory at 85% of maxmemory/);
    state.used = 10;
    state.waiting = 10;
    await s.sample();
    expect(s.shedReason()).toMatch(/backlog of 10 batches/);
  });

  it('adds the writes noted since the last sample, so a burst sheds before the next sample', async () => {
    const state = { used: 700, max: 1000 };
    const s = new LoadShedder({ ...fakes(state), maxWaiting: 1e9, maxMemoryRatio: 0.8 });
    await s.sample();
    s.noteWrite(60);
    expect(s.shedReason()).toBeNull();
    s.noteWrite(60);
    expect(s.shedReason()).toMatch(/Redis memory at 82% of maxmemory \(with this process's writes/);
    // The next sample sees those writes in used_memory; they are no longer counted twice.
    state.used = 760;
    await s.sample();
    expect(s.shedReason()).toBeNull();
    s.noteWrite(30);
    expect(s.shedReason()).toBeNull();
  });

  it('ignores writes when Redis has no maxmemory', async () => {
    const s = new LoadShedder({ ...fakes({ used: 5e9, max: 0 }), maxWaiting: 1e9, maxMemoryRatio: 0.8 });
    await s.sample();
    s.noteWrite(1e12);
    expect(s.shedReason()).toBeNull();
  });
});
