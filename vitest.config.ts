import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Integration files start processes and servers; two cores do not gain from more workers.
    maxWorkers: 2,
    pool: 'forks',
  },
});
