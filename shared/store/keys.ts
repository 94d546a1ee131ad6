import { StoreError } from '../errors.js';

/** S3's own limit on key length; holding every store to it keeps keys portable between backends. */
export const MAX_KEY_BYTES = 1024;

/**
 * Throws a non-retriable `StoreError` unless `key` is a safe relative key:
 * non-empty, at most {@link MAX_KEY_BYTES} UTF-8 bytes, `/`-separated segments
 * of at least one character, no `.` or `..` segment, no backslash, no NUL, no
 * leading `/`. Every store applies the same rule so a key accepted by one
 * backend is accepted by all, and the filesystem store can map keys to paths
 * without any chance of leaving its root.
 */
export function validateKey(key: string): void {
  const problem = keyProblem(key);
  if (problem !== undefined) {
    throw new StoreError(`invalid object key ${JSON.stringify(key)}: ${problem}`, { retriable: false });
  }
}

/** Non-throwing form of {@link validateKey}, for filtering keys a backend reports that this code did not write. */
export function isValidKey(key: string): boolean {
  return keyProblem(key) === undefined;
}

function keyProblem(key: string): string | undefined {
  if (typeof key !== 'string' || key.length === 0) return 'empty';
  if (Buffer.byteLength(key, 'utf8') > MAX_KEY_BYTES) return `longer than ${MAX_KEY_BYTES} bytes`;
  if (key.includes('\0')) return 'contains NUL';
  // Backslash is a separator on Windows; refusing it everywhere keeps one rule for all platforms.
  if (key.includes('\\')) return 'contains a backslash';
  if (key.startsWith('/')) return 'starts with /';
  for (const segment of key.split('/')) {
    if (segment.length === 0) return 'has an empty segment';
    if (segment === '.' || segment === '..') return `has a "${segment}" segment`;
  }
  return undefined;
}

/**
 * Whether any valid key could start with `prefix`. A prefix holding a finished
 * `..` segment, a NUL, a leading `/` and so on matches nothing, so listing it
 * is answered with `[]` without touching the backend (and, for the
 * filesystem, without resolving a path outside the root).
 */
export function prefixCanMatchKeys(prefix: string): boolean {
  if (prefix.length === 0) return true;
  if (prefix.includes('\0') || prefix.includes('\\') || prefix.startsWith('/')) return false;
  const segments = prefix.split('/');
  // The last segment may be partial (`events/ap`) or empty (`events/`); only finished ones must be valid.
  for (let i = 0; i < segments.length - 1; i++) {
    const segment = segments[i];
    if (segment.length === 0 || segment === '.' || segment === '..') return false;
  }
  return true;
}

/**
 * Orders keys by their UTF-8 bytes, the order S3 lists in. Plain `<` compares
 * UTF-16 code units, which disagrees with byte order when a character above
 * U+FFFF meets one in U+E000–U+FFFF; remapping surrogates above that range
 * gives code point order, which equals UTF-8 byte order, without allocating.
 */
export function compareKeys(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    if (x < 0xd800 && y < 0xd800) return x - y;
    return codePointRank(x) - codePointRank(y);
  }
  return a.length - b.length;
}

function codePointRank(unit: number): number {
  if (unit < 0xd800) return unit;
  // Surrogates (D800–DFFF) encode code points above FFFF, so they must sort after E000–FFFF.
  return unit >= 0xe000 ? unit - 0x800 : unit + 0x2000;
}

/**
 * The `limit` of a listing as a count: absent means no limit. A negative or
 * NaN limit is a caller bug, reported as a non-retriable `StoreError` rather
 * than silently read as "all" or "none".
 */
export function resolveListLimit(limit: number | undefined): number {
  if (limit === undefined) return Number.POSITIVE_INFINITY;
  if (Number.isNaN(limit) || limit < 0) {
    throw new StoreError(`invalid list limit ${String(limit)}`, { retriable: false });
  }
  return Math.floor(limit);
}
