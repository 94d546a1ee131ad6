import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { uniqueName } from '../helpers/names.js';
import { commandLine, distEntry, ROOT } from '../helpers/dist.js';
import { startService, waitFor, waitForHttp } from '../helpers/proc.js';
import { freePort } from '../helpers/redis-server.js';

/**
 * The project as others get it: the npm tarball installed into a fresh project with production
 * dependencies only, and the Dockerfile's layout (dist/ next to `npm ci --omit=dev`). npm
 * resolves from its cache (warm after the repository's own `npm ci`), so nothing is downloaded.
 */
const NPM_TIMEOUT_MS = 240_000;

function npm(args: string[], cwd: string): string {
  const r = spawnSync('npm', [...args, '--no-audit', '--no-fund', '--prefer-offline', '--loglevel=error'], {
    cwd,
    encoding: 'utf8',
    timeout: NPM_TIMEOUT_MS,
  });
  if (r.status !== 0) throw new Error(`npm ${args.join(' ')} failed (${String(r.status)}):\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

function run(
  cmd: string,
  args: string[],
  cwd: string,
  timeout = 60_000,
): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const SNIPPET = `
import express from 'express';
import { S3ObjectStore } from 'events-ingest/s3';
import { BatchJobSchema, FilesystemObjectStore, JOB_NAME, createEventsServerPlugin, createSyncRouter, duckdbReadParquetSql, jsonErrorHandler } from 'events-ingest';

const store = new FilesystemObjectStore({ root: process.argv[2] });
const eventsPlugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
const syncRouter = createSyncRouter({
  store,
  config: { version: 1, collections: [{ name: 'events', storagePath: 'events/{app}/{batchId}', readRoles: ['admin'], writeRoles: ['public'], encryption: 'none', allowedMimeTypes: ['application/json'], maxBodyBytes: 8_000_000 }] },
  plugins: [eventsPlugin],
});
const app = express().use(syncRouter);
app.get('/boom', () => { throw new Error('host route failed'); });
app.use(jsonErrorHandler());
const server = app.listen(0, '127.0.0.1', async () => {
  const base = 'http://127.0.0.1:' + server.address().port;
  const push = (body) => fetch(base + '/push/events/myapp/any', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
  const ok = await push(JSON.stringify({ data: { events: [{ event_type: 'track', event: 'signup', distinct_id: 'u1' }] }, baseHash: null }));
  const bad = await push('{"data":');
  const boom = await fetch(base + '/boom');
  const s3 = new S3ObjectStore({ bucket: 'b', endpoint: 'http://127.0.0.1:9', forcePathStyle: true });
  console.log(JSON.stringify({
    ok: { status: ok.status, body: await ok.json() },
    bad: { status: bad.status, type: bad.headers.get('content-type'), body: await bad.json() },
    boom: { status: boom.status, type: boom.headers.get('content-type'), body: await boom.json() },
    s3: s3.describe(),
    sql: duckdbReadParquetSql({ store, collection: 'events/{app}/{batchId}', params: { app: 'myapp' } }).from,
    job: JOB_NAME,
    schema: typeof BatchJobSchema.safeParse,
  }));
  server.close();
  s3.destroy();
});
`;

const CONSUMER_TS = `
import { FilesystemObjectStore, createEventsServerPlugin, type BatchJob, type ObjectMeta, type ObjectStore } from 'events-ingest';
import { S3ObjectStore } from 'events-ingest/s3';

const store: ObjectStore = new FilesystemObjectStore({ root: '/tmp/x' });
export const meta: Promise<ObjectMeta | null> | undefined = store.head?.('events/a/b.parquet');
const plugin = createEventsServerPlugin({ store, collection: 'events', storagePath: 'events/{app}/{batchId}' });
export const mode: 'queue' | 'inline' = plugin.mode;
export const bucket: string = new S3ObjectStore({ bucket: 'b' }).bucket;
export const job: Pick<BatchJob, 'batchId' | 'key'> = { batchId: '1782933157690-0000-735223', key: 'events/a/1782933157690-0000-735223.parquet' };
// The declarations are real types, not any: this line must not type-check.
// @ts-expect-error root must be a string
new FilesystemObjectStore({ root: 1 });
`;

describe('the package as others install it', () => {
  const dirs: string[] = [];
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  let dist = '';
  // The compiled build is shared with the other test files; outside the tests' own timeouts.
  beforeAll(async () => {
    dist = dirname(await distEntry('index.js'));
  }, 300_000);
  const tempDir = (name: string): string => {
    const d = mkdtempSync(join(tmpdir(), name));
    dirs.push(d);
    return d;
  };

  it('npm pack → install with production deps only: plain-node ESM import and the setup snippet (push → file), the bin, and a TypeScript consumer', async () => {
    // Stage what `npm pack` would pack after `prepare`.
    const stage = tempDir('pack-stage-');
    for (const f of ['package.json', 'README.md', 'LICENSE', 'NOTICE']) cpSync(join(ROOT, f), join(stage, f));
    for (const d of ['bin', 'docs']) cpSync(join(ROOT, d), join(stage, d), { recursive: true });
    cpSync(dist, join(stage, 'dist'), { recursive: true, filter: (src) => !src.endsWith('.sources-sha256') });
    const packed = JSON.parse(npm(['pack', '--ignore-scripts', '--json', '--pack-destination', stage], stage)) as {
      filename: string;
      files: { path: string }[];
    }[];
    const files = packed[0]!.files.map((f) => f.path);
    // Only what a user needs: compiled code, declarations, maps, Lua, the bin, docs and the OpenAPI document.
    expect(files).toContain('dist/index.js');
    expect(files).toContain('dist/index.d.ts');
    expect(files).toContain('dist/shared/redis/scripts/mint_batches-n.lua');
    expect(files).toContain('bin/events-ingest.mjs');
    expect(files).toContain('dist/cli/main.js');
    expect(files).toContain('docs/openapi.json');
    // Apache-2.0: the licence and the notices travel with every copy.
    expect(files).toEqual(expect.arrayContaining(['LICENSE', 'NOTICE']));
    expect(
      files.filter(
        (f) =>
          !/^(dist\/.*\.(js|d\.ts|js\.map|d\.ts\.map|lua)|bin\/events-ingest\.mjs|docs\/.*\.md|docs\/openapi\.json|README\.md|LICENSE|NOTICE|package\.json)$/.test(
            f,
          ),
      ),
    ).toEqual([]);
    // No tests, benchmarks or TypeScript sources (the maps carry the sources inline, as the README says).
    expect(files.filter((f) => /(^|\/)(test|bench)\/|\.test\.|(?<!\.d)\.ts$/.test(f))).toEqual([]);
    const manifest = JSON.parse(readFileSync(join(stage, 'package.json'), 'utf8')) as {
      license?: string;
      private?: boolean;
      optionalDependencies?: Record<string, string>;
    };
    expect(manifest).toMatchObject({ license: 'Apache-2.0' });
    expect(manifest.private).toBeUndefined();
    // The Starfish protocol package declares no licence: optional, loaded only with cap auth on (NOTICE).
    expect(Object.keys(manifest.optionalDependencies ?? {})).toContain('@drakkar.software/starfish-protocol');
    // What `npm publish` would do, without publishing.
    const dry = spawnSync('npm', ['publish', '--dry-run', '--ignore-scripts', '--json'], {
      cwd: stage,
      encoding: 'utf8',
      timeout: NPM_TIMEOUT_MS,
    });
    expect(dry.status, dry.stderr).toBe(0);
    // npm 11 keys the answer by package name; earlier versions answer the package itself.
    const published = JSON.parse(dry.stdout) as { name?: string; 'events-ingest'?: { name: string } };
    expect(published['events-ingest']?.name ?? published.name).toBe('events-ingest');

    const consumer = tempDir('consumer-');
    writeFileSync(
      join(consumer, 'package.json'),
      JSON.stringify({ name: 'consumer', version: '1.0.0', private: true, type: 'module' }),
    );
    npm(['install', '--omit=dev', join(stage, packed[0]!.filename), 'express@5'], consumer);
    const modules = readdirSync(join(consumer, 'node_modules'));
    for (const devOnly of ['tsx', 'typescript', 'vitest', '@duckdb', 'esbuild'])
      expect(modules, devOnly).not.toContain(devOnly);

    // Plain node, ESM: the seed's setup snippet on the filesystem store.
    const root = join(consumer, 'data');
    writeFileSync(join(consumer, 'snippet.mjs'), SNIPPET);
    const r = run(process.execPath, ['snippet.mjs', root], consumer);
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop() as string) as Record<
      string,
      { status: number; type?: string; body: Record<string, unknown> }
    >;
    expect(out.ok!.status).toBe(200);
    const batchId = out.ok!.body.batchId as string;
    const file = readFileSync(join(root, 'events', 'myapp', `${batchId}.parquet`));
    expect(file.subarray(0, 4).toString()).toBe('PAR1');
    // The router's JSON error mapping, inside the router and after the host's own routes.
    expect(out.bad).toMatchObject({
      status: 400,
      type: expect.stringContaining('application/json') as unknown,
      body: { error: expect.stringContaining('malformed JSON') as unknown },
    });
    expect(out.boom).toMatchObject({
      status: 500,
      type: expect.stringContaining('application/json') as unknown,
      body: { error: 'internal error' },
    });
    expect(out).toMatchObject({ s3: 's3://b (http://127.0.0.1:9)', job: 'encode-batch', schema: 'function' });
    expect(out.sql).toContain(`${root}/events/myapp/`);

    // The bin, from the tarball: plain node, no tsx; `query` says how to get DuckDB.
    const bin = join(consumer, 'node_modules', '.bin', 'events-ingest');
    const help = run(bin, ['--help'], consumer);
    expect(help.status, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/sync/);
    expect(help.stdout).toMatch(/query/);
    const query = run(bin, ['query', 'SELECT count(*) FROM events', '--dir', join(root, 'events', 'myapp')], consumer);
    expect(query.status).toBe(1);
    expect(query.stderr).toContain('npm install @duckdb/node-api');

    // A TypeScript consumer type-checks against the shipped declarations.
    writeFileSync(join(consumer, 'consumer.ts'), CONSUMER_TS);
    writeFileSync(
      join(consumer, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          strict: true,
          noEmit: true,
          skipLibCheck: true,
          types: ['node'],
          typeRoots: [join(ROOT, 'node_modules', '@types')],
        },
        files: ['consumer.ts'],
      }),
    );
    const tsc = run(
      process.execPath,
      [join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', consumer],
      consumer,
      120_000,
    );
    expect(tsc.stdout + tsc.stderr).toBe('');
    expect(tsc.status).toBe(0);
  }, 420_000);

  it('dist/ next to `npm ci --omit=dev` (the Dockerfile runtime stage) starts with plain node and serves a push', async () => {
    const app = tempDir('omit-dev-');
    for (const f of ['package.json', 'package-lock.json']) cpSync(join(ROOT, f), join(app, f));
    // As in the Dockerfile: `prepare` finds no TypeScript and leaves the build alone.
    mkdirSync(join(app, 'scripts'));
    cpSync(join(ROOT, 'scripts', 'build.mjs'), join(app, 'scripts', 'build.mjs'));
    npm(['ci', '--omit=dev'], app);
    for (const devOnly of ['tsx', 'typescript', '@duckdb'])
      expect(existsSync(join(app, 'node_modules', devOnly)), devOnly).toBe(false);
    cpSync(dist, join(app, 'dist'), { recursive: true });

    const port = await freePort();
    const dataDir = join(app, 'data');
    const proc = startService(join(app, 'dist', 'services', 'main.js') as `${string}.js`, {
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      REDIS_URL: inject('redisUrl'),
      QUEUE_NAME: uniqueName('omitdev'),
    });
    try {
      await waitForHttp(`http://127.0.0.1:${port}/readyz`, 30_000, proc);
      expect(commandLine(proc.pid).join(' ')).not.toMatch(/tsx/);
      const r = await fetch(`http://127.0.0.1:${port}/push/events/shop/x`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ data: { events: [{ event: 'a' }, { event: 'b' }] }, baseHash: null }),
      });
      expect(r.status).toBe(200);
      const { batchId } = (await r.json()) as { batchId: string };
      await waitFor(
        async () => existsSync(join(dataDir, 'events', 'shop', `${batchId}.parquet`)),
        30_000,
        'the batch file',
      );
      expect(await proc.stop('SIGTERM')).toBe(0);
    } finally {
      await proc.stop('SIGKILL');
    }
  }, 420_000);
});
