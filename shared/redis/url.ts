/**
 * A Redis on this host can be reached through its unix socket: `unix:///run/redis/redis.sock`,
 * with `?db=`, `?password=` (and `?username=`) as query parameters. Each command then skips
 * the loopback TCP stack on both sides. Returns the socket path with its query, or undefined
 * for any other URL.
 */
export function unixSocketOf(url: string): string | undefined {
  if (!url.startsWith('unix://')) return undefined;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return undefined;
  }
  // `unix:///path`: no host, an absolute path. `unix://path` would take `path` for a host.
  if (u.host !== '' || u.username !== '' || u.password !== '' || !u.pathname.startsWith('/') || u.pathname.length < 2)
    return undefined;
  const path = decodeURIComponent(u.pathname);
  // ioredis takes what follows a `?` in a socket path for options.
  if (path.includes('?') || path.endsWith('/')) return undefined;
  return `${path}${u.search}`;
}

/** What ioredis is handed for a REDIS_URL: the socket path (and query) of a `unix://` URL, else the URL itself. */
export function ioredisAddress(url: string): string {
  return unixSocketOf(url) ?? url;
}

/** The `unix://` URL of an absolute socket path (each path segment percent-encoded). */
export function unixSocketUrl(socketPath: string): string {
  return `unix://${socketPath.split('/').map(encodeURIComponent).join('/')}`;
}

/** Why REDIS_URL is refused, or undefined when it names one Redis: `redis://`, `rediss://` or `unix:///<absolute socket path>`. */
export function redisUrlProblem(url: string): string | undefined {
  if (url.startsWith('unix:'))
    return unixSocketOf(url) === undefined
      ? 'a unix socket is named unix:///absolute/path.sock (options as ?db=&password=)'
      : undefined;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return 'must be a URL: redis://host:port, rediss://host:port or unix:///path/to/redis.sock';
  }
  if (u.protocol !== 'redis:' && u.protocol !== 'rediss:')
    return `scheme "${u.protocol}" is not one of redis:, rediss:, unix:`;
  if (u.hostname === '') return 'names no host: redis://host:port';
  return undefined;
}
