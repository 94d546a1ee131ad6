/**
 * Durable local writes for `sync`: every file appears whole or not at all (temp file, fsync,
 * rename, fsync of the folder), so a run killed at any instant leaves either the old state or
 * the new one, plus at most a temp file the next run removes.
 */
import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { fsyncDir, writeFileDurably } from '../shared/store/durable.js';

/** Temp names start with a dot and end with `.part-<pid>`: never matched by `*.parquet` globs. */
const PART_RE = /^\..+\.part-\d+$/;

/** The temp path a download of `name` goes to before its rename. */
export function partPath(dir: string, name: string): string {
  return path.join(dir, `.${name}.part-${process.pid}`);
}

/** Whether `name` is a temp file left by a sync (ours or a killed run's). */
export function isPartName(name: string): boolean {
  return PART_RE.test(name);
}

export { fsyncDir };

/** Writes `text` to `file` atomically and durably (temp + fsync + rename + fsync dir). */
export async function writeFileAtomic(file: string, text: string): Promise<void> {
  const dir = path.dirname(file);
  const tmp = partPath(dir, path.basename(file));
  // Not exclusive: a part left by a killed run of this pid is simply overwritten.
  await writeFileDurably(tmp, text, { exclusive: false });
  await fs.rename(tmp, file);
  await fsyncDir(dir);
}

/** Removes temp files of earlier (killed) runs; call only while holding the folder's lock. Returns how many. */
export async function removeStaleParts(dir: string): Promise<number> {
  let removed = 0;
  for (const name of await fs.readdir(dir)) {
    if (!isPartName(name)) continue;
    await fs.rm(path.join(dir, name), { force: true });
    removed++;
  }
  return removed;
}

/** sha256 hex of a local file, or null when it does not exist. */
export async function fileSha256(file: string): Promise<string | null> {
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(file, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  try {
    const hash = createHash('sha256');
    for await (const chunk of handle.createReadStream({ autoClose: false })) hash.update(chunk as Buffer);
    return hash.digest('hex');
  } finally {
    // A read-only handle: a failed close loses nothing.
    await handle.close().catch(() => undefined);
  }
}
