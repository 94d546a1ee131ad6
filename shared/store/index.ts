export type { ByteRange, ListOptions, ObjectMeta, ObjectStore, PutOptions, StoredObject } from './types.js';
export { MemoryObjectStore } from './memory.js';
export { FilesystemObjectStore } from './filesystem.js';
export type { FilesystemObjectStoreOptions } from './filesystem.js';
export { S3ObjectStore } from './s3.js';
export type { S3ObjectStoreOptions } from './s3.js';
export { compareKeys, isValidKey, prefixCanMatchKeys, validateKey, MAX_KEY_BYTES } from './keys.js';
