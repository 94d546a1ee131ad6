import { resolve } from 'node:path';
import type { StoreSlice } from '../config-slices.js';
import { FilesystemObjectStore } from './filesystem/index.js';
import { MemoryObjectStore } from './memory/index.js';
import { S3ObjectStore } from './s3/index.js';
import type { ObjectStore } from './types.js';

/** The store the environment asks for: `fs` under DATA_DIR, `s3` (S3_*), or `memory`. */
export function storeFromEnv(env: StoreSlice): ObjectStore {
  if (env.STORE === 's3') {
    return new S3ObjectStore({
      bucket: env.S3_BUCKET as string,
      prefix: env.S3_PREFIX || undefined,
      endpoint: env.S3_ENDPOINT,
      region: env.S3_REGION,
      forcePathStyle: env.S3_FORCE_PATH_STYLE,
    });
  }
  if (env.STORE === 'memory') return new MemoryObjectStore();
  return new FilesystemObjectStore({ root: resolve(env.DATA_DIR) });
}
