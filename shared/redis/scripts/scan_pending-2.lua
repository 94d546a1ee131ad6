--[[
  One upkeep pass over every prefix of one shard, in one call: the oldest in-flight id of the
  shard (for the watermark lag) and, when asked, the release of ids past their grace that have
  no job behind them (orphans: minted, never enqueued) or whose job failed for good (dead).
  Replaces one round trip per prefix (and one per candidate id) with one per shard.

  KEYS[1] prefixes set    {ns}:prefixes            list prefixes with ids in flight
  KEYS[2] failed zset     the shard's BullMQ failed set (the queue's own key name)

  ARGV[1] pending key prefix      {ns}:pending:     (.. prefix = that prefix's pending zset)
  ARGV[2] replay marker prefix    {ns}:replaying:   (.. id; see release_unless_replaying-3.lua)
  ARGV[3] job key prefix          the queue's job hash prefix (.. id = the job's hash)
  ARGV[4] '1' to release orphans and dead ids, '0' to only read
  ARGV[5] cutoff: a 13-digit ms; only ids minted before it are candidates
  ARGV[6] at most this many prefixes are looked at
  ARGV[7] at most this many candidate ids per prefix
  ARGV[8] groups hash     {ns}:groups   member id -> its group job's id ('' = none): a member
          rides in that job, so that job's hash and failed entry are the ones checked

  Returns { orphans released, dead released, oldest in-flight id left ('' if none), prefixes seen }.

  Every key here shares the shard's hash tag (the pending zsets, markers, and the queue's keys
  are named under it), so the script stays in one Cluster slot although it names keys it was
  not passed. On one Redis without tags (QUEUE_SHARDS=1) that is allowed too.
  Cost: one ZRANGE per prefix plus work per candidate; ~10,000 prefixes take a few ms.
]]
local prefixes = redis.call('SMEMBERS', KEYS[1])
local maxPrefixes = tonumber(ARGV[6])
local perPrefix = tonumber(ARGV[7])
local reap = ARGV[4] == '1'
local groups = ARGV[8] or ''
local orphans, dead, seen = 0, 0, 0
local oldest = ''
for i = 1, math.min(#prefixes, maxPrefixes) do
  local prefix = prefixes[i]
  local pkey = ARGV[1] .. prefix
  seen = seen + 1
  local ids
  if reap then
    ids = redis.call('ZRANGE', pkey, 0, perPrefix - 1)
  else
    ids = redis.call('ZRANGE', pkey, 0, 0)
  end
  local left = nil
  for j = 1, #ids do
    local id = ids[j]
    local released = false
    if reap and id < ARGV[5] and redis.call('EXISTS', ARGV[2] .. id) == 0 then
      local job = id
      if groups ~= '' and redis.call('EXISTS', ARGV[3] .. id) == 0 then
        job = redis.call('HGET', groups, id) or id
      end
      if redis.call('EXISTS', ARGV[3] .. job) == 0 then
        redis.call('ZREM', pkey, id)
        orphans = orphans + 1
        released = true
      elseif redis.call('ZSCORE', KEYS[2], job) then
        redis.call('ZREM', pkey, id)
        dead = dead + 1
        released = true
      end
      if released and groups ~= '' then redis.call('HDEL', groups, id) end
    end
    if not released then
      left = id
      break
    end
  end
  if left == nil and reap and #ids > 0 then
    -- Every candidate read was released: the next one (if any) is the oldest left.
    local rest = redis.call('ZRANGE', pkey, 0, 0)
    left = rest[1]
  end
  if left == nil then
    if redis.call('ZCARD', pkey) == 0 then redis.call('SREM', KEYS[1], prefix) end
  elseif oldest == '' or left < oldest then
    oldest = left
  end
end
return { orphans, dead, oldest, seen }
