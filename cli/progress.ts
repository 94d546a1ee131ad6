/**
 * Progress of `sync` on stderr: a live bar (batches and bytes) on a terminal, plain lines
 * otherwise (cron mail, CI logs), so stdout keeps only the summary line.
 */
import cliProgress from 'cli-progress';

export interface SyncProgress {
  /** `known` batches are listed so far (the total grows page by page). */
  listed(known: number): void;
  /** `done` batches handled so far, `bytes` downloaded so far. */
  advanced(done: number, bytes: number): void;
  /** A line that must be seen (retries, cleanup). */
  note(line: string): void;
  stop(): void;
}

/** `1.5 MB`-style sizes for humans; the summary line keeps exact byte counts. */
export function formatBytes(n: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${n} B` : `${v.toFixed(1)} ${units[u]}`;
}

/** A bar when `stream` is a TTY, else line-per-page output. */
export function createProgress(stream: NodeJS.WriteStream = process.stderr): SyncProgress {
  return stream.isTTY ? barProgress(stream) : lineProgress(stream);
}

function barProgress(stream: NodeJS.WriteStream): SyncProgress {
  const bar = new cliProgress.SingleBar(
    {
      stream,
      format: 'sync |{bar}| {value}/{total} batches | {size}',
      hideCursor: true,
      clearOnComplete: false,
      etaBuffer: 50,
    },
    cliProgress.Presets.shades_classic,
  );
  let started = false;
  let known = 0;
  return {
    listed(k) {
      known = k;
      if (!started) {
        bar.start(known, 0, { size: formatBytes(0) });
        started = true;
      } else bar.setTotal(known);
    },
    advanced(done, bytes) {
      if (started) bar.update(done, { size: formatBytes(bytes) });
    },
    note(line) {
      // Lines printed under a live bar get overwritten: clear it, print, redraw.
      if (started) stream.write('\n');
      stream.write(`${line}\n`);
    },
    stop() {
      if (started) bar.stop();
      started = false;
    },
  };
}

function lineProgress(stream: NodeJS.WriteStream): SyncProgress {
  let known = 0;
  let done = 0;
  let bytes = 0;
  let lastReported = -1;
  const report = (): void => {
    if (done === lastReported) return;
    lastReported = done;
    stream.write(`progress: ${done}/${known} batches, ${formatBytes(bytes)}\n`);
  };
  return {
    listed(k) {
      // One line per list page: at most one per `--limit` batches.
      if (known > 0) report();
      known = k;
    },
    advanced(d, b) {
      done = d;
      bytes = b;
    },
    note(line) {
      stream.write(`${line}\n`);
    },
    stop() {
      if (known > 0) report();
    },
  };
}
