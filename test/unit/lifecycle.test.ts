import { describe, expect, it } from 'vitest';
import {
  type Component,
  Lifecycle,
  type LifecycleLogger,
  type ProcessHost,
  runUntilSignal,
  splitStartStop,
} from '../../shared/lifecycle.js';

interface Line {
  level: 'info' | 'warn' | 'error';
  obj: Record<string, unknown>;
  msg: string;
}

function fakeLogger(): LifecycleLogger & { lines: Line[] } {
  const lines: Line[] = [];
  const at = (level: Line['level']) => (obj: object, msg: string) =>
    void lines.push({ level, obj: obj as Record<string, unknown>, msg });
  return { lines, info: at('info'), warn: at('warn'), error: at('error') };
}

/** A component that records its calls in `events`; its start and stop can be made to fail or hang. */
function fake(
  name: string,
  events: string[],
  o: { startFails?: boolean; stopFails?: boolean; stopHangs?: boolean; startGate?: Promise<void> } = {},
): Component & { graces: number[] } {
  const graces: number[] = [];
  return {
    name,
    graces,
    async start() {
      events.push(`start ${name}`);
      await o.startGate;
      if (o.startFails) throw new Error(`${name} failed to start`);
    },
    async stop(graceMs) {
      events.push(`stop ${name}`);
      graces.push(graceMs);
      if (o.stopFails) throw new Error(`${name} failed to stop`);
      if (o.stopHangs) await new Promise<never>(() => undefined);
    },
  };
}

describe('Lifecycle', () => {
  it('starts in the listed order and stops in the reverse order, once', async () => {
    const events: string[] = [];
    const lc = new Lifecycle(
      ['redis', 'store', 'api server', 'upkeep'].map((n) => fake(n, events)),
      { logger: fakeLogger() },
    );
    await lc.start();
    expect(lc.isStopping).toBe(false);
    const [first, second] = [lc.stop(1000), lc.stop(1000)];
    expect(await first).toEqual({ notStopped: [], failed: [] });
    expect(await second).toEqual({ notStopped: [], failed: [] });
    expect(lc.isStopping).toBe(true);
    expect(events).toEqual([
      'start redis',
      'start store',
      'start api server',
      'start upkeep',
      'stop upkeep',
      'stop api server',
      'stop store',
      'stop redis',
    ]);
  });

  it('a component that fails to start: it and the ones started before it are stopped in reverse, later ones never start, start rejects with its error', async () => {
    const events: string[] = [];
    const lc = new Lifecycle(
      [fake('a', events), fake('b', events), fake('c', events, { startFails: true }), fake('d', events)],
      { logger: fakeLogger() },
    );
    await expect(lc.start()).rejects.toThrow('c failed to start');
    expect(events).toEqual(['start a', 'start b', 'start c', 'stop c', 'stop b', 'stop a']);
    // A later stop does not stop anything twice.
    await lc.stop(1000);
    expect(events).toHaveLength(6);
  });

  it('each stop gets what is left of one grace', async () => {
    const events: string[] = [];
    const slow: Component = {
      name: 'slow',
      start: async () => undefined,
      stop: () => new Promise((r) => setTimeout(r, 60)),
    };
    const last = fake('last', events);
    const lc = new Lifecycle([last, slow], { logger: fakeLogger() });
    await lc.start();
    const report = await lc.stop(1000);
    expect(report.notStopped).toEqual([]);
    expect(last.graces).toHaveLength(1);
    expect(last.graces[0]).toBeLessThanOrEqual(1000 - 50);
    expect(last.graces[0]).toBeGreaterThan(0);
  });

  it('past the grace it stops waiting: names the component that did not stop, asks the rest to stop at once, and resolves', async () => {
    const events: string[] = [];
    const logger = fakeLogger();
    const first = fake('redis', events);
    const lc = new Lifecycle([first, fake('encoder', events, { stopHangs: true }), fake('api server', events)], {
      logger,
    });
    await lc.start();
    const t0 = Date.now();
    const report = await lc.stop(50);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(report.notStopped).toEqual(['encoder', 'redis']);
    expect(events.slice(3)).toEqual(['stop api server', 'stop encoder', 'stop redis']);
    expect(first.graces).toEqual([0]);
    const overran = logger.lines.find((l) => l.level === 'error' && l.obj.component === 'encoder');
    expect(overran?.msg).toMatch(/did not stop within the grace/);
  });

  it('a stop that throws is logged and counted; the others are still stopped', async () => {
    const events: string[] = [];
    const logger = fakeLogger();
    const lc = new Lifecycle([fake('a', events), fake('b', events, { stopFails: true }), fake('c', events)], {
      logger,
    });
    await lc.start();
    expect(await lc.stop(1000)).toEqual({ notStopped: [], failed: ['b'] });
    expect(events.slice(3)).toEqual(['stop c', 'stop b', 'stop a']);
    expect(logger.lines).toContainEqual({
      level: 'warn',
      obj: { component: 'b', err: 'b failed to stop' },
      msg: 'component stop failed',
    });
  });

  it('a stop while a component starts stops it and the ones before it; nothing after it starts; start resolves', async () => {
    const events: string[] = [];
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const lc = new Lifecycle([fake('a', events), fake('b', events, { startGate: gate }), fake('c', events)], {
      logger: fakeLogger(),
    });
    const starting = lc.start();
    await new Promise((r) => setTimeout(r, 5));
    expect(events).toEqual(['start a', 'start b']);
    const stopping = lc.stop(1000);
    open();
    await starting;
    await stopping;
    expect(events).toEqual(['start a', 'start b', 'stop b', 'stop a']);
  });

  it('splitStartStop: one component started where its start is listed and stopped where its stop is listed', async () => {
    const events: string[] = [];
    const pool = splitStartStop(fake('encoder processes', events));
    const lc = new Lifecycle([fake('redis', events), pool.stop, fake('api server', events), pool.start], {
      logger: fakeLogger(),
    });
    await lc.start();
    await lc.stop(1000);
    expect(events).toEqual([
      'start redis',
      'start api server',
      'start encoder processes',
      'stop api server',
      'stop encoder processes',
      'stop redis',
    ]);
  });
});

/** A process stand-in: signals are delivered by `signal()`, exits are recorded. */
function fakeHost(): ProcessHost & { signal(s: NodeJS.Signals): void; exits: number[]; exited: Promise<number> } {
  const listeners = new Map<string, (() => void)[]>();
  const exits: number[] = [];
  let resolveExit!: (code: number) => void;
  const exited = new Promise<number>((r) => (resolveExit = r));
  return {
    exits,
    exited,
    on(signal, listener) {
      listeners.set(signal, [...(listeners.get(signal) ?? []), listener]);
    },
    exit(code) {
      exits.push(code);
      resolveExit(code);
    },
    signal(s) {
      for (const l of listeners.get(s) ?? []) l();
    },
  };
}

describe('runUntilSignal', () => {
  it('SIGTERM stops in reverse order and exits 0; the same signal again within moments is ignored', async () => {
    const events: string[] = [];
    const host = fakeHost();
    const logger = fakeLogger();
    await runUntilSignal(new Lifecycle([fake('a', events), fake('b', events)], { logger }), {
      logger,
      graceMs: 1000,
      host,
    });
    host.signal('SIGTERM');
    host.signal('SIGTERM');
    expect(await host.exited).toBe(0);
    expect(host.exits).toEqual([0]);
    expect(events).toEqual(['start a', 'start b', 'stop b', 'stop a']);
    expect(logger.lines.map((l) => l.msg)).toEqual(['shutting down', 'shut down cleanly']);
  });

  it('a second signal later than that forces: exit 1 at once', async () => {
    const events: string[] = [];
    const host = fakeHost();
    const logger = fakeLogger();
    let now = 1_000_000;
    await runUntilSignal(new Lifecycle([fake('encoder', events, { stopHangs: true })], { logger }), {
      logger,
      graceMs: 60_000,
      host,
      now: () => now,
    });
    host.signal('SIGINT');
    now += 5000;
    host.signal('SIGINT');
    expect(host.exits).toEqual([1]);
    expect(logger.lines).toContainEqual({
      level: 'warn',
      obj: { signal: 'SIGINT' },
      msg: 'second signal: exiting now',
    });
  });

  it('a stop past the grace exits 1 naming what did not stop', async () => {
    const host = fakeHost();
    const logger = fakeLogger();
    await runUntilSignal(new Lifecycle([fake('rollup', [], { stopHangs: true })], { logger }), {
      logger,
      graceMs: 30,
      host,
    });
    host.signal('SIGTERM');
    expect(await host.exited).toBe(1);
    expect(logger.lines.find((l) => l.msg === 'shutdown took too long; exiting')?.obj).toEqual({
      graceMs: 30,
      notStopped: ['rollup'],
    });
  });

  it('a signal during start-up stops what has started; a failed start rejects after stopping what had started', async () => {
    const events: string[] = [];
    const host = fakeHost();
    const logger = fakeLogger();
    let open!: () => void;
    const gate = new Promise<void>((r) => (open = r));
    const running = runUntilSignal(
      new Lifecycle([fake('redis', events), fake('api server', events, { startGate: gate }), fake('upkeep', events)], {
        logger,
      }),
      { logger, graceMs: 1000, host },
    );
    await new Promise((r) => setTimeout(r, 5));
    host.signal('SIGTERM');
    open();
    await running;
    expect(await host.exited).toBe(0);
    expect(events).toEqual(['start redis', 'start api server', 'stop api server', 'stop redis']);

    const failing: string[] = [];
    const host2 = fakeHost();
    await expect(
      runUntilSignal(
        new Lifecycle([fake('redis', failing), fake('api server', failing, { startFails: true })], { logger }),
        { logger, graceMs: 1000, host: host2 },
      ),
    ).rejects.toThrow('api server failed to start');
    expect(failing).toEqual(['start redis', 'start api server', 'stop api server', 'stop redis']);
    expect(host2.exits).toEqual([]);
  });

  it('stopWhen: another trigger runs the same stop and never forces; beforeExit runs before the exit', async () => {
    const host = fakeHost();
    const logger = fakeLogger();
    let stop!: (reason: string) => void;
    const order: string[] = [];
    await runUntilSignal(new Lifecycle([fake('encoder', order)], { logger }), {
      logger,
      graceMs: 1000,
      host,
      signals: [],
      stopWhen: (s) => (stop = s),
      beforeExit: (code) => void order.push(`before exit ${code}`),
    });
    stop('parent gone');
    stop('asked by npm start');
    expect(await host.exited).toBe(0);
    expect(host.exits).toEqual([0]);
    expect(order).toEqual(['start encoder', 'stop encoder', 'before exit 0']);
  });
});
