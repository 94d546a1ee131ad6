--[[
  Read-only look-up of an idempotency claim, as mint_batch-4.lua would find it: lets a push learn
  that it is a retry (and will be answered from its claim) before anything is charged for it.
  Writes nothing.

  KEYS[1] idempotency key prefix {ns}:idem:<family>:<shard>:   (see mint_batch-4.lua: the entries
          live in hashes named KEYS[1] .. <bucket>, all under the same hash tag, so one slot)

  ARGV[1] idempotency window in seconds (> 0)
  ARGV[2] clock override in ms ('' = Redis TIME; tests only)
  ARGV[3] claim field (16-byte digest of the scope)
  ARGV[4] body digest (16 bytes) for a keyed claim; '' for a body claim

  Returns { id, status }: status 0 = no entry ('' for id), 1 = the claim names id with the same
  body, 2 = the key names id with a DIFFERENT body. Buckets are looked up exactly as the mint does.
]]
local now
if ARGV[2] ~= '' then
  now = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local window = tonumber(ARGV[1])
local bucketLen = math.max(1, math.ceil(window / 4))
local back = math.ceil(window / bucketLen)
local bucket = math.floor(math.floor(now / 1000) / bucketLen)
for b = bucket, bucket - back, -1 do
  local prior = redis.call('HGET', KEYS[1] .. b, ARGV[3])
  if prior then
    local id = string.sub(prior, 1, 25)
    if ARGV[4] == '' or string.sub(prior, 26) == ARGV[4] then return { id, 1 } end
    return { id, 2 }
  end
end
return { '', 0 }
