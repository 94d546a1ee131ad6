import { createHash } from 'node:crypto';
import { constants as fsConstants, promises as fs } from 'node:fs';
import type { BigIntStats, Dirent } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { StoreError } from '../../errors.js';
import { randomHex } from '../../ids.js';
import { DirSyncGroup, errnoCode, type FileVersion, fsyncDir, unlinkQuietly, writeFileDurably } from '../durable.js';
import { compareKeys, prefixCanMatchKeys, resolveListLimit, validateKey } from '../keys.js';
import { checkOptionNames } from '../options.js';
import type { Readable } from 'node:stream';
import {
  DEFAULT_CONTENT_TYPE,
  type ByteRange,
  type ListOptions,
  type ObjectMeta,
  type ObjectStore,
  type PutOptions,
  type StoreLocation,
  type StoredObject,
} from '../types.js';
import { createFileIfAbsent } from './create-if-absent.js';
import { StarfishDocuments } from '../documents.js';

/**
 * In-flight writes live next to their final file under this name prefix, so
 * the rename is within one directory (atomic) and listings can skip them.
 * A key whose last segment starts with it is refused for the same reason.
 */
const TEMP_PREFIX = '.tmp-';

/**
 * An object's metadata (sha256, size, content type) sits next to it in `.meta-<name>.json`,
 * written with the object, so `head` reads ~200 bytes instead of hashing the file. Names with
 * this prefix are reserved and never listed; the `.json` ending keeps them out of `*.parquet` globs.
 * Small objects whose content type follows from their name have none (see SIDECAR_MIN_BYTES).
 */
const META_PREFIX = '.meta-';
const META_SUFFIX = '.json';

/**
 * Objects up to this size whose content type is the one their name implies (a `.parquet` key put
 * as Parquet: batch files up to a few thousand events) are written without a sidecar, and `head`
 * hashes them instead: reading and hashing at most 256 KiB costs 0.1–0.3 ms (sha256 runs at
 * ~1.5 GB/s where the CPU has SHA extensions), while creating the sidecar was the largest single
 * cost of a put on an ext4 volume (an inode allocation: ~1 ms of kernel CPU on the bench machine,
 * docs/decisions/0009-no-sidecar-for-small-files.md). Larger objects keep the sidecar, so a
 * `HEAD`, a range or a 304 never reads them whole.
 */
export const SIDECAR_MIN_BYTES = 256 * 1024;

/** Content types a key's name implies: objects put with exactly this type may skip the sidecar. */
const IMPLIED_CONTENT_TYPES: ReadonlyMap<string, string> = new Map([['.parquet', 'application/vnd.apache.parquet']]);

function impliedContentType(file: string): string | undefined {
  return IMPLIED_CONTENT_TYPES.get(path.extname(file));
}

/** Directories remembered as existing (one per list prefix in practice); the set is emptied when full. */
const KNOWN_DIRS_MAX = 4096;

/** The sidecar's content. `ino` and `mtimeNs` tie it to one version of the file: any other version is re-hashed. */
interface Sidecar {
  v: 1;
  ino: string;
  mtimeNs: string;
  size: number;
  sha256: string;
  contentType?: string;
}

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

/**
 * Where the store keeps its objects: `root`, or `baseDir` as the Starfish reference server's
 * `FilesystemObjectStore` calls it (one of the two; both only when they name the same folder).
 */
export type FilesystemObjectStoreOptions =
  | {
      /** Folder holding the objects; resolved to an absolute path, created on first write. */
      root: string;
      baseDir?: string;
    }
  | {
      /** The reference server's name for `root`. */
      baseDir: string;
      root?: string;
    };

const FILESYSTEM_OPTIONS = ['root', 'baseDir'] as const;

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
 * validated and resolved so they can never leave the root. The sha256 and
 * content type of an object are kept in a sidecar next to it (see META_PREFIX), except for
 * small objects whose name implies their type (see SIDECAR_MIN_BYTES); `getBytes` returns bytes only.
 */
export class FilesystemObjectStore extends StarfishDocuments implements ObjectStore {
  readonly root: string;
  /** Sorted listings of large, quiet directories (see sortedEntries), least recently used first. */
  private readonly dirCache = new Map<string, CachedDir>();
  /** Directory fsyncs after renames, shared by puts into the same directory (group commit). */
  private readonly dirSyncs = new DirSyncGroup();
  /**
   * Directories this store already created (or found) and made durable: a put into one skips
   * its `mkdir -p`. Bounded by {@link KNOWN_DIRS_MAX}; a directory removed behind the store's back
   * shows up as ENOENT on the temp file and is created again.
   */
  private readonly knownDirs = new Set<string>();

  constructor(opts: FilesystemObjectStoreOptions) {
    super();
    checkOptionNames('FilesystemObjectStore', opts, FILESYSTEM_OPTIONS);
    const { root, baseDir } = opts as { root?: unknown; baseDir?: unknown };
    const dir = root ?? baseDir;
    if (typeof dir !== 'string' || dir.length === 0) {
      // An empty root would silently resolve to the working directory.
      throw new StoreError('filesystem store needs a non-empty root (or baseDir)', { retriable: false });
    }
    if (
      root !== undefined &&
      baseDir !== undefined &&
      (typeof baseDir !== 'string' || path.resolve(baseDir) !== path.resolve(dir))
    ) {
      throw new StoreError('filesystem store got both root and baseDir naming different folders; give one of them', {
        retriable: false,
      });
    }
    this.root = path.resolve(dir);
  }

  /**
   * Writes `body` atomically under `key`; readers see the old object or the new one, never a
   * part. Its sha256 and content type go to the sidecar, which is renamed into place first: a
   * crash in between leaves a sidecar naming another file version, which `head` then re-hashes.
   * A small object of its name's content type gets no sidecar (SIDECAR_MIN_BYTES).
   */
  async putBytes(key: string, body: Uint8Array, opts: PutOptions = {}): Promise<void> {
    const file = this.pathFor(key);
    const dir = path.dirname(file);
    const sidecar = body.byteLength > SIDECAR_MIN_BYTES || opts.contentType !== impliedContentType(file);
    const sha256 = sidecar ? createHash('sha256').update(body).digest('hex') : '';
    try {
      const tmp = path.join(dir, `${TEMP_PREFIX}${randomHex(8)}`);
      // The version (inode, mtime) is read back only for a sidecar, which records it.
      const put = (): Promise<FileVersion | undefined> => writeFileDurably(tmp, body, { version: sidecar });
      let written: FileVersion | undefined;
      if (this.knownDirs.has(dir)) {
        try {
          written = await put();
        } catch (err) {
          if (errnoCode(err) !== 'ENOENT') throw err;
          this.knownDirs.delete(dir);
          await this.ensureDir(dir);
          written = await put();
        }
      } else {
        await this.ensureDir(dir);
        written = await put();
      }
      try {
        if (written)
          await writeSidecar(file, {
            v: 1,
            ino: String(written.ino),
            mtimeNs: String(written.mtimeNs),
            size: body.byteLength,
            sha256,
            ...(opts.contentType === undefined ? {} : { contentType: opts.contentType }),
          });
        await fs.rename(tmp, file);
      } catch (err) {
        await unlinkQuietly(tmp);
        throw err;
      }
      // Without this the rename itself may be lost on power failure even though the data was
      // synced. Concurrent puts into this directory share one fsync that starts after their renames.
      await this.dirSyncs.sync(dir);
    } catch (err) {
      throw toStoreError('put', key, err);
    }
  }

  /** `mkdir -p` made durable, remembered so the next put into `dir` skips it. */
  private async ensureDir(dir: string): Promise<void> {
    await ensureDirDurably(dir);
    if (this.knownDirs.size >= KNOWN_DIRS_MAX) this.knownDirs.clear();
    this.knownDirs.add(dir);
  }

  /** The file's bytes, or null when there is no object (including when a path component is a file). */
  async getBytes(key: string): Promise<StoredObject | null> {
    const file = this.pathFor(key);
    let buf: Buffer;
    // The sidecar holds a content type other than the one the name implies (read beside the file).
    const side = readSidecar(file);
    try {
      buf = await fs.readFile(file);
    } catch (err) {
      const code = errnoCode(err);
      if (code === 'ENOENT' || code === 'ENOTDIR' || code === 'EISDIR') return null;
      throw toStoreError('get', key, err);
    }
    const contentType = (await side)?.contentType ?? impliedContentType(file) ?? DEFAULT_CONTENT_TYPE;
    return { body: asPlainBytes(buf), contentType };
  }

  /**
   * Size, sha256 and content type from the sidecar written with the file. A file without a
   * matching sidecar is hashed: a small one (SIDECAR_MIN_BYTES) on every call, with the content
   * type its name implies; a larger one (written before sidecars existed, copied in by hand, or a
   * crash between the two renames) once, and its sidecar written, so later calls read only that.
   */
  async head(key: string): Promise<ObjectMeta | null> {
    const file = this.pathFor(key);
    let st: BigIntStats;
    try {
      st = await fs.stat(file, { bigint: true });
    } catch (err) {
      if (isMissing(err)) return null;
      throw toStoreError('head', key, err);
    }
    if (!st.isFile()) return null;
    const side = await readSidecar(file);
    if (side && side.ino === String(st.ino) && side.mtimeNs === String(st.mtimeNs) && side.size === Number(st.size)) {
      return metaOf(side);
    }
    try {
      return await this.hashAndRecord(file, side ? side.contentType : impliedContentType(file));
    } catch (err) {
      if (isMissing(err)) return null;
      throw toStoreError('head', key, err);
    }
  }

  /** A read stream of the file, or of `range` of it; null when there is no object. */
  async getStream(key: string, range?: ByteRange): Promise<Readable | null> {
    const file = this.pathFor(key);
    let handle: fs.FileHandle;
    try {
      handle = await fs.open(file, 'r');
    } catch (err) {
      if (isMissing(err)) return null;
      throw toStoreError('get', key, err);
    }
    try {
      if (!(await handle.stat()).isFile()) {
        await handle.close();
        return null;
      }
    } catch (err) {
      // The stat's error is the one to report; a read-only handle loses nothing on a failed close.
      await handle.close().catch(() => undefined);
      throw toStoreError('get', key, err);
    }
    return handle.createReadStream(range === undefined ? {} : { start: range.start, end: range.end });
  }

  /** Hashes one version of the file (through one open handle, so size and bytes agree) and records it when it is large. */
  private async hashAndRecord(file: string, contentType: string | undefined): Promise<ObjectMeta> {
    const handle = await fs.open(file, 'r');
    let side: Sidecar;
    try {
      const st = await handle.stat({ bigint: true });
      const hash = createHash('sha256');
      for await (const chunk of handle.createReadStream({ autoClose: false })) hash.update(chunk as Buffer);
      side = {
        v: 1,
        ino: String(st.ino),
        mtimeNs: String(st.mtimeNs),
        size: Number(st.size),
        sha256: hash.digest('hex'),
        ...(contentType === undefined ? {} : { contentType }),
      };
    } finally {
      // A read-only handle: a failed close loses nothing.
      await handle.close().catch(() => undefined);
    }
    // Only saves work next time: a read-only root still answers, it just hashes again.
    if (side.size > SIDECAR_MIN_BYTES) await writeSidecar(file, side).catch(() => undefined);
    return metaOf(side);
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

  /** Unlinks each key's file and its sidecar (a missing one is fine), then fsyncs each touched directory once. */
  async deleteKeys(keys: readonly string[]): Promise<void> {
    const files = keys.map((key) => ({ key, file: this.pathFor(key) }));
    const dirs = new Set<string>();
    for (const { key, file } of files) {
      try {
        await fs.unlink(file);
        dirs.add(path.dirname(file));
        // A sidecar left behind would outlive its file forever (retention deletes millions).
        await unlinkQuietly(sidecarPath(file));
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

  /** The root folder, and its `file://` URI. */
  location(): StoreLocation {
    return { kind: 'file', rootUri: `${pathToFileURL(this.root).href}/`, dir: this.root };
  }

  /**
   * Creates `key` only if no file is there (./create-if-absent.ts: temp file, fsync, link, fsync
   * the folder). No sidecar is written: `head` hashes the file (it is small: Iceberg metadata), and
   * the content type is not kept, as with every object here.
   */
  async createIfAbsent(key: string, body: Uint8Array): Promise<boolean> {
    const file = this.pathFor(key);
    try {
      await this.ensureDir(path.dirname(file));
      return await createFileIfAbsent(file, body, `${TEMP_PREFIX}${randomHex(8)}`);
    } catch (err) {
      throw toStoreError('create', key, err);
    }
  }

  /** Nothing to release: every call opens and closes its own files. */
  async close(): Promise<void> {}

  /** Absolute path for a key, refusing anything that is not a valid key or would land outside the root. */
  private pathFor(key: string): string {
    validateKey(key);
    const segments = key.split('/');
    const last = segments[segments.length - 1];
    if (last.startsWith(TEMP_PREFIX) || last.startsWith(META_PREFIX)) {
      throw new StoreError(
        `invalid object key ${JSON.stringify(key)}: "${TEMP_PREFIX}" and "${META_PREFIX}" names are reserved`,
        {
          retriable: false,
        },
      );
    }
    const file = path.resolve(this.root, ...segments);
    // validateKey already rules out escapes; this guards the invariant itself against future edits.
    const rootWithSep = this.root.endsWith(path.sep) ? this.root : this.root + path.sep;
    if (!file.startsWith(rootWithSep)) {
      throw new StoreError(`invalid object key ${JSON.stringify(key)}: resolves outside the root`, {
        retriable: false,
      });
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
      i = Math.max(
        i,
        lowerBound(entries, (c) => isWhollyAtOrBefore(dirKey + c.sortName, c.kind, startAfter)),
      );
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
      if (kind === 'file' && (name.startsWith(TEMP_PREFIX) || name.startsWith(META_PREFIX))) continue;
      entries.push({ sortName: kind === 'dir' ? `${name}/` : name, kind });
    }
    // readdir already returns byte order on Linux, so this is close to one linear pass.
    entries.sort((a, b) => compareKeys(a.sortName, b.sortName));
    if (entries.length >= DIR_CACHE_MIN_ENTRIES && BigInt(Date.now()) * 1_000_000n - before.mtimeNs > QUIET_NS) {
      const after = await fs.stat(dirPath, { bigint: true }).catch(() => null);
      if (after && sameDirVersion(versionOf(before), after))
        this.remember(dirPath, { version: versionOf(before), entries });
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
  if (
    entry.isSymbolicLink() ||
    entry.isFIFO() ||
    entry.isSocket() ||
    entry.isBlockDevice() ||
    entry.isCharacterDevice()
  ) {
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

function sidecarPath(file: string): string {
  return path.join(path.dirname(file), `${META_PREFIX}${path.basename(file)}${META_SUFFIX}`);
}

/**
 * Temp file + rename, not fsynced: a sidecar lost or torn in a crash fails to parse or names
 * another file version, and `head` re-hashes; the directory fsync after the object's rename
 * persists both in the normal case.
 */
async function writeSidecar(file: string, side: Sidecar): Promise<void> {
  const tmp = path.join(path.dirname(file), `${TEMP_PREFIX}${randomHex(8)}`);
  try {
    await fs.writeFile(tmp, JSON.stringify(side), { flag: 'wx' });
    await fs.rename(tmp, sidecarPath(file));
  } catch (err) {
    await unlinkQuietly(tmp);
    throw err;
  }
}

/** The sidecar if it exists and parses; anything else means "hash the file". */
async function readSidecar(file: string): Promise<Sidecar | null> {
  try {
    const side = JSON.parse(await fs.readFile(sidecarPath(file), 'utf8')) as Partial<Sidecar>;
    if (
      side.v !== 1 ||
      typeof side.ino !== 'string' ||
      typeof side.mtimeNs !== 'string' ||
      typeof side.size !== 'number' ||
      typeof side.sha256 !== 'string' ||
      !/^[0-9a-f]{64}$/.test(side.sha256)
    )
      return null;
    return side as Sidecar;
  } catch {
    return null;
  }
}

function metaOf(side: Sidecar): ObjectMeta {
  const meta: ObjectMeta = { size: side.size, sha256: side.sha256 };
  if (side.contentType !== undefined) meta.contentType = side.contentType;
  return meta;
}

function isMissing(err: unknown): boolean {
  const code = errnoCode(err);
  return code === 'ENOENT' || code === 'ENOTDIR' || code === 'EISDIR';
}

/** A Uint8Array over the same memory when the Buffer owns its whole ArrayBuffer, else a copy (never expose a shared pool). */
function asPlainBytes(buf: Buffer): Uint8Array {
  if (buf.byteOffset === 0 && buf.byteLength === buf.buffer.byteLength) {
    return new Uint8Array(buf.buffer, 0, buf.byteLength);
  }
  return new Uint8Array(buf);
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
