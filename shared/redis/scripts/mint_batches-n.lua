--[[
  Mint batch ids and mark them in flight, atomically, for one or more pushes in the order given
  (one call carries the mints that waited while the previous call ran: shared/ledger/ledger.ts).
  With an idempotency claim, a push's retry is answered with the id its first push got instead.
  Each push is handled exactly as if it had been minted alone, one after the other: a later push
  in the same call sees the claims and the clock of the earlier ones.

  The key count is the caller's (2 + 2 per push), so every key the script touches is in KEYS.
  KEYS[1]       clock hash      {ns}:clock              fields: ms (last minted ms), n (counter in that ms), last (last id)
  KEYS[2]       prefixes set    {ns}:prefixes           list prefixes that have in-flight ids
  per push i (1-based):
  KEYS[1 + 2i]  pending zset    {ns}:pending:<prefix>   members = in-flight ids (score 0: ordered by member)
  KEYS[2 + 2i]  idempotency key prefix {ns}:idem:<family>:<shard>:   (ignored unless its claim flag is '1')
          The entries live in hashes named <key prefix> .. <bucket>, bucket = floor(now s / len) with
          len = ceil(window / 4): field = 16-byte digest of the claim's scope, value = id .. body
          digest (keyed claims) or the id alone (body claims). A claim is looked up in the current
          bucket and the back = ceil(window / len) before it, and a bucket hash expires back + 1
          buckets after it starts, so an entry is recognised for at least the window and lives
          at most (back + 1) × len: 1.25 windows when the window is a multiple of 4 s.

  ARGV[1]  clock override in ms ('' = Redis TIME; tests only)
  per push i, at j = 1 + 6 (i - 1):
  ARGV[j + 1]  random suffix (6 hex chars)
  ARGV[j + 2]  idempotency window in seconds
  ARGV[j + 3]  '1' to use the claim (its key prefix, ARGV[j + 5], ARGV[j + 6])
  ARGV[j + 4]  list prefix (member of KEYS[2])
  ARGV[j + 5]  claim field (16-byte digest of the scope)
  ARGV[j + 6]  body digest (16 bytes) for a keyed claim; '' for a body claim

  Returns { id1, status1, id2, status2, ... } in push order: status 0 = minted, 1 = the claim
  already named this id (same body; nothing minted), 2 = the key already named this id with a
  DIFFERENT body (nothing minted).

  The clock is Redis TIME so every API instance shares one clock; the minted ms never goes
  below the last one, and the per-ms counter rolls into the next ms after 9999, so ids are
  unique and strictly increasing as strings.
]]
local pushes = (#KEYS - 2) / 2
if pushes < 1 or pushes ~= math.floor(pushes) or #ARGV ~= 1 + 6 * pushes then
  return redis.error_reply('mint_batches: want 2 + 2n keys and 1 + 6n arguments')
end

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The last id minted: read once, carried from push to push, written back once.
local last = tonumber(redis.call('HGET', KEYS[1], 'ms') or '0')
local counter = tonumber(redis.call('HGET', KEYS[1], 'n') or '-1')
local lastId
local out = {}

for i = 1, pushes do
  local j = 1 + 6 * (i - 1)
  local pending, idemPrefix = KEYS[1 + 2 * i], KEYS[2 + 2 * i]
  local useClaim = ARGV[j + 3] == '1'
  local field, digest = ARGV[j + 5], ARGV[j + 6]
  local answered = false

  local bucketLen, bucket, back
  if useClaim then
    local window = tonumber(ARGV[j + 2])
    bucketLen = math.max(1, math.ceil(window / 4))
    back = math.ceil(window / bucketLen)
    bucket = math.floor(math.floor(now / 1000) / bucketLen)
    for b = bucket, bucket - back, -1 do
      local prior = redis.call('HGET', idemPrefix .. b, field)
      if prior then
        local id = string.sub(prior, 1, 25)
        out[#out + 1] = id
        if digest == '' or string.sub(prior, 26) == digest then out[#out + 1] = 1 else out[#out + 1] = 2 end
        answered = true
        break
      end
    end
  end

  if not answered then
    local ms, n = now, 0
    if ms <= last then
      ms = last
      n = counter + 1
      if n > 9999 then
        ms = last + 1
        n = 0
      end
    end
    local id = string.format('%013d-%04d-%s', ms, n, ARGV[j + 1])
    last, counter, lastId = ms, n, id
    redis.call('ZADD', pending, 0, id)
    redis.call('SADD', KEYS[2], ARGV[j + 4])
    if useClaim then
      local key = idemPrefix .. bucket
      redis.call('HSET', key, field, id .. digest)
      -- Relative TTL (not EXPIREAT) so a test clock override cannot expire it at once.
      local nowS = math.floor(ms / 1000)
      redis.call('EXPIRE', key, (bucket + back + 1) * bucketLen - nowS)
    end
    out[#out + 1] = id
    out[#out + 1] = 0
  end
end

if lastId then redis.call('HSET', KEYS[1], 'ms', last, 'n', counter, 'last', lastId) end
return out
