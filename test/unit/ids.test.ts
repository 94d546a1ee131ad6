import { describe, expect, it } from 'vitest';
import { randomHex, randomSuffix } from '../../shared/ids.js';

describe('pooled random hex', () => {
  it('hands out each pooled byte once, across refills of the pool', () => {
    // 1,000 × 8 bytes crosses the 4 KiB pool twice; 64-bit values repeat only by a fault.
    const seen = new Set<string>();
    for (let i = 0; i < 1000; i++) {
      const h = randomHex(8);
      expect(h).toMatch(/^[0-9a-f]{16}$/);
      seen.add(h);
    }
    expect(seen.size).toBe(1000);
    // The bytes are not all of one value (a pool left unfilled would be zeros).
    const joined = [...seen].join('');
    expect(new Set(joined).size).toBe(16);
    expect(randomSuffix()).toMatch(/^[0-9a-f]{6}$/);
  });

  it('refuses sizes outside 1-64 bytes', () => {
    for (const bad of [0, -1, 65, 1.5, Number.NaN]) expect(() => randomHex(bad)).toThrow(RangeError);
    expect(randomHex(64)).toMatch(/^[0-9a-f]{128}$/);
  });
});
