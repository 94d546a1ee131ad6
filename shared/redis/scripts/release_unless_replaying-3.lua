--[[
  The reaper's release of a dead-lettered (or never enqueued) id: like release_batch-7.lua
  without the index, but a no-op while the id is being replayed.

  KEYS[1] pending zset    {ns}:pending:<prefix>
  KEYS[2] prefixes set    {ns}:prefixes
  KEYS[3] replay marker   {ns}:replaying:<id>   set by a replay before it retries the job (TTL 60 s)

  ARGV[1] batch id
  ARGV[2] list prefix

  Returns 1 when the id was released, else 0.

  The reaper reads a job's state and then releases its id. A replay between the two (mark the
  id in flight, move the job back to waiting) would otherwise be undone by a release decided
  on the stale 'failed' state, and the list would stop waiting for a batch being written. The
  marker outlives that window by far, so the reaper's next pass sees the job's new state.
]]
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], ARGV[2])
end
return removed
