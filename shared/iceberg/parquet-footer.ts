/**
 * A data file's row count and size as a manifest needs them, from its Parquet footer alone: the
 * committer appends batch files it did not write (the encoder did), and reading a footer is one
 * ranged GET where reading the file is many. The footer is Thrift compact protocol
 * (parquet-format's parquet.thrift, `FileMetaData`: 1 version, 2 schema, 3 num_rows, ...); only
 * `num_rows` is decoded, every other field is skipped by type.
 */
import { CompactReader, T_I64 } from '../parquet/thrift-compact.js';
import type { ObjectStore } from '../store/types.js';

/** Thrown when bytes are not a Parquet footer we can read. */
export class ParquetFooterError extends Error {
  override readonly name = 'ParquetFooterError';
}

const MAGIC = 0x31524150; // "PAR1" little-endian
/** Bytes read from the end on the first try: our batch and rollup footers are a few KB. */
const TAIL_GUESS = 64 * 1024;

/** `num_rows` of a Parquet `FileMetaData` (the footer's Thrift bytes, without length and magic). */
export function footerRowCount(footer: Uint8Array): number {
  const r = new CompactReader(footer, 0, footer.length, (m) => new ParquetFooterError(m));
  let id = 0;
  for (;;) {
    const h = r.byte();
    if (h === 0) break;
    const delta = h >> 4;
    id = delta === 0 ? r.zigzag() : id + delta;
    const t = h & 0x0f;
    if (id === 3 && t === T_I64) {
      const rows = r.zigzagBig();
      if (rows < 0n || rows > BigInt(Number.MAX_SAFE_INTEGER))
        throw new ParquetFooterError(`num_rows out of range: ${rows}`);
      return Number(rows);
    }
    r.skipValue(t, 0);
  }
  throw new ParquetFooterError('FileMetaData has no num_rows');
}

/** Row count from the last bytes of a Parquet file (`tail` ends where the file ends); null when the tail is too short to hold the footer. */
export function rowCountFromTail(tail: Uint8Array): number | null {
  if (tail.byteLength < 12) throw new ParquetFooterError('not a Parquet file: too short');
  const v = new DataView(tail.buffer, tail.byteOffset, tail.byteLength);
  if (v.getUint32(tail.byteLength - 4, true) !== MAGIC)
    throw new ParquetFooterError('not a Parquet file: no PAR1 at the end');
  const len = v.getUint32(tail.byteLength - 8, true);
  if (len + 8 > tail.byteLength) return null;
  return footerRowCount(tail.subarray(tail.byteLength - 8 - len, tail.byteLength - 8));
}

async function readAll(stream: AsyncIterable<Uint8Array | Buffer>): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(Buffer.from(c));
  const b = Buffer.concat(chunks);
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

/**
 * Row count and size of a Parquet object, reading only its tail where the store offers `head`
 * and ranged reads (one HEAD and one GET of at most 64 KiB for our files), else the whole object.
 * Null when there is no such object.
 */
export async function parquetFacts(
  store: ObjectStore,
  key: string,
): Promise<{ recordCount: number; fileSizeInBytes: number } | null> {
  if (store.head && store.getStream) {
    const meta = await store.head(key);
    if (!meta) return null;
    const size = meta.size;
    let want = Math.min(size, TAIL_GUESS);
    // Two tries at most: the guess, then exactly the footer's length.
    for (let i = 0; i < 2; i++) {
      const stream = await store.getStream(key, { start: size - want, end: size - 1 });
      if (!stream) return null;
      const tail = await readAll(stream);
      const rows = rowCountFromTail(tail);
      if (rows !== null) return { recordCount: rows, fileSizeInBytes: size };
      // The footer is longer than the guess: its length is in the tail just read.
      want = Math.min(size, new DataView(tail.buffer, tail.byteOffset + tail.byteLength - 8, 4).getUint32(0, true) + 8);
    }
    throw new ParquetFooterError(`${key}: footer could not be read`);
  }
  const got = await store.getBytes(key);
  if (!got) return null;
  const rows = rowCountFromTail(got.body);
  if (rows === null) throw new ParquetFooterError(`${key}: footer longer than the file`);
  return { recordCount: rows, fileSizeInBytes: got.body.byteLength };
}
