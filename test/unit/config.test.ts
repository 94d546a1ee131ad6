import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  ConfigError,
  DEFAULT_SYNC_CONFIG,
  loadSyncConfig,
  loadTokens,
  parseEnv,
  parseSyncConfig,
} from '../../shared/config.js';

const base = DEFAULT_SYNC_CONFIG.collections[0]!;
const withCollection = (patch: Record<string, unknown>) => ({ version: 1, collections: [{ ...base, ...patch }] });

describe('SyncConfig validation', () => {
  it('accepts the default config and fills defaults', () => {
    const cfg = parseSyncConfig(DEFAULT_SYNC_CONFIG);
    expect(cfg.collections[0]).toMatchObject({
      name: 'events',
      listable: true,
      maxBodyBytes: 8_000_000,
      readRoles: ['admin'],
      writeRoles: ['public'],
    });
    const minimal = parseSyncConfig({ version: 1, collections: [{ name: 'e', storagePath: 'e/{app}/{id}' }] });
    expect(minimal.collections[0]).toMatchObject({
      listable: false,
      encryption: 'none',
      allowedMimeTypes: ['application/json'],
    });
  });

  it.each([
    [{ storagePath: 'events/{app}/latest' }, /collections\.0\.storagePath: .*must end with a \{param\}/],
    [{ storagePath: 'events/{app}/{app}' }, /repeats a param/],
    [{ storagePath: '/events/{id}' }, /storagePath/],
    [{ encryption: 'aes' }, /collections\.0\.encryption/],
    [
      { allowedMimeTypes: ['application/vnd.apache.parquet'] },
      /collections\.0\.allowedMimeTypes: an events collection must be JSON-typed/,
    ],
    [{ maxBodyBytes: 0 }, /collections\.0\.maxBodyBytes/],
    [{ name: 'bad name' }, /collections\.0\.name/],
  ])('refuses %j naming the field', (patch, message) => {
    expect(() => parseSyncConfig(withCollection(patch))).toThrow(message);
    expect(() => parseSyncConfig(withCollection(patch))).toThrow(ConfigError);
  });

  it('refuses a wrong version, no collections, and duplicate names', () => {
    expect(() => parseSyncConfig({ version: 2, collections: [base] })).toThrow(/version/);
    expect(() => parseSyncConfig({ version: 1, collections: [] })).toThrow(/collections/);
    expect(() =>
      parseSyncConfig({ version: 1, collections: [base, { ...base, storagePath: 'other/{a}/{b}' }] }),
    ).toThrow(/duplicate collection name/);
    expect(() =>
      parseSyncConfig({ version: 1, collections: [base, { ...base, name: 'two', storagePath: 'events/{x}/{y}' }] }),
    ).toThrow(/collide/);
  });

  it('reads CONFIG_FILE and names the file when it is broken', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cfg-'));
    const good = join(dir, 'good.json');
    writeFileSync(good, JSON.stringify(withCollection({ name: 'clicks', storagePath: 'clicks/{app}/{batchId}' })));
    expect(loadSyncConfig({ CONFIG_FILE: good }).collections[0]?.name).toBe('clicks');
    const broken = join(dir, 'broken.json');
    writeFileSync(broken, '{ nope');
    expect(() => loadSyncConfig({ CONFIG_FILE: broken })).toThrow(/CONFIG_FILE: .*broken\.json is not valid JSON/);
    expect(() => loadSyncConfig({ CONFIG_FILE: join(dir, 'missing.json') })).toThrow(/cannot read/);
  });
});

describe('environment', () => {
  it('has the documented defaults', () => {
    const env = parseEnv({});
    expect(env).toMatchObject({
      PORT: 8787,
      HOST: '0.0.0.0',
      STORE: 'fs',
      DATA_DIR: './data',
      ENCODER_CONCURRENCY: 32,
      METRICS_PORT: 9464,
      LOG_LEVEL: 'info',
      S3_FORCE_PATH_STYLE: false,
    });
    expect(env.REDIS_URL).toBeUndefined();
  });

  it("npm start's encoder processes: ENCODER_PROCESSES (1-8, default 1) and ENCODER_NICE (0-19, default 10); their earlier names ENCODER_THREADS and ENCODER_THREAD_NICE still read", () => {
    expect(parseEnv({})).toMatchObject({ ENCODER_PROCESSES: 1, ENCODER_NICE: 10 });
    expect(parseEnv({ ENCODER_PROCESSES: '3', ENCODER_NICE: '19' })).toMatchObject({
      ENCODER_PROCESSES: 3,
      ENCODER_NICE: 19,
    });
    expect(parseEnv({ ENCODER_THREADS: '2', ENCODER_THREAD_NICE: '5' })).toMatchObject({
      ENCODER_PROCESSES: 2,
      ENCODER_NICE: 5,
    });
    expect(parseEnv({ ENCODER_THREADS: '2', ENCODER_PROCESSES: '2' }).ENCODER_PROCESSES).toBe(2);
    expect(() => parseEnv({ ENCODER_THREADS: '2', ENCODER_PROCESSES: '3' })).toThrow(
      /ENCODER_THREADS \(the earlier name of ENCODER_PROCESSES\) is 2 but ENCODER_PROCESSES is 3/,
    );
    expect(() => parseEnv({ ENCODER_THREADS: '9' })).toThrow(/ENCODER_PROCESSES/);
    expect(() => parseEnv({ ENCODER_NICE: '20' })).toThrow(/ENCODER_NICE/);
  });

  it('takes ENCODER_CONCURRENCY from 1 to 64', () => {
    expect(parseEnv({ ENCODER_CONCURRENCY: '3' }).ENCODER_CONCURRENCY).toBe(3);
    expect(parseEnv({ ENCODER_CONCURRENCY: '64' }).ENCODER_CONCURRENCY).toBe(64);
    expect(() => parseEnv({ ENCODER_CONCURRENCY: '65' })).toThrow(/ENCODER_CONCURRENCY/);
    expect(() => parseEnv({ ENCODER_CONCURRENCY: '0' })).toThrow(/ENCODER_CONCURRENCY/);
  });

  it('takes API_ENCODE_MAX_BYTES from 0 (the encoders encode every batch) to 16 MiB, 1 MiB by default', () => {
    expect(parseEnv({}).API_ENCODE_MAX_BYTES).toBe(1024 * 1024);
    expect(parseEnv({ API_ENCODE_MAX_BYTES: '0' }).API_ENCODE_MAX_BYTES).toBe(0);
    expect(parseEnv({ API_ENCODE_MAX_BYTES: String(16 * 1024 * 1024) }).API_ENCODE_MAX_BYTES).toBe(16 * 1024 * 1024);
    for (const bad of ['-1', String(16 * 1024 * 1024 + 1), '1.5', 'lots'])
      expect(() => parseEnv({ API_ENCODE_MAX_BYTES: bad })).toThrow(/API_ENCODE_MAX_BYTES/);
  });

  it('takes REDIS_URL as redis://, rediss:// or unix:///<socket path>, and names what is wrong with any other', () => {
    expect(parseEnv({ REDIS_URL: 'redis://:pw@10.0.0.5:6380/2' }).REDIS_URL).toBe('redis://:pw@10.0.0.5:6380/2');
    expect(parseEnv({ REDIS_URL: 'rediss://cache.internal:6380' }).REDIS_URL).toBe('rediss://cache.internal:6380');
    expect(parseEnv({ REDIS_URL: 'unix:///run/redis/redis.sock?db=1' }).REDIS_URL).toBe(
      'unix:///run/redis/redis.sock?db=1',
    );
    expect(() => parseEnv({ REDIS_URL: 'unix://run/redis.sock' })).toThrow(
      /REDIS_URL: a unix socket is named unix:\/\/\/absolute\/path\.sock/,
    );
    expect(() => parseEnv({ REDIS_URL: 'http://10.0.0.5:6379' })).toThrow(
      /REDIS_URL: scheme "http:" is not one of redis:, rediss:, unix:/,
    );
    expect(() => parseEnv({ REDIS_URL: '10.0.0.5:6379' })).toThrow(/REDIS_URL/);
    expect(() => parseEnv({ REDIS_URL: 'redis://' })).toThrow(/REDIS_URL: names no host/);
  });

  it('names each bad variable', () => {
    expect(() => parseEnv({ PORT: 'x' })).toThrow(/environment variable PORT/);
    expect(() => parseEnv({ STORE: 'gcs' })).toThrow(/STORE/);
    expect(() => parseEnv({ STORE: 's3' })).toThrow(/S3_BUCKET: is required when STORE=s3/);
    expect(() => parseEnv({ ADMIN_TOKEN: 'short' })).toThrow(/ADMIN_TOKEN/);
    expect(() => parseEnv({ S3_FORCE_PATH_STYLE: 'maybe' })).toThrow(/S3_FORCE_PATH_STYLE/);
    expect(() => parseEnv({ BASE_PATH: 'ingest/' })).toThrow(/BASE_PATH/);
    expect(parseEnv({ S3_FORCE_PATH_STYLE: 'true', PORT: '' }).S3_FORCE_PATH_STYLE).toBe(true);
  });

  it('maps tokens to roles from ADMIN_TOKEN and TOKENS_FILE', () => {
    const dir = mkdtempSync(join(tmpdir(), 'tok-'));
    const f = join(dir, 'tokens.json');
    writeFileSync(f, JSON.stringify({ 'reader-token-0123456789': ['reader'], 'admin-token-0123456789ab': ['ops'] }));
    const tokens = loadTokens({ ADMIN_TOKEN: 'admin-token-0123456789ab', TOKENS_FILE: f });
    expect(tokens.get('admin-token-0123456789ab')).toEqual(['admin', 'ops']);
    expect(tokens.get('reader-token-0123456789')).toEqual(['reader']);
    writeFileSync(f, JSON.stringify({ short: ['x'] }));
    expect(() => loadTokens({ TOKENS_FILE: f })).toThrow(/TOKENS_FILE/);
  });
});
