--[[
  Move a namespace's id clock forward to a given ms when it is behind, so the next id is minted
  after it (a change of the shard layout: a prefix's ids keep increasing on its new shard).

  KEYS[1] clock hash      {ns}:clock              fields: ms (last minted ms), n (counter in that ms)

  ARGV[1] ms to move the clock to

  Returns 1. A clock at or past ARGV[1] is left as it is; one behind it is set to ms = ARGV[1]
  and n = 9999 (the last counter of that ms), so the next mint moves to a later ms.

  Bound: no TTL on purpose. The clock is one small hash per namespace (QUEUE_SHARDS of them), the same
  key mint_batch-4.lua keeps; it must outlive idle spells so that ids never go backwards
  (shared/redis/keyspace.ts `clock`; docs/reliability.md's sizing table).
]]
if tonumber(redis.call('HGET', KEYS[1], 'ms') or '0') < tonumber(ARGV[1]) then
  redis.call('HSET', KEYS[1], 'ms', ARGV[1], 'n', 9999)
end
return 1
