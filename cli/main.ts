/**
 * `events-ingest`: the analyst and admin CLI (`npx events-ingest …`, `npm run cli -- …`).
 *   sync   incremental, resumable download of a collection's batches into a folder
 *   query  SQL in DuckDB: as given (it names its files), or with an `events` view over a synced
 *          folder (--dir) or the configured store (--store; on S3 through DuckDB's httpfs, or a
 *          local copy of what the view reads when httpfs cannot be loaded or with --copy), or an
 *          app's Iceberg table (--table --app A [--as-of <snapshot id|timestamp>])
 *   table  the snapshots of an app's Iceberg table
 *   erase  erase every event of a person from an app (admin), --wait to follow it to completion
 *   openapi  the server's OpenAPI 3.1 document for its config, on stdout
 * Exit codes: 0 ok, 1 error, 2 usage, 3 sync lock held by another run, 4 sync cursor older than the
 * server's raw retention, 130 interrupted.
 */
import { Command, CommanderError, Option } from 'commander';
import { ConfigError, parseEnv } from '../shared/config.js';
import { CliError, EXIT, messageOf } from './errors.js';
import { eraseCommand } from './erase.js';
import { openapiCommand } from './openapi.js';
import { DEFAULT_RETRY } from './http.js';
import { intOption } from './options.js';
import type { QuerySource } from './query.js';

interface SyncFlags {
  url: string;
  app: string;
  out: string;
  token?: string;
  collectionPath: string;
  limit: number;
  maxRetries: number;
  timeout: number;
  maxBatches: number;
}

interface QueryFlags {
  dir?: string;
  store?: boolean;
  table?: boolean;
  asOf?: string;
  app?: string;
  collection?: string;
  copy?: boolean;
  cacheDir?: string;
  json?: boolean;
  csv?: boolean;
}

/** The commander program; actions throw CliError, which `main` turns into exit codes. */
export function buildProgram(io: {
  stdout: NodeJS.WriteStream;
  stderr: NodeJS.WriteStream;
  env: NodeJS.ProcessEnv;
  signal: AbortSignal;
}): Command {
  const program = new Command('events-ingest')
    .description('Analyst and admin tools for events-ingest: sync batches to a folder, query them with DuckDB')
    .exitOverride()
    .showHelpAfterError()
    .configureOutput({ writeOut: (s) => io.stdout.write(s), writeErr: (s) => io.stderr.write(s) });

  program
    .command('sync')
    .description('download new batches (list ?after= + pull) into a folder; resumable, safe from cron')
    .requiredOption('--url <url>', 'server base URL (with BASE_PATH if any), e.g. http://127.0.0.1:8787')
    .requiredOption('--app <app>', 'app whose batches to download')
    .requiredOption('--out <dir>', 'folder for <batchId>.parquet files, .cursor and .sync.lock')
    .option(
      '--token <token>',
      'bearer token with a read role (default: $EVENTS_INGEST_TOKEN; prefer the variable, arguments show in ps)',
    )
    .option('--collection-path <path>', 'list/pull path before the app (storagePath without {app}/{batchId})', 'events')
    .option('--limit <n>', 'list page size (1-1000)', intOption(1, 1000), 1000)
    .option(
      '--max-retries <n>',
      'retries per request on 429/5xx/network errors',
      intOption(0, 100),
      DEFAULT_RETRY.maxRetries,
    )
    .option(
      '--timeout <ms>',
      'per-request timeout in ms, body included',
      intOption(1000, 3_600_000),
      DEFAULT_RETRY.timeoutMs,
    )
    .option('--max-batches <n>', 'stop after this many batches (0: until caught up)', intOption(0, 1_000_000_000), 0)
    .action(async (flags: SyncFlags) => {
      const token = flags.token ?? (io.env.EVENTS_INGEST_TOKEN || undefined);
      // Loaded on demand: each command's dependencies (DuckDB, the AWS SDK) cost start-up time the other does not need.
      const [{ runSync }, { createProgress }] = await Promise.all([import('./sync.js'), import('./progress.js')]);
      const result = await runSync({
        url: flags.url,
        app: flags.app,
        out: flags.out,
        token,
        collectionPath: flags.collectionPath.replace(/^\/+|\/+$/g, ''),
        limit: flags.limit,
        retry: { ...DEFAULT_RETRY, maxRetries: flags.maxRetries, timeoutMs: flags.timeout },
        maxBatches: flags.maxBatches,
        progress: createProgress(io.stderr),
        signal: io.signal,
      });
      const unchanged = result.unchanged > 0 ? `; ${result.unchanged} already present` : '';
      const rewritten = result.rewritten > 0 ? `; ${result.rewritten} rewritten by erasures downloaded again` : '';
      const erasures = result.erasuresFollowed ? '' : '; erasures not followed (see the warning)';
      const retention = result.startedAfterRetention
        ? `; started after ${result.startedAfterRetention}: older batches were deleted by raw retention and are in the rollups (query --store)`
        : '';
      io.stdout.write(
        `synced ${result.downloaded} batches (${result.bytes} bytes), cursor ${result.cursor ?? 'none'}${unchanged}${rewritten}${erasures}${retention}\n`,
      );
    });

  program
    .command('query')
    .description(
      'run SQL in DuckDB: as given (naming its files with read_parquet), or with "events" a view over the synced folder (--dir) or the configured store (--store)',
    )
    .argument('<sql>', 'SQL to run, e.g. "SELECT event_type, COUNT(*) AS n FROM events GROUP BY 1 ORDER BY n DESC"')
    .addOption(
      new Option('--dir <dir>', 'folder filled by sync: events = <dir>/*.parquet').conflicts(['store', 'table']),
    )
    .addOption(
      new Option(
        '--store',
        'the store the server writes to, from STORE, DATA_DIR, S3_*, CONFIG_FILE (as the server reads them)',
      ).conflicts(['dir', 'table']),
    )
    .addOption(
      new Option(
        '--table',
        "the app's Iceberg table in that store (needs --app): events = the current snapshot's files",
      ).conflicts(['dir', 'store']),
    )
    .option('--as-of <snapshot>', 'with --table: an older snapshot, by id or ISO timestamp (the one current then)')
    .option(
      '--app <app>',
      'with --store: only this app (default: every app); with --table: the app whose table is read',
    )
    .option('--collection <name>', 'with --store or --table: collection name from CONFIG_FILE (default: the first)')
    .option(
      '--copy',
      "with --store on S3: read through a local copy of the objects the view needs (fetched with the server's S3 client) instead of DuckDB's httpfs; the default when httpfs cannot be loaded",
    )
    .option('--no-copy', "with --store on S3: read S3 only through DuckDB's httpfs; fail if it cannot be loaded")
    .option(
      '--cache-dir <dir>',
      'with --store on S3: folder of the local copy, reused across runs (default: $XDG_CACHE_HOME or ~/.cache, /events-ingest/view-copy/<store>)',
    )
    .addOption(new Option('--json', 'JSON lines, one object per row').conflicts('csv'))
    .addOption(new Option('--csv', 'CSV with a header row').conflicts('json'))
    .action(async (sql: string, flags: QueryFlags) => {
      const { renderResult, runQuery } = await import('./query.js');
      let source: QuerySource;
      const copyFlags = flags.copy !== undefined || flags.cacheDir !== undefined;
      if (flags.copy === false && flags.cacheDir !== undefined)
        throw new CliError('--cache-dir is the folder of the copy that --no-copy turns off', EXIT.usage);
      if (copyFlags && !flags.store)
        throw new CliError('--copy, --no-copy and --cache-dir go with --store (STORE=s3)', EXIT.usage);
      if (flags.asOf !== undefined && !flags.table) throw new CliError('--as-of goes with --table', EXIT.usage);
      if (flags.table) {
        if (flags.app === undefined) throw new CliError('--table needs --app (one table per app)', EXIT.usage);
        source = { kind: 'table', env: envOf(io.env), app: flags.app, collection: flags.collection, asOf: flags.asOf };
      } else if (flags.dir !== undefined) {
        if (flags.app !== undefined || flags.collection !== undefined)
          throw new CliError('--app and --collection go with --store (a synced folder holds one app)', EXIT.usage);
        source = { kind: 'dir', dir: flags.dir };
      } else if (flags.store) {
        let env;
        try {
          env = parseEnv(io.env);
        } catch (err) {
          throw new CliError(messageOf(err));
        }
        if (copyFlags && env.STORE !== 's3')
          throw new CliError(
            `--copy, --no-copy and --cache-dir are for STORE=s3 (STORE=${env.STORE} is read in place)`,
            EXIT.usage,
          );
        source = {
          kind: 'store',
          env,
          app: flags.app,
          collection: flags.collection,
          copy: flags.copy,
          cacheDir: flags.cacheDir,
        };
      } else {
        // The SQL names its files itself (read_parquet('<root>/events/<app>/*.parquet'), as in the README).
        if (flags.app !== undefined || flags.collection !== undefined)
          throw new CliError('--app and --collection go with --store', EXIT.usage);
        source = { kind: 'none' };
      }
      const result = await runQuery(sql, source, {
        notice: (line) => io.stderr.write(`${line}\n`),
        env: io.env,
        signal: io.signal,
      });
      io.stdout.write(renderResult(result, flags.json ? 'json' : flags.csv ? 'csv' : 'table'));
    });

  program
    .command('table')
    .description(
      "list the snapshots of an app's Iceberg table in the configured store (id, time, operation, files, rows, through-batch-id)",
    )
    .requiredOption('--app <app>', 'the app')
    .option('--collection <name>', 'collection name from CONFIG_FILE (default: the first)')
    .addOption(new Option('--json', 'JSON lines, one object per row').conflicts('csv'))
    .addOption(new Option('--csv', 'CSV with a header row').conflicts('json'))
    .action(async (flags: { app: string; collection?: string; json?: boolean; csv?: boolean }) => {
      const { renderResult } = await import('./query.js');
      const { tableSnapshots } = await import('./table.js');
      const result = await tableSnapshots({ env: envOf(io.env), app: flags.app, collection: flags.collection });
      io.stdout.write(renderResult(result, flags.json ? 'json' : flags.csv ? 'csv' : 'table'));
    });

  program.addCommand(eraseCommand(io));
  program.addCommand(openapiCommand(io));

  return program;
}

/** The server's settings from the environment, a config error as a CliError. */
function envOf(env: NodeJS.ProcessEnv): ReturnType<typeof parseEnv> {
  try {
    return parseEnv(env);
  } catch (err) {
    throw new CliError(messageOf(err));
  }
}

/** Runs the CLI on `argv` and resolves to the exit code (never throws). */
export async function main(
  argv: readonly string[],
  io = { stdout: process.stdout, stderr: process.stderr, env: process.env },
): Promise<number> {
  const abort = new AbortController();
  const onSignal = (): void => {
    abort.abort(new CliError('interrupted', EXIT.interrupted));
    // Work between requests (hashing, fsync) is not abortable; do not let it hold a ^C for long.
    setTimeout(() => process.exit(EXIT.interrupted), 5_000).unref();
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    await buildProgram({ ...io, signal: abort.signal }).parseAsync([...argv], { from: 'user' });
    return EXIT.ok;
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version are "errors" to commander; real usage errors were already printed by it.
      return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
    }
    if (err instanceof CliError) {
      io.stderr.write(`events-ingest: ${err.message}\n`);
      return err.exitCode;
    }
    if (err instanceof ConfigError) {
      io.stderr.write(`events-ingest: ${err.message}\n`);
      return EXIT.error;
    }
    io.stderr.write(`events-ingest: ${messageOf(err)}\n`);
    return EXIT.error;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

// Always the entry point (run by tsx or imported by bin/events-ingest.mjs); stdout is flushed before exit.
const code = await main(process.argv.slice(2));
process.exitCode = code;
