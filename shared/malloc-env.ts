/**
 * The glibc allocator setting every process of the product runs with: `npm start`'s scripts
 * (package.json) and the image (Dockerfile `ENV`) set it for the process they start, and
 * services/main.ts gives it to the encoder processes it forks (an operator's own value wins
 * everywhere). test/integration/deploy-files.test.ts holds the three to this value.
 *
 * `MALLOC_MMAP_THRESHOLD_` = 1 MiB: an allocation of 1 MiB or more gets its own mapping, given back
 * to the system when it is freed, so a burst of large pushes (8 MB bodies, the buffers of a big
 * batch) does not stay in the process' RSS; a fixed value also turns off glibc's raising of the
 * threshold to the size of each large buffer freed, after which such buffers would come from the
 * main heap, which is only returned from its top (an idle encoder kept 96 MiB that way).
 * Smaller buffers (a 1,000-event body is ~600 KB) come from the heap and reuse its pages: a fresh
 * mapping costs its page faults on every allocation, ~3.3 ms of CPU per MB on the 2-core test
 * machine against 0.4–0.8 from the heap, and with the threshold at 128 KiB (before 2026-12-06)
 * a 1,000-event batch cost about 40% more CPU.
 *
 * Elsewhere than glibc the variable means nothing. Figures: docs/decisions/0027-malloc-mmap-threshold.md.
 */
export const MALLOC_ENV: Readonly<Record<string, string>> = {
  MALLOC_MMAP_THRESHOLD_: String(1024 * 1024),
};

/** `env` plus MALLOC_ENV (a variable already set in `env` wins). */
export function withMallocEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { ...MALLOC_ENV, ...env };
}
