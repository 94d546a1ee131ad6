import { createReadStream } from 'node:fs';
import fs from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';

/**
 * Serves a folder read-only over loopback HTTP, with byte ranges (icebird's Parquet reader,
 * hyparquet, reads footers by range). Paths outside the folder get 403, missing files 404.
 */
export function serveFolder(dir: string): Promise<http.Server> {
  const s = http.createServer((req, res) => {
    void (async () => {
      const file = path.join(dir, decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname));
      if (!file.startsWith(dir + path.sep)) return res.writeHead(403).end();
      const st = await fs.stat(file).catch(() => null);
      if (!st?.isFile()) return res.writeHead(404).end();
      const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
      if (m) {
        const start = Number(m[1]);
        const end = m[2] ? Math.min(Number(m[2]), st.size - 1) : st.size - 1;
        res.writeHead(206, { 'content-length': end - start + 1, 'content-range': `bytes ${start}-${end}/${st.size}` });
        createReadStream(file, { start, end }).pipe(res);
      } else {
        res.writeHead(200, { 'content-length': st.size });
        createReadStream(file).pipe(res);
      }
    })();
  });
  return new Promise((resolve) => s.listen(0, '127.0.0.1', () => resolve(s)));
}
