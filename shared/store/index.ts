export type {
  ByteRange,
  CreateIfAbsent,
  ListOptions,
  ObjectMeta,
  ObjectStore,
  PutOptions,
  StoreCredentials,
  StoreLocation,
  StoredObject,
} from './types.js';
export { MemoryObjectStore } from './memory/index.js';
export { FilesystemObjectStore } from './filesystem/index.js';
export type { FilesystemObjectStoreOptions } from './filesystem/index.js';
export { S3ObjectStore } from './s3/index.js';
export type { S3ObjectStoreOptions } from './s3/index.js';
export { compareKeys, isValidKey, prefixCanMatchKeys, validateKey, MAX_KEY_BYTES } from './keys.js';
export { type StoreSpec, createStore } from './create.js';
export { closeStore, requireCreateIfAbsent } from './optional.js';
