/**
 * HTTP range requests (RFC 9110 §14) for pull: enough for range readers such as DuckDB's
 * httpfs and hyparquet, which fetch a Parquet file's footer and then the column chunks they need.
 * Pure functions; the router turns the result into 200/206/416.
 *
 * Not Express' `req.range()` (range-parser): it answers a reversed range (`bytes=9-3`), which
 * RFC 9110 §14.1.1 says to ignore, as unsatisfiable (a 416 instead of the file), and it reads
 * `Bytes = 5-5` as the unit "Bytes " so the caller must re-check the unit; this module is
 * about as long as the glue would be.
 */

/** What to send for a `Range` header against a representation of `size` bytes. */
export type RangeDecision =
  /** No usable range (absent, another unit, malformed, several ranges, or `If-Range` mismatch): send everything with 200. */
  | { kind: 'full' }
  /** One satisfiable range: send bytes `start..end` (inclusive) with 206. */
  | { kind: 'partial'; start: number; end: number }
  /** A well-formed single range that lies wholly past the end: 416 with `Content-Range: bytes *\/size`. */
  | { kind: 'unsatisfiable' };

/** Digits only, so `Number()` cannot see hex, exponents or signs; 15 digits stay exact in a double. */
const SPEC_RE = /^(\d{1,15})?-(\d{1,15})?$/;

/**
 * Decides how to answer `Range: <header>` for a body of `size` bytes.
 *
 * Supports one range per request: `bytes=a-b`, `bytes=a-` and `bytes=-n`. An end past the last
 * byte is clamped; a suffix longer than the body means the whole body (still 206). A first byte
 * at or past the end, or a zero-length suffix, is unsatisfiable. Anything else a server may
 * ignore per RFC 9110 (other units, syntax errors, `a > b`) yields `full`; so do multiple ranges,
 * which would need a multipart/byteranges body that no Parquet reader asks for.
 */
export function decideRange(header: string | undefined, size: number): RangeDecision {
  if (header === undefined) return { kind: 'full' };
  const m = /^\s*bytes\s*=\s*(.*)$/i.exec(header);
  if (!m) return { kind: 'full' };
  const specs = (m[1] ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  if (specs.length !== 1) return { kind: 'full' };
  const spec = SPEC_RE.exec(specs[0] as string);
  if (!spec) return { kind: 'full' };
  const [, first, last] = spec;
  if (first === undefined && last === undefined) return { kind: 'full' };

  if (first === undefined) {
    const suffix = Number(last);
    if (suffix === 0 || size === 0) return { kind: 'unsatisfiable' };
    return { kind: 'partial', start: Math.max(0, size - suffix), end: size - 1 };
  }
  const start = Number(first);
  if (last !== undefined && Number(last) < start) return { kind: 'full' };
  if (start >= size) return { kind: 'unsatisfiable' };
  const end = last === undefined ? size - 1 : Math.min(Number(last), size - 1);
  return { kind: 'partial', start, end };
}

/**
 * Whether a `Range` may be honoured given `If-Range`: absent, or exactly our strong ETag.
 * A date never matches (pull sends no Last-Modified), nor does a weak tag, so the client gets
 * the whole current file rather than a slice of a different one.
 */
export function ifRangeAllows(ifRange: string | undefined, etag: string): boolean {
  if (ifRange === undefined) return true;
  return ifRange.trim() === etag;
}

/** `Content-Range` value for a 206. */
export function contentRange(start: number, end: number, size: number): string {
  return `bytes ${start}-${end}/${size}`;
}

/** `Content-Range` value for a 416. */
export function unsatisfiedRange(size: number): string {
  return `bytes */${size}`;
}
