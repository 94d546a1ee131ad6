import { describe, expect, it } from 'vitest';
import {
  API_ENCODE_MAX_BYTES_DEFAULT,
  ENCODER_CONCURRENCY_DEFAULT,
  ENCODER_LOCK_SECONDS_DEFAULT,
  ENCODER_MAX_INFLIGHT_BYTES_DEFAULT,
  JWT_ROLES_CLAIM_DEFAULT,
  LIST_INDEX_SECONDS_DEFAULT,
  MAX_INFLIGHT_BYTES_DEFAULT,
  QUEUE_GROUP_MAX_DEFAULT,
  QUEUE_NAME_DEFAULT,
  RATE_LIMIT_PUSH_ON_ERROR_DEFAULT,
  TRUSTED_PROXY_HOPS_DEFAULT,
  parseEnv,
} from '../../shared/config.js';
import {
  API_KEYS,
  EDGE_KEYS,
  ENCODER_KEYS,
  ICEBERG_KEYS,
  LISTEN_KEYS,
  PROCESS_KEYS,
  REDIS_KEYS,
  ROLLUP_KEYS,
  STORE_KEYS,
  apiSlice,
  edgeSlice,
  encoderSlice,
  icebergSlice,
  listenSlice,
  processSlice,
  redisSlice,
  rollupSlice,
  storeSlice,
} from '../../shared/config-slices.js';

const slices = [
  ['api', apiSlice, API_KEYS],
  ['edge', edgeSlice, EDGE_KEYS],
  ['encoder', encoderSlice, ENCODER_KEYS],
  ['iceberg', icebergSlice, ICEBERG_KEYS],
  ['listen', listenSlice, LISTEN_KEYS],
  ['process', processSlice, PROCESS_KEYS],
  ['redis', redisSlice, REDIS_KEYS],
  ['rollup', rollupSlice, ROLLUP_KEYS],
  ['store', storeSlice, STORE_KEYS],
] as const;

/** Every variable set, so every optional key is present in the parsed Env. */
const FULL_ENV = {
  REDIS_URL: 'redis://127.0.0.1:6390',
  REDIS_PASSWORD: 'redis-password',
  REDIS_TLS: '1',
  S3_BUCKET: 'b',
  S3_ENDPOINT: 'http://127.0.0.1:9000',
  CONFIG_FILE: '/nonexistent.json',
  ADMIN_TOKEN: 'a'.repeat(16),
  TOKENS_FILE: '/nonexistent-tokens.json',
  SEGMENT_WRITE_KEYS_FILE: '/nonexistent-segment-keys.json',
  APP_PATTERN: '[a-z]+',
  CORS_ORIGINS: 'https://app.example.com',
  JWT_JWKS_URL: 'https://idp.example.com/jwks',
  JWT_ISSUER: 'iss',
  JWT_AUDIENCE: 'aud',
  CAP_AUTH: 'on',
  CAP_ADMINS: '0123456789abcdef0123456789abcdef',
  CAP_REVOCATIONS_FILE: '/nonexistent-revocations.json',
  RETENTION_DAYS: '7',
  ERASURE_HASH_KEY: 'k'.repeat(32),
};

describe('config slices', () => {
  it('each slice holds only its own keys, and all of them when every variable is set', () => {
    // Variables that exclude each other: JWT_JWKS_URL / JWT_PUBLIC_KEY, and REDIS_URL /
    // REDIS_CLUSTER_NODES / REDIS_SENTINELS (with its name and password).
    const { JWT_JWKS_URL: _jwks, REDIS_URL: _url, ...rest } = FULL_ENV;
    const envs = [
      parseEnv(FULL_ENV),
      parseEnv({ ...rest, JWT_PUBLIC_KEY: '/nonexistent.pem', REDIS_CLUSTER_NODES: '127.0.0.1:7000' }),
      parseEnv({
        ...rest,
        JWT_PUBLIC_KEY: '/nonexistent.pem',
        REDIS_SENTINELS: '127.0.0.1:26379',
        REDIS_SENTINEL_NAME: 'mymaster',
        REDIS_SENTINEL_PASSWORD: 'sentinel-password',
      }),
    ];
    for (const [name, slice, keys] of slices) {
      const seen = new Set(envs.flatMap((env) => Object.keys(slice(env))));
      expect([...seen].sort(), name).toEqual([...new Set<string>(keys)].sort());
    }
  });

  it('an unset optional variable stays absent from its slice (no undefined keys)', () => {
    const r = rollupSlice(parseEnv({}));
    expect('RETENTION_DAYS' in r).toBe(false);
    expect('ERASURE_HASH_KEY' in r).toBe(false);
    expect('REDIS_URL' in redisSlice(parseEnv({}))).toBe(false);
  });

  it('a slice carries the parsed values unchanged: defaults are applied once, by parseEnv', () => {
    const env = parseEnv({});
    for (const [name, slice] of slices) {
      for (const [k, v] of Object.entries(slice(env))) expect(v, `${name}.${k}`).toBe(env[k as keyof typeof env]);
    }
    // Slicing a slice's values again changes nothing: nothing downstream re-defaults.
    expect(apiSlice({ ...env, ...apiSlice(env) })).toEqual(apiSlice(env));
  });

  it('values set in the environment reach the slice, not the defaults', () => {
    const env = parseEnv({
      ENCODER_CONCURRENCY: '7',
      LIST_INDEX_SECONDS: '60',
      QUEUE_NAME: 'q1',
      ICEBERG_COMMIT_SECONDS: '30',
    });
    expect(encoderSlice(env)).toMatchObject({ ENCODER_CONCURRENCY: 7, LIST_INDEX_SECONDS: 60, QUEUE_NAME: 'q1' });
    expect(icebergSlice(env).ICEBERG_COMMIT_SECONDS).toBe(30);
    expect(rollupSlice(env).ICEBERG_COMMIT_SECONDS).toBe(30);
  });

  it('the environment defaults are the constants the library falls back to', () => {
    const env = parseEnv({});
    expect(apiSlice(env)).toMatchObject({
      QUEUE_NAME: QUEUE_NAME_DEFAULT,
      MAX_INFLIGHT_BYTES: MAX_INFLIGHT_BYTES_DEFAULT,
      QUEUE_GROUP_MAX: QUEUE_GROUP_MAX_DEFAULT,
      API_ENCODE_MAX_BYTES: API_ENCODE_MAX_BYTES_DEFAULT,
      TRUSTED_PROXY_HOPS: TRUSTED_PROXY_HOPS_DEFAULT,
      RATE_LIMIT_PUSH_ON_ERROR: RATE_LIMIT_PUSH_ON_ERROR_DEFAULT,
      JWT_ROLES_CLAIM: JWT_ROLES_CLAIM_DEFAULT,
    });
    expect(encoderSlice(env)).toEqual({
      QUEUE_NAME: QUEUE_NAME_DEFAULT,
      ENCODER_CONCURRENCY: ENCODER_CONCURRENCY_DEFAULT,
      ENCODER_LOCK_SECONDS: ENCODER_LOCK_SECONDS_DEFAULT,
      LIST_INDEX_SECONDS: LIST_INDEX_SECONDS_DEFAULT,
      ENCODER_MAX_INFLIGHT_BYTES: ENCODER_MAX_INFLIGHT_BYTES_DEFAULT,
    });
  });

  it('ICEBERG defaults to on; off turns it off', () => {
    expect(icebergSlice(parseEnv({})).ICEBERG).toBe('on');
    expect(icebergSlice(parseEnv({ ICEBERG: 'off' })).ICEBERG).toBe('off');
  });
});
