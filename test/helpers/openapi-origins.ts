/**
 * Which loopback origins are the product's API (started by test/helpers/stack.ts or
 * test/helpers/proc.ts), with their BASE_PATH: the integration tier's OpenAPI hook
 * (test/helpers/openapi-hook.ts) checks the answers of these origins only, so that it never sends
 * a request of its own to a test's fake server (a JWKS, a sync target, s3rver) that counts them.
 * Kept on globalThis so that the setup file and the helpers share it whatever module instance
 * each one loaded.
 */
const KEY = Symbol.for('events-ingest.test.productOrigins');

type Registry = Map<string, string>;

function registry(): Registry {
  const g = globalThis as { [KEY]?: Registry };
  return (g[KEY] ??= new Map());
}

/** Records that `url` (any URL of the server) is the product's API under `basePath`. */
export function registerProductOrigin(url: string, basePath = ''): void {
  if (!url) return;
  registry().set(new URL(url).origin, basePath);
}

/** The BASE_PATH of a registered product origin, or undefined for any other origin. */
export function productBasePath(origin: string): string | undefined {
  return registry().get(origin);
}
