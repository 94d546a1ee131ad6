/**
 * Every name `GET /list/<collection>/<app>` returns, paged with `?after=` (`limit` a page, 1,000
 * unless told; at most `maxPages` pages, 100 unless told, then it throws rather than return part of
 * the list), without the `.parquet` suffix: the batch ids in the order the API lists them.
 */
export async function listAllIds(
  base: string,
  app: string,
  token: string,
  opts: { collection?: string; limit?: number; maxPages?: number } = {},
): Promise<string[]> {
  const { collection = 'events', limit = 1000, maxPages = 100 } = opts;
  const out: string[] = [];
  let after: string | undefined;
  for (let page = 0; page < maxPages; page++) {
    const q = new URLSearchParams({ limit: String(limit) });
    if (after !== undefined) q.set('after', after);
    const r = await fetch(`${base}/list/${collection}/${app}?${q.toString()}`, {
      headers: { Authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(10_000),
    });
    if (r.status !== 200) throw new Error(`list ${app}: ${r.status}`);
    const body = (await r.json()) as { items: string[]; hasMore: boolean };
    out.push(...body.items.map((n) => n.replace(/\.parquet$/, '')));
    after = out[out.length - 1];
    if (!body.hasMore) return out;
  }
  throw new Error(`list ${app}: more than ${maxPages} pages`);
}
