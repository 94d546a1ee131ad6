import { checkParamValue } from '../../../../shared/paths.js';
import { type Step, done, next } from '../runner.js';
import { type AdmissionDeps, type Admitting, type Refused, type WithParams, refused } from './types.js';

/**
 * Step 2: every route parameter (1-128 characters of `[A-Za-z0-9._~-]`, not `.` or `..`), then
 * APP_PATTERN on the list-prefix ones; refused `bad_param` naming the parameter.
 */
export function params(deps: AdmissionDeps): Step<Admitting, WithParams, Refused> {
  const names = deps.template.segments.flatMap((s) => (s.kind === 'param' ? [s.name] : []));
  const bad = (detail: string) => {
    deps.observer?.rejected?.('bad_param');
    return done(refused('bad_param', detail));
  };
  return {
    name: 'params',
    async run(c) {
      const out: Record<string, string> = {};
      for (const name of names) {
        const value = c.input.params[name] ?? '';
        const problem = checkParamValue(value);
        if (problem) return bad(`path parameter "${name}" ${problem}`);
        out[name] = value;
      }
      const pattern = deps.appPattern;
      const unmatched = pattern ? deps.template.prefixParams.find((n) => !pattern.test(out[n] ?? '')) : undefined;
      if (pattern && unmatched !== undefined)
        return bad(`path parameter "${unmatched}" does not match APP_PATTERN (${pattern.source})`);
      return next({ ...c, params: out });
    },
  };
}
