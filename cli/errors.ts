/** Exit codes of the `events-ingest` CLI (documented in docs/analysts.md). */
export const EXIT = {
  ok: 0,
  /** The command ran and failed: HTTP error, retries exhausted, DuckDB error, I/O error. */
  error: 1,
  /** Bad arguments or options. */
  usage: 2,
  /** `sync`: another sync holds the folder's lock; nothing was done. */
  locked: 3,
  /** `sync`: the cursor is older than the server's raw retention (list answered 410); nothing was done. */
  retention: 4,
  /** Interrupted by SIGINT/SIGTERM (128 + 2, the shell convention for SIGINT). */
  interrupted: 130,
} as const;

/** An error the CLI prints as one line (no stack) and exits with `exitCode`. */
export class CliError extends Error {
  override readonly name = 'CliError';
  readonly exitCode: number;
  constructor(message: string, exitCode: number = EXIT.error, opts?: { cause?: unknown }) {
    super(message, opts);
    this.exitCode = exitCode;
  }
}

/** The message of anything thrown, for one-line reports. */
export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
