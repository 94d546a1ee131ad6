/**
 * Group commit of queue adds. The first item is sent at once, alone; items submitted while a send
 * runs wait and leave together when it finishes, up to `maxItems` and `maxBytes` per send. At a
 * low rate every item goes alone with no added wait; under load one send (one queue job, one
 * round trip) carries several batches. Pure logic: the send is the caller's. Why and what it saves:
 * docs/decisions/0011-group-commit.md.
 */
export interface GroupCommitOptions<T> {
  /** Sends one group (at least one item); resolves once all of it is durable. */
  send(items: readonly T[]): Promise<void>;
  /** Items per send, at least 1. */
  maxItems: number;
  /** Bytes per send (by `sizeOf`); an item larger than this goes alone. */
  maxBytes: number;
  sizeOf(item: T): number;
}

/** One submitted item's handle. */
export interface GroupTicket<T> {
  /** Resolves when the item's group was sent; rejects with the send's error. */
  readonly done: Promise<void>;
  /** The items sent together with this one (itself included, first item first) once its group is formed, else undefined. */
  group(): readonly T[] | undefined;
  /**
   * Takes the item back if its group has not been formed yet (true: it will never be sent, and
   * `done` stays pending forever); false once it is being sent or was sent.
   */
  withdraw(): boolean;
}

interface Entry<T> {
  item: T;
  group?: readonly T[];
  resolve(): void;
  reject(err: unknown): void;
}

export class GroupCommitter<T> {
  private readonly waiting: Entry<T>[] = [];
  private sending = false;
  /** Sends made and items they carried, for metrics and tests. */
  sends = 0;
  items = 0;

  constructor(private readonly opts: GroupCommitOptions<T>) {
    if (!Number.isInteger(opts.maxItems) || opts.maxItems < 1)
      throw new Error(`maxItems must be a positive integer, got ${opts.maxItems}`);
  }

  /** Items waiting for a send (not counting the one running). */
  get backlog(): number {
    return this.waiting.length;
  }

  submit(item: T): GroupTicket<T> {
    let entry!: Entry<T>;
    const done = new Promise<void>((resolve, reject) => {
      entry = { item, resolve, reject };
    });
    this.waiting.push(entry);
    if (!this.sending) void this.drain();
    return {
      done,
      group: () => entry.group,
      withdraw: () => {
        const at = this.waiting.indexOf(entry);
        if (at < 0) return false;
        this.waiting.splice(at, 1);
        return true;
      },
    };
  }

  private async drain(): Promise<void> {
    this.sending = true;
    try {
      // Bounded: each pass sends at least one waiting item, and items only join while it runs.
      while (this.waiting.length > 0) {
        const group = this.take();
        const items = group.map((e) => e.item);
        for (const e of group) e.group = items;
        this.sends++;
        this.items += group.length;
        try {
          await this.opts.send(items);
          for (const e of group) e.resolve();
        } catch (err) {
          for (const e of group) e.reject(err);
        }
      }
    } finally {
      this.sending = false;
    }
  }

  /** The next group: the oldest item, then later ones while they fit. */
  private take(): Entry<T>[] {
    const first = this.waiting.shift() as Entry<T>;
    const group = [first];
    let bytes = this.opts.sizeOf(first.item);
    if (bytes > this.opts.maxBytes) return group;
    for (let i = 0; i < this.waiting.length && group.length < this.opts.maxItems;) {
      const e = this.waiting[i] as Entry<T>;
      const size = this.opts.sizeOf(e.item);
      if (bytes + size > this.opts.maxBytes) {
        i++;
        continue;
      }
      bytes += size;
      group.push(e);
      this.waiting.splice(i, 1);
    }
    return group;
  }
}
