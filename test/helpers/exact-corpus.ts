/**
 * Hard JSON values, written as the raw text a client sends (never produced by JSON.stringify,
 * which could not write most of them), and a way to build a push body of them with whitespace
 * around and inside every value. Used by the exact-values unit and integration tests.
 */

/** Numbers JSON.parse + JSON.stringify would change (or that sit at the edge of the grammar). */
export const HARD_NUMBERS: readonly string[] = [
  '123456789012345678901234567890',
  '-123456789012345678901234567890',
  '9007199254740993',
  '1e400',
  '-1E400',
  '1E-400',
  '-0',
  '-0.0',
  '0',
  '1.0',
  '100e-2',
  '1.5E+300',
  '0.1000000000000000055511151231257827',
  '2.2250738585072011e-308',
];

/** Strings as JSON text: every escape, NUL, surrogate pairs raw and escaped, lone surrogates, non-ASCII. */
export const HARD_STRINGS: readonly string[] = [
  String.raw`"\" \\ \/ \b \f \n \r \t"`,
  String.raw`"\u0000"`,
  String.raw`"nul\u0000inside"`,
  '"😀"',
  String.raw`"\ud83d\ude00"`,
  String.raw`"\uD83D\uDE00 upper-case hex"`,
  String.raw`"\ud83d"`,
  String.raw`"\ude00 a lone low surrogate"`,
  '"café 中文 ü ß Ω"',
  String.raw`"\u00e9 escaped, é raw"`,
  '"a, b: {c} [d] \\"e\\""',
  '"  spaces inside are data  "',
  '""',
];

/** Containers: empty, nested, mixed, holding hard numbers and strings. */
export const HARD_CONTAINERS: readonly string[] = [
  '{}',
  '[]',
  '[[[]]]',
  '[{}]',
  '{"a":{"b":{"c":[1,{"d":[]}]}}}',
  '[1e400,-0,{"x":123456789012345678901234567890}]',
  String.raw`{"\u0061":"\ud83d","k":[true,false,null]}`,
  '{"dup":1,"dup":2}',
];

/** Every hard value (compact JSON text). */
export const HARD_VALUES: readonly string[] = [...HARD_NUMBERS, ...HARD_STRINGS, ...HARD_CONTAINERS];

/** `{"k0":v0,"k1":v1,...}` as compact text. */
export function objectOf(values: readonly string[]): string {
  return `{${values.map((v, i) => `"k${i}":${v}`).join(',')}}`;
}

/** `[v0,v1,...]` as compact text. */
export function arrayOf(values: readonly string[]): string {
  return `[${values.join(',')}]`;
}

/**
 * The compact JSON text with whitespace (spaces, tabs, CR, LF) after every `{ [ , :` and before
 * every `} ]` outside strings, as a pretty-printer would write it. The scanner must store the
 * compact form again.
 */
export function spaced(compact: string): string {
  let out = '';
  let inString = false;
  for (let i = 0; i < compact.length; i++) {
    const c = compact[i];
    if (inString) {
      out += c;
      if (c === '\\') out += compact[++i];
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    if (c === '}' || c === ']') out += '\r\n\t';
    out += c;
    if (c === '{' || c === '[' || c === ',' || c === ':') out += '\n  ';
  }
  return out;
}

/** One member of an event as `"key" : value` with whitespace around the colon. */
export function member(key: string, rawValue: string): string {
  return `"${key}" :\t${rawValue}`;
}

/** A push envelope around events given as raw JSON text, pretty-printed around them. */
export function envelopeOf(rawEvents: readonly string[]): string {
  return `{\n  "data" : {\n    "events" : [\n      ${rawEvents.join(' ,\n      ')}\n    ]\n  },\n  "baseHash" : null\n}\n`;
}

/** What a UTF-8 string column holds for a JSON string: decoded, a lone surrogate as U+FFFD. */
export function decodedString(raw: string): string {
  return (JSON.parse(raw) as string).replace(
    /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g,
    '\ufffd',
  );
}
