/**
 * The environment of `npm start`'s encoder processes (services/main.ts forks them with it): the
 * parent's, plus a fixed glibc mmap threshold unless the operator set one.
 *
 * An encoder allocates a few large buffers per big batch (the inflated body, column builders, the
 * Arrow IPC stream; up to tens of MB). glibc serves an allocation above its mmap threshold with
 * its own mapping, returned to the system when freed, but raises that threshold (up to 32 MiB) to
 * the size of every such buffer freed; from then on same-sized buffers come from the main heap,
 * which is only given back from its top. Measured (scripts/memory-acceptance.ts, 200 pushes of
 * 100,000-event 7.9 MB batches): an idle encoder kept 96 MiB of freed heap, at 240 MiB of RSS
 * against 129 before the burst. A fixed threshold (`MALLOC_MMAP_THRESHOLD_`, which also turns the
 * raising off) keeps every buffer over 128 KiB in its own mapping: ordinary batches (tens of KB)
 * are untouched, and a big batch's buffers go back when they are freed. Elsewhere than glibc the
 * variable means nothing.
 */
export const ENCODER_MALLOC_ENV: Readonly<Record<string, string>> = { MALLOC_MMAP_THRESHOLD_: String(128 * 1024) };

/** `env` plus ENCODER_MALLOC_ENV (a variable already set in `env` wins). */
export function encoderProcessEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { ...ENCODER_MALLOC_ENV, ...env };
}
