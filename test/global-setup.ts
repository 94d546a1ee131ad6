import type { TestProject } from 'vitest/node';
import { type RedisServer, startRedisServer } from './helpers/redis-server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
}

let server: RedisServer | undefined;

/** One private Redis for the whole run (or REDIS_URL when given); tests isolate by queue name. */
export async function setup(project: TestProject): Promise<void> {
  let url = process.env.REDIS_URL;
  if (!url) {
    server = await startRedisServer();
    url = server.url;
  }
  project.provide('redisUrl', url);
}

export async function teardown(): Promise<void> {
  await server?.stop();
}
