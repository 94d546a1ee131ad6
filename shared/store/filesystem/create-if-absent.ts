import { promises as fs } from 'node:fs';
import path from 'node:path';
import { errnoCode, fsyncDir, unlinkQuietly, writeFileDurably } from '../durable.js';

/**
 * Exclusive create of `file` in an existing folder (FilesystemObjectStore.createIfAbsent): the
 * body is written to `tmpName` next to it and fsynced, then `link(2)`ed to the final name, which
 * fails with EEXIST when the name exists, so of concurrent creators exactly one links. Unlike
 * opening the final name with `wx` and writing into it, a reader never sees a partly written
 * object. The folder is fsynced after the link, as after a put's rename. True when this call
 * created the file; a folder under the name is an error (EEXIST), not an object that exists.
 */
export async function createFileIfAbsent(file: string, body: Uint8Array, tmpName: string): Promise<boolean> {
  const dir = path.dirname(file);
  const tmp = path.join(dir, tmpName);
  await writeFileDurably(tmp, body);
  try {
    await fs.link(tmp, file);
  } catch (err) {
    if (errnoCode(err) !== 'EEXIST' || (await fs.lstat(file)).isDirectory()) throw err;
    return false;
  } finally {
    await unlinkQuietly(tmp);
  }
  await fsyncDir(dir);
  return true;
}
