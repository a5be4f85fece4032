"""The script a budget reservation runs in Redis (``RedisSpendStore.reserve``): one atomic step per request.

It drops the holds that expired, reads each budget's spent and reserved, and when the request's hold fits under
every limit takes it in each (a member of the budget's holds, scored by its expiry, and its amount added to
``reserved``); else it takes nothing and names the budget it did not fit. Its release is the settlement's
script (``gateway.admission.spending.redis_settle``), which removes the member once and only if it is there.
"""

from __future__ import annotations

# KEYS: per scope, its counters hash and its holds zset.
# ARGV: now, expiry, member ("" = only read), amount, then per scope: limit (-1 = no check), ttl.
# Returns {ok, refused scope (1-based, 0 if none), then spent, reserved per scope as read}.
RESERVE = """
local now, expiry, member, amount = tonumber(ARGV[1]), ARGV[2], ARGV[3], tonumber(ARGV[4])
local n = #KEYS / 2
local out = {1, 0}
for i = 1, n do
  local h, z = KEYS[2 * i - 1], KEYS[2 * i]
  local expired = redis.call('ZRANGEBYSCORE', z, '-inf', now)
  if #expired > 0 then
    local freed = 0
    for _, m in ipairs(expired) do freed = freed + tonumber(string.match(m, ':(%d+)$')) end
    redis.call('ZREMRANGEBYSCORE', z, '-inf', now)
    if freed ~= 0 then redis.call('HINCRBY', h, 'reserved', -freed) end
  end
  local v = redis.call('HMGET', h, 'spent', 'reserved')
  local spent, reserved = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  out[2 * i + 1], out[2 * i + 2] = spent, reserved
  local limit = tonumber(ARGV[3 + 2 * i])
  if out[1] == 1 and limit >= 0 and spent + reserved + amount > limit then
    out[1], out[2] = 0, i
  end
end
if out[1] == 1 and member ~= '' then
  for i = 1, n do
    redis.call('HINCRBY', KEYS[2 * i - 1], 'reserved', amount)
    redis.call('ZADD', KEYS[2 * i], expiry, member)
    redis.call('EXPIRE', KEYS[2 * i - 1], ARGV[4 + 2 * i])
    redis.call('EXPIRE', KEYS[2 * i], ARGV[4 + 2 * i])
  end
end
return out
"""

__all__ = ["RESERVE"]
