-- renew.lua: extends a shard lease while its holder is busy in a long batch
-- (sent by the host's main thread every lease_renew seconds for each thread
-- that is performing). Never takes a lease someone else holds.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] token, [2] lease_ms.
-- Returns 1 when the lease is (again) this token's, 0 when another holds it or
-- it lapsed and another host became holder since.
-- luakiq:include keys
local P = KEYS[1]
local K = shard_keys(P)
local token, lease_ms = ARGV[1], tonumber(ARGV[2])
if not token or token == "" or not lease_ms or lease_ms < 1 then
  error("BADARG luakiq renew: ARGV must be token, lease_ms", 0)
end
local cur = redis.call("GET", K.lease)
if cur == token or (not cur and redis.call("GET", K.holder) == token) then
  redis.call("SET", K.lease, token, "PX", math.floor(lease_ms))
  return 1
end
return 0
