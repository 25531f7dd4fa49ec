-- luakiq.splitters: how the shards of a node are split over its threads.
--
-- A splitter is a function (handlers, threads_per_node) -> groups:
--   handlers  the flat array of {worker = name, shard = n}, workers in config
--             order, then shards 0..shards_count-1 (Lowkiq's order);
--   groups    an array of non-empty arrays of handlers; one thread per group.
-- The main thread runs it once at start. Lowkiq's dealing is kept exactly, so
-- a plan made by Lowkiq and by luakiq for the same workers is the same.
--
-- Config:  splitter = luakiq.splitters.default
--          splitter = luakiq.splitters.by_node(3, 1)   -- 3 nodes, this is node 1
--          splitter = "elastic"  (or luakiq.splitters.elastic): the shards
--          move between the live hosts as they come and go (luakiq.runner.elastic)
local M = {}

local function is_int(x) return type(x) == "number" and x % 1 == 0 end

-- transpose(list, k) -> k groups (some possibly empty): item i (1-based)
-- goes to group (i - 1) % k + 1, order kept inside each group (round-robin
-- dealing; Lowkiq's Array#in_transposed_groups). 0..9 into 3 groups:
-- {0,3,6,9}, {1,4,7}, {2,5,8}.
function M.transpose(list, k)
  if not is_int(k) or k < 1 then
    error("splitters.transpose: k must be an integer >= 1, got " .. tostring(k), 2)
  end
  local groups = {}
  for g = 1, k do groups[g] = {} end
  for i = 1, #list do
    local g = groups[(i - 1) % k + 1]
    g[#g + 1] = list[i]
  end
  return groups
end

local function drop_empty(groups)
  local out = {}
  for _, g in ipairs(groups) do
    if #g > 0 then out[#out + 1] = g end
  end
  return out
end

-- The arguments of a splitter `name` called as one (`write` says how to
-- configure it when it was called instead); raises at the splitter's caller.
local function check_args(name, write, handlers, threads_per_node)
  if type(handlers) ~= "table" then
    error("splitters." .. name .. ": handlers must be an array (write `" .. write .. "`, without a call)", 3)
  end
  if not is_int(threads_per_node) or threads_per_node < 1 then
    error("splitters." .. name .. ": threads_per_node must be an integer >= 1, got " .. tostring(threads_per_node), 3)
  end
end

-- default(handlers, threads_per_node) -> groups: deals the handlers into
-- threads_per_node groups and drops the empty ones (fewer shards than threads
-- means fewer threads). Use the function itself as the splitter; do not call it.
function M.default(handlers, threads_per_node)
  check_args("default", "splitter = luakiq.splitters.default", handlers, threads_per_node)
  return drop_empty(M.transpose(handlers, threads_per_node))
end

-- Accepts integers and integer strings (e.g. straight from os.getenv).
local function int_arg(v)
  if type(v) == "string" then v = tonumber(v) end
  if is_int(v) then return v end
  return nil
end

-- by_node(number_of_nodes, node_number) -> splitter. For a cluster of
-- number_of_nodes hosts on one Redis, each started with a distinct
-- node_number in 0..number_of_nodes-1: this node takes the flat handler
-- indices node_number, node_number + N, ... (dealt as Lowkiq does), then
-- splits them over its threads like `default`. Shard leases still fence a
-- wrong or duplicate node_number (the second holder is refused).
function M.by_node(number_of_nodes, node_number)
  local n, k = int_arg(number_of_nodes), int_arg(node_number)
  if not n or n < 1 then
    error("splitters.by_node: number_of_nodes must be an integer >= 1, got " .. tostring(number_of_nodes), 2)
  end
  if not k or k < 0 or k >= n then
    error(string.format("splitters.by_node: node_number must be an integer in 0..%d, got %s",
      n - 1, tostring(node_number)), 2)
  end
  return function(handlers, threads_per_node)
    if type(handlers) ~= "table" then error("splitters.by_node: handlers must be an array", 2) end
    return M.default(M.transpose(handlers, n)[k + 1], threads_per_node)
  end
end

-- elastic(handlers, threads_per_node) -> groups: the marker of elastic hosts
-- (`splitter = "elastic"`). Called as a splitter it gives what this host would
-- take alone: every shard, split evenly over its threads by the same hashing
-- as a running elastic host's (luakiq.runner.elastic; the thread of a shard depends
-- on the host's token, random per start, so this is an example). `luakiq
-- run` does not use the groups, only their count (threads), and gives every
-- thread every handler; each thread then takes its share (luakiq.runner).
function M.elastic(handlers, threads_per_node)
  check_args("elastic", 'splitter = "elastic"', handlers, threads_per_node)
  local elastic = require "luakiq.runner.elastic"
  return drop_empty(elastic.share(handlers, {}, "plan", threads_per_node))
end

return M
