/**
 * One Iceberg v2 table per (collection, app) over an ObjectStore, in the file-system catalog
 * layout every engine's Hadoop/file catalog reads (format/spec.md of apache/iceberg, "File System
 * Tables"):
 *
 *   iceberg/<collection>/<app>/metadata/v<N>.metadata.json   one per committed version
 *   iceberg/<collection>/<app>/metadata/version-hint.text    "<N>", written after v<N>
 *   iceberg/<collection>/<app>/metadata/m-<ms>-<hex>.avro     manifests
 *   iceberg/<collection>/<app>/metadata/snap-<id>-<ms>-<hex>.avro  manifest lists
 *
 * Data files are the batch and rollup files already in the store, referenced in place by absolute
 * URI (`rootUri` + key). A commit writes its manifests and manifest list, then creates
 * `v<N+1>.metadata.json` only if it does not exist (the store's own createIfAbsent): that create is the
 * commit point. A committer that loses the race deletes what it wrote, re-reads and retries (a
 * bounded number of times); one whose create failed with an unknown outcome leaves its files for
 * {@link IcebergTable.cleanOrphans}, which deletes unreferenced metadata files older than a grace
 * period. `version-hint.text` follows the create; a reader (or the next commit) that finds a stale
 * hint still sees a committed version, and the loader probes past it.
 *
 * Not handled here (the caller's job): one committer per table at a time is the design (the lock
 * keeps commits from racing at all; the exclusive create keeps a race safe), the choice of which
 * batch files to append, and deleting data files that {@link IcebergTable.expireSnapshots} returns.
 */
import { batchIdMs, randomHex } from '../ids.js';
import type { RollupFile } from '../rollup/manifest.js';
import { requireCreateIfAbsent } from '../store/optional.js';
import type { CreateIfAbsent, ObjectStore } from '../store/types.js';
import {
  type DataFile,
  type ManifestEntry,
  type ManifestFile,
  STATUS_ADDED,
  STATUS_DELETED,
  STATUS_EXISTING,
  hourSummary,
  readManifest,
  readManifestList,
  writeManifest,
  writeManifestList,
} from './avro.js';
import {
  EVENTS_SCHEMA,
  type IcebergSchema,
  LAST_COLUMN_ID,
  PARTITION_SPEC,
  type PartitionSpec,
  ROLLUP_ORDER_ID,
  SORT_ORDERS,
  type SortOrder,
  UNSORTED_ORDER_ID,
  hourPartition,
  tableProperties,
} from './schema.js';

/** Snapshot summary key: the last batch id (in id order) the snapshot's appends have reached. */
export const THROUGH_BATCH_ID = 'events-ingest.through-batch-id';

/** A data file to add, as the caller knows it. */
export interface TableFile {
  /** Store key. */
  readonly key: string;
  readonly recordCount: number;
  readonly fileSizeInBytes: number;
  /** `received_at` range of its rows (epoch ms): must lie in one hour (the partition). */
  readonly minReceivedAtMs: number;
  readonly maxReceivedAtMs: number;
  /** Written in the rollup order (rollup files) or not (batch files). */
  readonly sorted: boolean;
}

/** A batch file: every row's `received_at` is its batch id's instant (shared/ids.ts), so the file lies in one hour. */
export function batchTableFile(key: string, batchId: string, recordCount: number, fileSizeInBytes: number): TableFile {
  const ms = batchIdMs(batchId);
  return { key, recordCount, fileSizeInBytes, minReceivedAtMs: ms, maxReceivedAtMs: ms, sorted: false };
}

/** A rollup file: rows of batch ids `firstId..lastId`, sorted in the rollup order. */
export function rollupTableFile(f: RollupFile): TableFile {
  return {
    key: f.key,
    recordCount: f.rows,
    fileSizeInBytes: f.bytes,
    minReceivedAtMs: batchIdMs(f.firstId),
    maxReceivedAtMs: batchIdMs(f.lastId),
    sorted: true,
  };
}

export interface Snapshot {
  'snapshot-id': number;
  'parent-snapshot-id'?: number;
  'sequence-number': number;
  'timestamp-ms': number;
  'manifest-list': string;
  summary: Record<string, string> & { operation: string };
  'schema-id': number;
}

/** Table metadata v2 as we write it (spec "Table Metadata Fields", Appendix C). */
export interface TableMetadata {
  'format-version': 2;
  'table-uuid': string;
  location: string;
  'last-sequence-number': number;
  'last-updated-ms': number;
  'last-column-id': number;
  schemas: IcebergSchema[];
  'current-schema-id': number;
  'partition-specs': PartitionSpec[];
  'default-spec-id': number;
  'last-partition-id': number;
  properties: Record<string, string>;
  'current-snapshot-id'?: number;
  snapshots: Snapshot[];
  'snapshot-log': { 'timestamp-ms': number; 'snapshot-id': number }[];
  'metadata-log': { 'timestamp-ms': number; 'metadata-file': string }[];
  'sort-orders': SortOrder[];
  'default-sort-order-id': number;
  refs: Record<string, { 'snapshot-id': number; type: 'branch' | 'tag' }>;
}

/** A replace or delete named a file the table does not hold (anymore), or an append re-adds a held one. Not retriable. */
export class IcebergConflictError extends Error {
  override readonly name = 'IcebergConflictError';
}

/** Every attempt lost the race for the next version. Retriable later. */
export class IcebergCommitRaceError extends Error {
  override readonly name = 'IcebergCommitRaceError';
}

export interface CommitResult {
  version: number;
  snapshotId: number;
  sequenceNumber: number;
  /** Attempts it took (1 = no race lost). */
  attempts: number;
  /** False when the commit succeeded but version-hint.text could not be written (readers see the previous version until the next commit). */
  hintWritten: boolean;
}

export interface ExpireResult {
  expiredSnapshotIds: number[];
  /** Store keys of data files that no retained snapshot references: the caller may delete them now. */
  unreferencedDataKeys: string[];
  /** Manifests and manifest lists deleted (referenced only by expired snapshots). */
  deletedMetadataFiles: number;
  version: number | null;
}

export interface IcebergTableOptions {
  store: ObjectStore;
  collection: string;
  app: string;
  /** URI of the store's root, ending with `/`: data file URIs are this plus the key ({@link storeRootUri}). */
  rootUri: string;
  /** The commit point's exclusive create (default: the store's own, ObjectStore.createIfAbsent; a commit on a store without one fails). */
  createIfAbsent?: CreateIfAbsent;
  now?: () => number;
  /** Commit attempts before giving up with IcebergCommitRaceError (default 5). */
  maxAttempts?: number;
  /** Carried manifests are merged into one once a snapshot would list more than this many (default 100). */
  mergeManifestsAbove?: number;
  /** Metadata-log entries kept (default 100). */
  metadataLogMax?: number;
  /** Test hook: runs after a commit's manifests are written, before the metadata create (throw to simulate a crash there). */
  beforeMetadataCreate?: (version: number) => Promise<void>;
  /**
   * Told of work the table gives up without failing the commit: `version_hint` (the hint was not
   * rewritten; readers probe past a stale one) or `cleanup` (files of a lost or failed commit not
   * deleted; cleanOrphans takes them later). For the caller to log and count.
   */
  onQuietFailure?: (what: 'version_hint' | 'cleanup', err: unknown) => void;
}

/** The URI of a store's root (ending with `/`) as data file paths in manifests use it (ObjectStore.location). */
export function storeRootUri(store: ObjectStore): string {
  const location = store.location?.();
  if (!location)
    throw new Error(
      `${store.describe()}: no absolute URI for its files (Iceberg needs a store with a location: the filesystem, S3 or memory store)`,
    );
  return location.rootUri;
}

/** The app name of a list prefix's table: its params' values (`events/{app}/` → the app), joined by `.`. */
export function tableAppName(params: Readonly<Record<string, string>>): string {
  const values = Object.values(params);
  return values.length > 0 ? values.join('.') : '_';
}

/** The table's folder key: `iceberg/<collection>/<app>/`. */
export function tablePrefix(collection: string, app: string): string {
  return `iceberg/${collection}/${app}/`;
}

const JSON_TYPE = 'application/json';
const AVRO_TYPE = 'application/avro';
const ORPHAN_NAME_RE = /\/(?:m|snap-\d+)-(\d{13})-[0-9a-f]+\.avro$/;
/** Bound on versions probed past a stale hint (each is a GET; a hint lags by one at most in practice). */
const MAX_HINT_LAG = 1000;
/** Snapshot ids: positive, below 2^53 (exact as JS numbers and JSON), random (spec Appendix F). */
function newSnapshotId(taken: ReadonlySet<number>): number {
  for (;;) {
    const id = Number.parseInt(randomHex(7), 16) % 2 ** 53;
    if (id > 0 && !taken.has(id)) return id;
  }
}

function uuid(): string {
  const h = randomHex(16);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-${((Number.parseInt(h[16] as string, 16) & 3) | 8).toString(16)}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** A live file of a snapshot: its entry with inherited fields resolved, and the manifest holding it. */
interface LiveFile {
  entry: ManifestEntry;
  manifest: ManifestFile;
}

export class IcebergTable {
  readonly prefix: string;
  readonly location: string;
  private readonly store: ObjectStore;
  private readonly rootUri: string;
  private readonly createIfAbsent: CreateIfAbsent;
  private readonly now: () => number;
  private readonly maxAttempts: number;
  private readonly mergeAbove: number;
  private readonly metadataLogMax: number;
  private readonly onQuietFailure: IcebergTableOptions['onQuietFailure'];
  private readonly beforeMetadataCreate: ((version: number) => Promise<void>) | undefined;
  /** Manifests are immutable: their resolved entries are cached by path (bounded). */
  private readonly manifestCache = new Map<string, ManifestEntry[]>();
  private readonly listCache = new Map<string, ManifestFile[]>();

  constructor(o: IcebergTableOptions) {
    if (!o.rootUri.endsWith('/')) throw new Error(`rootUri must end with "/": ${o.rootUri}`);
    this.store = o.store;
    this.prefix = tablePrefix(o.collection, o.app);
    this.rootUri = o.rootUri;
    this.location = o.rootUri + this.prefix.slice(0, -1);
    // Resolved at the commit: a table only read needs no conditional create.
    this.createIfAbsent =
      o.createIfAbsent ?? (async (key, body, opts) => requireCreateIfAbsent(o.store)(key, body, opts));
    this.now = o.now ?? Date.now;
    this.maxAttempts = o.maxAttempts ?? 5;
    this.mergeAbove = o.mergeManifestsAbove ?? 100;
    this.metadataLogMax = o.metadataLogMax ?? 100;
    this.beforeMetadataCreate = o.beforeMetadataCreate;
    this.onQuietFailure = o.onQuietFailure;
  }

  /** Store key of a metadata file. */
  metadataKey(name: string): string {
    return `${this.prefix}metadata/${name}`;
  }

  uriOf(key: string): string {
    return this.rootUri + key;
  }

  keyOf(uri: string): string {
    if (!uri.startsWith(this.rootUri)) throw new Error(`${uri} is not under the store root ${this.rootUri}`);
    return uri.slice(this.rootUri.length);
  }

  // ---- reading ----

  /** The latest committed version number (0: no table yet): the hint, then any versions past it. */
  async currentVersion(): Promise<number> {
    let n = 0;
    const hint = await this.store.getBytes(this.metadataKey('version-hint.text'));
    const parsed = hint ? Number.parseInt(new TextDecoder().decode(hint.body).trim(), 10) : Number.NaN;
    if (Number.isSafeInteger(parsed) && parsed > 0) {
      n = parsed;
    } else {
      // No (readable) hint: a crash before the first hint write, or a hint torn by hand. List.
      const keys = await this.store.listKeys(this.metadataKey('v'));
      for (const k of keys) {
        const m = /\/v(\d+)\.metadata\.json$/.exec(k);
        if (m) n = Math.max(n, Number(m[1]));
      }
    }
    for (let i = 0; i < MAX_HINT_LAG; i++) {
      if (!(await this.store.getBytes(this.metadataKey(`v${n + 1}.metadata.json`)))) return n;
      n++;
    }
    return n;
  }

  /** The metadata of version `n`. */
  async readVersion(n: number): Promise<TableMetadata> {
    const got = await this.store.getBytes(this.metadataKey(`v${n}.metadata.json`));
    if (!got) throw new Error(`${this.prefix}: metadata version ${n} does not exist`);
    return JSON.parse(new TextDecoder().decode(got.body)) as TableMetadata;
  }

  /** The current version and its metadata, or null before the first commit. */
  async load(): Promise<{ version: number; metadata: TableMetadata } | null> {
    const version = await this.currentVersion();
    if (version === 0) return null;
    return { version, metadata: await this.readVersion(version) };
  }

  /** The manifests of a snapshot (manifest lists are immutable: cached by path, bounded). */
  async manifestsOf(snapshot: Snapshot): Promise<ManifestFile[]> {
    const path = snapshot['manifest-list'];
    let list = this.listCache.get(path);
    if (!list) {
      list = await readManifestList(await this.getRequired(this.keyOf(path)));
      if (this.listCache.size >= 10_000) this.listCache.clear();
      this.listCache.set(path, list);
    }
    return list;
  }

  /** A manifest's entries with `snapshot_id` and sequence numbers inherited from its list record where null (spec "Sequence Number Inheritance"). */
  async entriesOf(m: ManifestFile): Promise<ManifestEntry[]> {
    let entries = this.manifestCache.get(m.manifestPath);
    if (!entries) {
      entries = await readManifest(await this.getRequired(this.keyOf(m.manifestPath)));
      if (this.manifestCache.size >= 10_000) this.manifestCache.clear();
      this.manifestCache.set(m.manifestPath, entries);
    }
    return entries.map((e) => ({
      ...e,
      snapshotId: e.snapshotId ?? m.addedSnapshotId,
      sequenceNumber: e.sequenceNumber ?? (e.status === STATUS_ADDED ? m.sequenceNumber : null),
      fileSequenceNumber: e.fileSequenceNumber ?? (e.status === STATUS_ADDED ? m.sequenceNumber : null),
    }));
  }

  /** Live (ADDED or EXISTING) data files of a snapshot, by URI, in manifest order. */
  async liveFiles(snapshot: Snapshot | undefined): Promise<Map<string, LiveFile>> {
    const live = new Map<string, LiveFile>();
    if (!snapshot) return live;
    for (const manifest of await this.manifestsOf(snapshot)) {
      for (const entry of await this.entriesOf(manifest)) {
        if (entry.status !== STATUS_DELETED) live.set(entry.dataFile.filePath, { entry, manifest });
      }
    }
    return live;
  }

  /** Store keys of the data files of a snapshot (the current one by default), in manifest order. */
  async dataKeys(snapshot?: Snapshot): Promise<string[]> {
    const s = snapshot ?? (await this.load().then((l) => (l ? currentSnapshot(l.metadata) : undefined)));
    return [...(await this.liveFiles(s)).keys()].map((uri) => this.keyOf(uri));
  }

  private async getRequired(key: string): Promise<Uint8Array> {
    const got = await this.store.getBytes(key);
    if (!got) throw new Error(`${key} is missing (referenced by table metadata)`);
    return got.body;
  }

  // ---- commits ----

  /** An `append` snapshot adding `files`; `throughBatchId` is recorded in its summary. */
  append(files: readonly TableFile[], o: { throughBatchId?: string } = {}): Promise<CommitResult> {
    if (files.length === 0) throw new Error('append of no files');
    return this.commit('append', files, [], o.throughBatchId);
  }

  /** A `replace` snapshot (rollup: same rows, other files): removes `removedKeys`, adds `added`, in one commit. */
  replace(removedKeys: readonly string[], added: readonly TableFile[]): Promise<CommitResult> {
    if (removedKeys.length === 0 || added.length === 0)
      throw new Error('replace needs files to remove and files to add');
    return this.commit('replace', added, removedKeys, undefined);
  }

  /**
   * An `overwrite` snapshot (erasure, issue 36): removes `removedKeys` and adds `added` in one
   * commit. A file rewritten in place (a batch file keeps its key) is both removed and added: its
   * entry is replaced by one with the new size and count.
   */
  overwrite(removedKeys: readonly string[], added: readonly TableFile[]): Promise<CommitResult> {
    if (removedKeys.length === 0) throw new Error('overwrite needs files to remove');
    return this.commit('overwrite', added, removedKeys, undefined);
  }

  /** A `delete` snapshot removing `keys` (retention). */
  delete(keys: readonly string[]): Promise<CommitResult> {
    if (keys.length === 0) throw new Error('delete of no files');
    return this.commit('delete', [], keys, undefined);
  }

  private freshMetadata(): TableMetadata {
    const now = this.now();
    return {
      'format-version': 2,
      'table-uuid': uuid(),
      location: this.location,
      'last-sequence-number': 0,
      'last-updated-ms': now,
      'last-column-id': LAST_COLUMN_ID,
      schemas: [EVENTS_SCHEMA],
      'current-schema-id': EVENTS_SCHEMA['schema-id'],
      'partition-specs': [PARTITION_SPEC],
      'default-spec-id': PARTITION_SPEC['spec-id'],
      'last-partition-id': Math.max(...PARTITION_SPEC.fields.map((f) => f['field-id'])),
      properties: tableProperties(),
      snapshots: [],
      'snapshot-log': [],
      'metadata-log': [],
      'sort-orders': [...SORT_ORDERS],
      'default-sort-order-id': ROLLUP_ORDER_ID,
      refs: {},
    };
  }

  private dataFileOf(f: TableFile): DataFile {
    return {
      filePath: this.uriOf(f.key),
      recordCount: f.recordCount,
      fileSizeInBytes: f.fileSizeInBytes,
      hour: hourPartition(f.minReceivedAtMs, f.maxReceivedAtMs),
      minReceivedAtMs: f.minReceivedAtMs,
      maxReceivedAtMs: f.maxReceivedAtMs,
      sortOrderId: f.sorted ? ROLLUP_ORDER_ID : UNSORTED_ORDER_ID,
    };
  }

  /** Writes a new manifest for `entries` (added by `snapshotId` at `seq`) and returns its list record. */
  private async putManifest(
    entries: readonly ManifestEntry[],
    snapshotId: number,
    seq: number,
    written: string[],
  ): Promise<ManifestFile> {
    const key = this.metadataKey(`m-${this.stamp()}.avro`);
    const bytes = await writeManifest(entries, EVENTS_SCHEMA, PARTITION_SPEC);
    written.push(key);
    await this.store.putBytes(key, bytes, { contentType: AVRO_TYPE });
    const count = (s: number): number => entries.filter((e) => e.status === s).length;
    const rows = (s: number): number =>
      entries.filter((e) => e.status === s).reduce((n, e) => n + e.dataFile.recordCount, 0);
    const liveSeqs = entries.filter((e) => e.status !== STATUS_DELETED).map((e) => e.sequenceNumber ?? seq);
    return {
      manifestPath: this.uriOf(key),
      manifestLength: bytes.byteLength,
      partitionSpecId: PARTITION_SPEC['spec-id'],
      content: 0,
      sequenceNumber: seq,
      minSequenceNumber: liveSeqs.length ? Math.min(...liveSeqs) : seq,
      addedSnapshotId: snapshotId,
      addedFilesCount: count(STATUS_ADDED),
      existingFilesCount: count(STATUS_EXISTING),
      deletedFilesCount: count(STATUS_DELETED),
      addedRowsCount: rows(STATUS_ADDED),
      existingRowsCount: rows(STATUS_EXISTING),
      deletedRowsCount: rows(STATUS_DELETED),
      partitions: hourSummary(entries),
    };
  }

  /** `<epoch ms>-<random hex>`: metadata file names carry their write time, which the orphan sweep reads. */
  private stamp(): string {
    return `${String(this.now()).padStart(13, '0')}-${randomHex(8)}`;
  }

  private async commit(
    operation: 'append' | 'replace' | 'delete' | 'overwrite',
    added: readonly TableFile[],
    removedKeys: readonly string[],
    throughBatchId: string | undefined,
  ): Promise<CommitResult> {
    const addedFiles = added.map((f) => this.dataFileOf(f));
    const addedUris = new Set(addedFiles.map((f) => f.filePath));
    if (addedUris.size !== addedFiles.length)
      throw new IcebergConflictError('the same file is added twice in one commit');
    const removedUris = new Set(removedKeys.map((k) => this.uriOf(k)));

    for (let attempt = 1; attempt <= this.maxAttempts; attempt++) {
      const base = await this.load();
      const version = (base?.version ?? 0) + 1;
      const meta = base?.metadata ?? this.freshMetadata();
      const parent = currentSnapshot(meta);
      const parentManifests = parent ? await this.manifestsOf(parent) : [];

      // Validate against the version this attempt builds on (spec "Commit Conflict Resolution and Retry").
      const live = await this.liveFiles(parent);
      for (const uri of removedUris)
        if (!live.has(uri)) throw new IcebergConflictError(`${this.keyOf(uri)} is not in the table's current snapshot`);
      for (const uri of addedUris)
        if (live.has(uri) && !(operation === 'overwrite' && removedUris.has(uri)))
          throw new IcebergConflictError(`${this.keyOf(uri)} is already in the table`);

      const snapshotId = newSnapshotId(new Set(meta.snapshots.map((s) => s['snapshot-id'])));
      const seq = meta['last-sequence-number'] + 1;
      const written: string[] = [];
      const now = this.now();
      let metadataCreateStarted = false;
      try {
        const list: ManifestFile[] = [];
        if (addedFiles.length > 0) {
          // New entries carry the snapshot id; sequence numbers are inherited from the list record.
          list.push(
            await this.putManifest(
              addedFiles.map((dataFile) => ({
                status: STATUS_ADDED,
                snapshotId,
                sequenceNumber: null,
                fileSequenceNumber: null,
                dataFile,
              })),
              snapshotId,
              seq,
              written,
            ),
          );
        }
        const carried: ManifestFile[] = [];
        const carriedEntries: ManifestEntry[] = [];
        for (const m of parentManifests) {
          const entries = (await this.entriesOf(m)).filter((e) => e.status !== STATUS_DELETED);
          if (entries.length === 0) continue; // only deletions left: not needed by this snapshot
          if (!entries.some((e) => removedUris.has(e.dataFile.filePath))) {
            carried.push(m);
            carriedEntries.push(...entries);
            continue;
          }
          // Rewrite: removed files become DELETED by this snapshot, the rest EXISTING; both keep their sequence numbers.
          const rewritten = entries.map((e): ManifestEntry =>
            removedUris.has(e.dataFile.filePath)
              ? { ...e, status: STATUS_DELETED, snapshotId }
              : { ...e, status: STATUS_EXISTING },
          );
          list.push(await this.putManifest(rewritten, snapshotId, seq, written));
        }
        if (list.length + carried.length > this.mergeAbove && carried.length > 1) {
          list.push(
            await this.putManifest(
              carriedEntries.map((e) => ({ ...e, status: STATUS_EXISTING })),
              snapshotId,
              seq,
              written,
            ),
          );
        } else {
          list.push(...carried);
        }

        const listKey = this.metadataKey(`snap-${snapshotId}-${this.stamp()}.avro`);
        const listBytes = await writeManifestList(list, {
          snapshotId,
          parentSnapshotId: parent?.['snapshot-id'] ?? null,
          sequenceNumber: seq,
        });
        written.push(listKey);
        await this.store.putBytes(listKey, listBytes, { contentType: AVRO_TYPE });

        const removedFiles = [...removedUris].map((u) => (live.get(u) as LiveFile).entry.dataFile);
        const after = [...live.values()]
          .map((l) => l.entry.dataFile)
          .filter((f) => !removedUris.has(f.filePath))
          .concat(addedFiles);
        const snapshot: Snapshot = {
          'snapshot-id': snapshotId,
          ...(parent ? { 'parent-snapshot-id': parent['snapshot-id'] } : {}),
          'sequence-number': seq,
          'timestamp-ms': now,
          'manifest-list': this.uriOf(listKey),
          summary: summaryOf(
            operation,
            addedFiles,
            removedFiles,
            after,
            throughBatchId ?? parent?.summary[THROUGH_BATCH_ID],
          ),
          'schema-id': EVENTS_SCHEMA['schema-id'],
        };
        const next: TableMetadata = {
          ...meta,
          'last-sequence-number': seq,
          'last-updated-ms': now,
          'current-snapshot-id': snapshotId,
          snapshots: [...meta.snapshots, snapshot],
          'snapshot-log': [...meta['snapshot-log'], { 'timestamp-ms': now, 'snapshot-id': snapshotId }],
          'metadata-log': base
            ? [
                ...meta['metadata-log'],
                {
                  'timestamp-ms': meta['last-updated-ms'],
                  'metadata-file': this.uriOf(this.metadataKey(`v${base.version}.metadata.json`)),
                },
              ].slice(-this.metadataLogMax)
            : [],
          refs: { ...meta.refs, main: { 'snapshot-id': snapshotId, type: 'branch' } },
        };
        if (this.beforeMetadataCreate) await this.beforeMetadataCreate(version);
        metadataCreateStarted = true;
        if (
          await this.createIfAbsent(this.metadataKey(`v${version}.metadata.json`), encodeJson(next), {
            contentType: JSON_TYPE,
          })
        ) {
          return {
            version,
            snapshotId,
            sequenceNumber: seq,
            attempts: attempt,
            hintWritten: await this.writeHint(version),
          };
        }
      } catch (err) {
        // Before the create started nothing references these files: remove them. Once it started, the
        // outcome is unknown (a create may have landed): leave them to cleanOrphans, which checks.
        if (!metadataCreateStarted) await this.deleteQuietly(written);
        throw err;
      }
      // Lost the race: v<version> is someone else's. Nothing references what this attempt wrote.
      await this.deleteQuietly(written);
    }
    throw new IcebergCommitRaceError(
      `${this.prefix}: lost the race for the next metadata version ${this.maxAttempts} times`,
    );
  }

  private async writeHint(version: number): Promise<boolean> {
    try {
      await this.store.putBytes(this.metadataKey('version-hint.text'), new TextEncoder().encode(String(version)), {
        contentType: 'text/plain',
      });
      return true;
    } catch (err) {
      // Committed all the same: loaders probe past a stale hint, and the next commit rewrites it.
      this.onQuietFailure?.('version_hint', err);
      return false;
    }
  }

  private async deleteQuietly(keys: readonly string[]): Promise<void> {
    if (keys.length === 0 || !this.store.deleteKeys) return;
    try {
      await this.store.deleteKeys(keys);
    } catch (err) {
      // Unreferenced files: cleanOrphans removes them on a later pass.
      this.onQuietFailure?.('cleanup', err);
    }
  }

  // ---- maintenance ----

  /**
   * Expires snapshots replaced at or before `olderThanMs` (by the next snapshot's commit; the
   * current one and the newest `retainLast` are always kept; spec "Snapshot Retention Policy",
   * with the age counted from the replacement), as a new metadata version. Deletes the
   * manifests and manifest lists only expired snapshots referenced, and returns the data files no
   * retained snapshot references, for the caller to delete from the store.
   */
  async expireSnapshots(olderThanMs: number, o: { retainLast?: number } = {}): Promise<ExpireResult> {
    const retainLast = Math.max(1, o.retainLast ?? 1);
    for (let attempt = 1; attempt <= this.maxAttempts; attempt++) {
      const base = await this.load();
      if (!base) return { expiredSnapshotIds: [], unreferencedDataKeys: [], deletedMetadataFiles: 0, version: null };
      const meta = base.metadata;
      const bySeq = [...meta.snapshots].sort((a, b) => a['sequence-number'] - b['sequence-number']);
      const keep = new Set<number>(bySeq.slice(-retainLast).map((s) => s['snapshot-id']));
      if (meta['current-snapshot-id'] !== undefined) keep.add(meta['current-snapshot-id']);
      // A snapshot's age counts from when the next one replaced it (not from its own commit): a reader
      // that loaded the current snapshot, however old, has the whole retention once a commit supersedes it.
      bySeq.forEach((s, i) => {
        const replacedAt = bySeq[i + 1]?.['timestamp-ms'];
        if (replacedAt === undefined || replacedAt > olderThanMs) keep.add(s['snapshot-id']);
      });
      const expired = bySeq.filter((s) => !keep.has(s['snapshot-id']));
      if (expired.length === 0)
        return { expiredSnapshotIds: [], unreferencedDataKeys: [], deletedMetadataFiles: 0, version: base.version };
      const retained = bySeq.filter((s) => keep.has(s['snapshot-id']));

      const retainedData = new Set<string>();
      const retainedMeta = new Set<string>();
      for (const s of retained) {
        retainedMeta.add(s['manifest-list']);
        for (const m of await this.manifestsOf(s)) retainedMeta.add(m.manifestPath);
        for (const uri of (await this.liveFiles(s)).keys()) retainedData.add(uri);
      }
      const freedData = new Set<string>();
      const freedMeta = new Set<string>();
      for (const s of expired) {
        if (!retainedMeta.has(s['manifest-list'])) freedMeta.add(s['manifest-list']);
        for (const m of await this.manifestsOf(s)) if (!retainedMeta.has(m.manifestPath)) freedMeta.add(m.manifestPath);
        for (const uri of (await this.liveFiles(s)).keys()) if (!retainedData.has(uri)) freedData.add(uri);
      }

      const expiredIds = new Set(expired.map((s) => s['snapshot-id']));
      const log = meta['snapshot-log'];
      let lastExpired = -1;
      log.forEach((e, i) => {
        if (expiredIds.has(e['snapshot-id'])) lastExpired = i;
      });
      const now = this.now();
      const next: TableMetadata = {
        ...meta,
        'last-updated-ms': now,
        snapshots: meta.snapshots.filter((s) => keep.has(s['snapshot-id'])),
        'snapshot-log': log.slice(lastExpired + 1),
        'metadata-log': [
          ...meta['metadata-log'],
          {
            'timestamp-ms': meta['last-updated-ms'],
            'metadata-file': this.uriOf(this.metadataKey(`v${base.version}.metadata.json`)),
          },
        ].slice(-this.metadataLogMax),
      };
      const version = base.version + 1;
      if (
        await this.createIfAbsent(this.metadataKey(`v${version}.metadata.json`), encodeJson(next), {
          contentType: JSON_TYPE,
        })
      ) {
        await this.writeHint(version);
        const metaKeys = [...freedMeta].map((u) => this.keyOf(u));
        if (metaKeys.length > 0 && this.store.deleteKeys) await this.store.deleteKeys(metaKeys);
        for (const u of freedMeta) {
          this.manifestCache.delete(u);
          this.listCache.delete(u);
        }
        return {
          expiredSnapshotIds: expired.map((s) => s['snapshot-id']),
          unreferencedDataKeys: [...freedData].map((u) => this.keyOf(u)),
          deletedMetadataFiles: metaKeys.length,
          version,
        };
      }
    }
    throw new IcebergCommitRaceError(
      `${this.prefix}: lost the race for the next metadata version ${this.maxAttempts} times`,
    );
  }

  /**
   * Deletes manifests and manifest lists that no snapshot of the current version references and
   * that were written more than `graceMs` ago (younger ones may belong to a commit in flight):
   * what a committer that crashed, or whose metadata create failed, left behind. Returns the keys deleted.
   */
  async cleanOrphans(graceMs: number): Promise<string[]> {
    const base = await this.load();
    const referenced = new Set<string>();
    for (const s of base?.metadata.snapshots ?? []) {
      referenced.add(this.keyOf(s['manifest-list']));
      for (const m of await this.manifestsOf(s)) referenced.add(this.keyOf(m.manifestPath));
    }
    const cutoff = this.now() - graceMs;
    const orphans: string[] = [];
    let startAfter: string | undefined;
    // Bounded: pages of 1,000 until the listing ends.
    for (;;) {
      const page = await this.store.listKeys(this.metadataKey(''), { startAfter, limit: 1000 });
      for (const key of page) {
        const m = ORPHAN_NAME_RE.exec(key);
        if (m && Number(m[1]) <= cutoff && !referenced.has(key)) orphans.push(key);
      }
      if (page.length < 1000) break;
      startAfter = page[page.length - 1];
    }
    if (orphans.length > 0 && this.store.deleteKeys) await this.store.deleteKeys(orphans);
    return orphans;
  }
}

/** The current snapshot of a metadata version, if any. */
export function currentSnapshot(meta: TableMetadata): Snapshot | undefined {
  const id = meta['current-snapshot-id'];
  return id === undefined || id < 0 ? undefined : meta.snapshots.find((s) => s['snapshot-id'] === id);
}

/** The snapshot that was current at `timestampMs` (spec Appendix F, "Point in Time Reads": by the snapshot log). */
export function snapshotAsOf(meta: TableMetadata, timestampMs: number): Snapshot | undefined {
  let id: number | undefined;
  for (const e of meta['snapshot-log']) if (e['timestamp-ms'] <= timestampMs) id = e['snapshot-id'];
  return id === undefined ? undefined : meta.snapshots.find((s) => s['snapshot-id'] === id);
}

function encodeJson(v: unknown): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(v));
}

/** Snapshot summary: the operation, the spec's optional metrics (Appendix F) and our through-batch-id. */
function summaryOf(
  operation: string,
  added: readonly DataFile[],
  removed: readonly DataFile[],
  after: readonly DataFile[],
  throughBatchId: string | undefined,
): Snapshot['summary'] {
  const sum = (fs: readonly DataFile[], f: (d: DataFile) => number): string => String(fs.reduce((n, d) => n + f(d), 0));
  const rows = (d: DataFile): number => d.recordCount;
  const bytes = (d: DataFile): number => d.fileSizeInBytes;
  const summary: Snapshot['summary'] = {
    operation,
    'added-data-files': String(added.length),
    'deleted-data-files': String(removed.length),
    'added-records': sum(added, rows),
    'deleted-records': sum(removed, rows),
    'added-files-size': sum(added, bytes),
    'removed-files-size': sum(removed, bytes),
    'changed-partition-count': String(new Set([...added, ...removed].map((d) => d.hour)).size),
    'total-data-files': String(after.length),
    'total-records': sum(after, rows),
    'total-files-size': sum(after, bytes),
    'total-delete-files': '0',
    'total-position-deletes': '0',
    'total-equality-deletes': '0',
  };
  if (throughBatchId !== undefined) summary[THROUGH_BATCH_ID] = throughBatchId;
  return summary;
}
