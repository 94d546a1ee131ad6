--[[
  Take a batch id out of flight (its file is written, it was dead-lettered, or its push failed),
  and, when its file is written, add it to the prefix's index of written ids.

  KEYS[1] pending zset    {ns}:pending:<prefix>
  KEYS[2] prefixes set    {ns}:prefixes
  KEYS[3] idempotency key prefix {ns}:idem:<family>:<shard>:  (see mint_batch-4.lua; used only if ARGV[3] == '1')
  KEYS[4] written zset    {ns}:written:<prefix>  ids whose file is written (score 0: ordered by member)
  KEYS[5] floor key       {ns}:floor:<prefix>    the index holds every written id above this
  KEYS[6] clock hash      {ns}:clock
  KEYS[7] groups hash     {ns}:groups            member id -> the id of the group job it rides in (see BatchLedger.noteGroup)

  ARGV[1] batch id
  ARGV[2] list prefix
  ARGV[3] '1' to forget the idempotency claim (a push that failed must be retryable)
  ARGV[4] '1' when the file is written (index it)
  ARGV[5] trim cutoff: a 13-digit ms; ids older than it leave the index ('' = keep all)
  ARGV[6] idle TTL in seconds of the written zset and the floor key ('' or '0' = none)
  ARGV[7] idempotency window in seconds (with ARGV[3])
  ARGV[8] claim field (with ARGV[3]); its entry is deleted only while it still names ARGV[1]

  Returns 1 when the id was in flight, else 0 (releasing twice is harmless).

  The floor is set when a prefix's index is born: to the last id minted by then. Every id
  written before that moment is at most that id, and every id minted after it is released (and
  so indexed) after it. A list cursor at or above the floor can therefore be answered from the
  index alone. Trimming raises the floor to the cutoff. Both keys expire ARGV[6] seconds after
  the prefix's last write: by then every id in the index is older than the trim cutoff, and a
  later write starts a new index whose floor is the last id minted, so nothing listable is lost.
]]
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
-- Out of flight, so no longer a group member anyone needs to find.
redis.call('HDEL', KEYS[7], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[2])
end
if ARGV[3] == '1' then
  local t = redis.call('TIME')
  local window = tonumber(ARGV[7])
  local bucketLen = math.max(1, math.ceil(window / 4))
  local bucket = math.floor(tonumber(t[1]) / bucketLen)
  -- One bucket ahead too: the mint may have run on a test clock or just before a bucket turned.
  for b = bucket + 1, bucket - math.ceil(window / bucketLen), -1 do
    local key = KEYS[3] .. b
    local v = redis.call('HGET', key, ARGV[8])
    if v and string.sub(v, 1, 25) == ARGV[1] then
      redis.call('HDEL', key, ARGV[8])
    end
  end
end
if ARGV[4] == '1' then
  if redis.call('EXISTS', KEYS[5]) == 0 then
    redis.call('SET', KEYS[5], redis.call('HGET', KEYS[6], 'last') or ARGV[1])
  end
  redis.call('ZADD', KEYS[4], 0, ARGV[1])
  if ARGV[5] ~= '' then
    redis.call('ZREMRANGEBYLEX', KEYS[4], '-', '(' .. ARGV[5])
    if redis.call('GET', KEYS[5]) < ARGV[5] then
      redis.call('SET', KEYS[5], ARGV[5])
    end
  end
  local ttl = tonumber(ARGV[6] ~= '' and ARGV[6] or '0')
  if ttl > 0 then
    redis.call('EXPIRE', KEYS[4], ttl)
    redis.call('EXPIRE', KEYS[5], ttl)
  end
end
return removed
