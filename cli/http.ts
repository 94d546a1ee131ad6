/**
 * HTTP for `sync`: bearer auth, a per-request timeout, and retries with exponential backoff on
 * overload and transient failures (429, 5xx, network errors), honouring `Retry-After`.
 */
import { CliError, EXIT, messageOf } from './errors.js';

export interface RetryPolicy {
  /** Retries after the first attempt (0 = fail on the first error). */
  maxRetries: number;
  /** First backoff delay; doubled per retry, with jitter, capped at `maxDelayMs`. */
  baseDelayMs: number;
  maxDelayMs: number;
  /** Longest `Retry-After` obeyed as given; longer values are cut to this so a cron run ends. */
  maxRetryAfterMs: number;
  /** Per attempt, body included. */
  timeoutMs: number;
}

/**
 * `--url` as a base URL the routes are appended to: http(s) only, and no query or fragment (they
 * would end up before the routes: a 404 on "/"). A CliError (exit 2) names the problem.
 */
export function parseBaseUrl(raw: string): URL {
  let base: URL;
  try {
    base = new URL(raw);
  } catch {
    throw new CliError(`--url ${JSON.stringify(raw)} is not a URL`, EXIT.usage);
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:')
    throw new CliError('--url must be http:// or https://', EXIT.usage);
  if (/[?#]/.test(base.href)) {
    const what = base.href.includes('?') ? 'a query (?…)' : 'a fragment (#…)';
    throw new CliError(
      `--url has ${what}: give only the server's base URL: scheme, host, port, and BASE_PATH if any (e.g. ${base.origin}${base.pathname.replace(/\/+$/, '')})`,
      EXIT.usage,
    );
  }
  return base;
}

export const DEFAULT_RETRY: RetryPolicy = {
  maxRetries: 5,
  baseDelayMs: 500,
  maxDelayMs: 30_000,
  maxRetryAfterMs: 300_000,
  timeoutMs: 120_000,
};

/** A failure worth another attempt; `retryAfterMs` comes from the server's `Retry-After`. */
export class RetriableError extends Error {
  override readonly name = 'RetriableError';
  readonly retryAfterMs: number | undefined;
  constructor(message: string, retryAfterMs?: number, opts?: { cause?: unknown }) {
    super(message, opts);
    this.retryAfterMs = retryAfterMs;
  }
}

/** `Retry-After` as milliseconds: delta-seconds or an HTTP date; undefined when absent or unreadable. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | undefined {
  if (value === null) return undefined;
  const trimmed = value.trim();
  if (/^\d{1,9}$/.test(trimmed)) return Number(trimmed) * 1000;
  const at = Date.parse(trimmed);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}

/** Whether a status means "try again later" rather than "this request is wrong". */
export function isRetriableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/** Throws RetriableError or CliError for a non-success response (after reading its `{error}` body, if any). */
export async function failFor(what: string, res: Response): Promise<never> {
  let detail = '';
  try {
    const text = await res.text();
    const parsed = JSON.parse(text) as { error?: unknown };
    detail = typeof parsed.error === 'string' ? `: ${parsed.error}` : '';
  } catch {
    // Not JSON: the status says enough.
  }
  const message = `${what} answered ${res.status}${detail}`;
  if (isRetriableStatus(res.status)) throw new RetriableError(message, parseRetryAfter(res.headers.get('retry-after')));
  throw new CliError(message);
}

/** Errors from fetch itself (connection refused/reset, DNS, our timeout) are transient by nature; a user abort is checked before this. */
export function asRetriable(err: unknown, what: string): unknown {
  if (err instanceof RetriableError || err instanceof CliError) return err;
  const cause = err instanceof Error && err.cause instanceof Error ? ` (${err.cause.message})` : '';
  return new RetriableError(`${what} failed: ${messageOf(err)}${cause}`, undefined, { cause: err });
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/** Delay before retry number `retry` (0-based): the server's Retry-After when given, else jittered exponential backoff. */
export function retryDelayMs(
  policy: RetryPolicy,
  retry: number,
  retryAfterMs: number | undefined,
  random = Math.random,
): number {
  if (retryAfterMs !== undefined) return Math.min(retryAfterMs, policy.maxRetryAfterMs);
  const exp = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** retry);
  // Half fixed, half random: spreads many cron clients without ever retrying immediately.
  return Math.round(exp / 2 + random() * (exp / 2));
}

/**
 * Runs `attempt` until it succeeds, throws a non-retriable error, or `policy.maxRetries` retries
 * are used up (then a CliError carrying the last failure). `onRetry` reports each wait.
 */
export async function withRetries<T>(
  what: string,
  policy: RetryPolicy,
  attempt: (signal: AbortSignal) => Promise<T>,
  opts: { signal?: AbortSignal; onRetry?: (message: string, delayMs: number, retry: number) => void } = {},
): Promise<T> {
  for (let retry = 0; ; retry++) {
    const signals = [AbortSignal.timeout(policy.timeoutMs), ...(opts.signal ? [opts.signal] : [])];
    try {
      return await attempt(AbortSignal.any(signals));
    } catch (raw) {
      if (opts.signal?.aborted) throw opts.signal.reason;
      const err = asRetriable(raw, what);
      if (!(err instanceof RetriableError)) throw err;
      if (retry >= policy.maxRetries)
        throw new CliError(`${err.message} (gave up after ${retry + 1} attempts)`, undefined, { cause: err });
      const delay = retryDelayMs(policy, retry, err.retryAfterMs);
      opts.onRetry?.(err.message, delay, retry + 1);
      await sleep(delay, opts.signal);
    }
  }
}
