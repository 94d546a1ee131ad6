--[[
  Admit a push of N events against its list prefix's (its {app}'s) events-per-window budget.

  KEYS[1] counter   <prefix>:<collection>:app:<prefix digest>

  ARGV[1] window length in ms
  ARGV[2] events allowed per window
  ARGV[3] events in this push

  Returns { 1 admitted or 0 refused, events counted in the window, ms until the window ends }.

  Refused pushes are not counted (they store nothing). A push bigger than the whole budget is
  admitted when the window is still empty, so one large batch can always get through; the
  key expires with its window (PEXPIRE), so an idle app costs nothing after one window.
]]
local window = tonumber(ARGV[1])
local max = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
if cur > 0 and cur + n > max then
  if ttl < 0 then ttl = window end
  return { 0, cur, ttl }
end
local total = redis.call('INCRBY', KEYS[1], n)
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], window)
  ttl = window
end
return { 1, total, ttl }
