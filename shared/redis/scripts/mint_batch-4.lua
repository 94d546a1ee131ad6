--[[
  Mint one batch id and mark it in flight, atomically; with an idempotency claim, answer a
  retry with the id its first push got instead.

  KEYS[1] clock hash      {ns}:clock              fields: ms (last minted ms), n (counter in that ms), last (last id)
  KEYS[2] pending zset    {ns}:pending:<prefix>   members = in-flight ids (score 0: ordered by member)
  KEYS[3] idempotency key prefix {ns}:idem:<family>:<shard>:   (ignored unless ARGV[3] == '1')
          The entries live in hashes named KEYS[3] .. <bucket>, bucket = floor(now s / len) with
          len = ceil(window / 4): field = 16-byte digest of the claim's scope, value = id .. body
          digest (keyed claims) or the id alone (body claims). A claim is looked up in the current
          bucket and the back = ceil(window / len) before it, and a bucket hash expires back + 1
          buckets after it starts, so an entry is recognised for at least the window and lives
          at most (back + 1) × len: 1.25 windows when the window is a multiple of 4 s.
  KEYS[4] prefixes set    {ns}:prefixes           list prefixes that have in-flight ids

  ARGV[1] random suffix (6 hex chars)
  ARGV[2] idempotency window in seconds
  ARGV[3] '1' to use the claim (KEYS[3], ARGV[6], ARGV[7])
  ARGV[4] clock override in ms ('' = Redis TIME; tests only)
  ARGV[5] list prefix (member of KEYS[4])
  ARGV[6] claim field (16-byte digest of the scope)
  ARGV[7] body digest (16 bytes) for a keyed claim; '' for a body claim

  Returns { id, status }: status 0 = minted, 1 = the claim already named this id (same body;
  nothing minted), 2 = the key already named this id with a DIFFERENT body (nothing minted).

  The clock is Redis TIME so every API instance shares one clock; the minted ms never goes
  below the last one, and the per-ms counter rolls into the next ms after 9999, so ids are
  unique and strictly increasing as strings.
]]
local now
if ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local bucketLen, bucket, back
if ARGV[3] == '1' then
  local window = tonumber(ARGV[2])
  bucketLen = math.max(1, math.ceil(window / 4))
  back = math.ceil(window / bucketLen)
  bucket = math.floor(math.floor(now / 1000) / bucketLen)
  for b = bucket, bucket - back, -1 do
    local prior = redis.call('HGET', KEYS[3] .. b, ARGV[6])
    if prior then
      local id = string.sub(prior, 1, 25)
      if ARGV[7] == '' or string.sub(prior, 26) == ARGV[7] then return { id, 1 } end
      return { id, 2 }
    end
  end
end

local last = tonumber(redis.call('HGET', KEYS[1], 'ms') or '0')
local counter = 0
if now <= last then
  now = last
  counter = tonumber(redis.call('HGET', KEYS[1], 'n') or '-1') + 1
  if counter > 9999 then
    now = last + 1
    counter = 0
  end
end

local id = string.format('%013d-%04d-%s', now, counter, ARGV[1])
redis.call('HSET', KEYS[1], 'ms', now, 'n', counter, 'last', id)
redis.call('ZADD', KEYS[2], 0, id)
redis.call('SADD', KEYS[4], ARGV[5])
if ARGV[3] == '1' then
  local key = KEYS[3] .. bucket
  redis.call('HSET', key, ARGV[6], id .. ARGV[7])
  -- Relative TTL (not EXPIREAT) so a test clock override cannot expire it at once.
  local nowS = math.floor(now / 1000)
  redis.call('EXPIRE', key, (bucket + back + 1) * bucketLen - nowS)
end
return { id, 0 }
