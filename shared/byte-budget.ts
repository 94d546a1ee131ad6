/**
 * A count of bytes a process holds at once (request bodies in the API, job bodies in the
 * encoder), with a limit. Reservations are plain numbers; whoever takes bytes gives them back.
 */
export class ByteBudget {
  private used = 0;
  private readonly waiters: { bytes: number; resolve: () => void }[] = [];

  /** @param limit bytes that may be held at once; `onChange` sees the new total after every change. */
  constructor(
    readonly limit: number,
    private readonly onChange?: (used: number) => void,
  ) {
    if (!(limit > 0)) throw new Error(`byte budget must be positive, got ${limit}`);
  }

  /** Bytes held now. */
  get inUse(): number {
    return this.used;
  }

  /**
   * Takes `bytes` if they fit right now, else takes nothing and returns false. Never waits: the
   * API answers 503 rather than queueing request bodies it would have to hold meanwhile. Like
   * {@link take}, a request larger than the whole limit is granted when nothing else is held;
   * `alreadyHeld` (what the caller took before, for the same body) does not count as "else".
   */
  tryTake(bytes: number, alreadyHeld = 0): boolean {
    if (bytes <= 0) return true;
    const fits = this.used + bytes <= this.limit || this.used - alreadyHeld <= 0;
    if (!fits || this.waiters.length > 0) return false;
    this.add(bytes);
    return true;
  }

  /**
   * Waits until `bytes` fit, first come first served (a large request at the head is not starved
   * by small ones behind it). A request larger than the whole limit runs once nothing else is held.
   */
  async take(bytes: number): Promise<void> {
    if (bytes <= 0) return;
    if (this.waiters.length === 0 && this.fits(bytes)) {
      this.add(bytes);
      return;
    }
    await new Promise<void>((resolve) => this.waiters.push({ bytes, resolve }));
  }

  /** Gives back bytes taken with tryTake or take. */
  give(bytes: number): void {
    if (bytes <= 0) return;
    this.add(-Math.min(bytes, this.used));
    while (this.waiters.length > 0) {
      const head = this.waiters[0] as { bytes: number; resolve: () => void };
      if (!this.fits(head.bytes)) break;
      this.waiters.shift();
      this.add(head.bytes);
      head.resolve();
    }
  }

  private fits(bytes: number): boolean {
    return this.used + bytes <= this.limit || this.used === 0;
  }

  private add(delta: number): void {
    this.used += delta;
    this.onChange?.(this.used);
  }
}
