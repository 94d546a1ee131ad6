/**
 * `events-ingest erase`: asks the server to erase every event of a person from an app
 * (`POST /admin/erase/<collection>/<app>`, issue 36) and, with `--wait`, follows the erasure
 * (`GET /admin/erase/<id>`) until it completes or fails, printing its progress on stderr.
 * It never prints the ids it erases: only the erasure id, states and counts.
 */
import { Command } from 'commander';
import { checkParamValue } from '../shared/paths.js';
import { CliError, EXIT } from './errors.js';
import { DEFAULT_RETRY, type RetryPolicy, failFor, parseBaseUrl, withRetries } from './http.js';
import { intOption } from './options.js';

/** The states an erasure goes through (`waiting`: for the list watermark to pass the request's instant). */
export const ERASE_STATES = ['queued', 'running', 'waiting', 'completed', 'failed'] as const;
export type EraseState = (typeof ERASE_STATES)[number];

/** The body of `POST /admin/erase/<collection>/<app>`. */
export interface EraseRequest {
  distinct_ids: string[];
  anonymous_ids: string[];
  dry_run: boolean;
}

/** What `GET /admin/erase/<id>` answers, as the CLI reads it. */
export interface EraseStatus {
  id: string;
  state: EraseState;
  filesScanned: number;
  filesRewritten: number;
  rowsErased: number;
  error?: string;
}

export interface EraseFlags {
  url: string;
  app: string;
  collection: string;
  distinctId: string[];
  anonymousId: string[];
  dryRun?: boolean;
  wait?: boolean;
  token?: string;
  maxRetries: number;
  timeout: number;
  waitTimeout: number;
  pollInterval: number;
}

export interface EraseOptions {
  base: URL;
  app: string;
  collection: string;
  request: EraseRequest;
  wait: boolean;
  token?: string;
  retry: RetryPolicy;
  /** How long `--wait` follows the erasure at most, in ms. */
  waitTimeoutMs: number;
  /** First delay between two status reads; grows to {@link MAX_POLL_MS}. */
  pollIntervalMs: number;
  /** Progress lines (stderr). */
  note(line: string): void;
  /** Called with the erasure id as soon as the server accepted the request (before any wait). */
  accepted?(id: string): void;
  signal?: AbortSignal;
}

/** Longest delay between two status reads: a long erasure is read every 10 s. */
export const MAX_POLL_MS = 10_000;

/** Commander's collector for a repeatable option. */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/**
 * The request an `erase` invocation makes, or a usage CliError (exit 2): at least one id, none
 * empty; repeated ids are sent once. What an id may be otherwise is the server's to say.
 */
export function eraseRequestOf(flags: Pick<EraseFlags, 'distinctId' | 'anonymousId' | 'dryRun'>): EraseRequest {
  const distinct = [...new Set(flags.distinctId)];
  const anonymous = [...new Set(flags.anonymousId)];
  if (distinct.length + anonymous.length === 0)
    throw new CliError('erase needs at least one --distinct-id or --anonymous-id', EXIT.usage);
  if ([...distinct, ...anonymous].some((id) => id.length === 0))
    throw new CliError('--distinct-id and --anonymous-id must not be empty', EXIT.usage);
  return { distinct_ids: distinct, anonymous_ids: anonymous, dry_run: flags.dryRun === true };
}

/** The options of a run from the parsed flags and environment; a usage CliError for a bad one. */
export function eraseOptionsOf(
  flags: EraseFlags,
  env: NodeJS.ProcessEnv,
  note: (line: string) => void,
  signal?: AbortSignal,
): EraseOptions {
  const base = parseBaseUrl(flags.url);
  for (const [name, value] of [
    ['--app', flags.app],
    ['--collection', flags.collection],
  ] as const) {
    const problem = checkParamValue(value);
    if (problem) throw new CliError(`${name} ${problem}`, EXIT.usage);
  }
  return {
    base,
    app: flags.app,
    collection: flags.collection,
    request: eraseRequestOf(flags),
    wait: flags.wait === true,
    token: flags.token ?? (env.EVENTS_INGEST_TOKEN || undefined),
    retry: { ...DEFAULT_RETRY, maxRetries: flags.maxRetries, timeoutMs: flags.timeout },
    waitTimeoutMs: flags.waitTimeout * 1000,
    pollIntervalMs: flags.pollInterval,
    note,
    signal,
  };
}

function count(v: unknown, name: string): number {
  if (v === undefined) return 0;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0)
    throw new CliError(`erasure status has ${name} ${JSON.stringify(v)}, not a count`);
  return v;
}

/** Reads a status answer; a CliError when it is not one. */
export function parseEraseStatus(body: unknown): EraseStatus {
  const v = body as Record<string, unknown> | null;
  if (
    typeof v !== 'object' ||
    v === null ||
    typeof v.id !== 'string' ||
    !ERASE_STATES.includes(v.state as EraseState)
  ) {
    throw new CliError(
      'erasure status is not {id, state, files_scanned, files_rewritten, rows_erased}; is the server recent enough?',
    );
  }
  const status: EraseStatus = {
    id: v.id,
    state: v.state as EraseState,
    filesScanned: count(v.files_scanned, 'files_scanned'),
    filesRewritten: count(v.files_rewritten, 'files_rewritten'),
    rowsErased: count(v.rows_erased, 'rows_erased'),
  };
  if (typeof v.error === 'string') status.error = v.error;
  return status;
}

/** One progress line: state and counts (a dry run's counts are what it would change). */
export function describeStatus(s: EraseStatus, dryRun: boolean): string {
  const verb = dryRun ? 'would rewrite' : 'rewritten';
  const rows = dryRun ? 'rows to erase' : 'rows erased';
  const error = s.error !== undefined ? ` (${s.error})` : '';
  return `erasure ${s.id}: ${s.state}${dryRun ? ' (dry run)' : ''}, ${s.filesScanned} files scanned, ${s.filesRewritten} ${verb}, ${s.rowsErased} ${rows}${error}`;
}

const sleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/**
 * Requests the erasure; with `wait`, reads its status until `completed` (resolves) or `failed`
 * (CliError, exit 1), at most `waitTimeoutMs` (CliError, exit 1, naming the id to look up later).
 * Retries each request like `sync` (429, 5xx, network errors). Returns the id and last status read.
 */
export async function runErase(o: EraseOptions): Promise<{ id: string; status?: EraseStatus }> {
  const root = o.base.href.replace(/\/+$/, '');
  const auth: Record<string, string> = o.token ? { Authorization: `Bearer ${o.token}` } : {};
  const onRetry = (message: string, delayMs: number, retry: number): void =>
    o.note(`${message}; retry ${retry}/${o.retry.maxRetries} in ${(delayMs / 1000).toFixed(1)} s`);
  const target = `${encodeURIComponent(o.collection)}/${encodeURIComponent(o.app)}`;
  const id = await withRetries(
    'erase',
    o.retry,
    async (signal) => {
      const res = await fetch(`${root}/admin/erase/${target}`, {
        method: 'POST',
        headers: { ...auth, 'Content-Type': 'application/json' },
        body: JSON.stringify(o.request),
        signal,
      });
      if (res.status !== 202 && res.status !== 200) return failFor(`erase ${o.collection}/${o.app}`, res);
      const body = (await res.json()) as { id?: unknown };
      if (typeof body.id !== 'string' || body.id.length === 0)
        throw new CliError('erase answered without an erasure id');
      return body.id;
    },
    { signal: o.signal, onRetry },
  );
  o.accepted?.(id);
  if (!o.wait) return { id };

  const deadline = Date.now() + o.waitTimeoutMs;
  let delay = o.pollIntervalMs;
  let last = '';
  let status: EraseStatus | undefined;
  for (;;) {
    status = await withRetries(
      'erasure status',
      o.retry,
      async (signal) => {
        const res = await fetch(`${root}/admin/erase/${encodeURIComponent(id)}`, { headers: auth, signal });
        if (res.status !== 200) return failFor(`erasure status ${id}`, res);
        return parseEraseStatus(await res.json());
      },
      { signal: o.signal, onRetry },
    );
    const line = describeStatus(status, o.request.dry_run);
    // A line when something changed, not one per read: a long erasure prints its progress, not a clock.
    if (line !== last) o.note(line);
    last = line;
    if (status.state === 'completed') return { id, status };
    if (status.state === 'failed')
      throw new CliError(`erasure ${id} failed${status.error !== undefined ? `: ${status.error}` : ''}`);
    const left = deadline - Date.now();
    if (left <= 0) {
      throw new CliError(
        `erasure ${id} is still ${status.state} after ${Math.round(o.waitTimeoutMs / 1000)} s (--wait-timeout); it goes on on the server: read GET /admin/erase/${id}`,
      );
    }
    await sleep(Math.min(delay, left), o.signal);
    delay = Math.min(MAX_POLL_MS, Math.ceil(delay * 1.5));
  }
}

export interface EraseIo {
  stdout: { write(s: string): unknown };
  stderr: { write(s: string): unknown };
  env: NodeJS.ProcessEnv;
  signal?: AbortSignal;
}

/**
 * The `erase` command. stdout gets the erasure id (one line, as soon as it is accepted), then
 * with `--wait` one summary line; progress and retries go to stderr. `run` is replaceable so tests can check what the
 * arguments become without a server.
 */
export function eraseCommand(
  io: EraseIo,
  run: (o: EraseOptions) => Promise<{ id: string; status?: EraseStatus }> = runErase,
): Command {
  return new Command('erase')
    .description(
      'erase every event of a person from an app (batch files, rollups, Iceberg table; synced folders on their next sync); admin token',
    )
    .requiredOption('--url <url>', 'server base URL (with BASE_PATH if any), e.g. http://127.0.0.1:8787')
    .requiredOption('--app <app>', 'the app whose events to erase')
    .option('--distinct-id <id>', 'a distinct_id to erase (repeatable)', collect, [])
    .option('--anonymous-id <id>', 'an anonymous_id to erase (repeatable)', collect, [])
    .option('--dry-run', 'report the files and rows it would change, change nothing')
    .option('--wait', 'follow the erasure until it completes or fails, with progress on stderr')
    .option('--collection <name>', 'collection name (as in CONFIG_FILE)', 'events')
    .option(
      '--token <token>',
      'bearer token with the admin role (default: $EVENTS_INGEST_TOKEN; prefer the variable, arguments show in ps)',
    )
    .option(
      '--max-retries <n>',
      'retries per request on 429/5xx/network errors',
      intOption(0, 100),
      DEFAULT_RETRY.maxRetries,
    )
    .option('--timeout <ms>', 'per-request timeout in ms', intOption(1000, 3_600_000), 30_000)
    .option(
      '--wait-timeout <s>',
      'with --wait: give up following after this many seconds (the erasure goes on)',
      intOption(1, 7 * 24 * 3600),
      3600,
    )
    .option(
      '--poll-interval <ms>',
      'with --wait: first delay between status reads (grows to 10 s)',
      intOption(100, 60_000),
      1000,
    )
    .action(async (flags: EraseFlags) => {
      const opts = eraseOptionsOf(flags, io.env, (line) => io.stderr.write(`${line}\n`), io.signal);
      opts.accepted = (id) => io.stdout.write(`${id}\n`);
      const { status } = await run(opts);
      if (status) io.stdout.write(`${describeStatus(status, opts.request.dry_run)}\n`);
    });
}
