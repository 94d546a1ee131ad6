import { FilesystemObjectStore } from './filesystem/index.js';
import { MemoryObjectStore } from './memory/index.js';
import { S3ObjectStore, type S3ObjectStoreOptions } from './s3/index.js';
import type { ObjectStore } from './types.js';

/** Which backend to build, with its options (the constructors' own). */
export type StoreSpec =
  { kind: 'filesystem'; root: string } | ({ kind: 's3' } & S3ObjectStoreOptions) | { kind: 'memory' };

/**
 * A store of the kind `spec` names. Code outside shared/store/ builds stores here (or through
 * storeFromEnv), so it depends on the ObjectStore contract and never on a backend's class.
 */
export function createStore(spec: StoreSpec): ObjectStore {
  if (spec.kind === 'filesystem') return new FilesystemObjectStore({ root: spec.root });
  if (spec.kind === 'memory') return new MemoryObjectStore();
  const { kind: _kind, ...opts } = spec;
  return new S3ObjectStore(opts);
}
