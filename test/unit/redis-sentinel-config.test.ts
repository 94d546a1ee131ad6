import { Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseEnv } from '../../shared/config.js';
import { redisSlice } from '../../shared/config-slices.js';
import {
  SENTINEL_RECONNECT_MAX_MS,
  describeTarget,
  redisAddress,
  redisTarget,
  sentinelOptions,
} from '../../shared/redis/connection.js';

const SENTINEL_ENV = {
  REDIS_SENTINELS: '10.0.0.1:26379, 10.0.0.2:26380,sentinel-2.redis:26379',
  REDIS_SENTINEL_NAME: 'mymaster',
};

describe('Redis Sentinel settings (REDIS_SENTINELS, REDIS_SENTINEL_NAME, REDIS_PASSWORD, REDIS_TLS)', () => {
  it('parses the sentinels and the master name into a sentinel target', () => {
    const env = parseEnv({ ...SENTINEL_ENV, REDIS_PASSWORD: 'pw', REDIS_SENTINEL_PASSWORD: 'spw' });
    const t = redisTarget(redisSlice(env));
    expect(t).toEqual({
      kind: 'sentinel',
      sentinels: [
        { host: '10.0.0.1', port: 26379 },
        { host: '10.0.0.2', port: 26380 },
        { host: 'sentinel-2.redis', port: 26379 },
      ],
      name: 'mymaster',
      password: 'pw',
      sentinelPassword: 'spw',
    });
    // Logs and /readyz name the group, never a password.
    expect(describeTarget(t)).toBe('sentinel mymaster');
  });

  it('refuses REDIS_SENTINELS beside REDIS_URL or REDIS_CLUSTER_NODES, naming both variables', () => {
    expect(() => parseEnv({ ...SENTINEL_ENV, REDIS_URL: 'redis://10.0.0.9:6379' })).toThrow(ConfigError);
    expect(() => parseEnv({ ...SENTINEL_ENV, REDIS_URL: 'redis://10.0.0.9:6379' })).toThrow(
      /REDIS_SENTINELS: set one of REDIS_URL .*not REDIS_SENTINELS and REDIS_URL/,
    );
    expect(() => parseEnv({ ...SENTINEL_ENV, REDIS_CLUSTER_NODES: '10.0.0.9:7000' })).toThrow(
      /REDIS_SENTINELS: .*not REDIS_SENTINELS and REDIS_CLUSTER_NODES/,
    );
  });

  it('requires REDIS_SENTINEL_NAME with REDIS_SENTINELS, and REDIS_SENTINELS with the name or the sentinel password', () => {
    expect(() => parseEnv({ REDIS_SENTINELS: '10.0.0.1:26379' })).toThrow(
      /REDIS_SENTINEL_NAME: is required with REDIS_SENTINELS/,
    );
    expect(() => parseEnv({ REDIS_SENTINEL_NAME: 'mymaster' })).toThrow(/REDIS_SENTINEL_NAME: needs REDIS_SENTINELS/);
    expect(() => parseEnv({ REDIS_SENTINEL_PASSWORD: 'spw' })).toThrow(
      /REDIS_SENTINEL_PASSWORD: needs REDIS_SENTINELS/,
    );
    expect(() => parseEnv({ ...SENTINEL_ENV, REDIS_SENTINEL_NAME: 'my master' })).toThrow(
      /REDIS_SENTINEL_NAME: must be/,
    );
    // A library caller that builds the target itself gets the same refusal.
    expect(() => redisTarget({ REDIS_SENTINELS: [{ host: 'h', port: 1 }] })).toThrow(ConfigError);
  });

  it('refuses a sentinel that is not host:port, or a port out of range', () => {
    for (const bad of ['10.0.0.1', 'redis://10.0.0.1:26379', '10.0.0.1:26379,:26379', '10.0.0.1:x'])
      expect(() => parseEnv({ ...SENTINEL_ENV, REDIS_SENTINELS: bad }), bad).toThrow(
        /REDIS_SENTINELS\.\d: must be a comma list of host:port sentinels/,
      );
    expect(() => parseEnv({ ...SENTINEL_ENV, REDIS_SENTINELS: '10.0.0.1:70000' })).toThrow(
      /REDIS_SENTINELS: ports must be 1-65535/,
    );
    expect(() => parseEnv({ ...SENTINEL_ENV, REDIS_SENTINELS: ' , ' })).toThrow(/REDIS_SENTINELS/);
  });

  it('hands ioredis the master group, role master, reconnect on READONLY, both passwords and TLS for both legs', () => {
    const t = redisTarget(
      redisSlice(parseEnv({ ...SENTINEL_ENV, REDIS_PASSWORD: 'pw', REDIS_SENTINEL_PASSWORD: 'spw', REDIS_TLS: '1' })),
    );
    if (t.kind !== 'sentinel') throw new Error('not a sentinel target');
    const o = sentinelOptions(t);
    expect(o).toMatchObject({
      name: 'mymaster',
      role: 'master',
      password: 'pw',
      sentinelPassword: 'spw',
      tls: {},
      enableTLSForSentinelMode: true,
      sentinelTLS: {},
    });
    expect(o.sentinels).toHaveLength(3);
    // No failover detector (see sentinelOptions); a READONLY reply reconnects instead.
    expect(o.failoverDetector).toBeUndefined();
    expect(o.reconnectOnError?.(new Error("READONLY You can't write against a read only replica."))).toBe(true);
    expect(o.reconnectOnError?.(new Error('OOM command not allowed'))).toBe(false);
    // A lost master is asked for again soon: reconnects at most SENTINEL_RECONNECT_MAX_MS apart.
    expect(o.retryStrategy?.(1)).toBe(100);
    expect(o.retryStrategy?.(1000)).toBe(SENTINEL_RECONNECT_MAX_MS);
    const plain = sentinelOptions({ ...t, tls: false, password: undefined, sentinelPassword: undefined });
    expect('tls' in plain || 'password' in plain || 'sentinelPassword' in plain).toBe(false);
    // What /readyz names a connection by (a lazy one: no socket is opened).
    const client = new Redis({ ...o, lazyConnect: true });
    expect(redisAddress(client)).toBe('sentinel mymaster');
    client.disconnect();
  });

  it('REDIS_PASSWORD and REDIS_TLS apply to REDIS_URL and Cluster targets too; REDIS_TLS is refused for a unix socket', () => {
    expect(redisTarget(redisSlice(parseEnv({ REDIS_URL: 'redis://10.0.0.9:6379', REDIS_PASSWORD: 'pw' })))).toEqual({
      kind: 'single',
      url: 'redis://10.0.0.9:6379',
      password: 'pw',
    });
    expect(redisTarget(redisSlice(parseEnv({ REDIS_CLUSTER_NODES: '10.0.0.9:7000', REDIS_TLS: 'true' })))).toEqual({
      kind: 'cluster',
      nodes: [{ host: '10.0.0.9', port: 7000 }],
      tls: true,
    });
    expect(() => parseEnv({ REDIS_URL: 'unix:///run/redis.sock', REDIS_TLS: '1' })).toThrow(/REDIS_TLS: is for TCP/);
  });
});
