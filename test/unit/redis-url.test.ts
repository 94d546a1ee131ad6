import { describe, expect, it } from 'vitest';
import { describeTarget } from '../../shared/redis/connection.js';
import { ioredisAddress, redisUrlProblem, unixSocketOf, unixSocketUrl } from '../../shared/redis/url.js';

describe('REDIS_URL forms', () => {
  it('hands ioredis the socket path (with its options) of a unix:// URL and any other URL as it is', () => {
    expect(ioredisAddress('unix:///run/redis/redis.sock')).toBe('/run/redis/redis.sock');
    expect(ioredisAddress('unix:///run/redis/redis.sock?db=2&password=s%40cret')).toBe(
      '/run/redis/redis.sock?db=2&password=s%40cret',
    );
    expect(ioredisAddress('redis://10.0.0.5:6379/1')).toBe('redis://10.0.0.5:6379/1');
  });

  it('refuses a unix URL with a host, credentials or no absolute path', () => {
    for (const bad of [
      'unix://run/redis.sock',
      'unix://:pw@/run/redis.sock',
      'unix://',
      'unix:///',
      'unix:/run/redis.sock',
    ]) {
      expect(unixSocketOf(bad)).toBeUndefined();
      expect(redisUrlProblem(bad)).toMatch(/unix:\/\/\/absolute\/path\.sock/);
    }
    expect(redisUrlProblem('unix:///tmp/r.sock')).toBeUndefined();
  });

  it('round-trips a socket path with characters a URL escapes', () => {
    const path = '/tmp/data dir/50%/#redis.sock';
    const url = unixSocketUrl(path);
    expect(url).toBe('unix:///tmp/data%20dir/50%25/%23redis.sock');
    expect(unixSocketOf(url)).toBe(path);
    // ioredis reads options after a `?` in a socket path, so a path holding one cannot be named.
    expect(unixSocketOf(unixSocketUrl('/tmp/a?b/redis.sock'))).toBeUndefined();
  });

  it('names a target in logs without its password', () => {
    expect(describeTarget({ kind: 'single', url: 'unix:///run/redis.sock?password=hunter2' })).toBe(
      'unix:/run/redis.sock',
    );
    expect(describeTarget({ kind: 'single', url: 'redis://:hunter2@10.0.0.5:6380' })).toBe('10.0.0.5:6380');
  });
});
