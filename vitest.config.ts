import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // The package's own name resolves to the sources in tests (package.json's exports point at dist/).
  resolve: {
    alias: [
      { find: /^events-ingest$/, replacement: fileURLToPath(new URL('./index.ts', import.meta.url)) },
      { find: /^events-ingest\/s3$/, replacement: fileURLToPath(new URL('./shared/store/s3.ts', import.meta.url)) },
    ],
  },
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
