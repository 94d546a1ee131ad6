/**
 * The pure parts of `events-ingest erase` (cli/erase.ts) and of sync's erasure following
 * (cli/sync.ts): arguments → request, status answers → progress lines, rewritten pages checked,
 * the rewritten route's `after` and roles. The command is parsed by its real commander
 * definition with the HTTP part replaced; no server (test/integration/erase-cli.test.ts has one).
 */
import { CommanderError } from 'commander';
import { describe, expect, it } from 'vitest';
import { CliError, EXIT } from '../../cli/errors.js';
import { type EraseOptions, describeStatus, eraseCommand, eraseRequestOf, parseEraseStatus } from '../../cli/erase.js';
import { parseRewrittenPage, rewrittenAnswer } from '../../cli/sync.js';
import { parseRewrittenAfter, rewrittenRoles } from '../../services/api/list/rewritten.js';
import { ApiError } from '../../services/api/error-map.js';

interface Parsed {
  opts?: EraseOptions;
  stdout: string;
  stderr: string;
  error?: unknown;
}

async function parse(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Parsed> {
  const out: Parsed = { stdout: '', stderr: '' };
  const io = {
    stdout: { write: (s: string) => (out.stdout += s) },
    stderr: { write: (s: string) => (out.stderr += s) },
    env,
  };
  const cmd = eraseCommand(io, async (o) => {
    out.opts = o;
    o.accepted?.('er-1');
    return o.wait
      ? { id: 'er-1', status: { id: 'er-1', state: 'completed', filesScanned: 3, filesRewritten: 1, rowsErased: 7 } }
      : { id: 'er-1' };
  })
    .exitOverride()
    .configureOutput({ writeOut: () => undefined, writeErr: () => undefined });
  try {
    await cmd.parseAsync(args, { from: 'user' });
  } catch (err) {
    out.error = err;
  }
  return out;
}

const URL_ARGS = ['--url', 'http://127.0.0.1:8787/ingest', '--app', 'shop'];

describe('erase arguments', () => {
  it('repeatable ids become the request body (duplicates sent once); defaults as documented', async () => {
    const r = await parse(
      [...URL_ARGS, '--distinct-id', 'u1', '--distinct-id', 'u2', '--distinct-id', 'u1', '--anonymous-id', 'a1'],
      { EVENTS_INGEST_TOKEN: 'tok' },
    );
    expect(r.error).toBeUndefined();
    expect(r.opts?.request).toEqual({ distinct_ids: ['u1', 'u2'], anonymous_ids: ['a1'], dry_run: false });
    expect(r.opts?.collection).toBe('events');
    expect(r.opts?.app).toBe('shop');
    expect(r.opts?.wait).toBe(false);
    expect(r.opts?.token).toBe('tok');
    expect(r.opts?.base.href).toBe('http://127.0.0.1:8787/ingest');
    expect(r.opts?.waitTimeoutMs).toBe(3_600_000);
    expect(r.opts?.pollIntervalMs).toBe(1000);
    expect(r.stdout).toBe('er-1\n');
  });

  it('--dry-run, --wait, --token, --collection and the timing options are passed; --wait prints a summary line', async () => {
    const r = await parse(
      [
        ...URL_ARGS,
        '--anonymous-id',
        'a1',
        '--dry-run',
        '--wait',
        '--token',
        't2',
        '--collection',
        'clicks',
        '--wait-timeout',
        '60',
        '--poll-interval',
        '250',
        '--max-retries',
        '0',
        '--timeout',
        '5000',
      ],
      {
        EVENTS_INGEST_TOKEN: 'tok',
      },
    );
    expect(r.error).toBeUndefined();
    expect(r.opts?.request).toEqual({ distinct_ids: [], anonymous_ids: ['a1'], dry_run: true });
    expect(r.opts).toMatchObject({
      wait: true,
      token: 't2',
      collection: 'clicks',
      waitTimeoutMs: 60_000,
      pollIntervalMs: 250,
    });
    expect(r.opts?.retry).toMatchObject({ maxRetries: 0, timeoutMs: 5000 });
    expect(r.stdout).toBe(
      'er-1\nerasure er-1: completed (dry run), 3 files scanned, 1 would rewrite, 7 rows to erase\n',
    );
  });

  it('usage errors: no id, an empty id, a bad app, a bad URL, a bad number, a missing --app', async () => {
    const usage = async (args: string[]): Promise<void> => {
      const r = await parse(args);
      expect(r.opts).toBeUndefined();
      if (r.error instanceof CliError) expect(r.error.exitCode).toBe(EXIT.usage);
      else expect(r.error).toBeInstanceOf(CommanderError);
    };
    await usage(URL_ARGS);
    await usage([...URL_ARGS, '--distinct-id', '']);
    await usage(['--url', 'http://x', '--app', '../x', '--distinct-id', 'u']);
    await usage(['--url', 'ftp://x', '--app', 'a', '--distinct-id', 'u']);
    await usage(['--url', 'http://x/?q=1', '--app', 'a', '--distinct-id', 'u']);
    await usage([...URL_ARGS, '--distinct-id', 'u', '--wait-timeout', '0']);
    await usage([...URL_ARGS, '--distinct-id', 'u', '--poll-interval', '1e3']);
    await usage(['--url', 'http://x', '--distinct-id', 'u']);
  });

  it('eraseRequestOf alone', () => {
    expect(eraseRequestOf({ distinctId: ['x'], anonymousId: [] })).toEqual({
      distinct_ids: ['x'],
      anonymous_ids: [],
      dry_run: false,
    });
    expect(() => eraseRequestOf({ distinctId: [], anonymousId: [] })).toThrow(CliError);
  });
});

describe('erase status answers', () => {
  it('are read with their counts; missing counts are 0; anything else is refused', () => {
    const s = parseEraseStatus({
      id: 'e',
      state: 'running',
      files_scanned: 10,
      files_rewritten: 2,
      rows_erased: 5,
      extra: true,
    });
    expect(s).toEqual({ id: 'e', state: 'running', filesScanned: 10, filesRewritten: 2, rowsErased: 5 });
    expect(describeStatus(s, false)).toBe('erasure e: running, 10 files scanned, 2 rewritten, 5 rows erased');
    expect(parseEraseStatus({ id: 'e', state: 'queued' })).toMatchObject({ filesScanned: 0, rowsErased: 0 });
    const failed = parseEraseStatus({
      id: 'e',
      state: 'failed',
      files_scanned: 1,
      files_rewritten: 0,
      rows_erased: 0,
      error: 'store down',
    });
    expect(describeStatus(failed, false)).toContain('(store down)');
    for (const bad of [
      null,
      {},
      { id: 'e', state: 'done' },
      { id: 'e', state: 'running', rows_erased: -1 },
      { id: 'e', state: 'running', files_scanned: 1.5 },
      { id: 1, state: 'running' },
    ]) {
      expect(() => parseEraseStatus(bad)).toThrow(CliError);
    }
  });
});

describe('sync: the rewritten listing', () => {
  const c = (n: number): string => `17829331570${String(n).padStart(2, '0')}-0000-0a1b2c3d`;
  const b = '1782933157000-0000-abcdef';

  it('pages are checked: cursors increasing past the saved one, batch ids only', () => {
    expect(
      parseRewrittenPage(
        {
          items: [
            { cursor: c(1), batchIds: [b] },
            { cursor: c(2), batchIds: [] },
          ],
          next: c(2),
          hasMore: false,
        },
        undefined,
      ),
    ).toEqual({
      items: [
        { cursor: c(1), batchIds: [b] },
        { cursor: c(2), batchIds: [] },
      ],
      hasMore: false,
    });
    const bad = [
      { items: 'x', hasMore: false },
      { items: [] },
      { items: [{ cursor: 'x', batchIds: [b] }], hasMore: false },
      {
        items: [
          { cursor: c(2), batchIds: [b] },
          { cursor: c(1), batchIds: [b] },
        ],
        hasMore: false,
      },
      { items: [{ cursor: c(1), batchIds: ['../../etc/passwd'] }], hasMore: false },
      { items: [{ cursor: c(1), batchIds: b }], hasMore: false },
    ];
    for (const body of bad) expect(() => parseRewrittenPage(body, undefined)).toThrow(CliError);
    // Not past the saved cursor: refused (a server going backwards could loop a run forever).
    expect(() => parseRewrittenPage({ items: [{ cursor: c(1), batchIds: [b] }], hasMore: false }, c(1))).toThrow(
      CliError,
    );
  });

  it('401, 403 and 404 are refusals (warned, not fatal); other failures are errors', () => {
    expect(rewrittenAnswer(200)).toBe('ok');
    for (const s of [401, 403, 404]) expect(rewrittenAnswer(s)).toBe('refused');
    for (const s of [400, 410, 429, 500, 503]) expect(rewrittenAnswer(s)).toBe('error');
  });

  it('the route takes a cursor or nothing as after, and is read by the read roles plus admin', () => {
    expect(parseRewrittenAfter(undefined)).toBeUndefined();
    expect(parseRewrittenAfter('')).toBeUndefined();
    expect(parseRewrittenAfter(c(3))).toBe(c(3));
    for (const bad of ['x', b, ['a', 'b'], `${c(3)}.json`]) expect(() => parseRewrittenAfter(bad)).toThrow(ApiError);
    expect(rewrittenRoles(['reader'])).toEqual(['reader', 'admin']);
    expect(rewrittenRoles(['admin'])).toEqual(['admin']);
  });
});
