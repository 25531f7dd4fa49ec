-- release.lua: give a shard's lease back (graceful stop; the caller acks its
-- batch first with fetch.lua). "holder" stays: it names the last holder.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".  ARGV[1] = token.
-- Returns 1 if the lease was this token's and is now gone, else 0.
-- luakiq:include keys
local lease = shard_keys(KEYS[1]).lease
if ARGV[1] and ARGV[1] ~= "" and redis.call("GET", lease) == ARGV[1] then
  redis.call("DEL", lease)
  return 1
end
return 0
