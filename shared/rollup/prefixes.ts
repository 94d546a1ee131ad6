/**
 * Which list prefixes (collection + app) exist, found from the store itself with a skip scan:
 * one `listKeys(…, { limit: 1 })` per prefix, each starting after the previous prefix's last
 * possible key. The cost is one listing call per prefix, whatever number of files each holds.
 */
import { type StoragePathTemplate, checkParamValue } from '../paths.js';
import type { ObjectStore } from '../store/types.js';
import { ROLLUP_ROOT } from './layout.js';

/** At most this many prefixes per discovery pass (a bound on calls per pass; documented in docs/analysts.md). */
export const MAX_PREFIXES_PER_SCAN = 10_000;

/** Sorts after every character a param value or batch id may hold ([A-Za-z0-9._~-]), and after `_manifest.json`/`date=`. */
const AFTER_ALL = '\u007f';

/** The literal key head every list prefix of the template starts with (`events/` for `events/{app}/{id}`). */
export function literalHead(t: StoragePathTemplate): string {
  const parts: string[] = [];
  for (const s of t.segments) {
    if (s.kind !== 'literal') break;
    parts.push(s.value);
  }
  return parts.length ? `${parts.join('/')}/` : '';
}

/** The list prefix a key of `t` lives under, with its params; null when the key does not fit the template. */
export function prefixOfKey(
  t: StoragePathTemplate,
  key: string,
): { prefix: string; params: Record<string, string> } | null {
  const parts = key.split('/');
  const n = t.segments.length - 1;
  if (parts.length <= n) return null;
  const params: Record<string, string> = {};
  for (let i = 0; i < n; i++) {
    const seg = t.segments[i];
    const value = parts[i] as string;
    if (seg === undefined) return null;
    if (seg.kind === 'literal') {
      if (seg.value !== value) return null;
    } else {
      if (checkParamValue(value) !== null) return null;
      params[seg.name] = value;
    }
  }
  return { prefix: `${parts.slice(0, n).join('/')}/`, params };
}

/**
 * The list prefixes of `t` that have batch files (`root: 'batches'`) or rollups (`root: 'rollups'`),
 * ascending, optionally only those whose params equal `match` (a value of `'*'` matches any).
 */
export async function discoverPrefixes(
  store: ObjectStore,
  t: StoragePathTemplate,
  opts: { root?: 'batches' | 'rollups'; match?: Readonly<Record<string, string>>; max?: number } = {},
): Promise<string[]> {
  const base = opts.root === 'rollups' ? ROLLUP_ROOT : '';
  const head = base + literalHead(t);
  const max = opts.max ?? MAX_PREFIXES_PER_SCAN;
  const out: string[] = [];
  let startAfter: string | undefined;
  for (let i = 0; i < max * 4 && out.length < max; i++) {
    const [key] = await store.listKeys(head, { startAfter, limit: 1 });
    if (key === undefined) break;
    // Batch-file prefixes never live under rollups/ (a template whose head is empty would see them).
    if (base === '' && key.startsWith(ROLLUP_ROOT)) {
      startAfter = `${ROLLUP_ROOT}${AFTER_ALL}`;
      continue;
    }
    const found = prefixOfKey(t, key.slice(base.length));
    if (!found) {
      // A stray key outside the template's shape: step past it alone.
      startAfter = key;
      continue;
    }
    startAfter = `${base}${found.prefix}${AFTER_ALL}`;
    const wanted = Object.entries(opts.match ?? {}).every(([k, v]) => v === '*' || found.params[k] === v);
    if (wanted) out.push(found.prefix);
  }
  return out;
}
