/**
 * The push's content headers, read without HTTP machinery: which coding to undo, and whether the
 * Content-Type is one the collection accepts.
 */

/** The content codings push decodes (RFC 9110 §8.4.1); `x-gzip` is read as `gzip`. */
export const CONTENT_CODINGS = ['identity', 'gzip', 'deflate', 'br'] as const;
export type ContentCoding = (typeof CONTENT_CODINGS)[number];

/**
 * The one coding to undo for a `Content-Encoding` header, or a message naming what is not
 * supported. `identity` entries are ignored; more than one real coding ("gzip, br") is refused:
 * each layer would multiply what a small body can inflate to, and no SDK sends them stacked.
 */
export function parseContentEncoding(
  header: string | undefined,
): { ok: true; coding: ContentCoding } | { ok: false; error: string } {
  const codings = (header ?? '')
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter((s) => s !== '' && s !== 'identity')
    .map((s) => (s === 'x-gzip' ? 'gzip' : s));
  const supported = 'gzip, deflate, br or identity';
  const unknown = codings.find((c) => !(CONTENT_CODINGS as readonly string[]).includes(c));
  if (unknown !== undefined)
    return { ok: false, error: `Content-Encoding "${printable(unknown)}" is not supported; use ${supported}` };
  if (codings.length > 1)
    return {
      ok: false,
      error: `Content-Encoding "${printable(header ?? '')}" stacks ${codings.length} codings; send at most one of ${supported}`,
    };
  return { ok: true, coding: (codings[0] as ContentCoding | undefined) ?? 'identity' };
}

/** A header value as it may be echoed in an error: printable ASCII, bounded. */
function printable(value: string): string {
  const clean = value.replace(/[^\x20-\x7e]/g, '?');
  return clean.length > 64 ? `${clean.slice(0, 64)}…` : clean;
}

/** True when the request's Content-Type (without parameters) is one of `allowed`. */
export function contentTypeAllowed(header: string | undefined, allowed: readonly string[]): boolean {
  if (!header) return false;
  const [type, ...params] = header.split(';').map((s) => s.trim().toLowerCase());
  if (!type || !allowed.some((a) => a.toLowerCase() === type)) return false;
  // JSON is UTF-8 by definition (RFC 8259); any other declared charset is refused.
  const charset = params.find((p) => p.startsWith('charset='));
  return !charset || /^charset="?utf-?8"?$/.test(charset);
}
