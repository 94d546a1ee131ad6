/**
 * Segment write keys (`SEGMENT_WRITE_KEYS_FILE`): each names where its events go, an app of a
 * collection. Keys are secrets: they are compared in constant time, never logged nor echoed.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { z } from 'zod';
import { type CollectionConfig, ConfigError, readJsonFile } from '../../../shared/config.js';
import { checkParamValue, parseStoragePath } from '../../../shared/paths.js';

/** Where a write key's events go. */
export interface WriteKeyTarget {
  readonly app: string;
  readonly collection: string;
}

const FileSchema = z.record(
  z.string().min(8, 'a write key must be at least 8 characters'),
  z.object({ app: z.string(), collection: z.string().default('events') }).strict(),
);

const digest = (key: string): Buffer => createHash('sha256').update(key, 'utf8').digest();

/** The write keys, looked up in constant time (every configured key is compared, by its sha256). */
export class WriteKeys {
  private readonly entries: { hash: Buffer; target: WriteKeyTarget }[];

  constructor(map: ReadonlyMap<string, WriteKeyTarget>) {
    this.entries = [...map].map(([key, target]) => ({ hash: digest(key), target }));
  }

  /** The target of `key`, or undefined. Time depends on the number of keys only. */
  lookup(key: string): WriteKeyTarget | undefined {
    const h = digest(key);
    let found: WriteKeyTarget | undefined;
    for (const e of this.entries) if (timingSafeEqual(e.hash, h) && found === undefined) found = e.target;
    return found;
  }

  /** The collections some key writes to. */
  get collections(): string[] {
    return [...new Set(this.entries.map((e) => e.target.collection))];
  }
}

/**
 * Validates a write keys value against the collections: each key's collection must exist and its
 * storagePath must have exactly one list parameter (the app); the app must be a valid path
 * parameter (and match APP_PATTERN when set). Throws ConfigError naming the key's position (never
 * the key) and the problem.
 */
export function parseWriteKeys(
  value: unknown,
  collections: readonly CollectionConfig[],
  source: string,
  appPattern?: RegExp,
): WriteKeys {
  const r = FileSchema.safeParse(value);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new ConfigError(
      `${source}: expected {"<writeKey>": {"app": "<app>", "collection": "<collection, default events>"}}: ${issue?.message ?? 'invalid'}`,
    );
  }
  const out = new Map<string, WriteKeyTarget>();
  let n = 0;
  for (const [key, t] of Object.entries(r.data)) {
    n++;
    const where = `${source}: write key #${n} (app "${t.app}")`;
    const c = collections.find((x) => x.name === t.collection);
    if (!c)
      throw new ConfigError(
        `${where}: no collection "${t.collection}" in the config (collections: ${collections.map((x) => x.name).join(', ')})`,
      );
    const params = parseStoragePath(c.storagePath).prefixParams;
    if (params.length !== 1)
      throw new ConfigError(
        `${where}: collection "${c.name}" has storagePath "${c.storagePath}" with ${params.length} list parameters; a write key needs exactly one (the app)`,
      );
    const problem = checkParamValue(t.app);
    if (problem) throw new ConfigError(`${where}: app ${problem}`);
    if (appPattern && !appPattern.test(t.app))
      throw new ConfigError(`${where}: app does not match APP_PATTERN (${appPattern.source})`);
    out.set(key, { app: t.app, collection: c.name });
  }
  if (out.size === 0) throw new ConfigError(`${source}: no write keys`);
  return new WriteKeys(out);
}

/** `SEGMENT_WRITE_KEYS_FILE`, read and validated at start. */
export function loadWriteKeys(path: string, collections: readonly CollectionConfig[], appPattern?: RegExp): WriteKeys {
  return parseWriteKeys(
    readJsonFile(path, 'SEGMENT_WRITE_KEYS_FILE'),
    collections,
    `SEGMENT_WRITE_KEYS_FILE ${path}`,
    appPattern,
  );
}

/**
 * The write key of an `Authorization: Basic` header (the user name; the password is ignored, as
 * Segment does): undefined without one, null for a Basic header that does not decode.
 */
export function basicUser(header: string | undefined): string | null | undefined {
  if (header === undefined) return undefined;
  const m = /^Basic[ \t]+([A-Za-z0-9+/=]+)[ \t]*$/i.exec(header);
  if (!m?.[1]) return null;
  const decoded = Buffer.from(m[1], 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  const user = colon < 0 ? decoded : decoded.slice(0, colon);
  return user === '' ? null : user;
}
