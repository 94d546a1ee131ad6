import { randomBytes } from 'node:crypto';
import { constants as fsConstants, promises as fs } from 'node:fs';
import type { BigIntStats, Dirent } from 'node:fs';
import path from 'node:path';
import { StoreError } from '../errors.js';
import { compareKeys, prefixCanMatchKeys, resolveListLimit, validateKey } from './keys.js';
import type { ListOptions, ObjectStore, PutOptions, StoredObject } from './types.js';

/**
 * In-flight writes live next to their final file under this name prefix, so
 * the rename is within one directory (atomic) and listings can skip them.
 * A key whose last segment starts with it is refused for the same reason.
 */
const TEMP_PREFIX = '.tmp-';

/**
 * Errno codes a retry cannot fix (bad path shapes, permissions, a key that
 * collides with a directory). Anything else (ENOSPC, EIO, EMFILE, EBUSY, ...)
 * is treated as transient, so the encoder retries instead of dead-lettering.
 */
const NON_RETRIABLE_CODES = new Set([
  'EACCES',
  'EPERM',
  'EROFS',
  'ENOTDIR',
  'EISDIR',
  'EEXIST',
  'ENOTEMPTY',
  'ENAMETOOLONG',
  'EINVAL',
  'ELOOP',
  'EBADF',
]);

/** Codes that mean "the directory cannot be fsynced here", which some platforms and filesystems report. */
const DIR_FSYNC_UNSUPPORTED = new Set(['EISDIR', 'EINVAL', 'EPERM', 'EBADF', 'ENOTSUP']);

export interface FilesystemObjectStoreOptions {
  /** Folder holding the objects; resolved to an absolute path, created on first write. */
  root: string;
}

type EntryKind = 'file' | 'dir';

interface ListCandidate {
  /** The entry name plus `/` for a directory: the part of every key below it that sorts it among its siblings. */
  sortName: string;
  kind: EntryKind;
}

/**
 * An `ObjectStore` that keeps each object as one file under `root`
 * (`events/app/id.parquet` → `<root>/events/app/id.parquet`). Writes are
 * atomic and durable (temp file, fsync, rename, fsync directory); keys are
 * validated and resolved so they can never leave the root. Content types are
 * not kept.
 */
export class FilesystemObjectStore implements ObjectStore {
  readonly root: string;
  /** Sorted listings of large, quiet directories (see sortedEntries), least recently used first. */
  private readonly dirCache = new Map<string, CachedDir>();

  constructor(opts: FilesystemObjectStoreOptions) {
    if (typeof opts.root !== 'string' || opts.root.length === 0) {
      // An empty root would silently resolve to the working directory.
      throw new StoreError('filesystem store needs a non-empty root', { retriable: false });
    }
    this.root = path.resolve(opts.root);
  }

  /** Writes `body` atomically under `key`; readers see the old object or the new one, never a part. */
  async putBytes(key: string, body: Uint8Array, _opts?: PutOptions): Promise<void> {
    const file = this.pathFor(key);
    const dir = path.dirname(file);
    try {
      await ensureDirDurably(dir);
      const tmp = path.join(dir, `${TEMP_PREFIX}${randomBytes(8).toString('hex')}`);
      await writeFileDurably(tmp, body);
      try {
        await fs.rename(tmp, file);
      } catch (err) {
        await unlinkQuietly(tmp);
        throw err;
      }
      // Without this the rename itself may be lost on power failure even though the data was synced.
      await fsyncDir(dir);
    } catch (err) {
      throw toStoreError('put', key, err);
    }
  }

  /** The file's bytes, or null when there is no object (including when a path component is a file). */
  async getBytes(key: string): Promise<StoredObject | null> {
    const file = this.pathFor(key);
    let buf: Buffer;
    try {
      buf = await fs.readFile(file);
    } catch (err) {
      const code = errnoCode(err);
      if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'EISDIR') return null;
      throw toStoreError('get', key, err);
    }
    return { body: asPlainBytes(buf) };
  }

  /**
   * Keys starting with `prefix`, in UTF-8 byte order. Only the directory the
   * prefix points into is read, plus the subdirectories whose names match; in
   * each directory entries are sorted so the walk emits keys already in
   * order, which lets it skip whole subtrees before `startAfter` and stop at
   * `limit`. A directory holding 100,000 files costs one readdir and one
   * (near-linear) sort, or only a stat while it has not changed for a few
   * seconds (see sortedEntries).
   */
  async listKeys(prefix: string, opts: ListOptions = {}): Promise<string[]> {
    const limit = resolveListLimit(opts.limit);
    if (limit === 0 || !prefixCanMatchKeys(prefix)) return [];
    const cut = prefix.lastIndexOf('/') + 1;
    const out: string[] = [];
    try {
      await this.walk(prefix.slice(0, cut), prefix.slice(cut), opts.startAfter, limit, out);
    } catch (err) {
      throw toStoreError('list', prefix, err);
    }
    return out;
  }

  /** Unlinks each key's file (a missing one is fine), then fsyncs each touched directory once. */
  async deleteKeys(keys: readonly string[]): Promise<void> {
    const files = keys.map((key) => ({ key, file: this.pathFor(key) }));
    const dirs = new Set<string>();
    for (const { key, file } of files) {
      try {
        await fs.unlink(file);
        dirs.add(path.dirname(file));
      } catch (err) {
        const code = errnoCode(err);
        if (code === 'ENOENT' || code === 'ENOTDIR') continue;
        throw toStoreError('delete', key, err);
      }
    }
    for (const dir of dirs) {
      try {
        await fsyncDir(dir);
      } catch (err) {
        throw toStoreError('delete', dir, err);
      }
    }
  }

  /**
   * Resolves when the root (or, before the first write, its nearest existing
   * ancestor) is a directory this process may write to.
   */
  async healthcheck(): Promise<void> {
    let dir = this.root;
    // Each step moves one level up, and dirname of the filesystem root is itself, so this ends.
    for (;;) {
      try {
        const st = await fs.stat(dir);
        if (!st.isDirectory()) {
          throw new StoreError(`filesystem store: ${dir} is not a directory`, { retriable: false });
        }
        await fs.access(dir, fsConstants.W_OK | fsConstants.X_OK);
        return;
      } catch (err) {
        const parent = path.dirname(dir);
        if (errnoCode(err) === 'ENOENT' && parent !== dir) {
          dir = parent;
          continue;
        }
        throw toStoreError('healthcheck', dir, err);
      }
    }
  }

  describe(): string {
    return `fs:${this.root}`;
  }

  /** Absolute path for a key, refusing anything that is not a valid key or would land outside the root. */
  private pathFor(key: string): string {
    validateKey(key);
    const segments = key.split('/');
    if (segments[segments.length - 1].startsWith(TEMP_PREFIX)) {
      throw new StoreError(`invalid object key ${JSON.stringify(key)}: "${TEMP_PREFIX}" names are reserved`, {
        retriable: false,
      });
    }
    const file = path.resolve(this.root, ...segments);
    // validateKey already rules out escapes; this guards the invariant itself against future edits.
    const rootWithSep = this.root.endsWith(path.sep) ? this.root : this.root + path.sep;
    if (!file.startsWith(rootWithSep)) {
      throw new StoreError(`invalid object key ${JSON.stringify(key)}: resolves outside the root`, { retriable: false });
    }
    return file;
  }

  /**
   * Appends to `out`, in key order, every key in directory `dirKey` (`''` or
   * ending in `/`) whose entry name starts with `namePrefix`, descending into
   * matching subdirectories. Recursion depth is bounded by key length.
   */
  private async walk(
    dirKey: string,
    namePrefix: string,
    startAfter: string | undefined,
    limit: number,
    out: string[],
  ): Promise<void> {
    const dirPath = dirKey === '' ? this.root : path.join(this.root, ...dirKey.slice(0, -1).split('/'));
    const entries = await this.sortedEntries(dirPath);
    if (entries === null) return;
    // Entries are sorted, so the names sharing `namePrefix` form one run, and the ones wholly
    // at or before `startAfter` are a leading part of the list: binary search skips both.
    let i = lowerBound(entries, (c) => compareKeys(c.sortName, namePrefix) < 0);
    if (startAfter !== undefined) {
      i = Math.max(i, lowerBound(entries, (c) => isWhollyAtOrBefore(dirKey + c.sortName, c.kind, startAfter)));
    }
    for (; i < entries.length && out.length < limit; i++) {
      const candidate = entries[i] as ListCandidate;
      if (!candidate.sortName.startsWith(namePrefix)) return;
      const key = dirKey + candidate.sortName;
      if (candidate.kind === 'file') {
        out.push(key);
      } else {
        await this.walk(key, '', startAfter, limit, out);
      }
    }
  }

  /**
   * Every listable entry of a directory, sorted by key; null when it does not exist. A large
   * directory that has not changed for a while is served from memory, so listing a page of a
   * quiet prefix of 100,000 files costs one stat instead of one readdir of them all.
   *
   * Why the cache cannot go stale: it is only filled when the directory's mtime was already
   * older than {@link QUIET_NS} before the readdir began and unchanged after it. Any entry
   * added, removed or renamed since then stamps the directory with a later mtime (timestamps
   * are at worst 2 s coarse), which fails the check on the next call and forces a readdir.
   */
  private async sortedEntries(dirPath: string): Promise<ListCandidate[] | null> {
    let before: BigIntStats;
    try {
      before = await fs.stat(dirPath, { bigint: true });
    } catch (err) {
      const code = errnoCode(err);
      if (code === 'ENOENT' || code === 'ENOTDIR') return null;
      throw err;
    }
    if (!before.isDirectory()) return null;
    const cached = this.dirCache.get(dirPath);
    if (cached && sameDirVersion(cached.version, before)) {
      // Refresh its place in the LRU order.
      this.dirCache.delete(dirPath);
      this.dirCache.set(dirPath, cached);
      return cached.entries;
    }
    // A changed directory's old listing is useless from now on; free it.
    if (cached) this.dirCache.delete(dirPath);
    let dirents: Dirent[];
    try {
      dirents = await fs.readdir(dirPath, { withFileTypes: true });
    } catch (err) {
      const code = errnoCode(err);
      if (code === 'ENOENT' || code === 'ENOTDIR') return null;
      throw err;
    }
    const entries: ListCandidate[] = [];
    for (const entry of dirents) {
      const name = entry.name;
      if (name.includes('\\')) continue;
      const reported = direntKind(entry);
      if (reported === 'other') continue;
      const kind = reported === 'unknown' ? await lstatKind(path.join(dirPath, name)) : reported;
      if (kind === undefined) continue;
      if (kind === 'file' && name.startsWith(TEMP_PREFIX)) continue;
      entries.push({ sortName: kind === 'dir' ? `${name}/` : name, kind });
    }
    // readdir already returns byte order on Linux, so this is close to one linear pass.
    entries.sort((a, b) => compareKeys(a.sortName, b.sortName));
    if (entries.length >= DIR_CACHE_MIN_ENTRIES && BigInt(Date.now()) * 1_000_000n - before.mtimeNs > QUIET_NS) {
      const after = await fs.stat(dirPath, { bigint: true }).catch(() => null);
      if (after && sameDirVersion(versionOf(before), after)) this.remember(dirPath, { version: versionOf(before), entries });
    }
    return entries;
  }

  /** Adds a listing to the cache, evicting the least recently used ones beyond the entry budget. */
  private remember(dirPath: string, listing: CachedDir): void {
    this.dirCache.delete(dirPath);
    this.dirCache.set(dirPath, listing);
    let total = 0;
    for (const v of this.dirCache.values()) total += v.entries.length;
    for (const [k, v] of this.dirCache) {
      if (total <= DIR_CACHE_MAX_ENTRIES || this.dirCache.size <= 1) break;
      this.dirCache.delete(k);
      total -= v.entries.length;
    }
  }
}

/** Identity and last change of a directory, as the listing cache checks them. */
interface DirVersion {
  dev: bigint;
  ino: bigint;
  mtimeNs: bigint;
  ctimeNs: bigint;
}

interface CachedDir {
  version: DirVersion;
  entries: ListCandidate[];
}

/** Directories smaller than this are cheap to read every time and not worth the memory. */
const DIR_CACHE_MIN_ENTRIES = 2000;
/** At most this many cached entries over all directories (~100 bytes each). */
const DIR_CACHE_MAX_ENTRIES = 500_000;
/** A directory unchanged for this long (ns) may be cached: well above any filesystem's mtime granularity (FAT: 2 s). */
const QUIET_NS = 3_000_000_000n;

function versionOf(st: BigIntStats): DirVersion {
  return { dev: st.dev, ino: st.ino, mtimeNs: st.mtimeNs, ctimeNs: st.ctimeNs };
}

function sameDirVersion(v: DirVersion, st: BigIntStats): boolean {
  return v.dev === st.dev && v.ino === st.ino && v.mtimeNs === st.mtimeNs && v.ctimeNs === st.ctimeNs;
}

/** Index of the first element for which `before` is false; `before` must hold for a leading run only. */
function lowerBound<T>(xs: readonly T[], before: (x: T) => boolean): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (before(xs[mid] as T)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * Whether every key an entry stands for is `<= startAfter`. For a directory
 * (`key` ending in `/`) all keys below share `key` as a prefix, so the subtree
 * can be skipped when `key` sorts before `startAfter` and is not a prefix of it.
 */
function isWhollyAtOrBefore(key: string, kind: EntryKind, startAfter: string): boolean {
  if (kind === 'file') return compareKeys(key, startAfter) <= 0;
  return compareKeys(key, startAfter) < 0 && !startAfter.startsWith(key);
}

/**
 * File or directory; symlinks and special files are not objects (and
 * following a symlink could leave the root). Synchronous on purpose: this runs
 * once per entry of directories that may hold 100,000 files.
 */
function direntKind(entry: Dirent): EntryKind | 'other' | 'unknown' {
  if (entry.isFile()) return 'file';
  if (entry.isDirectory()) return 'dir';
  if (entry.isSymbolicLink() || entry.isFIFO() || entry.isSocket() || entry.isBlockDevice() || entry.isCharacterDevice()) {
    return 'other';
  }
  return 'unknown';
}

/** Some filesystems do not report entry types in readdir; those entries are lstat'ed. */
async function lstatKind(file: string): Promise<EntryKind | undefined> {
  try {
    const st = await fs.lstat(file);
    if (st.isFile()) return 'file';
    if (st.isDirectory()) return 'dir';
    return undefined;
  } catch (err) {
    if (errnoCode(err) === 'ENOENT') return undefined;
    throw err;
  }
}

/**
 * `mkdir -p`, then fsyncs the parent of every directory it created so a new
 * directory entry survives a crash along with the file written into it.
 */
async function ensureDirDurably(dir: string): Promise<void> {
  const firstCreated = await fs.mkdir(dir, { recursive: true });
  if (firstCreated === undefined) return;
  const stop = path.dirname(firstCreated);
  // `dir` itself is fsynced after the rename; walk from its parent up to the parent of the first new directory.
  let current = dir;
  while (current !== stop) {
    const parent = path.dirname(current);
    if (parent === current) break;
    await fsyncDir(parent);
    current = parent;
  }
}

/** Creates `file` exclusively, writes all of `body` and fsyncs it; on failure the partial file is removed. */
async function writeFileDurably(file: string, body: Uint8Array): Promise<void> {
  const handle = await fs.open(file, 'wx');
  try {
    await handle.writeFile(body);
    await handle.sync();
  } catch (err) {
    await handle.close().catch(() => undefined);
    await unlinkQuietly(file);
    throw err;
  }
  try {
    await handle.close();
  } catch (err) {
    await unlinkQuietly(file);
    throw err;
  }
}

async function fsyncDir(dir: string): Promise<void> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(dir, 'r');
  } catch (err) {
    if (DIR_FSYNC_UNSUPPORTED.has(errnoCode(err) ?? '')) return;
    throw err;
  }
  try {
    await handle.sync();
  } catch (err) {
    if (!DIR_FSYNC_UNSUPPORTED.has(errnoCode(err) ?? '')) throw err;
  } finally {
    await handle.close().catch(() => undefined);
  }
}

async function unlinkQuietly(file: string): Promise<void> {
  try {
    await fs.unlink(file);
  } catch {
    // Best effort: the original error is the one worth reporting, and a stray temp file is skipped by listings.
  }
}

/** A Uint8Array over the same memory when the Buffer owns its whole ArrayBuffer, else a copy (never expose a shared pool). */
function asPlainBytes(buf: Buffer): Uint8Array {
  if (buf.byteOffset === 0 && buf.byteLength === buf.buffer.byteLength) {
    return new Uint8Array(buf.buffer, 0, buf.byteLength);
  }
  return new Uint8Array(buf);
}

function errnoCode(err: unknown): string | undefined {
  if (typeof err === 'object' && err !== null && 'code' in err) {
    const code = (err as { code: unknown }).code;
    return typeof code === 'string' ? code : undefined;
  }
  return undefined;
}

function toStoreError(op: string, target: string, err: unknown): StoreError {
  if (err instanceof StoreError) return err;
  const code = errnoCode(err);
  const detail = code ?? (err instanceof Error ? err.message : String(err));
  return new StoreError(`filesystem ${op} of ${JSON.stringify(target)} failed: ${detail}`, {
    retriable: code === undefined || !NON_RETRIABLE_CODES.has(code),
    cause: err,
  });
}
