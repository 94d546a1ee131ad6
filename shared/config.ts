import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { PARQUET_COMPRESSIONS, PARQUET_COMPRESSION_DEFAULT, type ParquetCompression } from './parquet/compression.js';
import { parseStoragePath } from './paths.js';
import { redisUrlProblem } from './redis/url.js';
import { ConfigError } from './errors.js';

/** Raised when configuration is invalid; the message names the field. Entry points print it and exit 1. */
// ConfigError lives in errors.ts (the Redis room throws it too); config users import it from here.
export { ConfigError };

const JSON_MIME_RE = /^application\/(?:[a-z0-9.+-]+\+)?json$/i;

/** True for `application/json` and `application/<x>+json`: what makes a collection JSON-typed. */
export function isJsonMimeType(mime: string): boolean {
  return JSON_MIME_RE.test(mime);
}

const positiveMs = z
  .number()
  .int()
  .positive()
  .max(24 * 3600 * 1000);
const positiveCount = z.number().int().positive();
const BucketSchema = z.enum(['identity', 'ip', 'identity+ip']);
const RateLimitDimensionSchema = z
  .object({ windowMs: positiveMs.optional(), maxRequests: positiveCount.optional() })
  .strict();

/**
 * One rate-limit rule for push, pull or list, in the reference's (Starfish) shape: a single
 * counter (`windowMs`, `maxRequests`, `bucket`), or independent `identity` / `ip` sub-limits.
 * Missing `windowMs`/`maxRequests` inherit from the collection's flat fields, then from the
 * global `rateLimit`.
 */
const RateLimitRuleSchema = z
  .object({
    windowMs: positiveMs.optional(),
    maxRequests: positiveCount.optional(),
    bucket: BucketSchema.optional(),
    identity: RateLimitDimensionSchema.optional(),
    ip: RateLimitDimensionSchema.optional(),
  })
  .strict()
  .refine((r) => !(r.bucket !== undefined && (r.identity !== undefined || r.ip !== undefined)), {
    message: 'cannot set both "bucket" and an "identity"/"ip" sub-limit; use one form or the other',
  });

/** Our own addition: events per window per list prefix (per `{app}`), counted on push. */
const AppEventsLimitSchema = z.object({ windowMs: positiveMs.default(1000), maxEvents: positiveCount }).strict();

const CollectionRateLimitSchema = z
  .object({
    windowMs: positiveMs.optional(),
    maxRequests: positiveCount.optional(),
    bucket: BucketSchema.optional(),
    push: RateLimitRuleSchema.optional(),
    pull: RateLimitRuleSchema.optional(),
    list: RateLimitRuleSchema.optional(),
    appEvents: AppEventsLimitSchema.optional(),
  })
  .strict();

/** The reference's global block: defaults for every collection rule that leaves them out. */
const GlobalRateLimitSchema = z
  .object({ windowMs: positiveMs.optional(), maxRequests: positiveCount.optional() })
  .strict();

export type RateLimitRule = z.infer<typeof RateLimitRuleSchema>;
export type CollectionRateLimit = z.infer<typeof CollectionRateLimitSchema>;
export type GlobalRateLimit = z.infer<typeof GlobalRateLimitSchema>;

/**
 * Default events per push at most (`maxEventsPerBatch`). Every event is a row whose cost does not
 * shrink with its size (about 200 bytes in an encoder: shared/byte-budget.ts, ENCODER_ROW_BYTES),
 * so an 8 MB body of 2.66 M empty events would cost an encoder over 500 MB. At this cap a batch
 * of `maxBodyBytes` (8 MB) costs at most 100,000 × 200 + 8,000,000 = 28 MB: one such batch fits
 * the encoder's default budget (ENCODER_MAX_INFLIGHT_BYTES, 32 MiB). SDKs flush 1-1,000 events.
 */
export const MAX_EVENTS_PER_BATCH_DEFAULT = 100_000;

const CollectionSchema = z
  .object({
    name: z.string().regex(/^[A-Za-z0-9._~-]{1,128}$/, 'must be 1-128 characters of [A-Za-z0-9._~-]'),
    storagePath: z.string().min(1),
    readRoles: z.array(z.string().min(1)).default(['admin']),
    writeRoles: z.array(z.string().min(1)).default(['public']),
    encryption: z.string().default('none'),
    allowedMimeTypes: z.array(z.string()).min(1).default(['application/json']),
    maxBodyBytes: z
      .number()
      .int()
      .positive()
      .max(256 * 1024 * 1024)
      .default(8_000_000),
    /** Events per push at most; a body with more gets 413 naming this (see MAX_EVENTS_PER_BATCH_DEFAULT). */
    maxEventsPerBatch: z.number().int().positive().max(10_000_000).default(MAX_EVENTS_PER_BATCH_DEFAULT),
    listable: z.boolean().default(false),
    rateLimit: CollectionRateLimitSchema.nullish(),
    /**
     * Our own addition: the codec of the collection's batch files (unset: PARQUET_COMPRESSION_DEFAULT,
     * `snappy`, which every Parquet reader opens without add-ons; docs/decisions/0022-batch-file-codec.md).
     * Rollup files keep the analysts' codec.
     */
    parquetCompression: z.enum(PARQUET_COMPRESSIONS).optional(),
  })
  .superRefine((c, ctx) => {
    try {
      parseStoragePath(c.storagePath);
    } catch (err) {
      ctx.addIssue({ code: 'custom', path: ['storagePath'], message: (err as Error).message });
    }
    if (c.encryption !== 'none') {
      ctx.addIssue({
        code: 'custom',
        path: ['encryption'],
        message: `events collections store plain Parquet; encryption must be "none" (got "${c.encryption}")`,
      });
    }
    const bad = c.allowedMimeTypes.filter((m) => !isJsonMimeType(m));
    if (bad.length > 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['allowedMimeTypes'],
        message: `an events collection must be JSON-typed (only application/json); not ${bad.map((m) => JSON.stringify(m)).join(', ')}`,
      });
    }
  });

export const SyncConfigSchema = z
  .object({
    version: z.literal(1),
    collections: z.array(CollectionSchema).min(1),
    rateLimit: GlobalRateLimitSchema.optional(),
    // Starfish mounts namespaces under /<name>/push/...; our routes have no such prefix.
    namespaces: z.unknown().optional(),
  })
  .superRefine((cfg, ctx) => {
    if (cfg.namespaces !== undefined && cfg.namespaces !== null) {
      ctx.addIssue({
        code: 'custom',
        path: ['namespaces'],
        message:
          'namespaces are not supported by events-ingest (routes have no /<namespace>/ prefix); list every collection under "collections" with distinct storagePaths, or run one deployment per namespace',
      });
    }
    cfg.collections.forEach((c, i) => {
      const rl = c.rateLimit;
      if (!rl) return;
      for (const action of ['push', 'pull', 'list'] as const) {
        const rule = rl[action];
        if (!rule) continue;
        const dims = rule.identity || rule.ip ? (['identity', 'ip'] as const).filter((d) => rule[d]) : [null];
        for (const d of dims) {
          const dim = d ? rule[d] : undefined;
          const windowMs = dim?.windowMs ?? rule.windowMs ?? rl.windowMs ?? cfg.rateLimit?.windowMs;
          const maxRequests = dim?.maxRequests ?? rule.maxRequests ?? rl.maxRequests ?? cfg.rateLimit?.maxRequests;
          if (windowMs === undefined || maxRequests === undefined) {
            ctx.addIssue({
              code: 'custom',
              path: ['collections', i, 'rateLimit', action, ...(d ? [d] : [])],
              message:
                "must resolve both windowMs and maxRequests: set them on the rule, on the collection's rateLimit, or on the global rateLimit",
            });
          }
        }
      }
    });
    const seen = new Set<string>();
    cfg.collections.forEach((c, i) => {
      if (seen.has(c.name))
        ctx.addIssue({
          code: 'custom',
          path: ['collections', i, 'name'],
          message: `duplicate collection name "${c.name}"`,
        });
      seen.add(c.name);
    });
    const routes = new Set<string>();
    cfg.collections.forEach((c, i) => {
      const shape = c.storagePath.replace(/\{[^}]*\}/g, '{}');
      if (routes.has(shape))
        ctx.addIssue({
          code: 'custom',
          path: ['collections', i, 'storagePath'],
          message: `routes of "${c.storagePath}" collide with another collection`,
        });
      routes.add(shape);
    });
  });

export type SyncConfig = z.infer<typeof SyncConfigSchema>;
export type CollectionConfig = SyncConfig['collections'][number];
/**
 * The batch-file codec of each collection by name (unset: PARQUET_COMPRESSION_DEFAULT): what an
 * encoder uses for a job, which names its collection. A name the config does not have gets the
 * default too (a job queued under an older config).
 */
export function compressionOfCollections(
  collections: readonly Pick<CollectionConfig, 'name' | 'parquetCompression'>[],
): (collection: string) => ParquetCompression {
  const byName = new Map(collections.map((c) => [c.name, c.parquetCompression ?? PARQUET_COMPRESSION_DEFAULT]));
  return (collection) => byName.get(collection) ?? PARQUET_COMPRESSION_DEFAULT;
}

/** What callers may pass (defaults filled in by parsing). */
export type SyncConfigInput = z.input<typeof SyncConfigSchema>;

/** The config used when no CONFIG_FILE is given. */
export const DEFAULT_SYNC_CONFIG: SyncConfigInput = {
  version: 1,
  collections: [
    {
      name: 'events',
      storagePath: 'events/{app}/{batchId}',
      readRoles: ['admin'],
      writeRoles: ['public'],
      encryption: 'none',
      allowedMimeTypes: ['application/json'],
      maxBodyBytes: 8_000_000,
      listable: true,
    },
  ],
};

function formatIssues(prefix: string, error: z.ZodError): string {
  return error.issues.map((i) => `${prefix}${i.path.length ? i.path.join('.') : '(root)'}: ${i.message}`).join('; ');
}

/** Validates a SyncConfig value; throws ConfigError naming each bad field. */
export function parseSyncConfig(input: unknown, source = 'config'): SyncConfig {
  const r = SyncConfigSchema.safeParse(input);
  if (!r.success) throw new ConfigError(formatIssues(`${source} `, r.error));
  return r.data;
}

/** A JSON file's value; ConfigError naming `what` and the file when it cannot be read or parsed. */
export function readJsonFile(path: string, what: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(`${what}: cannot read ${path}: ${(err as Error).message}`);
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new ConfigError(`${what}: ${path} is not valid JSON: ${(err as Error).message}`);
  }
}

/** Batches per queue job at most under load (`QUEUE_GROUP_MAX`; 1 turns the API's group commit off). */
export const QUEUE_GROUP_MAX_DEFAULT = 16;
/**
 * Defaults the library's options share with the environment (createApiApp, createEncoder and the
 * edge fall back to these when a setting is left out; the env schema below defaults to them).
 */
export const QUEUE_NAME_DEFAULT = 'events-ingest';
export const ENCODER_LOCK_SECONDS_DEFAULT = 30;
export const LIST_INDEX_SECONDS_DEFAULT = 3600;
export const JWT_ROLES_CLAIM_DEFAULT = 'roles';
export const TRUSTED_PROXY_HOPS_DEFAULT = 0;
export const RATE_LIMIT_PUSH_ON_ERROR_DEFAULT = 'open';
/**
 * Push bodies of at least API_ENCODE_MIN_BYTES and at most this (`API_ENCODE_MAX_BYTES`) are
 * turned into their Parquet file by the API, which queues the file instead of the deflated JSON
 * (docs/decisions/0012-api-encodes-large-bodies.md). Bounded so one push's scan holds the event
 * loop for a few ms at most, and its encode the API's encode thread for a few more.
 */
export const API_ENCODE_MAX_BYTES_DEFAULT = 1024 * 1024;
/** Job slots of an encoder (`ENCODER_CONCURRENCY`), alone or as `npm start`'s thread. */
export const ENCODER_CONCURRENCY_DEFAULT = 32;

/** Defaults of the memory budgets (docs/operations.md, "Memory", shows how they were sized). */
export const MAX_INFLIGHT_BYTES_DEFAULT = 128 * 1024 * 1024;
export const ENCODER_MAX_INFLIGHT_BYTES_DEFAULT = 32 * 1024 * 1024;
/** `npm start`'s encoder processes (ENCODER_PROCESSES); more than one adds burst encoders (see the env schema). */
export const ENCODER_PROCESSES_DEFAULT = 1;
/**
 * CPU niceness of `npm start`'s encoder processes (ENCODER_NICE): every thread of the process,
 * its file calls and garbage collection included, so pushes get the cores first. Measured at a
 * steady 300 pushes/s on two cores (docs/decisions/0014-encoder-child-process.md).
 */
export const ENCODER_NICE_DEFAULT = 10;
/** Earlier names of two `npm start` settings, still read (the encoder was a thread before it was a process). */
const RENAMED_ENV: readonly (readonly [old: string, now: string])[] = [
  ['ENCODER_THREADS', 'ENCODER_PROCESSES'],
  ['ENCODER_THREAD_NICE', 'ENCODER_NICE'],
];
/** V8's old-space growth factor after a full GC, in percent (`HEAP_GROWING_PERCENT`): ×4. */
export const HEAP_GROWING_PERCENT_DEFAULT = 300;

/** A Starfish user id: `sha256(root Ed25519 public key)[0:16]` in lowercase hex. */
const CAP_USER_ID_RE = /^[0-9a-f]{32}$/;

const boolish = z
  .enum(['true', 'false', '1', '0', 'yes', 'no', ''])
  .transform((v) => v === 'true' || v === '1' || v === 'yes');
const port = z.coerce.number().int().min(0).max(65535);
const positiveInt = z.coerce.number().int().positive();

/** A comma list of `host:port` (REDIS_CLUSTER_NODES, REDIS_SENTINELS) as `{ host, port }`s; `problem` says what it must be. */
function hostPortList(problem: string) {
  return z
    .string()
    .transform((v) =>
      v
        .split(',')
        .map((n) => n.trim())
        .filter(Boolean),
    )
    .pipe(z.array(z.string().regex(/^[A-Za-z0-9.-]+:\d{1,5}$/, problem)).min(1))
    .transform((nodes) =>
      nodes.map((n) => ({ host: n.slice(0, n.lastIndexOf(':')), port: Number(n.slice(n.lastIndexOf(':') + 1)) })),
    )
    .refine((nodes) => nodes.every((n) => n.port > 0 && n.port <= 65535), 'ports must be 1-65535')
    .optional();
}

/** Environment of every service; parsed once at start and passed down as a value. */
/**
 * Default idempotency windows, sized so a 1 GB Redis stays below the shedding mark at 500
 * pushes/s (docs/reliability.md, "Sizing Redis"). The library's events plugin uses them too.
 */
export const DEFAULT_IDEMPOTENCY_WINDOW_SECONDS = 3600;
export const DEFAULT_BODY_DEDUP_WINDOW_SECONDS = 300;

/**
 * SHUTDOWN_DRAIN_MS when it is not set, by entry point (`shutdownDrainMs`). `start:api` runs
 * behind a load balancer: for 5 s after SIGTERM it keeps serving while /readyz answers 503, so
 * endpoints (Kubernetes removes a terminating pod from its Service at once; kube-proxy and ingress
 * controllers follow within a few seconds) and load balancers that poll /readyz stop sending it
 * new connections before it stops listening (docs/operations.md, "Draining"). `npm start` and
 * `npm run dev` (one process, usually alone, with nowhere for clients to move) and the library's
 * stack stop at once.
 */
export const SHUTDOWN_DRAIN_MS_DEFAULT = { api: 5000, single: 0 } as const;

/** The API's drain window for an entry point: SHUTDOWN_DRAIN_MS, else that entry point's default. */
export function shutdownDrainMs(
  env: Pick<Env, 'SHUTDOWN_DRAIN_MS'>,
  entry: keyof typeof SHUTDOWN_DRAIN_MS_DEFAULT,
): number {
  return env.SHUTDOWN_DRAIN_MS ?? SHUTDOWN_DRAIN_MS_DEFAULT[entry];
}

export const EnvSchema = z
  .object({
    PORT: port.default(8787),
    HOST: z.string().min(1).default('0.0.0.0'),
    /**
     * Shutdown: the API's drain window. From SIGTERM it keeps serving this long with /readyz
     * answering 503 and every answer carrying `Connection: close`, then stops listening and
     * finishes what is in flight. The whole stop is bounded by this plus SHUTDOWN_GRACE_MS (30 s,
     * shared/stack-context.ts). Unset: SHUTDOWN_DRAIN_MS_DEFAULT for the entry point.
     */
    SHUTDOWN_DRAIN_MS: z.coerce.number().int().min(0).max(120_000).optional(),
    BASE_PATH: z
      .string()
      .regex(/^(\/[A-Za-z0-9._~-]+)*$/, 'must be empty or like /ingest (no trailing slash)')
      .default(''),
    /** One Redis: `redis://host:port`, `rediss://…`, or `unix:///path/redis.sock` for one on this host. */
    REDIS_URL: z
      .string()
      .superRefine((v, ctx) => {
        const problem = redisUrlProblem(v);
        if (problem) ctx.addIssue({ code: 'custom', message: problem });
      })
      .optional(),
    /** Seed nodes of a Redis Cluster (`host:port,host:port,…`); switches every process to the Cluster client. */
    REDIS_CLUSTER_NODES: hostPortList('must be a comma list of host:port seed nodes, like 10.0.0.1:7000,10.0.0.2:7000'),
    /**
     * The sentinels of a Redis Sentinel group (`host:port,host:port,…`): every connection goes to
     * the master they name for REDIS_SENTINEL_NAME, and follows a failover to the promoted replica.
     */
    REDIS_SENTINELS: hostPortList('must be a comma list of host:port sentinels, like 10.0.0.1:26379,10.0.0.2:26379'),
    /** The master group name the sentinels monitor (`sentinel monitor <name> …`); required with REDIS_SENTINELS. */
    REDIS_SENTINEL_NAME: z
      .string()
      .regex(/^[A-Za-z0-9._-]{1,128}$/, 'must be 1-128 characters of [A-Za-z0-9._-], as in `sentinel monitor <name>`')
      .optional(),
    /** The password of the sentinels themselves (their `requirepass`), when they have one. */
    REDIS_SENTINEL_PASSWORD: z.string().min(1).optional(),
    /** The Redis password (`requirepass`) for every mode; a password in REDIS_URL wins over it. */
    REDIS_PASSWORD: z.string().min(1).optional(),
    /** `1`: TLS to Redis (with Sentinel: to the sentinels and the master; a Cluster: to every node). A `rediss://` REDIS_URL needs no switch. */
    REDIS_TLS: boolish.default(false),
    /**
     * BullMQ queues the work is split into, each under its own hash tag so a Cluster spreads them
     * over its masters. A list prefix always maps to the same shard. Changing it needs a drained
     * queue (docs/operations.md, "Running on Redis Cluster"). At most 256: the shard is kept in
     * the batch id's random suffix.
     */
    QUEUE_SHARDS: positiveInt.max(256).default(1),
    /** A push is answered 200 only once its enqueue reached this many replicas (Redis WAIT); 0: no wait. */
    REDIS_WAIT_REPLICAS: z.coerce.number().int().min(0).max(16).default(0),
    /** How long a push waits for REDIS_WAIT_REPLICAS before answering 503 + Retry-After. */
    REDIS_WAIT_TIMEOUT_MS: positiveInt.min(10).max(10_000).default(1000),
    QUEUE_NAME: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be 1-64 characters of [A-Za-z0-9_-]')
      .default(QUEUE_NAME_DEFAULT),
    STORE: z.enum(['fs', 's3', 'memory']).default('fs'),
    DATA_DIR: z.string().min(1).default('./data'),
    S3_BUCKET: z.string().optional(),
    S3_PREFIX: z.string().default(''),
    S3_ENDPOINT: z.string().url().optional(),
    S3_REGION: z.string().default('us-east-1'),
    S3_FORCE_PATH_STYLE: boolish.default(false),
    CONFIG_FILE: z.string().optional(),
    ADMIN_TOKEN: z.string().min(16, 'must be at least 16 characters').optional(),
    TOKENS_FILE: z.string().optional(),
    // The Segment tracking API (/v1/batch, …) is served only with this file: write key → {app, collection}.
    SEGMENT_WRITE_KEYS_FILE: z.string().optional(),
    // Encoding is synchronous, so extra slots only overlap the waits (Redis round trips, file
    // creation, fsync), which are most of a small batch's job, and more jobs in flight let Redis
    // and the event loop handle their commands in fewer wake-ups. Measured
    // (docs/decisions/0013-encoder-slots.md): 32 drains 1- to 100-event batches 17-68% faster
    // than 8 with 15-25% less encoder CPU per batch; 64 gives no more. Memory does not grow with
    // it: a job waiting for ENCODER_MAX_INFLIGHT_BYTES holds no body (services/encoder/worker.ts).
    ENCODER_CONCURRENCY: positiveInt.max(64).default(ENCODER_CONCURRENCY_DEFAULT),
    /** How long an active job's lock lives; a killed encoder's job is retried after about 1.5× this. */
    ENCODER_LOCK_SECONDS: positiveInt.min(5).max(600).default(ENCODER_LOCK_SECONDS_DEFAULT),
    QUEUE_HIGH_WATER: positiveInt.default(20_000),
    /** Batches per queue job at most when pushes arrive while an add runs (group commit); 1: one job per batch. */
    QUEUE_GROUP_MAX: positiveInt.max(64).default(QUEUE_GROUP_MAX_DEFAULT),
    /** Largest push body the API encodes to Parquet itself (from 128 KiB); 0: the encoders encode every batch. */
    API_ENCODE_MAX_BYTES: z.coerce
      .number()
      .int()
      .min(0)
      .max(16 * 1024 * 1024)
      .default(API_ENCODE_MAX_BYTES_DEFAULT),
    REDIS_MEMORY_HIGH_WATER: z.coerce.number().gt(0).lt(1).default(0.8),
    IDEMPOTENCY_WINDOW_SECONDS: z.coerce.number().int().min(0).default(DEFAULT_IDEMPOTENCY_WINDOW_SECONDS),
    /** Pushes without an Idempotency-Key: a byte-identical body within this many seconds is a retry. Meant for retries only. */
    BODY_DEDUP_WINDOW_SECONDS: z.coerce.number().int().min(0).max(86_400).default(DEFAULT_BODY_DEDUP_WINDOW_SECONDS),
    ORPHAN_GRACE_SECONDS: positiveInt.default(60),
    LIST_INDEX_SECONDS: z.coerce.number().int().min(0).default(LIST_INDEX_SECONDS_DEFAULT),
    /**
     * Pushes whose list-prefix path parameters ({app} and the like) do not match this regular
     * expression (anchored at both ends) get 400: operators refuse junk app names before they
     * leave state in Redis. Unset: every name allowed by the path rules.
     */
    APP_PATTERN: z
      .string()
      .transform((v, ctx) => {
        try {
          return new RegExp(`^(?:${v})$`);
        } catch (err) {
          ctx.addIssue({ code: 'custom', message: `is not a valid regular expression: ${(err as Error).message}` });
          return z.NEVER;
        }
      })
      .optional(),
    /**
     * Memory of pushes the API holds at once (body bytes, then a cost per event once counted:
     * shared/byte-budget.ts); past it pushes get 503 + Retry-After. Sized so
     * `npm start` (API + encoder in one process) stays under 1 GB of RSS: see docs/operations.md
     * ("Memory") for the measured RSS per in-flight byte.
     */
    MAX_INFLIGHT_BYTES: positiveInt.min(1024 * 1024).default(MAX_INFLIGHT_BYTES_DEFAULT),
    /** Memory of the batches one encoder process works on at once (decoded JSON bytes plus ENCODER_ROW_BYTES per event: shared/byte-budget.ts); a costlier batch runs alone. */
    ENCODER_MAX_INFLIGHT_BYTES: positiveInt.min(1024 * 1024).default(ENCODER_MAX_INFLIGHT_BYTES_DEFAULT),
    ENCODER_NICE: z.coerce.number().int().min(0).max(19).default(ENCODER_NICE_DEFAULT),
    /**
     * Encoder processes of `npm start` (child processes of the API's). The first always takes
     * jobs; each further one only while the queue holds a backlog (services/encoder/worker.ts,
     * `burst`), so a burst's backlog is encoded on more cores and at a steady rate the API keeps
     * them. They share ENCODER_MAX_INFLIGHT_BYTES evenly; each has ENCODER_CONCURRENCY slots.
     * Default 1: on two cores a second one shortened the drain after a burst but cost 5-10% more
     * CPU per batch (docs/decisions/0014-encoder-child-process.md).
     */
    ENCODER_PROCESSES: positiveInt.max(8).default(ENCODER_PROCESSES_DEFAULT),
    /**
     * V8's old-space growth after a full garbage collection, in percent (its
     * `--heap-growing-percent`): the next full collection starts once the old space has grown to
     * (1 + p/100) × what survived the last one. 300 is ×4, V8's own ceiling; V8 chose ×1.7–2.1
     * here, which under 325 pushes/s meant a full collection of the API's heap every 0.2–0.3 s: with
     * ×4, push p99 there halved (docs/decisions/0015-heap-growing-percent.md). 0 leaves
     * V8's own choice. Each `npm start` encoder process applies it too.
     */
    HEAP_GROWING_PERCENT: z.coerce.number().int().min(0).max(1000).default(HEAP_GROWING_PERCENT_DEFAULT),
    /** Browser origins allowed to call the sync routes: `*` or a comma list of origins; unset = CORS off. */
    CORS_ORIGINS: z
      .string()
      .transform((v) =>
        v
          .split(',')
          .map((o) => o.trim())
          .filter(Boolean),
      )
      .pipe(
        z
          .array(
            z
              .string()
              .regex(
                /^(\*|https?:\/\/[^/\s,]+)$/,
                'must be * or origins like https://app.example.com (scheme://host[:port], comma separated)',
              ),
          )
          .min(1),
      )
      .optional(),
    /** Reverse proxies in front of the API; X-Forwarded-For is believed only that far (0: never). */
    TRUSTED_PROXY_HOPS: z.coerce.number().int().min(0).max(10).default(TRUSTED_PROXY_HOPS_DEFAULT),
    /** A request not answered within this many ms gets 408 JSON (0: off; Node's own timeouts stay the outer bound). */
    REQUEST_TIMEOUT_MS: z.coerce.number().int().min(0).max(3_600_000).default(60_000),
    /** What a push gets when the rate limiter cannot reach Redis: `open` lets it through, `closed` answers 503. Reads always fail open. */
    RATE_LIMIT_PUSH_ON_ERROR: z.enum(['open', 'closed']).default(RATE_LIMIT_PUSH_ON_ERROR_DEFAULT),
    /** One audit line per push too (list, pull and admin are always audited). */
    AUDIT_PUSH: z.enum(['on', 'off']).default('off'),
    JWT_JWKS_URL: z.string().url().optional(),
    /** PEM text of the public key (SPKI), or a path to a PEM file. */
    JWT_PUBLIC_KEY: z.string().min(1).optional(),
    JWT_ISSUER: z.string().min(1).optional(),
    JWT_AUDIENCE: z.string().min(1).optional(),
    /** Claim holding the roles (array or space-separated string); dots walk into objects, e.g. realm_access.roles. */
    JWT_ROLES_CLAIM: z.string().min(1).default(JWT_ROLES_CLAIM_DEFAULT),
    /** `on` accepts JWTs without `exp` (they never expire); by default such a token gets 401. */
    JWT_ALLOW_NO_EXP: z.enum(['on', 'off']).default('off'),
    /** `on`: Starfish v3 cap-cert auth (`Authorization: Cap …`) beside Bearer tokens and JWTs (services/api/edge/cap-auth.ts). */
    CAP_AUTH: z.enum(['on', 'off']).default('off'),
    /** Starfish user ids (32 lowercase hex, the root identity's `userId`) whose caps get `admin` (with CAP_AUTH=on). */
    CAP_ADMINS: z
      .string()
      .transform((v) =>
        v
          .split(',')
          .map((id) => id.trim())
          .filter(Boolean),
      )
      .pipe(
        z
          .array(
            z
              .string()
              .regex(CAP_USER_ID_RE, 'must be a comma list of Starfish user ids (32 lowercase hex characters each)'),
          )
          .min(1),
      )
      .optional(),
    /** A JSON file of signed Starfish revocation lists (one list or an array): the caps they name get 401. */
    CAP_REVOCATIONS_FILE: z.string().min(1).optional(),
    METRICS_PORT: port.default(9464),
    // Rollups (shared/rollup, services/rollup): closed periods of each list prefix compacted into a few sorted files.
    ROLLUP: z.enum(['on', 'off']).default('on'),
    /** Period length; must divide a day so periods line up with date=/hour= partitions. */
    ROLLUP_PERIOD_SECONDS: positiveInt
      .max(86_400)
      .refine((v) => 86_400 % v === 0, 'must divide 86400 (a day) so periods line up with days')
      .default(3600),
    ROLLUP_DELAY_SECONDS: z.coerce.number().int().min(0).max(86_400).default(300),
    /** Batch files older than this whose rollup is durable are deleted (0: keep forever). */
    RAW_RETENTION_SECONDS: z.coerce.number().int().min(0).default(604_800),
    /** Rolled periods older than this many days are deleted with their manifest entries (unset: keep). */
    RETENTION_DAYS: positiveInt.optional(),
    // Iceberg (shared/iceberg, services/rollup/iceberg-committer.ts): one table per app, committed by the rollup service.
    /** `off`: no Iceberg table is committed (and rollups and retention delete files as before). */
    ICEBERG: z.enum(['on', 'off']).default('on'),
    /** How often each app's table gets an `append` snapshot of the batch files listed since the last one. */
    ICEBERG_COMMIT_SECONDS: positiveInt.max(86_400).default(60),
    /** Snapshots older than this are expired (the current one is always kept); a reader of an older snapshot must finish within it. */
    ICEBERG_SNAPSHOT_RETENTION_SECONDS: positiveInt.default(3600),
    /** Test-only (scripts/iceberg-acceptance.ts kills the committer mid-commit): each commit waits this long after writing its manifests, before creating the metadata version. 0 (the default) in production. */
    ICEBERG_TEST_COMMIT_DELAY_MS: z.coerce.number().int().min(0).max(60_000).default(0),
    /** Erasure log (shared/erasure/log.ts): the HMAC-SHA256 key of the id hashes, at least 32 characters; unset: a random key kept in the store at `erasures/_hash-key`. */
    ERASURE_HASH_KEY: z.string().min(32).optional(),
    /** Test-only (scripts/erasure-acceptance.ts kills the erasing process at a chosen step): each erasure step logs `erasure: test step delay` with its step and waits this long (the iceberg step: after its overwrite, before the expiry). 0 (the default) in production. */
    ERASURE_TEST_STEP_DELAY_MS: z.coerce.number().int().min(0).max(60_000).default(0),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  })
  .superRefine((e, ctx) => {
    if (e.REDIS_URL && e.REDIS_CLUSTER_NODES)
      ctx.addIssue({
        code: 'custom',
        path: ['REDIS_CLUSTER_NODES'],
        message: 'set REDIS_URL (one Redis) or REDIS_CLUSTER_NODES (a Redis Cluster), not both',
      });
    if (e.REDIS_SENTINELS && (e.REDIS_URL || e.REDIS_CLUSTER_NODES))
      ctx.addIssue({
        code: 'custom',
        path: ['REDIS_SENTINELS'],
        message: `set one of REDIS_URL (one Redis), REDIS_SENTINELS (Redis Sentinel) or REDIS_CLUSTER_NODES (a Redis Cluster), not REDIS_SENTINELS and ${e.REDIS_URL ? 'REDIS_URL' : 'REDIS_CLUSTER_NODES'}`,
      });
    if (e.REDIS_SENTINELS && !e.REDIS_SENTINEL_NAME)
      ctx.addIssue({
        code: 'custom',
        path: ['REDIS_SENTINEL_NAME'],
        message: 'is required with REDIS_SENTINELS: the master group name the sentinels monitor',
      });
    for (const only of ['REDIS_SENTINEL_NAME', 'REDIS_SENTINEL_PASSWORD'] as const)
      if (e[only] && !e.REDIS_SENTINELS)
        ctx.addIssue({ code: 'custom', path: [only], message: 'needs REDIS_SENTINELS (the sentinels host:port list)' });
    if (e.REDIS_TLS && e.REDIS_URL?.startsWith('unix:'))
      ctx.addIssue({ code: 'custom', path: ['REDIS_TLS'], message: 'is for TCP; REDIS_URL names a unix socket' });
    if (e.STORE === 's3' && !e.S3_BUCKET)
      ctx.addIssue({ code: 'custom', path: ['S3_BUCKET'], message: 'is required when STORE=s3' });
    if (e.JWT_JWKS_URL && e.JWT_PUBLIC_KEY)
      ctx.addIssue({
        code: 'custom',
        path: ['JWT_PUBLIC_KEY'],
        message: 'set JWT_JWKS_URL or JWT_PUBLIC_KEY, not both',
      });
    if ((e.JWT_ISSUER || e.JWT_AUDIENCE) && !e.JWT_JWKS_URL && !e.JWT_PUBLIC_KEY) {
      ctx.addIssue({
        code: 'custom',
        path: ['JWT_ISSUER'],
        message: 'JWT_ISSUER/JWT_AUDIENCE need JWT_JWKS_URL or JWT_PUBLIC_KEY',
      });
    }
    if (e.JWT_ALLOW_NO_EXP === 'on' && !e.JWT_JWKS_URL && !e.JWT_PUBLIC_KEY)
      ctx.addIssue({ code: 'custom', path: ['JWT_ALLOW_NO_EXP'], message: 'needs JWT_JWKS_URL or JWT_PUBLIC_KEY' });
    if ((e.CAP_ADMINS || e.CAP_REVOCATIONS_FILE) && e.CAP_AUTH !== 'on')
      ctx.addIssue({
        code: 'custom',
        path: [e.CAP_ADMINS ? 'CAP_ADMINS' : 'CAP_REVOCATIONS_FILE'],
        message: 'needs CAP_AUTH=on',
      });
    if (e.ICEBERG === 'on' && e.ROLLUP === 'on' && 3600 % e.ROLLUP_PERIOD_SECONDS !== 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['ROLLUP_PERIOD_SECONDS'],
        message: `must divide 3600 (an hour) while ICEBERG=on: the table is partitioned by hour and a rollup file must lie in one (set ICEBERG=off to keep ${e.ROLLUP_PERIOD_SECONDS})`,
      });
    }
    if (e.CORS_ORIGINS && e.CORS_ORIGINS.includes('*') && e.CORS_ORIGINS.length > 1)
      ctx.addIssue({ code: 'custom', path: ['CORS_ORIGINS'], message: 'is either * or a list of origins, not both' });
  });

export type Env = z.infer<typeof EnvSchema>;

/** Parses the environment (empty strings count as unset); throws ConfigError naming each bad variable. */
export function parseEnv(env: NodeJS.ProcessEnv = process.env): Env {
  const cleaned: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) if (v !== undefined && v !== '') cleaned[k] = v;
  for (const [old, now] of RENAMED_ENV) {
    const was = cleaned[old];
    if (was === undefined) continue;
    delete cleaned[old];
    if (cleaned[now] !== undefined && cleaned[now] !== was)
      throw new ConfigError(
        `environment variable ${old} (the earlier name of ${now}) is ${was} but ${now} is ${cleaned[now]}; set only ${now}`,
      );
    cleaned[now] = was;
  }
  const r = EnvSchema.safeParse(cleaned);
  if (!r.success) throw new ConfigError(formatIssues('environment variable ', r.error));
  return r.data;
}

/** The SyncConfig from CONFIG_FILE, or the default one. */
export function loadSyncConfig(env: Pick<Env, 'CONFIG_FILE'>): SyncConfig {
  if (!env.CONFIG_FILE) return parseSyncConfig(DEFAULT_SYNC_CONFIG, 'default config');
  return parseSyncConfig(readJsonFile(env.CONFIG_FILE, 'CONFIG_FILE'), `CONFIG_FILE ${env.CONFIG_FILE}:`);
}

const TokensFileSchema = z.union([
  z.record(z.string().min(16), z.array(z.string().min(1)).min(1)),
  z.array(
    z.union([
      z.object({ token: z.string().min(16), roles: z.array(z.string().min(1)).min(1) }).strict(),
      // A Starfish identity's caps get these roles (CAP_AUTH=on), as CAP_ADMINS gives `admin`.
      z
        .object({
          capUserId: z.string().regex(CAP_USER_ID_RE, 'must be a Starfish user id (32 lowercase hex characters)'),
          roles: z.array(z.string().min(1)).min(1),
        })
        .strict(),
    ]),
  ),
]);

function readTokensFile(path: string): z.infer<typeof TokensFileSchema> {
  const r = TokensFileSchema.safeParse(readJsonFile(path, 'TOKENS_FILE'));
  if (!r.success) throw new ConfigError(formatIssues(`TOKENS_FILE ${path}: `, r.error));
  return r.data;
}

/** Token → roles: ADMIN_TOKEN gives `admin`; TOKENS_FILE (`{"<token>": ["role"]}` or `[{token, roles}]`) adds more. */
export function loadTokens(env: Pick<Env, 'ADMIN_TOKEN' | 'TOKENS_FILE'>): Map<string, string[]> {
  const tokens = new Map<string, string[]>();
  if (env.ADMIN_TOKEN) tokens.set(env.ADMIN_TOKEN, ['admin']);
  if (env.TOKENS_FILE) {
    const data = readTokensFile(env.TOKENS_FILE);
    const entries = Array.isArray(data)
      ? data.flatMap((e) => ('token' in e ? [[e.token, e.roles] as const] : []))
      : Object.entries(data);
    for (const [token, roles] of entries) tokens.set(token, [...new Set([...(tokens.get(token) ?? []), ...roles])]);
  }
  return tokens;
}

/**
 * Starfish user id → roles for cap-cert auth: CAP_ADMINS gives `admin`; TOKENS_FILE's
 * `[{ "capUserId": "<id>", "roles": [...] }]` entries add more. Empty unless CAP_AUTH=on.
 */
export function loadCapRoles(env: Pick<Env, 'CAP_AUTH' | 'CAP_ADMINS' | 'TOKENS_FILE'>): Map<string, string[]> {
  const out = new Map<string, string[]>();
  if (env.CAP_AUTH !== 'on') return out;
  const add = (id: string, roles: readonly string[]): void =>
    void out.set(id, [...new Set([...(out.get(id) ?? []), ...roles])]);
  for (const id of env.CAP_ADMINS ?? []) add(id, ['admin']);
  if (env.TOKENS_FILE) {
    const data = readTokensFile(env.TOKENS_FILE);
    if (Array.isArray(data)) for (const e of data) if ('capUserId' in e) add(e.capUserId, e.roles);
  }
  return out;
}

/** The signed revocation lists of CAP_REVOCATIONS_FILE (one list or an array), checked by the cap resolver. */
export function loadCapRevocations(env: Pick<Env, 'CAP_REVOCATIONS_FILE'>): unknown[] {
  if (!env.CAP_REVOCATIONS_FILE) return [];
  const data = readJsonFile(env.CAP_REVOCATIONS_FILE, 'CAP_REVOCATIONS_FILE');
  const lists = Array.isArray(data) ? data : [data];
  lists.forEach((l, i) => {
    if (
      typeof l !== 'object' ||
      l === null ||
      typeof (l as { iss?: unknown }).iss !== 'string' ||
      !Array.isArray((l as { revoked?: unknown }).revoked)
    ) {
      throw new ConfigError(
        `CAP_REVOCATIONS_FILE ${env.CAP_REVOCATIONS_FILE}: list ${i} is not a signed revocation list ({ v, iss, issUserId, generation, revoked, sig })`,
      );
    }
  });
  return lists;
}
