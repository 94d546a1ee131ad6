/**
 * The Iceberg committer (ICEBERG=on): one table per list prefix (collection + app,
 * shared/iceberg/table.ts), committed by the rollup service every ICEBERG_COMMIT_SECONDS. Each
 * pass over a prefix runs under the prefix's rollup lock (shared/redis/rollup-keys.ts: 10 s TTL,
 * renewed by the live holder, so a killed process's lock expires and any other rollup process
 * commits next; roll jobs and retention take the same lock, so the rollup manifest cannot change
 * under a pass). A pass:
 *
 * 1. **append**: the batch files after the current snapshot's `events-ingest.through-batch-id`, in
 *    id order, never past the list watermark (the ledger's bound, as the list route reads it); a
 *    rolled period the table holds nothing of goes in as its rollup files (its batch files may be
 *    gone to raw retention). The snapshot's through-batch-id is the last id taken.
 * 2. **replace**: each rolled period whose batch ids the table has all taken (its rollup files'
 *    last id is at or below through-batch-id) and whose files in the table differ from the rollup
 *    manifest's: the period's files out, the manifest's in, one snapshot.
 * 3. **delete** (RETENTION_DAYS): files of periods that whole-period retention drops.
 * 4. **expire**: snapshots replaced more than ICEBERG_SNAPSHOT_RETENTION_SECONDS ago; the data files no
 *    retained snapshot references are deleted from the store once the rollup side is done with
 *    them (raw retention passed them, or the manifest no longer lists them).
 *
 * While ICEBERG=on, the rollup side deletes a file only when {@link IcebergCommitter.mayDelete}
 * says so (RollContext.mayDelete): no retained snapshot references it, and for a batch file the
 * table has taken it already. Whichever side sees both conditions last deletes it.
 */
import type { Registry } from 'prom-client';
import { batchIdMs } from '../../shared/ids.js';
import { throttledWarn } from '../../shared/logger.js';
import { parquetFacts } from '../../shared/iceberg/parquet-footer.js';
import {
  IcebergTable,
  type Snapshot,
  THROUGH_BATCH_ID,
  type TableFile,
  batchTableFile,
  currentSnapshot,
  rollupTableFile,
  storeRootUri,
  tableAppName,
} from '../../shared/iceberg/table.js';
import { visibleUnder } from '../../shared/ledger/ledger.js';
import { batchIdOfKey, periodStart, rollupFileFirstId } from '../../shared/rollup/layout.js';
import { type Manifest, type RollupPeriod, manifestFiles, readManifest } from '../../shared/rollup/manifest.js';
import { discoverPrefixes, prefixOfKey } from '../../shared/rollup/prefixes.js';
import type { PrefixLock } from '../../shared/redis/rollup-keys.js';
import { requireCreateIfAbsent } from '../../shared/store/optional.js';
import type { CreateIfAbsent } from '../../shared/store/types.js';
import { type RollupDeps, assertLayout, ledgerOf, takePrefixLock } from './context.js';
import { type IcebergMetrics, createIcebergMetrics } from './metrics.js';
import type { CollectionTemplate } from './planner.js';

/** Data files one append takes at most (the next pass takes the rest). */
export const MAX_FILES_PER_COMMIT = 5000;
/** Store listing pages (of 1,000 keys) one append reads at most. */
const MAX_PAGES = 20;
/** Metadata versions kept (the metadata log's length, IcebergTableOptions.metadataLogMax's default). */
export const METADATA_VERSIONS_KEPT = 100;
/** Parallel footer reads for an append's row counts. */
const FACTS_CONCURRENCY = 16;

export interface IcebergCommitterOptions {
  templates: readonly CollectionTemplate[];
  /** The list prefixes to commit (the planner's known prefixes). */
  prefixes: () => Iterable<string>;
  registry: Registry;
  /** Test hook: the exclusive create (default: the store's own, ObjectStore.createIfAbsent). */
  createIfAbsent?: CreateIfAbsent;
}

/** What one pass over a prefix did. */
export interface PrefixPass {
  /** Another holder had the prefix lock: nothing was done. */
  busy: boolean;
  appended: number;
  replaced: number;
  deleted: number;
  expired: number;
}

/** The period start of a data file key of `prefix` (a batch file's id, a rollup file's first id), or null. */
export function periodOfKey(prefix: string, key: string, periodMs: number): number | null {
  const id = batchIdOfKey(prefix, key) ?? rollupFileFirstId(key);
  return id === null ? null : periodStart(batchIdMs(id), periodMs);
}

/**
 * True when the rollup side is done with `key` (so expiry may delete it): a rollup file the
 * manifest no longer lists; a batch file raw retention has passed, or of a rolled period that
 * whole-period retention dropped.
 */
export function releasedByRollup(prefix: string, manifest: Manifest | null, key: string, periodMs: number): boolean {
  if (!manifest) return false;
  const id = batchIdOfKey(prefix, key);
  if (id === null) return rollupFileFirstId(key) !== null && !manifestFiles(manifest).includes(key);
  const start = periodStart(batchIdMs(id), periodMs);
  const period = manifest.periods.find((p) => p.startMs === start);
  if (period) return period.rawDeletedThrough !== '' && id <= period.rawDeletedThrough;
  return start + periodMs <= manifest.watermarkMs;
}

/** Of a table's metadata keys, the versions older than the metadata log of version `current` names (the newest METADATA_VERSIONS_KEPT before it). */
export function droppedMetadataKeys(keys: readonly string[], current: number): string[] {
  return keys.filter((k) => {
    const m = /\/v(\d+)\.metadata\.json$/.exec(k);
    return m !== null && Number(m[1]) < current - METADATA_VERSIONS_KEPT;
  });
}

export class IcebergCommitter {
  readonly metrics: IcebergMetrics;
  private readonly tables = new Map<string, IcebergTable>();
  /** Per prefix: when its table last held every batch the list showed (the lag gauge). */
  private readonly caughtUpAt = new Map<string, number>();
  private readonly createIfAbsent: CreateIfAbsent;
  private readonly rootUri: string;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  /** Work a table gave up without failing its commit (IcebergTableOptions.onQuietFailure): counted, logged at most every 5 s per kind. */
  private readonly quietFailure: (what: 'version_hint' | 'cleanup', err: unknown) => void;

  constructor(
    private readonly deps: RollupDeps,
    private readonly o: IcebergCommitterOptions,
  ) {
    const { store } = deps;
    this.metrics = createIcebergMetrics(o.registry, {
      intervalSeconds: deps.env.ICEBERG_COMMIT_SECONDS,
      lagSeconds: () => this.lagSeconds(),
    });
    this.rootUri = storeRootUri(store);
    // The store's own conditional create, through its own client and credentials; a store without one fails here, at start-up.
    this.createIfAbsent = o.createIfAbsent ?? requireCreateIfAbsent(store);
    const warns = {
      version_hint: throttledWarn(deps.logger, 'iceberg: version-hint.text not rewritten after a commit'),
      cleanup: throttledWarn(
        deps.logger,
        'iceberg: files of a lost or failed commit not deleted (the orphan sweep takes them)',
      ),
    };
    this.quietFailure = (what, err) => {
      this.metrics.failures.inc({ stage: what });
      warns[what]({ err: (err as Error).message });
    };
  }

  private get periodMs(): number {
    return this.deps.env.ROLLUP_PERIOD_SECONDS * 1000;
  }

  /** The table of `prefix`, or null when the prefix belongs to no collection. */
  tableOf(prefix: string): IcebergTable | null {
    const known = this.tables.get(prefix);
    if (known) return known;
    for (const c of this.o.templates) {
      const hit = prefixOfKey(c.template, `${prefix}x`);
      if (hit?.prefix !== prefix) continue;
      const table = new IcebergTable({
        store: this.deps.store,
        collection: c.name,
        app: tableAppName(hit.params),
        rootUri: this.rootUri,
        createIfAbsent: this.createIfAbsent,
        onQuietFailure: this.quietFailure,
        beforeMetadataCreate: this.testCommitDelay(prefix),
      });
      this.tables.set(prefix, table);
      return table;
    }
    return null;
  }

  /**
   * Test-only (ICEBERG_TEST_COMMIT_DELAY_MS, 0 by default: no hook): a commit logs that its
   * manifests are written, then waits before creating the metadata version, so the acceptance
   * harness (scripts/iceberg-acceptance.ts) can `kill -9` this process in the middle of a commit.
   */
  private testCommitDelay(prefix: string): ((version: number) => Promise<void>) | undefined {
    const ms = this.deps.env.ICEBERG_TEST_COMMIT_DELAY_MS;
    if (!ms) return undefined;
    return async (version) => {
      this.deps.logger.info(
        { prefix, version, ms },
        'iceberg: test commit delay: manifests written, metadata not yet created',
      );
      await new Promise((r) => setTimeout(r, ms));
    };
  }

  /** Runs a pass now and then every ICEBERG_COMMIT_SECONDS, one at a time. */
  start(): void {
    const tick = (): void => {
      if (this.stopped) return;
      this.running = this.passOnce().finally(() => {
        this.running = undefined;
        if (!this.stopped) {
          this.timer = setTimeout(tick, this.deps.env.ICEBERG_COMMIT_SECONDS * 1000);
          this.timer.unref();
        }
      });
    };
    tick();
  }

  /** Stops the loop; resolves once the pass still running (if any) is over. */
  stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    return this.running ?? Promise.resolve();
  }

  /** One pass over every known prefix (never rejects: failures are counted and logged per prefix). */
  async passOnce(nowMs = Date.now()): Promise<void> {
    const prefixes = await this.prefixes();
    // A prefix no longer listed anywhere has nothing to commit: it stops counting in the lag.
    for (const p of this.caughtUpAt.keys()) if (!prefixes.includes(p)) this.caughtUpAt.delete(p);
    for (const prefix of prefixes) {
      if (this.stopped) break;
      try {
        await this.commitPrefix(prefix, nowMs);
      } catch (err) {
        this.metrics.failures.inc({ stage: 'commit' });
        this.deps.logger.warn({ prefix, err: (err as Error).message }, 'iceberg commit failed for a prefix');
      }
    }
  }

  /** Seconds since the table furthest behind last held every batch the list showed (0 with no tables). */
  lagSeconds(nowMs = Date.now()): number {
    let lag = 0;
    for (const at of this.caughtUpAt.values()) lag = Math.max(lag, (nowMs - at) / 1000);
    return lag;
  }

  /**
   * The prefixes to commit: the planner's, and the store's own (a skip scan, one listing call per
   * prefix), so a new app's table starts within a commit interval rather than at the planner's
   * next discovery (up to 5 minutes).
   */
  private async prefixes(): Promise<string[]> {
    const all = new Set(this.o.prefixes());
    try {
      for (const t of this.o.templates)
        for (const p of await discoverPrefixes(this.deps.store, t.template, { root: 'batches' })) all.add(p);
    } catch (err) {
      this.deps.logger.warn(
        { err: (err as Error).message },
        'iceberg: listing prefixes failed; committing the known ones',
      );
    }
    return [...all].sort();
  }

  /** One pass over `prefix` under its lock (see the module comment). */
  async commitPrefix(prefix: string, nowMs = Date.now()): Promise<PrefixPass> {
    const out: PrefixPass = { busy: false, appended: 0, replaced: 0, deleted: 0, expired: 0 };
    const table = this.tableOf(prefix);
    if (!table) return out;
    const lock = await takePrefixLock(this.deps, prefix, 'iceberg');
    if (!lock) return { ...out, busy: true };
    try {
      await assertLayout(this.deps);
      const swept = this.sweptAt.get(prefix);
      if (swept === undefined || nowMs - swept >= Math.max(600_000, 10 * this.deps.env.ICEBERG_COMMIT_SECONDS * 1000)) {
        await this.sweepOrphans(prefix, table);
        this.sweptAt.set(prefix, nowMs);
      }
      const manifest = await readManifest(this.deps.store, prefix);
      out.appended = await this.appendNew(prefix, table, manifest, lock);
      out.replaced = await this.replaceRolled(prefix, table, manifest, lock);
      out.deleted = await this.deleteOld(table, prefix, manifest, lock, nowMs);
      out.expired = await this.expire(prefix, table, manifest, lock, nowMs);
      await this.pruneMetadata(prefix, table);
      return out;
    } finally {
      await lock.release();
    }
  }

  /** Per prefix: when this process last swept its orphan metadata files (on its first pass, then every ten intervals, at least 10 minutes). */
  private readonly sweptAt = new Map<string, number>();
  /** Per prefix: the data files the retained snapshots of one metadata version reference (mayDelete; versions are immutable). */
  private readonly referenced = new Map<string, { version: number; keys: Set<string> }>();

  /** Manifests and lists a crashed or failed commit left (older than two intervals, at least a minute). */
  private async sweepOrphans(prefix: string, table: IcebergTable): Promise<void> {
    try {
      const removed = await table.cleanOrphans(Math.max(60_000, 2 * this.deps.env.ICEBERG_COMMIT_SECONDS * 1000));
      if (removed.length > 0)
        this.deps.logger.info(
          { prefix, files: removed.length },
          'iceberg: orphan metadata files of failed commits deleted',
        );
    } catch (err) {
      this.metrics.failures.inc({ stage: 'orphans' });
      this.deps.logger.warn({ prefix, err: (err as Error).message }, 'iceberg orphan sweep failed');
    }
  }

  /**
   * Metadata versions that left the metadata log (all but the newest METADATA_VERSIONS_KEPT) are
   * deleted, as Iceberg's `write.metadata.delete-after-commit` does: one is written per commit,
   * so they would otherwise pile up. A catalog that registered one must be pointed at a newer one
   * before then (docs/analysts.md).
   */
  private async pruneMetadata(prefix: string, table: IcebergTable): Promise<void> {
    if (!this.deps.store.deleteKeys) return;
    try {
      const current = await table.currentVersion();
      const old = droppedMetadataKeys(
        await this.deps.store.listKeys(table.metadataKey('v'), { limit: 100_000 }),
        current,
      );
      if (old.length > 0) await this.deps.store.deleteKeys(old);
    } catch (err) {
      this.metrics.failures.inc({ stage: 'expire' });
      this.deps.logger.warn({ prefix, err: (err as Error).message }, 'iceberg: deleting old metadata versions failed');
    }
  }

  private async assertHeld(prefix: string, lock: PrefixLock): Promise<void> {
    if (!(await lock.held())) throw new Error(`lost the rollup lock of ${prefix}`);
  }

  /** Step 1: the append (see the module comment); returns the files added. */
  private async appendNew(
    prefix: string,
    table: IcebergTable,
    manifest: Manifest | null,
    lock: PrefixLock,
  ): Promise<number> {
    const { store } = this.deps;
    const periodMs = this.periodMs;
    const listedAt = Date.now();
    if (!this.caughtUpAt.has(prefix)) this.caughtUpAt.set(prefix, listedAt);
    const loaded = await table.load();
    const cur = loaded ? currentSnapshot(loaded.metadata) : undefined;
    const through = cur?.summary[THROUGH_BATCH_ID];
    const throughMs = through === undefined ? -1 : batchIdMs(through);
    const livePeriods = new Set<number>();
    for (const key of await table.dataKeys(cur)) {
      const p = periodOfKey(prefix, key, periodMs);
      if (p !== null) livePeriods.add(p);
    }
    // Rolled periods wholly past through-batch-id that the table holds nothing of: taken as their rollup files.
    const rolled = (manifest?.periods ?? []).filter(
      (p) =>
        p.files.length > 0 &&
        p.endMs <= (manifest?.watermarkMs ?? 0) &&
        p.startMs > throughMs &&
        !livePeriods.has(p.startMs),
    );
    const rolledAt = new Map(rolled.map((p) => [p.startMs, p]));
    const bound = await ledgerOf(this.deps, prefix).listBound(prefix);

    type Item = { key: string; id: string } | { period: RollupPeriod };
    const items: Item[] = [];
    const taken = new Set<number>();
    let last = through;
    let count = 0;
    const takePeriod = (p: RollupPeriod): void => {
      if (taken.has(p.startMs)) return;
      taken.add(p.startMs);
      items.push({ period: p });
      count += p.files.length;
      const lastId = p.files.reduce((m, f) => (f.lastId > m ? f.lastId : m), '');
      if (last === undefined || lastId > last) last = lastId;
    };
    // Periods with no batch file left come in order before the first key past them.
    const takePeriodsBefore = (ms: number): void => {
      for (const p of rolled) if (p.endMs <= ms) takePeriod(p);
    };
    let full = false;
    let endOfList = false;
    let startAfter = through === undefined ? undefined : `${prefix}${through}.parquet`;
    scan: for (let page = 0; page < MAX_PAGES; page++) {
      const keys = await store.listKeys(prefix, { startAfter, limit: 1000 });
      for (const key of keys) {
        const id = batchIdOfKey(prefix, key);
        if (id === null) continue;
        if (!visibleUnder(bound, id)) {
          endOfList = true;
          break scan;
        }
        const ms = batchIdMs(id);
        takePeriodsBefore(ms);
        const period = rolledAt.get(periodStart(ms, periodMs));
        if (period) {
          takePeriod(period);
        } else {
          items.push({ key, id });
          count++;
          if (last === undefined || id > last) last = id;
        }
        if (count >= MAX_FILES_PER_COMMIT) {
          full = true;
          break scan;
        }
      }
      if (keys.length < 1000) {
        endOfList = true;
        break;
      }
      startAfter = keys[keys.length - 1];
    }
    // Rolled periods are final, so all below the list bound: at the end of the list every one is due.
    if (endOfList && !full) for (const p of rolled) takePeriod(p);
    if (items.length === 0 || last === undefined) {
      this.caughtUpAt.set(prefix, listedAt);
      return 0;
    }

    const files = await this.tableFiles(items);
    await this.assertHeld(prefix, lock);
    await this.timed('append', files, () => table.append(files, { throughBatchId: last }));
    if (!full) this.caughtUpAt.set(prefix, listedAt);
    return files.length;
  }

  /** Table entries of an append's items: batch files with their footers' row counts, rollup files from the manifest. */
  private async tableFiles(
    items: readonly ({ key: string; id: string } | { period: RollupPeriod })[],
  ): Promise<TableFile[]> {
    const out: (TableFile | TableFile[] | undefined)[] = new Array(items.length);
    let next = 0;
    const worker = async (): Promise<void> => {
      for (let i = next++; i < items.length; i = next++) {
        const item = items[i] as { key: string; id: string } | { period: RollupPeriod };
        if ('period' in item) {
          out[i] = item.period.files.map(rollupTableFile);
          continue;
        }
        const facts = await parquetFacts(this.deps.store, item.key);
        if (!facts) throw new Error(`${item.key} is listed but missing from the store`);
        out[i] = batchTableFile(item.key, item.id, facts.recordCount, facts.fileSizeInBytes);
      }
    };
    await Promise.all(Array.from({ length: Math.min(FACTS_CONCURRENCY, items.length) }, worker));
    return out.flatMap((f) => (f === undefined ? [] : Array.isArray(f) ? f : [f]));
  }

  /** Step 2: rolled periods the table has fully taken get their manifest's files, in one replace; returns the periods replaced. */
  private async replaceRolled(
    prefix: string,
    table: IcebergTable,
    manifest: Manifest | null,
    lock: PrefixLock,
  ): Promise<number> {
    if (!manifest) return 0;
    const loaded = await table.load();
    const cur = loaded ? currentSnapshot(loaded.metadata) : undefined;
    const through = cur?.summary[THROUGH_BATCH_ID];
    if (!cur || through === undefined) return 0;
    const byPeriod = await this.liveByPeriod(prefix, table, cur);
    const remove: string[] = [];
    const add: TableFile[] = [];
    let periods = 0;
    let removedRows = 0;
    for (const p of manifest.periods) {
      if (p.files.length === 0 || p.files.some((f) => f.lastId > through)) continue;
      const want = new Set(p.files.map((f) => f.key));
      const have = byPeriod.get(p.startMs) ?? new Map<string, number>();
      const out = [...have.keys()].filter((k) => !want.has(k));
      const inn = p.files.filter((f) => !have.has(f.key));
      if (out.length === 0 && inn.length === 0) continue;
      if (out.length === 0 || inn.length === 0) {
        // Not a rollup of what the table holds (files the table never took, or batches no rollup covers): left as is.
        this.deps.logger.warn(
          { prefix, startMs: p.startMs, remove: out.length, add: inn.length },
          'iceberg: rolled period does not match the table; not replaced',
        );
        continue;
      }
      remove.push(...out);
      add.push(...inn.map(rollupTableFile));
      removedRows += out.reduce((n, k) => n + (have.get(k) ?? 0), 0);
      periods++;
    }
    if (periods === 0) return 0;
    const addedRows = add.reduce((n, f) => n + f.recordCount, 0);
    if (addedRows !== removedRows)
      this.deps.logger.warn(
        { prefix, removedRows, addedRows },
        'iceberg: a replace changes the row count (a re-roll took a replayed batch)',
      );
    await this.assertHeld(prefix, lock);
    await this.timed('replace', add, () => table.replace(remove, add));
    return periods;
  }

  /** Live data files of a snapshot by period start: key → rows. */
  private async liveByPeriod(
    prefix: string,
    table: IcebergTable,
    snap: Snapshot,
  ): Promise<Map<number, Map<string, number>>> {
    const out = new Map<number, Map<string, number>>();
    for (const [uri, live] of await table.liveFiles(snap)) {
      const key = table.keyOf(uri);
      const p = periodOfKey(prefix, key, this.periodMs);
      if (p === null) continue;
      let m = out.get(p);
      if (!m) out.set(p, (m = new Map()));
      m.set(key, live.entry.dataFile.recordCount);
    }
    return out;
  }

  /** Step 3 (RETENTION_DAYS): a delete snapshot of the files of periods whole-period retention drops (periodsPastRetention's rule). */
  private async deleteOld(
    table: IcebergTable,
    prefix: string,
    manifest: Manifest | null,
    lock: PrefixLock,
    nowMs: number,
  ): Promise<number> {
    const days = this.deps.env.RETENTION_DAYS;
    if (days === undefined || !manifest) return 0;
    const cutoff = Math.min(nowMs - days * 86_400_000, manifest.watermarkMs);
    const keys = (await table.dataKeys()).filter((k) => {
      const p = periodOfKey(prefix, k, this.periodMs);
      return p !== null && p + this.periodMs <= cutoff;
    });
    if (keys.length === 0) return 0;
    await this.assertHeld(prefix, lock);
    await this.timed('delete', [], () => table.delete(keys));
    return keys.length;
  }

  /** Step 4: snapshot expiry, then the freed data files the rollup side is done with leave the store. */
  private async expire(
    prefix: string,
    table: IcebergTable,
    manifest: Manifest | null,
    lock: PrefixLock,
    nowMs: number,
  ): Promise<number> {
    let r;
    try {
      await this.assertHeld(prefix, lock);
      r = await table.expireSnapshots(nowMs - this.deps.env.ICEBERG_SNAPSHOT_RETENTION_SECONDS * 1000);
    } catch (err) {
      this.metrics.failures.inc({ stage: 'expire' });
      this.deps.logger.warn({ prefix, err: (err as Error).message }, 'iceberg snapshot expiry failed');
      return 0;
    }
    if (r.expiredSnapshotIds.length === 0) return 0;
    this.metrics.commits.inc({ operation: 'expire' });
    const gone = r.unreferencedDataKeys.filter((k) => releasedByRollup(prefix, manifest, k, this.periodMs));
    if (gone.length > 0 && this.deps.store.deleteKeys) {
      await this.deps.store.deleteKeys(gone);
      this.metrics.dataDeleted.inc(gone.length);
    }
    this.deps.logger.info(
      {
        prefix,
        snapshots: r.expiredSnapshotIds.length,
        metadataFiles: r.deletedMetadataFiles,
        dataFiles: gone.length,
        kept: r.unreferencedDataKeys.length - gone.length,
      },
      'iceberg: snapshots expired',
    );
    return r.expiredSnapshotIds.length;
  }

  private async timed(
    operation: 'append' | 'replace' | 'delete',
    added: readonly TableFile[],
    commit: () => Promise<unknown>,
  ): Promise<void> {
    const t0 = performance.now();
    await commit();
    this.metrics.duration.observe({ operation }, (performance.now() - t0) / 1000);
    this.metrics.commits.inc({ operation });
    this.metrics.files.observe({ operation }, added.length);
    this.metrics.rows.observe(
      { operation },
      added.reduce((n, f) => n + f.recordCount, 0),
    );
  }

  /**
   * Which of `keys` (of `prefix`) may leave the store now: none that a retained snapshot
   * references, and no batch file the table has not taken yet (past its through-batch-id).
   * Called by roll jobs and retention under the prefix lock, so no pass of this prefix runs.
   */
  readonly mayDelete = async (prefix: string, keys: readonly string[]): Promise<readonly string[]> => {
    const table = this.tableOf(prefix);
    if (!table) return keys;
    const loaded = await table.load();
    const through = loaded ? currentSnapshot(loaded.metadata)?.summary[THROUGH_BATCH_ID] : undefined;
    let referenced = this.referenced.get(prefix);
    if (!referenced || referenced.version !== (loaded?.version ?? 0)) {
      const all = new Set<string>();
      for (const s of loaded?.metadata.snapshots ?? []) for (const k of await table.dataKeys(s)) all.add(k);
      referenced = { version: loaded?.version ?? 0, keys: all };
      this.referenced.set(prefix, referenced);
    }
    const held = referenced.keys;
    return keys.filter((k) => {
      if (held.has(k)) return false;
      const id = batchIdOfKey(prefix, k);
      return id === null || (through !== undefined && id <= through);
    });
  };
}
