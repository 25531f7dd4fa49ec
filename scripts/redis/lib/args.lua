-- Argument checks shared by the queue scripts ("luakiq:include args"). Each
-- runs before its script's first write (Redis does not roll a script back)
-- and raises one line, "BADARG luakiq SCRIPT: WHAT must be ..., got 'VALUE'"
-- (docs/redis.md, "Errors").
-- Each returns the parsed number.

-- A finite number (no NaN, no +-inf).
local function arg_finite(script, what, s)
  local x = tonumber(s)
  if not x or x ~= x or x == math.huge or x == -math.huge then
    error("BADARG luakiq " .. script .. ": " .. what .. " must be a finite number, got '" .. tostring(s) .. "'", 0)
  end
  return x
end

-- An integer >= 0 (a limit or count).
local function arg_count(script, what, s)
  local x = tonumber(s)
  if not x or x ~= math.floor(x) or x < 0 or x > 1e9 then
    error("BADARG luakiq " .. script .. ": " .. what .. " must be an integer >= 0, got '" .. tostring(s) .. "'", 0)
  end
  return x
end

-- The lease arguments of the scripts that hold a shard: a non-empty token and
-- lease_ms, a positive integer. Returns lease_ms.
local function arg_lease(script, token, s)
  if not token or token == "" then error("BADARG luakiq " .. script .. ": token is empty", 0) end
  local x = tonumber(s)
  if not x or x ~= math.floor(x) or x < 1 or x > 1e12 then
    error("BADARG luakiq " .. script .. ": lease_ms must be a positive integer, got '" .. tostring(s) .. "'", 0)
  end
  return x
end
