/**
 * Summaries of V8 CPU profiles (`node --cpu-prof` writes them as `.cpuprofile` JSON): where a
 * process's busy samples went, by function and by module, optionally over a window of time only.
 * `npm run profile` (bench/profile.ts) prints these for the API's and the encoders' processes.
 */

/** The parts of a `.cpuprofile` this module reads. */
export interface CpuProfile {
  nodes: {
    id: number;
    callFrame: { functionName: string; url: string; lineNumber: number };
    children?: number[];
  }[];
  /** Node id of each sample. */
  samples: number[];
  /** µs since the previous sample (the first: since `startTime`). */
  timeDeltas: number[];
  /** µs on the monotonic clock (`process.hrtime`'s, on Linux). */
  startTime: number;
  endTime: number;
}

export interface ProfileShare {
  name: string;
  /** Share of the busy samples, 0–1. */
  share: number;
}

export interface ProfileSummary {
  /** Samples in the window, idle ones included. */
  samples: number;
  /** Samples in the window that were not `(idle)`. */
  busy: number;
  /** Self samples by module: our files (`shared/envelope.js`), packages (`bullmq`), `node:zlib`, or native frames by name. */
  modules: ProfileShare[];
  /** Self samples by function (`name file:line`). */
  functions: ProfileShare[];
}

/**
 * Where a frame's code lives, shortened: `root` and a build folder under it are dropped
 * (`file:///repo/.tmp/test-dist/shared/envelope.js` → `shared/envelope.js`), a package keeps its
 * name only, and a frame without a file (native code, the collector) is named by its function.
 */
export function moduleOf(url: string, functionName: string, root = ''): string {
  if (url === '') return functionName === '' ? '(native)' : functionName;
  const pkg = /.*node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (pkg) return pkg[1] as string;
  if (url.startsWith('wasm:')) return 'wasm';
  if (url.startsWith('node:')) return url;
  let path = url.replace(/^file:\/\//, '');
  if (root && path.startsWith(`${root}/`)) path = path.slice(root.length + 1);
  // The tests' and the bench's build (test/helpers/dist.ts) and `npm run build`'s.
  return path.replace(/^(?:\.tmp\/test-dist|dist)\//, '');
}

function top(counts: Map<string, number>, busy: number, n: number): ProfileShare[] {
  return [...counts]
    .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
    .slice(0, n)
    .map(([name, c]) => ({ name, share: busy === 0 ? 0 : c / busy }));
}

/**
 * Self samples of `profile` by module and by function, the `top` largest of each, over the
 * samples taken from `window.fromUs` to `window.toUs` (the profile's own clock) or all of them.
 * Samples are counted, not weighted by their interval (`--cpu-prof-interval` is fixed).
 */
export function summarizeProfile(
  profile: CpuProfile,
  opts: { top?: number; root?: string; window?: { fromUs: number; toUs: number } } = {},
): ProfileSummary {
  const n = opts.top ?? 15;
  const frames = new Map(profile.nodes.map((node) => [node.id, node.callFrame]));
  const modules = new Map<string, number>();
  const functions = new Map<string, number>();
  let at = profile.startTime;
  let samples = 0;
  let busy = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    at += profile.timeDeltas[i] ?? 0;
    if (opts.window && (at < opts.window.fromUs || at > opts.window.toUs)) continue;
    samples++;
    const frame = frames.get(profile.samples[i] as number);
    if (frame === undefined || frame.functionName === '(idle)') continue;
    busy++;
    const mod = moduleOf(frame.url, frame.functionName, opts.root);
    modules.set(mod, (modules.get(mod) ?? 0) + 1);
    const fn = frame.url === '' ? mod : `${frame.functionName || '(anonymous)'} ${mod}:${frame.lineNumber + 1}`;
    functions.set(fn, (functions.get(fn) ?? 0) + 1);
  }
  return { samples, busy, modules: top(modules, busy, n), functions: top(functions, busy, n) };
}

/** The summary as text lines: `  12.3%  name`, modules first, then functions. */
export function formatSummary(title: string, s: ProfileSummary): string[] {
  const pct = (x: number): string => `${(x * 100).toFixed(1).padStart(5)}%`;
  const busyShare = s.samples === 0 ? 0 : s.busy / s.samples;
  return [
    `${title}: ${s.samples} samples, ${pct(busyShare).trim()} busy`,
    '  by module (self):',
    ...s.modules.map((m) => `    ${pct(m.share)}  ${m.name}`),
    '  by function (self):',
    ...s.functions.map((f) => `    ${pct(f.share)}  ${f.name}`),
  ];
}
