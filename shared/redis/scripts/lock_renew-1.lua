--[[
  Renew a lock's TTL, if the caller still holds it (the rollup's per-prefix lock).

  KEYS[1] lock string     {<QUEUE_NAME>}:rollup:lock:<prefix>   value = the holder's token

  ARGV[1] the holder's token
  ARGV[2] the new TTL in ms

  Returns 1 when renewed; 0 when the key is gone or another holder's token is in it.
]]
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
