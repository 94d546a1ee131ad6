import { type Component, settled } from '../../shared/lifecycle.js';
import { rollupSlice } from '../../shared/config-slices.js';
import type { StackContext } from '../../shared/stack-context.js';
import { type RollupService, startRollupService } from './service.js';

export interface RollupComponent extends Component {
  /** Set once started; stays unset when rollups are off (ROLLUP=off, or a store DuckDB cannot read). */
  readonly service: RollupService | undefined;
}

/** The rollup planner and worker (unless rollups are off). `required`: a missing DuckDB fails the start. */
export function rollupService(ctx: StackContext, o: { required?: boolean } = {}): RollupComponent {
  let service: RollupService | undefined;
  let starting: Promise<void> | undefined;
  return {
    name: 'rollup',
    get service() {
      return service;
    },
    start() {
      starting ??= (async () => {
        service =
          (await startRollupService({
            env: rollupSlice(ctx.env),
            config: ctx.config,
            store: ctx.store,
            redis: ctx.target,
            registry: ctx.registry,
            logger: ctx.logger,
            ...(o.required ? { required: true } : {}),
          })) ?? undefined;
      })();
      return starting;
    },
    async stop(graceMs) {
      const started = Date.now();
      await settled(starting);
      graceMs = Math.max(0, graceMs - (Date.now() - started));
      await service?.close(Math.min(ctx.stopBound(15_000, 250), graceMs));
    },
  };
}
