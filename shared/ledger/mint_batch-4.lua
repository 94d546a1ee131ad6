--[[
  Mint one batch id and mark it in flight, atomically.

  KEYS[1] clock hash      {ns}:clock         fields: ms (last minted ms), n (counter in that ms), last (last id)
  KEYS[2] pending zset    {ns}:pending:<prefix>   members = in-flight ids (score 0: ordered by member)
  KEYS[3] idempotency key {ns}:idem:<digest>  (ignored unless ARGV[3] == '1')
  KEYS[4] prefixes set    {ns}:prefixes      list prefixes that have in-flight ids

  ARGV[1] random suffix (6 hex chars)
  ARGV[2] idempotency window in seconds
  ARGV[3] '1' to use KEYS[3]
  ARGV[4] clock override in ms ('' = Redis TIME; tests only)
  ARGV[5] list prefix (member of KEYS[4])

  Returns { id, existed } where existed = 1 when KEYS[3] already named an id (nothing minted).

  The clock is Redis TIME so every API instance shares one clock; the minted ms never goes
  below the last one, and the per-ms counter rolls into the next ms after 9999, so ids are
  unique and strictly increasing as strings.
]]
if ARGV[3] == '1' then
  local prior = redis.call('GET', KEYS[3])
  if prior then return { prior, 1 } end
end

local now
if ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
  redis.call('SET', KEYS[3], id, 'EX', tonumber(ARGV[2]))
end
return { id, 0 }
