/**
 * A loopback TCP proxy in front of a real Redis that can hold one client's commands back: once
 * armed, the first client→server chunk that contains a marker, and everything that client sends
 * after it, reach Redis only `holdMs` later (in order, nothing dropped). Redis' answers pass at
 * once. It stands for a Redis that stalls while a command is on its way (a long fork, a slow
 * script, a congested link): the command runs, but after the client stopped waiting for it.
 */
import net from 'node:net';

export interface DelayProxy {
  url: string;
  /** Holds the next chunk that contains `marker` (and the rest of its connection) for `holdMs`. */
  arm(marker: string, holdMs: number): void;
  /** How many holds have fired and how many of them have been let go. */
  readonly held: number;
  readonly released: number;
  close(): Promise<void>;
}

export async function startDelayProxy(target: { host: string; port: number }): Promise<DelayProxy> {
  let armed: { marker: string; holdMs: number } | null = null;
  let held = 0;
  let released = 0;
  const sockets = new Set<net.Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target.port, target.host);
    sockets.add(client);
    sockets.add(upstream);
    let queue: Buffer[] | null = null; // non-null while this connection is held
    let tail = '';
    client.on('data', (chunk: Buffer) => {
      if (queue) {
        queue.push(chunk);
        return;
      }
      const text = tail + chunk.toString('latin1');
      tail = text.slice(-256);
      if (armed && text.includes(armed.marker)) {
        const { holdMs } = armed;
        armed = null;
        held++;
        const q: Buffer[] = [chunk];
        queue = q;
        const t = setTimeout(() => {
          timers.delete(t);
          queue = null;
          released++;
          for (const b of q) upstream.write(b);
        }, holdMs);
        timers.add(t);
        return;
      }
      upstream.write(chunk);
    });
    upstream.on('data', (chunk: Buffer) => client.write(chunk));
    const end = (): void => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', end);
    upstream.on('close', end);
    client.on('error', end);
    upstream.on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return {
    url: `redis://127.0.0.1:${port}`,
    arm(marker, holdMs) {
      armed = { marker, holdMs };
    },
    get held() {
      return held;
    },
    get released() {
      return released;
    },
    async close() {
      for (const t of timers) clearTimeout(t);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
