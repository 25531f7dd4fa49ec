-- A stand-in for the application's database: the applied version of each order
-- is kept in Redis (hash example:orders), through the worker thread's own connection.
local luakiq = require "luakiq"

local M = {}

function M.applied_version(id)
  return tonumber(luakiq.redis.call("HGET", "example:orders", id)) or 0
end

function M.apply(id, snapshot)
  luakiq.redis.call("HSET", "example:orders", id, snapshot.version)
end

return M
