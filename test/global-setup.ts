import { spawnSync } from 'node:child_process';
import type { TestProject } from 'vitest/node';
import { type RedisServer, startRedisServer } from './helpers/redis-server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
}

let server: RedisServer | undefined;
let container: { stop(): Promise<unknown> } | undefined;

function hasRedisServer(): boolean {
  const r = spawnSync('redis-server', ['--version'], { stdio: 'ignore' });
  return !r.error && r.status === 0;
}

/**
 * One Redis for the whole run; tests isolate by queue name. In order: REDIS_URL, a private
 * `redis-server` on a free port, or (no binary, but a Docker engine) a container via
 * testcontainers.
 */
export async function setup(project: TestProject): Promise<void> {
  let url = process.env.REDIS_URL;
  if (!url && hasRedisServer()) {
    server = await startRedisServer();
    url = server.url;
  }
  if (!url) {
    // Only reached without redis-server installed; needs a Docker engine (none on the dev/CI machines).
    const { GenericContainer, Wait } = await import('testcontainers');
    const started = await new GenericContainer('redis:7-alpine')
      .withExposedPorts(6379)
      .withWaitStrategy(Wait.forLogMessage('Ready to accept connections'))
      .start();
    container = started;
    url = `redis://${started.getHost()}:${started.getMappedPort(6379)}`;
  }
  project.provide('redisUrl', url);
}

export async function teardown(): Promise<void> {
  await server?.stop();
  await container?.stop();
}
