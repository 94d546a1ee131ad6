--[[
  Take a batch id out of flight (its file is written, it was dead-lettered, or its push failed).

  KEYS[1] pending zset    {ns}:pending:<prefix>
  KEYS[2] prefixes set    {ns}:prefixes
  KEYS[3] idempotency key {ns}:idem:<digest>  (deleted only if ARGV[3] == '1' and it still names ARGV[1])

  ARGV[1] batch id
  ARGV[2] list prefix
  ARGV[3] '1' to forget the idempotency key (a push that failed must be retryable)

  Returns 1 when the id was in flight, else 0 (releasing twice is harmless).
]]
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[2])
end
if ARGV[3] == '1' and redis.call('GET', KEYS[3]) == ARGV[1] then
  redis.call('DEL', KEYS[3])
end
return removed
