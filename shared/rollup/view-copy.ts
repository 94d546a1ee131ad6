/**
 * A local copy of exactly the objects the analysts' exact view reads from a store DuckDB cannot
 * open (S3 without DuckDB's `httpfs` extension), fetched through the product's own store, so the
 * same view SQL (./view.ts) runs over a local folder.
 *
 * Per list prefix, in the view's order: the manifest first, then the rollup files it lists, then
 * the batch files after its watermark, listed after the manifest was read. The manifest is
 * written locally once its files are there. So the copy holds what the view over the store would
 * have read at the moment the manifest was read (the watermark never moves back, and batch files
 * at or after it are never deleted), and the view over the copy is exact.
 *
 * The folder is reused: an object already copied is not fetched again. Batch files never change
 * (the key is the batch id; a retried encode rewrites the same rows), so their key and local size
 * identify them. A rollup file is identified by its key plus the size and the period's `rolledAt`
 * the manifest gives it: a re-rolled period is fetched again. Objects the view no longer reads
 * (batch files that fell below the watermark, rollup files no manifest lists, prefixes gone from
 * the store) are removed, so the copy stays the size of the view and never shows a row twice.
 */
import { createHash, randomBytes } from 'node:crypto';
import { type WriteStream, createWriteStream, promises as fs } from 'node:fs';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { z } from 'zod';
import { StoreError } from '../errors.js';
import { listPrefix, parseStoragePath } from '../paths.js';
import { createStore } from '../store/create.js';
import type { ObjectStore } from '../store/types.js';
import { manifestKey, msKey, rollupPrefix } from './layout.js';
import { type Manifest, readManifest } from './manifest.js';
import { discoverPrefixes } from './prefixes.js';

/** Objects fetched at once: enough to hide S3's per-request latency, few enough for a laptop and a shared server. */
export const DEFAULT_COPY_CONCURRENCY = 8;
/** The folder (under the copy's folder) that is the local store's root: `<dir>/objects/events/<app>/…`. */
export const COPY_OBJECTS_DIR = 'objects';
const INDEX_NAME = 'index.json';

const IndexSchema = z.object({
  v: z.literal(1),
  /** The store the copy was made from (`describe()`): one folder never mixes two stores. */
  source: z.string(),
  /** Key → local size and, for rollup files, the manifest's `<bytes>/<rolledAt>`. */
  objects: z.record(z.string(), z.object({ size: z.number().int().nonnegative(), tag: z.string() })),
});
type CopyIndex = z.infer<typeof IndexSchema>;

export interface ViewCopyProgress {
  /** Objects the view needs so far (grows prefix by prefix), and how many of them were fetched or found cached. */
  needed: number;
  fetched: number;
  fetchedBytes: number;
  cached: number;
}

export interface ViewCopyResult extends ViewCopyProgress {
  /** Root of the local copy: a filesystem store's root with the store's keys. */
  root: string;
  /** List prefixes copied. */
  prefixes: number;
  /** Local objects removed because the view no longer reads them. */
  removed: number;
}

export interface ViewCopyOptions {
  /** The store the view reads (an S3 store in practice; any ObjectStore works). */
  store: ObjectStore;
  /** The collection (its config or storagePath). */
  collection: { storagePath: string } | string;
  /** List-prefix params as for the view (`{ app: 'myapp' }`, `'*'` = every value). */
  params: Readonly<Record<string, string>>;
  /** The copy's folder (created if missing); holds `objects/` and `index.json`. */
  dir: string;
  /** Objects fetched at once (default {@link DEFAULT_COPY_CONCURRENCY}). */
  concurrency?: number;
  /** Called after each fetched object and once per prefix: counts and bytes only. */
  onProgress?: (p: ViewCopyProgress) => void;
  signal?: AbortSignal;
}

/** Brings `dir` up to date with what the exact view reads from `store` now; see the file comment. */
export async function refreshViewCopy(opts: ViewCopyOptions): Promise<ViewCopyResult> {
  const { store } = opts;
  const storagePath = typeof opts.collection === 'string' ? opts.collection : opts.collection.storagePath;
  const template = parseStoragePath(storagePath);
  const params = opts.params;
  const root = path.join(path.resolve(opts.dir), COPY_OBJECTS_DIR);
  await fs.mkdir(root, { recursive: true });
  const indexFile = path.join(path.resolve(opts.dir), INDEX_NAME);
  const index = await readIndex(indexFile, store.describe());
  const concurrency = Math.max(1, opts.concurrency ?? DEFAULT_COPY_CONCURRENCY);
  const progress: ViewCopyProgress = { needed: 0, fetched: 0, fetchedBytes: 0, cached: 0 };
  let removed = 0;

  const wildcard = template.prefixParams.some((p) => params[p] === '*');
  const pattern = listPrefix(template, params);
  const prefixes = wildcard
    ? [
        ...new Set([
          ...(await discoverPrefixes(store, template, { match: params })),
          ...(await discoverPrefixes(store, template, { root: 'rollups', match: params })),
        ]),
      ].sort()
    : [pattern];

  const fileOf = (key: string): string => path.join(root, ...key.split('/'));
  /** Fetches `wanted` objects that are not in the copy yet (or changed), `concurrency` at a time. */
  const fetchAll = async (wanted: readonly { key: string; tag: string }[]): Promise<void> => {
    progress.needed += wanted.length;
    const todo: { key: string; tag: string }[] = [];
    for (const w of wanted) {
      const known = index.objects[w.key];
      if (known && known.tag === w.tag && (await localSize(fileOf(w.key))) === known.size) progress.cached++;
      else todo.push(w);
    }
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < todo.length; i = next++) {
        opts.signal?.throwIfAborted();
        const { key, tag } = todo[i] as { key: string; tag: string };
        const size = await fetchObject(store, key, fileOf(key));
        index.objects[key] = { size, tag };
        progress.fetched++;
        progress.fetchedBytes += size;
        opts.onProgress?.({ ...progress });
      }
    };
    await Promise.all(Array.from({ length: Math.min(concurrency, todo.length) }, worker));
  };

  for (const prefix of prefixes) {
    opts.signal?.throwIfAborted();
    const manifest = await readManifest(store, prefix);
    const rollups = manifest ? rollupObjects(manifest) : [];
    await fetchAll(rollups);
    // Written after its files: a reader of the copy never sees a manifest listing a missing file.
    if (manifest) await writeFileAtomic(fileOf(manifestKey(prefix)), Buffer.from(`${JSON.stringify(manifest)}\n`));
    else await fs.rm(fileOf(manifestKey(prefix)), { force: true });
    const after = manifest && manifest.watermarkMs > 0 ? `${prefix}${msKey(manifest.watermarkMs)}` : undefined;
    // Listed after the manifest was read: every batch file the view reads at that moment is here.
    const batches = (await store.listKeys(prefix, { startAfter: after })).filter((k) => isViewFile(prefix, k));
    await fetchAll(batches.map((key) => ({ key, tag: '' })));
    removed += await prune(root, prefix, new Set(batches), new Set(rollups.map((r) => r.key)), index);
    await writeIndex(indexFile, index);
    opts.onProgress?.({ ...progress });
  }

  // Prefixes the copy holds but the store no longer has (only those the params select): the view over the copy must not read them.
  const local = new Set([
    ...(await discoverLocal(root, template, params, 'batches')),
    ...(await discoverLocal(root, template, params, 'rollups')),
  ]);
  for (const prefix of local) {
    if (prefixes.includes(prefix)) continue;
    await fs.rm(fileOf(manifestKey(prefix)), { force: true });
    removed += await prune(root, prefix, new Set(), new Set(), index);
  }
  await writeIndex(indexFile, index);
  return { ...progress, root, prefixes: prefixes.length, removed };
}

/** The default copy folder for a store: `<cache home>/events-ingest/view-copy/<hash of the store>`. */
export function defaultViewCopyDir(
  store: ObjectStore,
  env: Readonly<Record<string, string | undefined>>,
  home: string,
): string {
  const base = env.XDG_CACHE_HOME || path.join(home, '.cache');
  return path.join(
    base,
    'events-ingest',
    'view-copy',
    createHash('sha256').update(store.describe()).digest('hex').slice(0, 16),
  );
}

/** Rollup files the manifest lists, tagged with what identifies their content (size, and when the period was rolled). */
function rollupObjects(m: Manifest): { key: string; tag: string }[] {
  return m.periods.flatMap((p) => p.files.map((f) => ({ key: f.key, tag: `${f.bytes}/${p.rolledAt}` })));
}

/** A key the view's batch glob (`<prefix>*.parquet`) reads: a direct child of the prefix. */
function isViewFile(prefix: string, key: string): boolean {
  const name = key.slice(prefix.length);
  return key.startsWith(prefix) && name.endsWith('.parquet') && !name.includes('/');
}

/**
 * Removes local batch files of `prefix` not in `batches` and local rollup files not in `rollups`
 * (with their index entries); returns how many files went.
 */
async function prune(
  root: string,
  prefix: string,
  batches: ReadonlySet<string>,
  rollups: ReadonlySet<string>,
  index: CopyIndex,
): Promise<number> {
  let n = 0;
  for (const name of await readdirOrEmpty(path.join(root, ...prefix.split('/')))) {
    const key = `${prefix}${name}`;
    // `.part-` files are fetches a killed run left behind (runs on one folder never overlap: the CLI holds its lock).
    if (!(name.endsWith('.parquet') || name.includes('.parquet.part-')) || batches.has(key)) continue;
    await fs.rm(path.join(root, ...key.split('/')), { force: true });
    delete index.objects[key];
    n++;
  }
  const rollRoot = rollupPrefix(prefix);
  for (const rel of await walkFiles(path.join(root, ...rollRoot.split('/')))) {
    const key = `${rollRoot}${rel}`;
    if (!(rel.endsWith('.parquet') || rel.includes('.parquet.part-')) || rollups.has(key)) continue;
    await fs.rm(path.join(root, ...key.split('/')), { force: true });
    delete index.objects[key];
    n++;
  }
  return n;
}

/** List prefixes present in the local copy that match `params`. */
async function discoverLocal(
  root: string,
  template: ReturnType<typeof parseStoragePath>,
  params: Readonly<Record<string, string>>,
  which: 'batches' | 'rollups',
): Promise<string[]> {
  return discoverPrefixes(createStore({ kind: 'filesystem', root }), template, { root: which, match: params });
}

/** Reads of one object the copy makes before it gives up on a connection that keeps dropping. */
export const FETCH_ATTEMPTS = 3;
/** Errors of a connection, not of the local disk: the object is read again from the start. */
const NETWORK_CODES = new Set([
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  'ECONNABORTED',
  'ERR_STREAM_PREMATURE_CLOSE',
]);

function isDroppedConnection(err: unknown): boolean {
  if (err instanceof StoreError) return err.retriable;
  if (typeof err !== 'object' || err === null) return false;
  const { code, message } = err as { code?: unknown; message?: unknown };
  return (typeof code === 'string' && NETWORK_CODES.has(code)) || message === 'aborted';
}

/**
 * Streams `key` into `file` (temp name, then rename: no half-written file under the final name);
 * resolves to its size. A connection that drops mid-object costs a fresh read of the whole
 * object, up to FETCH_ATTEMPTS reads; a local write error is not retried.
 */
export async function fetchObject(store: ObjectStore, key: string, file: string): Promise<number> {
  await fs.mkdir(path.dirname(file), { recursive: true });
  for (let attempt = 1; ; attempt++) {
    try {
      return await fetchOnce(store, key, file);
    } catch (err) {
      if (attempt >= FETCH_ATTEMPTS || !isDroppedConnection(err)) throw err;
      await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
    }
  }
}

async function fetchOnce(store: ObjectStore, key: string, file: string): Promise<number> {
  const temp = `${file}.part-${randomBytes(4).toString('hex')}`;
  let size = 0;
  const count = new Transform({
    transform(chunk: Buffer, _enc, done) {
      size += chunk.length;
      done(null, chunk);
    },
  });
  let out: WriteStream | undefined;
  try {
    let body: Readable | null;
    if (store.getStream) body = await store.getStream(key);
    else {
      const got = await store.getBytes(key);
      body = got ? Readable.from([Buffer.from(got.body)]) : null;
    }
    if (body === null) throw new Error(`${key} is listed by the view but missing from ${store.describe()}`);
    out = createWriteStream(temp);
    await pipeline(body, count, out);
    await fs.rename(temp, file);
  } catch (err) {
    // pipeline rejects as soon as the body fails, when the file may still be opening: removed
    // before its open completes, the part file would come back and stay.
    const stream = out;
    if (stream && !stream.closed) await new Promise<void>((resolve) => stream.once('close', () => resolve()));
    await fs.rm(temp, { force: true });
    throw err;
  }
  return size;
}

async function writeFileAtomic(file: string, body: Uint8Array): Promise<void> {
  await fs.mkdir(path.dirname(file), { recursive: true });
  const temp = `${file}.part-${randomBytes(4).toString('hex')}`;
  await fs.writeFile(temp, body);
  await fs.rename(temp, file);
}

async function localSize(file: string): Promise<number | null> {
  try {
    return (await fs.stat(file)).size;
  } catch {
    return null;
  }
}

async function readdirOrEmpty(dir: string): Promise<string[]> {
  try {
    return await fs.readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

/** Files under `dir`, as `/`-joined paths relative to it (a rollup folder is two levels: date=…/hour=…). */
async function walkFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (rel: string): Promise<void> => {
    let entries;
    try {
      entries = await fs.readdir(path.join(dir, rel), { withFileTypes: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    for (const e of entries) {
      const child = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) await walk(child);
      else out.push(child);
    }
  };
  await walk('');
  return out;
}

/** The copy's index; a fresh one when there is none or it does not parse (every object is then fetched again). */
async function readIndex(file: string, source: string): Promise<CopyIndex> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { v: 1, source, objects: {} };
    throw err;
  }
  let parsed: CopyIndex;
  try {
    parsed = IndexSchema.parse(JSON.parse(text));
  } catch {
    return { v: 1, source, objects: {} };
  }
  if (parsed.source !== source) {
    throw new Error(
      `${path.dirname(file)} holds a copy of ${parsed.source}, not of ${source}; use another folder or delete it`,
    );
  }
  return parsed;
}

async function writeIndex(file: string, index: CopyIndex): Promise<void> {
  await writeFileAtomic(file, Buffer.from(JSON.stringify(index)));
}
