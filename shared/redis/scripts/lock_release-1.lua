--[[
  Release a lock, if the caller still holds it (the rollup's per-prefix lock).

  KEYS[1] lock string     {<QUEUE_NAME>}:rollup:lock:<prefix>   value = the holder's token

  ARGV[1] the holder's token

  Returns 1 when deleted; 0 when the key is gone or another holder's token is in it (that
  holder's lock is left alone).
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
