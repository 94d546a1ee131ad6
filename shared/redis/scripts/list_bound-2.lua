--[[
  Read, in one step, what the list route may show for a prefix.

  KEYS[1] clock hash   {ns}:clock
  KEYS[2] pending zset {ns}:pending:<prefix>

  Returns { oldestPending or '', lastMinted or '', now in ms (Redis TIME) }.

  Ids below the oldest in-flight id are final. With nothing in flight, every id up to the
  last minted one is final, and any id minted after this read is larger than it, so a
  listing filtered by this bound can never show an id while a smaller one is still coming.
  With no id ever minted here (fresh Redis, older files in the store), ids of earlier
  milliseconds than now are final.
]]
local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)
local last = redis.call('HGET', KEYS[1], 'last')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return { oldest[1] or '', last or '', string.format('%013d', now) }
