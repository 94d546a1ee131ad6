/**
 * Storage-path templates like `events/{app}/{batchId}`: literal segments and `{param}`
 * segments. The last segment must be a param; the server fills it with the minted id.
 */

export type Segment = { kind: 'literal'; value: string } | { kind: 'param'; name: string };

export interface StoragePathTemplate {
  readonly source: string;
  readonly segments: readonly Segment[];
  /** Name of the last `{param}` (replaced by the server-minted batch id). */
  readonly batchParam: string;
  /** Params of the list route: every param except the last. */
  readonly prefixParams: readonly string[];
}

/** 1-128 chars of RFC 3986 unreserved characters; `.` and `..` are refused separately. */
export const PARAM_VALUE_RE = /^[A-Za-z0-9._~-]{1,128}$/;
const PARAM_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
const LITERAL_RE = /^[A-Za-z0-9._~-]{1,128}$/;

/** Parses a storagePath template; throws an Error naming the problem. */
export function parseStoragePath(source: string): StoragePathTemplate {
  if (source.startsWith('/') || source.endsWith('/'))
    throw new Error(`storagePath "${source}" must not start or end with "/"`);
  const raw = source.split('/');
  const segments: Segment[] = raw.map((part) => {
    const m = /^\{([^}]*)\}$/.exec(part);
    if (m) {
      const name = m[1] ?? '';
      if (!PARAM_NAME_RE.test(name))
        throw new Error(`storagePath "${source}": param name "${name}" must be an identifier`);
      return { kind: 'param', name };
    }
    if (!LITERAL_RE.test(part) || part === '.' || part === '..') {
      throw new Error(`storagePath "${source}": segment "${part}" is neither a {param} nor a plain name`);
    }
    return { kind: 'literal', value: part };
  });
  const last = segments[segments.length - 1];
  if (!last || last.kind !== 'param')
    throw new Error(`storagePath "${source}" must end with a {param} segment (e.g. "events/{app}/{batchId}")`);
  const names = segments.flatMap((s) => (s.kind === 'param' ? [s.name] : []));
  if (new Set(names).size !== names.length) throw new Error(`storagePath "${source}" repeats a param name`);
  return { source, segments, batchParam: last.name, prefixParams: names.slice(0, -1) };
}

/** Null when `value` is a safe path param; otherwise why not. */
export function checkParamValue(value: string): string | null {
  if (!PARAM_VALUE_RE.test(value)) return 'must be 1-128 characters of [A-Za-z0-9._~-]';
  if (value === '.' || value === '..') return 'must not be "." or ".."';
  return null;
}

/** The list prefix (`events/myapp/`) for the given params; the params must be valid. */
export function listPrefix(t: StoragePathTemplate, params: Readonly<Record<string, string>>): string {
  const parts = t.segments.slice(0, -1).map((s) => (s.kind === 'literal' ? s.value : (params[s.name] ?? '')));
  return parts.length ? `${parts.join('/')}/` : '';
}

/** The object key of a batch: list prefix + id + `.parquet`. A function of the id, so retries overwrite. */
export function batchKey(t: StoragePathTemplate, params: Readonly<Record<string, string>>, batchId: string): string {
  return `${listPrefix(t, params)}${batchId}.parquet`;
}

/** Express route pattern for the segments (`events/:app/:batchId`). */
export function routePattern(segments: readonly Segment[]): string {
  return segments.map((s) => (s.kind === 'literal' ? s.value : `:${s.name}`)).join('/');
}
