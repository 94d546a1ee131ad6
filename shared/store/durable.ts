/**
 * Durable local writes, shared by the filesystem store and the CLI's `sync`: a file is written and
 * fsynced before it is renamed into place, and the folder is fsynced after the rename, so a crash
 * leaves the old file or the new one, never a part.
 */
import { promises as fs } from 'node:fs';

/** Codes that mean "the directory cannot be fsynced here", which some platforms and filesystems report. */
const DIR_FSYNC_UNSUPPORTED = new Set(['EISDIR', 'EINVAL', 'EPERM', 'EBADF', 'ENOTSUP']);

/** The inode and mtime that identify one version of a file (a rename keeps both). */
export interface FileVersion {
  ino: bigint;
  mtimeNs: bigint;
}

/**
 * Creates `file` (exclusively unless `exclusive: false`), writes all of `body` and fsyncs it; on
 * failure the partial file is removed. With `version: true` it returns the written version's
 * inode and mtime (one more `fstat`, a thread-pool round trip the caller pays only when it
 * records them); otherwise undefined.
 */
export async function writeFileDurably(
  file: string,
  body: Uint8Array | string,
  opts: { exclusive?: boolean; version?: boolean } = {},
): Promise<FileVersion | undefined> {
  const handle = await fs.open(file, opts.exclusive === false ? 'w' : 'wx');
  let version: FileVersion | undefined;
  try {
    await handle.writeFile(body);
    await handle.sync();
    if (opts.version) {
      const st = await handle.stat({ bigint: true });
      version = { ino: st.ino, mtimeNs: st.mtimeNs };
    }
  } catch (err) {
    // The write's error is the one to report; the file is removed either way.
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
  return version;
}

/** Fsyncs a directory so a rename inside it survives a crash; filesystems that cannot are skipped. */
export async function fsyncDir(dir: string): Promise<void> {
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
    // A read-only handle: closing it cannot lose data, and the sync's outcome is what counts.
    await handle.close().catch(() => undefined);
  }
}

/**
 * Group commit for directory fsyncs. Writers that rename into the same directory while an fsync
 * of it is running share the next one instead of each running its own: a caller's rename is done
 * before it calls {@link DirSyncGroup.sync}, and the fsync it waits for starts after that call
 * (the running one if none is running yet, else the one queued behind it), so every caller's
 * entry is covered. With a backlog, a burst of puts into one directory costs about two directory
 * fsyncs instead of one each; a lone put costs exactly one, as before
 * (docs/decisions/0010-durable-file-writes.md).
 */
export class DirSyncGroup {
  private readonly groups = new Map<string, { running: Promise<void>; next?: Promise<void> }>();

  /** @param fsync - The fsync to run (tests pass one they can observe). */
  constructor(private readonly fsync: (dir: string) => Promise<void> = fsyncDir) {}

  /** Resolves once an fsync of `dir` that started after this call has finished (rejects with its error). */
  sync(dir: string): Promise<void> {
    const current = this.groups.get(dir);
    if (current === undefined) return this.start(dir);
    current.next ??= current.running.then(
      () => this.start(dir),
      () => this.start(dir),
    );
    return current.next;
  }

  private start(dir: string): Promise<void> {
    const group: { running: Promise<void>; next?: Promise<void> } = { running: Promise.resolve() };
    group.running = this.fsync(dir).finally(() => {
      if (this.groups.get(dir) === group) this.groups.delete(dir);
    });
    this.groups.set(dir, group);
    return group.running;
  }
}

/** Removes a file if it is there; a failure is ignored (the error worth reporting is the caller's). */
export async function unlinkQuietly(file: string): Promise<void> {
  try {
    await fs.unlink(file);
  } catch {
    // Best effort: the original error is the one worth reporting.
  }
}

/** The errno code of a Node fs error (`ENOENT`, …), if any. */
export function errnoCode(err: unknown): string | undefined {
  if (typeof err === 'object' && err !== null && 'code' in err) {
    const code = (err as { code: unknown }).code;
    return typeof code === 'string' ? code : undefined;
  }
  return undefined;
}
