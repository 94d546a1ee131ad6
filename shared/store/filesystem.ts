import { randomBytes } from 'node:crypto';
import { constants as fsConstants, promises as fs } from 'node:fs';
import type { Dirent } from 'node:fs';
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
   * `limit`. A directory holding 100,000 files costs one readdir and one sort.
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
    let entries: Dirent[];
    try {
      entries = await fs.readdir(dirPath, { withFileTypes: true });
    } catch (err) {
      const code = errnoCode(err);
      if (code === 'ENOENT' || code === 'ENOTDIR') return;
      throw err;
    }

    const candidates: ListCandidate[] = [];
    for (const entry of entries) {
      const name = entry.name;
      if (!name.startsWith(namePrefix) || name.includes('\\')) continue;
      const reported = direntKind(entry);
      if (reported === 'other') continue;
      const kind = reported === 'unknown' ? await lstatKind(path.join(dirPath, name)) : reported;
      if (kind === undefined) continue;
      if (kind === 'file' && name.startsWith(TEMP_PREFIX)) continue;
      const sortName = kind === 'dir' ? `${name}/` : name;
      if (startAfter !== undefined && isWhollyAtOrBefore(dirKey + sortName, kind, startAfter)) continue;
      candidates.push({ sortName, kind });
    }
    // All candidates share dirKey, so sorting by the rest avoids comparing that common prefix every time.
    candidates.sort((a, b) => compareKeys(a.sortName, b.sortName));

    for (const candidate of candidates) {
      if (out.length >= limit) return;
      const key = dirKey + candidate.sortName;
      if (candidate.kind === 'file') {
        out.push(key);
      } else {
        await this.walk(key, '', startAfter, limit, out);
      }
    }
  }
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
