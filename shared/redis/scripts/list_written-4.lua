--[[
  Answer a list page from the index of written ids, when the index covers the cursor.

  KEYS[1] clock hash   {ns}:clock
  KEYS[2] pending zset {ns}:pending:<prefix>
  KEYS[3] written zset {ns}:written:<prefix>
  KEYS[4] floor key    {ns}:floor:<prefix>

  ARGV[1] cursor id (exclusive)
  ARGV[2] page size

  Returns { bound kind ('below' | 'upTo'), bound id, covered ('1' | '0'), ids... }.
  The bound is read as in list_bound-2.lua; ids come only when covered (cursor >= floor).
  Reading both in one script keeps the page consistent with the bound.
]]
local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)
local kind, bound
if oldest[1] then
  kind, bound = 'below', oldest[1]
else
  local last = redis.call('HGET', KEYS[1], 'last')
  if last then
    kind, bound = 'upTo', last
  else
    local t = redis.call('TIME')
    kind, bound = 'below', string.format('%013d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  end
end
local floor = redis.call('GET', KEYS[4])
if not floor or ARGV[1] < floor then
  return { kind, bound, '0' }
end
local ids = redis.call('ZRANGEBYLEX', KEYS[3], '(' .. ARGV[1], '+', 'LIMIT', 0, tonumber(ARGV[2]))
local out = { kind, bound, '1' }
for i = 1, #ids do out[#out + 1] = ids[i] end
return out
