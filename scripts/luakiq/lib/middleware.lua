-- luakiq.lib.middleware: folds a list of middlewares around an action (Lowkiq's
-- middleware_wrapper).
--
-- A middleware is function(worker, batch, nxt). It must call nxt() to go on;
-- nxt() runs the rest of the chain and returns what it returned. If it does
-- not call nxt(), the inner action is skipped (on the server the batch then
-- counts as a success, as in Lowkiq). Errors propagate to the caller (on the
-- server: the batch fails and is retried). list[1] is the outermost.
--   server (cfg.middlewares):        batch = {id -> payloads}, inner = perform
--   client (cfg.client_middlewares): batch = the jobs array (may be changed
--                                    in place before nxt()), inner = the push
local M = {}

local function callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and type(mt.__call) == "function"
end

-- chain(list, inner) -> function(worker, batch) returning what list[1]
-- returns (what inner returns when the list is empty).
function M.chain(list, inner)
  list = list or {}
  if type(list) ~= "table" then error("middleware.chain: list must be an array of functions", 2) end
  if not callable(inner) then error("middleware.chain: inner must be a function", 2) end
  local n = #list
  for i = 1, n do
    if not callable(list[i]) then
      error("middleware.chain: middleware " .. i .. " is a " .. type(list[i]) .. ", not a function", 2)
    end
  end
  if n == 0 then return inner end
  -- extra (the server's per-call info) goes to inner, not to middlewares
  return function(worker, batch, extra)
    local function run(i)
      if i > n then return inner(worker, batch, extra) end
      return list[i](worker, batch, function() return run(i + 1) end)
    end
    return run(1)
  end
end

return M
