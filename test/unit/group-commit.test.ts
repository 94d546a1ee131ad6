import { describe, expect, it } from 'vitest';
import { GroupCommitter } from '../../shared/group-commit.js';

/** A send the test finishes by hand, recording what each call carried. */
function manualSend(): {
  calls: string[][];
  finish(i: number, err?: Error): void;
  send(items: readonly string[]): Promise<void>;
} {
  const calls: string[][] = [];
  const pending: { resolve(): void; reject(e: Error): void }[] = [];
  return {
    calls,
    finish(i, err) {
      const p = pending[i];
      if (!p) throw new Error(`send ${i} was not made`);
      if (err) p.reject(err);
      else p.resolve();
    },
    send(items) {
      calls.push([...items]);
      return new Promise<void>((resolve, reject) => pending.push({ resolve, reject }));
    },
  };
}

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('GroupCommitter', () => {
  it('sends a lone item at once, alone; items that come while it runs leave together after it', async () => {
    const m = manualSend();
    const c = new GroupCommitter<string>({ send: (x) => m.send(x), maxItems: 16, maxBytes: 1000, sizeOf: () => 1 });
    const a = c.submit('a');
    expect(m.calls).toEqual([['a']]);
    const rest = ['b', 'c', 'd'].map((x) => c.submit(x));
    await tick();
    expect(m.calls).toHaveLength(1);
    expect(c.backlog).toBe(3);
    m.finish(0);
    await a.done;
    await tick();
    expect(m.calls).toEqual([['a'], ['b', 'c', 'd']]);
    expect(rest.map((t) => t.group())).toEqual([
      ['b', 'c', 'd'],
      ['b', 'c', 'd'],
      ['b', 'c', 'd'],
    ]);
    expect(a.group()).toEqual(['a']);
    m.finish(1);
    await Promise.all(rest.map((t) => t.done));
    expect({ sends: c.sends, items: c.items, backlog: c.backlog }).toEqual({ sends: 2, items: 4, backlog: 0 });
  });

  it('caps a group at maxItems and at maxBytes; an item over maxBytes goes alone; none is lost', async () => {
    const m = manualSend();
    const size: Record<string, number> = { big: 50, x: 4 };
    const c = new GroupCommitter<string>({
      send: (x) => m.send(x),
      maxItems: 3,
      maxBytes: 10,
      sizeOf: (s) => size[s] ?? 1,
    });
    const first = c.submit('first');
    const items = ['1', '2', '3', '4', 'big', 'x', 'x', 'x', '5'];
    const tickets = items.map((s) => c.submit(s));
    // Bounded: one send per call of finish, and every item is in some send.
    for (let i = 0; i < 20 && m.calls.flat().length < items.length + 1; i++) {
      m.finish(m.calls.length - 1);
      await tick();
    }
    m.finish(m.calls.length - 1);
    await Promise.all([first.done, ...tickets.map((t) => t.done)]);
    expect(m.calls[0]).toEqual(['first']);
    for (const call of m.calls) {
      expect(call.length).toBeLessThanOrEqual(3);
      if (call.includes('big')) expect(call).toEqual(['big']);
      else expect(call.reduce((n, s) => n + (size[s] ?? 1), 0)).toBeLessThanOrEqual(10);
    }
    expect(m.calls.flat().sort()).toEqual(['first', ...items].sort());
    expect(m.calls[1]).toEqual(['1', '2', '3']);
  });

  it('a failed send rejects every item of its group with its error, and later items still go', async () => {
    const m = manualSend();
    const c = new GroupCommitter<string>({ send: (x) => m.send(x), maxItems: 8, maxBytes: 100, sizeOf: () => 1 });
    const a = c.submit('a');
    const b = c.submit('b');
    const d = c.submit('d');
    m.finish(0, new Error('redis down'));
    await expect(a.done).rejects.toThrow('redis down');
    await tick();
    expect(m.calls[1]).toEqual(['b', 'd']);
    m.finish(1, new Error('still down'));
    await expect(b.done).rejects.toThrow('still down');
    await expect(d.done).rejects.toThrow('still down');
    const e = c.submit('e');
    expect(m.calls[2]).toEqual(['e']);
    m.finish(2);
    await expect(e.done).resolves.toBeUndefined();
  });

  it('withdraw takes back an item whose group has not formed; one being sent cannot be withdrawn', async () => {
    const m = manualSend();
    const c = new GroupCommitter<string>({ send: (x) => m.send(x), maxItems: 8, maxBytes: 100, sizeOf: () => 1 });
    const a = c.submit('a');
    const b = c.submit('b');
    const d = c.submit('d');
    expect(a.withdraw()).toBe(false);
    expect(b.withdraw()).toBe(true);
    expect(b.withdraw()).toBe(false);
    expect(b.group()).toBeUndefined();
    m.finish(0);
    await tick();
    expect(m.calls).toEqual([['a'], ['d']]);
    expect(d.withdraw()).toBe(false);
    m.finish(1);
    await d.done;
  });

  it('refuses a group size below 1', () => {
    expect(
      () => new GroupCommitter<string>({ send: async () => undefined, maxItems: 0, maxBytes: 1, sizeOf: () => 1 }),
    ).toThrow('maxItems');
  });
});
