import { describe, expect, it } from 'vitest';
import { coreCeilingEventsPerSec } from '../../bench/lib.js';

describe('coreCeilingEventsPerSec', () => {
  it('is the batches every core can run at that CPU per batch, in events', () => {
    // 2 cores at 2.0 ms a batch: 1,000 batches/s; at 100 events each, 100,000 events/s.
    expect(coreCeilingEventsPerSec(2, 2, 100)).toBe(100_000);
    expect(coreCeilingEventsPerSec(2, 14.5, 1000)).toBeCloseTo(137_931, 0);
    expect(coreCeilingEventsPerSec(4, 1, 10)).toBe(40_000);
  });

  it('is NaN, not Infinity, when nothing was measured', () => {
    expect(coreCeilingEventsPerSec(2, 0, 100)).toBeNaN();
    expect(coreCeilingEventsPerSec(2, Number.NaN, 100)).toBeNaN();
    expect(coreCeilingEventsPerSec(0, 2, 100)).toBeNaN();
  });
});
