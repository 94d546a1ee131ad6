/**
 * The codec of batch files (a collection's `parquetCompression`), and how to read the codec a
 * file was written with. No wasm here: the config schema imports this module.
 *
 * Why the default is what it is: docs/decisions/0022-batch-file-codec.md. Rollup files are not
 * batch files: DuckDB writes them with the analysts' codec (shared/rollup/), whatever this says.
 */
import { CompactReader, T_I32, T_LIST, T_STRUCT } from './thrift-compact.js';

/** The codecs a collection may choose for its batch files. */
export const PARQUET_COMPRESSIONS = ['zstd', 'snappy', 'uncompressed'] as const;

/** One of {@link PARQUET_COMPRESSIONS}. */
export type ParquetCompression = (typeof PARQUET_COMPRESSIONS)[number];

/**
 * The codec of a collection that names none: SNAPPY opens in every reader we checked without
 * add-ons (plain hyparquet included, which reads only SNAPPY and uncompressed), and costs a few
 * bytes per event more than ZSTD (figures: docs/decisions/0022-batch-file-codec.md).
 */
export const PARQUET_COMPRESSION_DEFAULT: ParquetCompression = 'snappy';

/** parquet-format's CompressionCodec values of the codecs we write (parquet.thrift). */
const CODEC_OF_THRIFT: Readonly<Record<number, ParquetCompression>> = { 0: 'uncompressed', 1: 'snappy', 6: 'zstd' };

/** FileMetaData.row_groups, RowGroup.columns, ColumnChunk.meta_data, ColumnMetaData.codec (parquet.thrift). */
const FMD_ROW_GROUPS = 4;
const RG_COLUMNS = 1;
const CC_META_DATA = 3;
const CMD_CODEC = 4;
const MAGIC = 0x31524150; // "PAR1" little-endian

class FooterError extends Error {
  override readonly name = 'ParquetFooterError';
}

/** Reads the struct's fields up to `want` (of type `type`), skipping the others; false when it has none. */
function seekField(r: CompactReader, want: number, type: number): boolean {
  let id = 0;
  for (let i = 0; i < 10_000; i++) {
    const h = r.byte();
    if (h === 0) return false;
    id = h >> 4 === 0 ? r.zigzag() : id + (h >> 4);
    if (id === want && (h & 0x0f) === type) return true;
    r.skipValue(h & 0x0f, 1);
  }
  throw new FooterError('Parquet footer struct has too many fields');
}

/**
 * The codec of the first column chunk of a Parquet file's first row group (our batch files use
 * one codec for every column), or undefined when the file has no row group (a zero-row file) or
 * a codec we do not write. Throws when the bytes are not a Parquet file.
 */
export function parquetFileCompression(file: Uint8Array): ParquetCompression | undefined {
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  if (file.byteLength < 12 || view.getUint32(0, true) !== MAGIC || view.getUint32(file.byteLength - 4, true) !== MAGIC)
    throw new FooterError('not a Parquet file');
  const footerLength = view.getUint32(file.byteLength - 8, true);
  const start = file.byteLength - 8 - footerLength;
  if (start < 4) throw new FooterError('Parquet footer length is out of range');
  const r = new CompactReader(file, start, file.byteLength - 8, (m) => new FooterError(m));
  if (!seekField(r, FMD_ROW_GROUPS, T_LIST)) return undefined;
  if (r.listHeader().size === 0) return undefined;
  if (!seekField(r, RG_COLUMNS, T_LIST)) return undefined;
  if (r.listHeader().size === 0) return undefined;
  if (!seekField(r, CC_META_DATA, T_STRUCT)) return undefined;
  if (!seekField(r, CMD_CODEC, T_I32)) return undefined;
  return CODEC_OF_THRIFT[r.zigzag()];
}
