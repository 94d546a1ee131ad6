import { describe, expect, it } from 'vitest';
import { parseContentEncoding } from '../../services/api/body.js';
import { ByteBudget } from '../../shared/byte-budget.js';

describe('ByteBudget', () => {
  it('tryTake grants while the total fits, refuses past it, and give makes room again', () => {
    const seen: number[] = [];
    const b = new ByteBudget(100, (used) => seen.push(used));
    expect(b.tryTake(60)).toBe(true);
    expect(b.tryTake(41)).toBe(false);
    expect(b.tryTake(40)).toBe(true);
    expect(b.inUse).toBe(100);
    b.give(60);
    expect(b.tryTake(50)).toBe(true);
    expect(seen).toEqual([60, 100, 40, 90]);
  });

  it('a request bigger than the whole budget is granted alone, never beside another', async () => {
    const b = new ByteBudget(100);
    expect(b.tryTake(10)).toBe(true);
    expect(b.tryTake(500)).toBe(false);
    let granted = false;
    const big = b.take(500).then(() => (granted = true));
    await Promise.resolve();
    expect(granted).toBe(false);
    b.give(10);
    await big;
    expect(b.inUse).toBe(500);
    expect(b.tryTake(1)).toBe(false);
    b.give(500);
    expect(b.inUse).toBe(0);
  });

  it('a body growing past the limit alone keeps growing; beside another it is refused', () => {
    const b = new ByteBudget(100);
    expect(b.tryTake(80)).toBe(true);
    expect(b.tryTake(50, 80)).toBe(true);
    expect(b.inUse).toBe(130);
    b.give(130);
    expect(b.tryTake(80)).toBe(true);
    expect(b.tryTake(10)).toBe(true);
    expect(b.tryTake(50, 80)).toBe(false);
  });

  it('take waits first come first served: a large waiter at the head is not overtaken by small ones', async () => {
    const b = new ByteBudget(100);
    await b.take(80);
    const order: string[] = [];
    const large = b.take(60).then(() => order.push('large'));
    const small = b.take(10).then(() => order.push('small'));
    // Room for the small one, but the large one asked first.
    expect(b.tryTake(10)).toBe(false);
    await new Promise((r) => setTimeout(r, 10));
    expect(order).toEqual([]);
    b.give(80);
    await Promise.all([large, small]);
    expect(order).toEqual(['large', 'small']);
    expect(b.inUse).toBe(70);
  });
});

describe('Content-Encoding header', () => {
  it.each([
    [undefined, 'identity'],
    ['', 'identity'],
    ['identity', 'identity'],
    ['gzip', 'gzip'],
    ['GZip', 'gzip'],
    ['x-gzip', 'gzip'],
    ['deflate', 'deflate'],
    [' br ', 'br'],
    ['identity, br', 'br'],
  ])('%j decodes as %s', (header, coding) => {
    expect(parseContentEncoding(header)).toEqual({ ok: true, coding });
  });

  it.each([
    ['x-bogus', /"x-bogus" is not supported; use gzip, deflate, br or identity/],
    ['gzip, x-bogus', /"x-bogus" is not supported/],
    ['compress', /"compress" is not supported/],
    ['gzip, br', /"gzip, br" stacks 2 codings; send at most one/],
    ['gzip, gzip', /stacks 2 codings/],
    [`x-${'a'.repeat(200)}\u0007`, /"x-a{62}…" is not supported/],
  ])('%j is refused', (header, message) => {
    const r = parseContentEncoding(header);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatch(message);
  });
});
