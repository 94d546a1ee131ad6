--[[
  Take batch ids out of flight (each file written, dead-lettered, or its push failed), and, for
  each whose file is written, add it to its prefix's index of written ids. One call carries the
  releases that waited while the previous call ran (shared/ledger/ledger.ts); each is handled
  exactly as if released alone, one after the other.

  The key count is the caller's (3 + 4 per release), so every key the script touches is in KEYS.
  KEYS[1]       prefixes set    {ns}:prefixes
  KEYS[2]       clock hash      {ns}:clock
  KEYS[3]       groups hash     {ns}:groups            member id -> the id of the group job it rides in (see BatchLedger.noteGroup)
  per release i (1-based), at k = 3 + 4 (i - 1):
  KEYS[k + 1]   pending zset    {ns}:pending:<prefix>
  KEYS[k + 2]   idempotency key prefix {ns}:idem:<family>:<shard>:  (see mint_batches-n.lua; used only with its forget flag)
  KEYS[k + 3]   written zset    {ns}:written:<prefix>  ids whose file is written (score 0: ordered by member)
  KEYS[k + 4]   floor key       {ns}:floor:<prefix>    the index holds every written id above this

  per release i, at j = 8 (i - 1):
  ARGV[j + 1] batch id
  ARGV[j + 2] list prefix
  ARGV[j + 3] '1' to forget the idempotency claim (a push that failed must be retryable)
  ARGV[j + 4] '1' when the file is written (index it)
  ARGV[j + 5] trim cutoff: a 13-digit ms; ids older than it leave the index ('' = keep all)
  ARGV[j + 6] idle TTL in seconds of the written zset and the floor key ('' or '0' = none)
  ARGV[j + 7] idempotency window in seconds (with ARGV[j + 3])
  ARGV[j + 8] claim field (with ARGV[j + 3]); its entry is deleted only while it still names the id

  Returns { r1, r2, ... } in release order: 1 when the id was in flight, else 0 (releasing twice
  is harmless).

  The floor is set when a prefix's index is born: to the last id minted by then. Every id
  written before that moment is at most that id, and every id minted after it is released (and
  so indexed) after it. A list cursor at or above the floor can therefore be answered from the
  index alone. Trimming raises the floor to the cutoff. Both keys expire the idle TTL after the
  prefix's last write: by then every id in the index is older than the trim cutoff, and a later
  write starts a new index whose floor is the last id minted, so nothing listable is lost.
]]
local releases = (#KEYS - 3) / 4
if releases < 1 or releases ~= math.floor(releases) or #ARGV ~= 8 * releases then
  return redis.error_reply('release_batches: want 3 + 4n keys and 8n arguments')
end

local nowS
local out = {}
for i = 1, releases do
  local k, j = 3 + 4 * (i - 1), 8 * (i - 1)
  local pending, idemPrefix, written, floor = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local id, prefix = ARGV[j + 1], ARGV[j + 2]

  out[i] = redis.call('ZREM', pending, id)
  -- Out of flight, so no longer a group member anyone needs to find.
  redis.call('HDEL', KEYS[3], id)
  if redis.call('ZCARD', pending) == 0 then
    redis.call('SREM', KEYS[1], prefix)
  end
  if ARGV[j + 3] == '1' then
    if not nowS then nowS = tonumber(redis.call('TIME')[1]) end
    local window = tonumber(ARGV[j + 7])
    local field = ARGV[j + 8]
    local bucketLen = math.max(1, math.ceil(window / 4))
    local bucket = math.floor(nowS / bucketLen)
    -- One bucket ahead too: the mint may have run on a test clock or just before a bucket turned.
    for b = bucket + 1, bucket - math.ceil(window / bucketLen), -1 do
      local key = idemPrefix .. b
      local v = redis.call('HGET', key, field)
      if v and string.sub(v, 1, 25) == id then
        redis.call('HDEL', key, field)
      end
    end
  end
  if ARGV[j + 4] == '1' then
    if redis.call('EXISTS', floor) == 0 then
      redis.call('SET', floor, redis.call('HGET', KEYS[2], 'last') or id)
    end
    redis.call('ZADD', written, 0, id)
    local cutoff = ARGV[j + 5]
    if cutoff ~= '' then
      redis.call('ZREMRANGEBYLEX', written, '-', '(' .. cutoff)
      if redis.call('GET', floor) < cutoff then
        redis.call('SET', floor, cutoff)
      end
    end
    local ttl = tonumber(ARGV[j + 6] ~= '' and ARGV[j + 6] or '0')
    if ttl > 0 then
      redis.call('EXPIRE', written, ttl)
      redis.call('EXPIRE', floor, ttl)
    end
  end
end
return out
