import { describe, expect, it } from 'vitest';
import { MALLOC_ENV, withMallocEnv } from '../../shared/malloc-env.js';

describe('withMallocEnv (the environment services/main.ts forks its encoder processes with)', () => {
  it("adds glibc's mmap threshold to an environment without them", () => {
    expect(withMallocEnv({ PATH: '/bin' })).toEqual({ PATH: '/bin', ...MALLOC_ENV });
    expect(MALLOC_ENV.MALLOC_MMAP_THRESHOLD_).toBe('1048576');
  });

  it("keeps an operator's own value", () => {
    expect(withMallocEnv({ MALLOC_MMAP_THRESHOLD_: '131072' }).MALLOC_MMAP_THRESHOLD_).toBe('131072');
  });
});
