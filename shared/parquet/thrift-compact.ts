/**
 * A reader of Thrift's compact protocol, the encoding of a Parquet footer (parquet-format's
 * parquet.thrift): field headers, varints, zigzag integers, and skipping any value by its type,
 * depth-bounded. Used by the footer's row-count reader (shared/iceberg/parquet-footer.ts) and the
 * footer editors (./field-ids.ts, ./arrow-schema.ts); each passes the error type it throws. The
 * writers at the end build the few field headers those editors insert.
 */

/** Compact-protocol type codes (the low nibble of a field header). */
export const T_BOOL_TRUE = 1;
export const T_BOOL_FALSE = 2;
export const T_I32 = 5;
export const T_I64 = 6;
export const T_BINARY = 8;
export const T_LIST = 9;
export const T_STRUCT = 12;
/** Footers nest a few levels; anything deeper is refused. */
const MAX_DEPTH = 64;

export class CompactReader {
  constructor(
    private readonly b: Uint8Array,
    public at: number,
    private readonly end: number,
    private readonly fail: (message: string) => Error,
  ) {}

  byte(): number {
    if (this.at >= this.end) throw this.fail('Parquet footer ends early');
    return this.b[this.at++] as number;
  }

  /** An unsigned varint as a number (lengths, counts and ids fit in 2^53; a 64-bit varint has at most 10 bytes). */
  varint(): number {
    let out = 0;
    let mul = 1;
    for (let i = 0; i < 10; i++) {
      const b = this.byte();
      out += (b & 0x7f) * mul;
      if ((b & 0x80) === 0) return out;
      mul *= 128;
    }
    throw this.fail('varint longer than 10 bytes');
  }

  /** An unsigned varint as a bigint (a full i64). */
  varintBig(): bigint {
    let shift = 0n;
    let out = 0n;
    for (let i = 0; i < 10; i++) {
      const b = this.byte();
      out |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return out;
      shift += 7n;
    }
    throw this.fail('varint longer than 10 bytes');
  }

  zigzag(): number {
    const v = this.varint();
    return v % 2 === 0 ? v / 2 : -(v + 1) / 2;
  }

  zigzagBig(): bigint {
    const v = this.varintBig();
    return (v >> 1n) ^ -(v & 1n);
  }

  skip(n: number): void {
    if (n < 0 || this.at + n > this.end) throw this.fail('Parquet footer ends early');
    this.at += n;
  }

  bytes(n: number): Uint8Array {
    const start = this.at;
    this.skip(n);
    return this.b.subarray(start, start + n);
  }

  listHeader(): { size: number; elementType: number } {
    const h = this.byte();
    return { size: h >> 4 === 15 ? this.varint() : h >> 4, elementType: h & 0x0f };
  }

  /** Skips one value of compact type `t`. */
  skipValue(t: number, depth: number): void {
    if (depth > MAX_DEPTH) throw this.fail('Parquet footer nests too deeply');
    switch (t) {
      case T_BOOL_TRUE:
      case T_BOOL_FALSE: // as a field, the value is in the type
        return;
      case 3: // BYTE
        return this.skip(1);
      case 4: // I16
      case T_I32:
      case T_I64:
        this.varint();
        return;
      case 7: // DOUBLE
        return this.skip(8);
      case T_BINARY:
        return this.skip(this.varint());
      case T_LIST:
      case 10: {
        // SET
        const { size, elementType } = this.listHeader();
        for (let i = 0; i < size; i++) this.skipElement(elementType, depth + 1);
        return;
      }
      case 11: {
        // MAP
        const size = this.varint();
        if (size === 0) return;
        const kv = this.byte();
        for (let i = 0; i < size; i++) {
          this.skipElement(kv >> 4, depth + 1);
          this.skipElement(kv & 0x0f, depth + 1);
        }
        return;
      }
      case T_STRUCT:
        return this.skipStruct(depth + 1);
      default:
        throw this.fail(`unknown Thrift compact type ${t}`);
    }
  }

  /** Skips the rest of a struct, up to and including its stop byte. */
  skipStruct(depth: number): void {
    for (;;) {
      const h = this.byte();
      if (h === 0) return;
      // A zero delta means the field id follows in full (zigzag i16).
      if (h >> 4 === 0) this.zigzag();
      this.skipValue(h & 0x0f, depth);
    }
  }

  /** A list or map element: a boolean element is one byte, unlike a boolean field. */
  private skipElement(t: number, depth: number): void {
    if (t === T_BOOL_TRUE || t === T_BOOL_FALSE) this.skip(1);
    else this.skipValue(t, depth);
  }
}

/** Appends `v` (a non-negative integer below 2^53) as an unsigned varint. */
export function varintBytes(v: number, out: number[]): void {
  while (v >= 0x80) {
    out.push((v % 0x80) | 0x80);
    v = Math.floor(v / 0x80);
  }
  out.push(v);
}

/** The zigzag form of a signed integer (what the compact protocol writes for i16/i32). */
export const zigzag = (v: number): number => (v >= 0 ? v * 2 : -v * 2 - 1);

/** Appends a compact-protocol field header for field `id` of type `t` after field `prevId`. */
export function fieldHeader(id: number, prevId: number, t: number, out: number[]): void {
  const delta = id - prevId;
  if (delta >= 1 && delta <= 15) {
    out.push((delta << 4) | t);
  } else {
    out.push(t);
    varintBytes(zigzag(id), out);
  }
}

/** Appends a compact-protocol list header: `size` elements of type `elementType`. */
export function listHeader(size: number, elementType: number, out: number[]): void {
  if (size < 15) out.push((size << 4) | elementType);
  else {
    out.push(0xf0 | elementType);
    varintBytes(size, out);
  }
}

/** "PAR1" as a little-endian uint32: the magic at both ends of a Parquet file. */
export const PAR1 = 0x31524150;

/**
 * Where the footer of the whole Parquet file `file` lies: `[start, end)`, `length` bytes, followed
 * by its 4-byte length and `PAR1`. Throws `fail(message)` for bytes that are not such a file.
 */
export function footerBounds(
  file: Uint8Array,
  fail: (message: string) => Error,
): { start: number; end: number; length: number } {
  if (file.byteLength < 12) throw fail('not a Parquet file: too short');
  const view = new DataView(file.buffer, file.byteOffset, file.byteLength);
  if (view.getUint32(file.byteLength - 4, true) !== PAR1) throw fail('not a Parquet file: no PAR1 at the end');
  const length = view.getUint32(file.byteLength - 8, true);
  const end = file.byteLength - 8;
  const start = end - length;
  if (start < 4) throw fail('not a Parquet file: footer longer than the file');
  return { start, end, length };
}

/**
 * `file` (a whole Parquet file whose footer is `footerLength` bytes) with its footer bytes
 * `[from, to)` replaced by `bytes`, and the footer length written to match: a new array. Pages
 * are addressed by absolute offsets before the footer, so nothing else moves.
 */
export function spliceFooter(
  file: Uint8Array,
  from: number,
  to: number,
  bytes: ArrayLike<number>,
  footerLength: number,
): Uint8Array {
  const growth = bytes.length - (to - from);
  const out = new Uint8Array(file.byteLength + growth);
  out.set(file.subarray(0, from), 0);
  out.set(bytes, from);
  out.set(file.subarray(to, file.byteLength - 8), from + bytes.length);
  const view = new DataView(out.buffer, out.byteOffset, out.byteLength);
  view.setUint32(out.byteLength - 8, footerLength + growth, true);
  view.setUint32(out.byteLength - 4, PAR1, true);
  return out;
}
