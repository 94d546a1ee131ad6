import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import {
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3';
import { StoreError } from '../../errors.js';
import { checkOptionNames } from '../options.js';
import { isValidKey, prefixCanMatchKeys, resolveListLimit, validateKey } from '../keys.js';
import {
  DEFAULT_CONTENT_TYPE,
  type ByteRange,
  type ListOptions,
  type ObjectMeta,
  type ObjectStore,
  type PutOptions,
  type StoreCredentials,
  type StoreLocation,
  type StoredObject,
} from '../types.js';
import { StarfishDocuments } from '../documents.js';

/**
 * Few attempts with the SDK's backoff: enough to ride out a blip, short enough
 * that an outage surfaces quickly (the encoder has its own BullMQ retries).
 */
const MAX_ATTEMPTS = 3;
/** An unreachable endpoint should fail fast rather than hang a request or /readyz. */
const CONNECTION_TIMEOUT_MS = 2_000;
/** Generous for one batch file (a few MB), still bounded. */
const REQUEST_TIMEOUT_MS = 10_000;
/** Pause before sending a GET again whose body broke off (times the attempt number). */
const BODY_RETRY_DELAY_MS = 100;
/** ListObjectsV2 never returns more than this per page. */
const MAX_KEYS_PER_PAGE = 1000;

/** User metadata key (`x-amz-meta-sha256`) holding the hex sha256 recorded at put. */
const SHA256_META = 'sha256';
/**
 * sha256s of objects written without that metadata (before it existed, or by another writer),
 * hashed once per process: keyed by key and S3 ETag, so a replaced object is hashed again.
 */
const LEGACY_HASH_CACHE_ENTRIES = 10_000;

/**
 * Client settings that make one client work on AWS S3 and on S3-compatible servers alike. The
 * SDK's defaults (since 3.729) add CRC checksums to every request and send streamed bodies as
 * `aws-chunked` with a checksum trailer, which Ceph RGW 16 answers with 411
 * MissingContentLength (test/integration/rgw.test.ts shows it). `WHEN_REQUIRED` sends a
 * checksum only where the operation demands one and validates responses only then; AWS accepts
 * both. RGW 16 ignores `x-amz-checksum-*` headers anyway (a wrong one is accepted), so they would
 * prove nothing there; it does check `Content-MD5`.
 */
export const S3_COMPATIBLE_CLIENT_SETTINGS = {
  requestChecksumCalculation: 'WHEN_REQUIRED',
  responseChecksumValidation: 'WHEN_REQUIRED',
} as const satisfies Partial<S3ClientConfig>;

/** Error names that are configuration or permission problems: retrying cannot help. */
const NON_RETRIABLE_NAMES = new Set([
  'CredentialsProviderError',
  'NoSuchBucket',
  'AccessDenied',
  'InvalidAccessKeyId',
  'SignatureDoesNotMatch',
  'InvalidBucketName',
  'PermanentRedirect',
]);

/** Error names S3 (and compatibles) use for overload or transient trouble, whatever the status code. */
const RETRIABLE_NAMES = new Set([
  'SlowDown',
  'Throttling',
  'ThrottlingException',
  'TooManyRequestsException',
  'RequestTimeout',
  'RequestTimeoutException',
  'TimeoutError',
  'InternalError',
  'ServiceUnavailable',
]);

export interface S3ObjectStoreOptions {
  bucket: string;
  /** Folder inside the bucket (`data` and `data/` both mean keys under `data/`); added on write, stripped on list. */
  prefix?: string;
  /** For S3-compatible servers (MinIO, R2, s3rver); omit for AWS. */
  endpoint?: string;
  /** Defaults to `us-east-1`, which S3-compatible servers generally accept. */
  region?: string;
  /** Path-style URLs (`endpoint/bucket/key`), needed by MinIO and most local servers. */
  forcePathStyle?: boolean;
  /** Omit to use the SDK's default credential chain. */
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  /**
   * The Starfish reference server's flat credentials (its `S3ObjectStore({ bucket, endpoint,
   * region, accessKeyId, secretAccessKey, forcePathStyle })`): both or neither, and not beside
   * `credentials`. With them, `forcePathStyle` defaults to true, as in the reference.
   */
  accessKeyId?: string;
  secretAccessKey?: string;
  /** A ready client; when given, endpoint/region/credentials only describe it and are not applied. */
  client?: S3Client;
}

const S3_OPTIONS = [
  'bucket',
  'prefix',
  'endpoint',
  'region',
  'forcePathStyle',
  'credentials',
  'accessKeyId',
  'secretAccessKey',
  'client',
] as const;

/** The credentials to hand the SDK: `credentials`, the flat pair, or undefined (the SDK's chain). */
function resolveCredentials(opts: S3ObjectStoreOptions): S3ObjectStoreOptions['credentials'] {
  const flat = opts.accessKeyId !== undefined || opts.secretAccessKey !== undefined;
  if (!flat) return opts.credentials;
  if (opts.credentials !== undefined) {
    throw new StoreError('S3 store got both credentials and accessKeyId/secretAccessKey; give one of them', {
      retriable: false,
    });
  }
  if (
    typeof opts.accessKeyId !== 'string' ||
    opts.accessKeyId === '' ||
    typeof opts.secretAccessKey !== 'string' ||
    opts.secretAccessKey === ''
  ) {
    const missing = typeof opts.accessKeyId !== 'string' || opts.accessKeyId === '' ? 'accessKeyId' : 'secretAccessKey';
    throw new StoreError(
      `S3 store got ${missing === 'accessKeyId' ? 'secretAccessKey' : 'accessKeyId'} without a non-empty ${missing}`,
      { retriable: false },
    );
  }
  return { accessKeyId: opts.accessKeyId, secretAccessKey: opts.secretAccessKey };
}

/**
 * An `ObjectStore` on S3 or an S3-compatible server. Every failure becomes a
 * `StoreError`: 5xx, throttling and network failures are retriable, other
 * 4xx are not. The connection settings are exposed so DuckDB SQL for the
 * same objects can be built from them.
 */
export class S3ObjectStore extends StarfishDocuments implements ObjectStore {
  readonly bucket: string;
  /** `''` or a folder ending in `/`. */
  readonly prefix: string;
  readonly endpoint: string | undefined;
  readonly region: string;
  readonly forcePathStyle: boolean;
  private readonly client: S3Client;
  /** The credentials given to the constructor (not those of a client passed in, nor the SDK's chain). */
  private readonly credentials: StoreCredentials | undefined;
  private readonly ownsClient: boolean;
  private destroyed = false;
  private readonly legacyHashes = new Map<string, string>();

  constructor(opts: S3ObjectStoreOptions) {
    super();
    checkOptionNames('S3ObjectStore', opts, S3_OPTIONS);
    if (typeof opts.bucket !== 'string' || opts.bucket.length === 0) {
      throw new StoreError('S3 store needs a bucket', { retriable: false });
    }
    const credentials = resolveCredentials(opts);
    this.bucket = opts.bucket;
    this.prefix = normalizePrefix(opts.prefix);
    this.endpoint = opts.endpoint;
    this.region = opts.region ?? 'us-east-1';
    this.forcePathStyle = opts.forcePathStyle ?? opts.accessKeyId !== undefined;
    this.ownsClient = opts.client === undefined;
    this.credentials = opts.client === undefined && credentials !== undefined ? { ...credentials } : undefined;
    this.client =
      opts.client ??
      new S3Client({
        region: this.region,
        endpoint: opts.endpoint,
        forcePathStyle: this.forcePathStyle,
        credentials,
        maxAttempts: MAX_ATTEMPTS,
        ...S3_COMPATIBLE_CLIENT_SETTINGS,
        requestHandler: {
          connectionTimeout: CONNECTION_TIMEOUT_MS,
          requestTimeout: REQUEST_TIMEOUT_MS,
          // Without this the SDK only logs a warning when requestTimeout passes.
          throwOnRequestTimeout: true,
        },
      });
  }

  /** Uploads the whole object in one PutObject; S3 makes it visible only once complete. */
  async putBytes(key: string, body: Uint8Array, opts: PutOptions = {}): Promise<void> {
    validateKey(key);
    try {
      await this.client.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: this.prefix + key,
          // A Buffer view (no copy) lets the SDK set Content-Length and hash the payload in one pass.
          Body: Buffer.from(body.buffer, body.byteOffset, body.byteLength),
          ContentType: opts.contentType,
          // Read back by head(): pull's ETag and 304 without fetching the object.
          Metadata: { [SHA256_META]: createHash('sha256').update(body).digest('hex') },
        }),
      );
    } catch (err) {
      throw toStoreError('put', key, err);
    }
  }

  /**
   * PutObject with `If-None-Match: *` through this store's own client (its endpoint and
   * credentials): S3 answers 412 when the key exists, and of concurrent creators exactly one
   * succeeds. AWS S3 honours it (since 2024-08), as Ceph RGW 16.2 does (the conformance suite on
   * RGW proves it); s3rver ignores the header and overwrites, so on such a server concurrent
   * creators must be kept apart by a lock (the Iceberg committer holds the prefix's rollup lock).
   */
  async createIfAbsent(key: string, body: Uint8Array, opts: PutOptions = {}): Promise<boolean> {
    validateKey(key);
    try {
      await this.client.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: this.prefix + key,
          Body: Buffer.from(body.buffer, body.byteOffset, body.byteLength),
          ContentType: opts.contentType,
          Metadata: { [SHA256_META]: createHash('sha256').update(body).digest('hex') },
          IfNoneMatch: '*',
        }),
      );
      return true;
    } catch (err) {
      const { name, status } = errorFacts(err);
      // 412: the key exists. 409 ConditionalRequestConflict (AWS): a concurrent conditional put of the key is in flight, i.e. another creator.
      if (status === 412 || status === 409 || name === 'PreconditionFailed') return false;
      throw toStoreError('conditional create', key, err);
    }
  }

  /**
   * The object and its stored content type, or null on NoSuchKey / 404 (a missing bucket is an error).
   * The SDK retries a request that fails before its response; a connection that drops while the
   * body is read fails after the SDK has returned, so that GET is sent again here, up to
   * MAX_ATTEMPTS reads in all.
   */
  async getBytes(key: string): Promise<StoredObject | null> {
    validateKey(key);
    for (let attempt = 1; ; attempt++) {
      let res;
      try {
        res = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }));
      } catch (err) {
        if (isMissingObject(err)) return null;
        throw toStoreError('get', key, err);
      }
      let body: Uint8Array;
      try {
        body = res.Body === undefined ? new Uint8Array(0) : await res.Body.transformToByteArray();
      } catch (err) {
        const failure = toStoreError('get', key, err);
        if (!failure.retriable || attempt >= MAX_ATTEMPTS) throw failure;
        await new Promise((resolve) => setTimeout(resolve, BODY_RETRY_DELAY_MS * attempt));
        continue;
      }
      return { body, contentType: res.ContentType ?? DEFAULT_CONTENT_TYPE } satisfies StoredObject;
    }
  }

  /**
   * HeadObject: size, content type and the sha256 stored as object metadata at put. An object
   * without it is read and hashed once per process (see LEGACY_HASH_CACHE_ENTRIES).
   */
  async head(key: string): Promise<ObjectMeta | null> {
    validateKey(key);
    let res;
    try {
      res = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }));
    } catch (err) {
      if (isMissingObject(err)) return null;
      throw toStoreError('head', key, err);
    }
    const size = res.ContentLength ?? 0;
    let sha256 = res.Metadata?.[SHA256_META];
    if (sha256 === undefined || !/^[0-9a-f]{64}$/.test(sha256)) {
      const cacheKey = `${key}\n${res.ETag ?? ''}`;
      sha256 = this.legacyHashes.get(cacheKey);
      if (sha256 === undefined) {
        const obj = await this.getBytes(key);
        if (obj === null) return null;
        sha256 = createHash('sha256').update(obj.body).digest('hex');
        if (this.legacyHashes.size >= LEGACY_HASH_CACHE_ENTRIES)
          this.legacyHashes.delete(this.legacyHashes.keys().next().value as string);
        this.legacyHashes.set(cacheKey, sha256);
      }
    }
    const meta: ObjectMeta = { size, sha256 };
    if (res.ContentType !== undefined) meta.contentType = res.ContentType;
    return meta;
  }

  /** GetObject (with `Range: bytes=start-end` when given) as a stream; null on a missing object. */
  async getStream(key: string, range?: ByteRange): Promise<Readable | null> {
    validateKey(key);
    try {
      const res = await this.client.send(
        new GetObjectCommand({
          Bucket: this.bucket,
          Key: this.prefix + key,
          Range: range === undefined ? undefined : `bytes=${range.start}-${range.end}`,
        }),
      );
      const body =
        res.Body === undefined
          ? Readable.from([])
          : res.Body instanceof Readable
            ? res.Body
            : Readable.from([await res.Body.transformToByteArray()]);
      if (range === undefined) return body;
      // A server that ignored or widened the Range (s3rver sends the whole object for `bytes=0-0`): cut it here.
      const sent = /^bytes (\d+)-(\d+)\//.exec(res.ContentRange ?? '');
      const sentStart = sent ? Number(sent[1]) : 0;
      if (sent && sentStart === range.start && Number(sent[2]) === range.end) return body;
      return Readable.from(sliceStream(body, { start: range.start - sentStart, end: range.end - sentStart }));
    } catch (err) {
      if (isMissingObject(err)) return null;
      throw toStoreError('get', key, err);
    }
  }

  /**
   * Keys under `prefix` via ListObjectsV2 (which lists in UTF-8 byte order),
   * following continuation tokens until `limit` keys are gathered or the
   * listing ends. Keys that are not valid store keys (e.g. console-made
   * `folder/` markers) are skipped because they could not be read back.
   */
  async listKeys(prefix: string, opts: ListOptions = {}): Promise<string[]> {
    const limit = resolveListLimit(opts.limit);
    if (limit === 0 || !prefixCanMatchKeys(prefix)) return [];
    const startAfter = opts.startAfter === undefined ? undefined : this.prefix + opts.startAfter;
    const out: string[] = [];
    let token: string | undefined;
    try {
      // Each pass consumes one page and the token must change, so this ends with the listing.
      for (;;) {
        const res = await this.client.send(
          new ListObjectsV2Command({
            Bucket: this.bucket,
            Prefix: this.prefix + prefix,
            // The token already encodes the position; some compatible servers mishandle both together.
            StartAfter: token === undefined ? startAfter : undefined,
            ContinuationToken: token,
            MaxKeys: Math.min(MAX_KEYS_PER_PAGE, limit - out.length),
          }),
        );
        for (const object of res.Contents ?? []) {
          const full = object.Key;
          if (full === undefined || !full.startsWith(this.prefix)) continue;
          const key = full.slice(this.prefix.length);
          if (!isValidKey(key)) continue;
          out.push(key);
          if (out.length >= limit) return out;
        }
        if (res.IsTruncated !== true) return out;
        const next = res.NextContinuationToken;
        if (next === undefined || next === '' || next === token) {
          throw new StoreError(
            `S3 list of ${JSON.stringify(prefix)}: truncated page without a new continuation token`,
            {
              retriable: false,
            },
          );
        }
        token = next;
      }
    } catch (err) {
      throw toStoreError('list', prefix, err);
    }
  }

  /** DeleteObjects, up to 1,000 keys a call; any per-key error fails the whole call (retry is safe). */
  async deleteKeys(keys: readonly string[]): Promise<void> {
    for (const key of keys) validateKey(key);
    for (let i = 0; i < keys.length; i += MAX_KEYS_PER_PAGE) {
      const chunk = keys.slice(i, i + MAX_KEYS_PER_PAGE);
      let res;
      try {
        res = await this.client.send(
          new DeleteObjectsCommand({
            Bucket: this.bucket,
            Delete: { Objects: chunk.map((k) => ({ Key: this.prefix + k })), Quiet: true },
          }),
        );
      } catch (err) {
        throw toStoreError('delete', chunk[0] ?? '', err);
      }
      const failed = (res.Errors ?? []).filter((e) => e.Code !== 'NoSuchKey');
      if (failed.length > 0) {
        throw new StoreError(
          `S3 delete of ${failed.length} key(s) failed (first: ${JSON.stringify(failed[0]?.Key)}: ${failed[0]?.Code ?? 'error'})`,
          { retriable: true },
        );
      }
    }
  }

  /** HeadBucket: proves the endpoint answers, the credentials work and the bucket exists. */
  async healthcheck(): Promise<void> {
    try {
      await this.client.send(new HeadBucketCommand({ Bucket: this.bucket }));
    } catch (err) {
      throw toStoreError('healthcheck', this.bucket, err);
    }
  }

  describe(): string {
    const where = `s3://${this.bucket}${this.prefix === '' ? '' : `/${this.prefix}`}`;
    return this.endpoint === undefined ? where : `${where} (${this.endpoint})`;
  }

  /**
   * The bucket, prefix and connection settings (DuckDB's S3 secret is built from them), with the
   * credentials this store was given: never log the result.
   */
  location(): StoreLocation {
    return {
      kind: 's3',
      rootUri: `s3://${this.bucket}/${this.prefix}`,
      bucket: this.bucket,
      prefix: this.prefix,
      region: this.region,
      ...(this.endpoint === undefined ? {} : { endpoint: this.endpoint }),
      forcePathStyle: this.forcePathStyle,
      ...(this.credentials === undefined ? {} : { credentials: { ...this.credentials } }),
    };
  }

  /** The contract's name for {@link S3ObjectStore.destroy}. */
  async close(): Promise<void> {
    this.destroy();
  }

  /**
   * Closes the sockets of a client this store created (not one passed in).
   * Idempotent; the store must not be used afterwards.
   */
  destroy(): void {
    if (this.destroyed || !this.ownsClient) return;
    this.destroyed = true;
    this.client.destroy();
  }
}

/** Bytes `range.start..range.end` of a stream of the whole object; stops reading once past the end. */
async function* sliceStream(src: Readable, range: ByteRange): AsyncGenerator<Buffer> {
  let pos = 0;
  for await (const chunk of src) {
    const b = chunk as Buffer;
    const from = Math.max(range.start - pos, 0);
    const to = Math.min(range.end + 1 - pos, b.length);
    if (to > from) yield b.subarray(from, to);
    pos += b.length;
    if (pos > range.end) break;
  }
  src.destroy();
}

/** `'a/b'`, `'/a/b/'` → `'a/b/'`; absent or `''` → `''`. Segments follow the key rules so the prefix cannot hide `..`. */
function normalizePrefix(prefix: string | undefined): string {
  if (prefix === undefined) return '';
  const trimmed = prefix.replace(/^\/+/, '').replace(/\/+$/, '');
  if (trimmed === '') return '';
  if (!isValidKey(trimmed)) {
    throw new StoreError(`invalid S3 key prefix ${JSON.stringify(prefix)}`, { retriable: false });
  }
  return `${trimmed}/`;
}

interface ErrorFacts {
  name: string | undefined;
  status: number | undefined;
  code: string | undefined;
}

function errorFacts(err: unknown): ErrorFacts {
  if (typeof err !== 'object' || err === null) return { name: undefined, status: undefined, code: undefined };
  const record = err as { name?: unknown; code?: unknown; $metadata?: { httpStatusCode?: unknown } };
  const status = record.$metadata?.httpStatusCode;
  return {
    name: typeof record.name === 'string' ? record.name : undefined,
    status: typeof status === 'number' ? status : undefined,
    code: typeof record.code === 'string' ? record.code : undefined,
  };
}

function isMissingObject(err: unknown): boolean {
  const { name, status } = errorFacts(err);
  if (name === 'NoSuchBucket') return false;
  return name === 'NoSuchKey' || name === 'NotFound' || status === 404;
}

function isRetriable({ name, status }: ErrorFacts): boolean {
  if (name !== undefined && NON_RETRIABLE_NAMES.has(name)) return false;
  if (name !== undefined && RETRIABLE_NAMES.has(name)) return true;
  if (status !== undefined) return status >= 500 || status === 429 || status === 408;
  // No HTTP response at all: refused, reset, DNS, timeout. The store may come back.
  return true;
}

function toStoreError(op: string, target: string, err: unknown): StoreError {
  if (err instanceof StoreError) return err;
  const facts = errorFacts(err);
  const parts = [facts.name ?? 'error'];
  if (facts.status !== undefined) parts.push(`HTTP ${facts.status}`);
  if (facts.code !== undefined && facts.code !== facts.name) parts.push(facts.code);
  return new StoreError(`S3 ${op} of ${JSON.stringify(target)} failed: ${parts.join(', ')}`, {
    retriable: isRetriable(facts),
    cause: err,
  });
}
