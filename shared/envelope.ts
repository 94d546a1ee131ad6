/**
 * Validation of a push body, done once in the API so the queue never holds a batch the
 * encoder would have to reject.
 */

/** Nesting limit: far below what JSON.parse/JSON.stringify can recurse through, far above real events. */
export const MAX_JSON_DEPTH = 64;

export type EnvelopeCheck = { ok: true; text: string; events: number } | { ok: false; error: string };

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

/**
 * Deepest `[`/`{` nesting in JSON text, ignoring brackets inside strings. Runs before
 * JSON.parse so a hostile 100k-deep body costs one linear scan, not a deep parse.
 */
export function jsonDepthExceeds(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92 /* \ */) i++;
      else if (c === 34 /* " */) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 123 || c === 91) {
      if (++depth > limit) return true;
    } else if (c === 125 || c === 93) depth--;
  }
  return false;
}

function describeType(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return `a ${typeof v}`;
}

/** Checks UTF-8, depth, JSON syntax and the `{ data: { events: [ {…} ] } }` shape. */
export function checkEnvelope(body: Buffer): EnvelopeCheck {
  if (body.length === 0) return { ok: false, error: 'empty body: expected { "data": { "events": [...] } }' };
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    return { ok: false, error: 'body is not valid UTF-8' };
  }
  if (jsonDepthExceeds(text, MAX_JSON_DEPTH + 2)) {
    return { ok: false, error: `JSON nesting deeper than ${MAX_JSON_DEPTH} levels inside an event` };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    // V8's message quotes the body; only the position is safe to repeat.
    const pos = /position (\d+)/.exec((err as Error).message)?.[1];
    return { ok: false, error: `malformed JSON${pos ? ` at position ${pos}` : ''}` };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return { ok: false, error: `body must be a JSON object { "data": { "events": [...] } }, got ${describeType(parsed)}` };
  }
  const data = (parsed as Record<string, unknown>).data;
  if (typeof data !== 'object' || data === null || Array.isArray(data)) {
    return { ok: false, error: `"data" must be an object holding "events", got ${describeType(data)}` };
  }
  const events = (data as Record<string, unknown>).events;
  if (!Array.isArray(events)) return { ok: false, error: `"data.events" must be an array, got ${describeType(events)}` };
  for (let i = 0; i < events.length; i++) {
    const e: unknown = events[i];
    if (typeof e !== 'object' || e === null || Array.isArray(e)) {
      return { ok: false, error: `data.events[${i}] must be a JSON object, got ${describeType(e)}` };
    }
  }
  return { ok: true, text, events: events.length };
}
