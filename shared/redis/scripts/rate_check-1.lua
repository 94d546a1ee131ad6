--[[
  Count one request against a fixed-window rate-limit bucket.

  KEYS[1] counter   <prefix>:<collection>:<action>:<dimension>:<bucket digest>

  ARGV[1] window length in ms

  Returns { count after this request, ms until the window ends }; the caller compares the
  count with the rule's limit (one script serves every rule).

  The window starts with the bucket's first request and the key expires with it (PEXPIRE),
  so an idle bucket costs nothing after one window. Every request counts, refused ones too
  (as in the reference): a client hammering past its limit stays limited.
]]
local n = redis.call('INCR', KEYS[1])
local ttl
if n == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
else
  ttl = redis.call('PTTL', KEYS[1])
  if ttl < 0 then
    -- A key that lost its expiry (it should not happen) must not limit forever.
    redis.call('PEXPIRE', KEYS[1], ARGV[1])
    ttl = tonumber(ARGV[1])
  end
end
return { n, ttl }
