import { resolve } from 'node:path';
import type { StoreSlice } from '../config-slices.js';
import { createStore } from './create.js';
import type { ObjectStore } from './types.js';

/** The store the environment asks for: `fs` under DATA_DIR, `s3` (S3_*), or `memory`. */
export function storeFromEnv(env: StoreSlice): ObjectStore {
  if (env.STORE === 's3') {
    return createStore({
      kind: 's3',
      bucket: env.S3_BUCKET as string,
      prefix: env.S3_PREFIX || undefined,
      endpoint: env.S3_ENDPOINT,
      region: env.S3_REGION,
      forcePathStyle: env.S3_FORCE_PATH_STYLE,
    });
  }
  if (env.STORE === 'memory') return createStore({ kind: 'memory' });
  return createStore({ kind: 'filesystem', root: resolve(env.DATA_DIR) });
}
