-- luakiq.runner.elastic: which shards an elastic host's thread takes (config
-- `splitter = "elastic"`; docs/operations.md, "Adding and removing hosts").
--
-- Every elastic host beats into NS:{hosts} (luakiq.ops.hosts) more often than a
-- fixed one (M.timing), and each of its worker threads reads the live hosts
-- every beat and works out on its own, with the same pure function as every
-- other thread of every host (M.share):
--   1. the host of each (worker, shard): rendezvous hashing over the live
--      hosts' tokens with bounded loads (no host above ceil(N / hosts)), so
--      every host gets an even share and a join or a leave moves few shards;
--   2. the thread of each of the host's shards: the same over its threads,
--      so they get an even share too.
-- The result is only a hint: two threads may disagree for a moment (one
-- has seen a host join, the other not yet). What keeps one holder per shard
-- is the shard lease, as always: each elastic thread leases with a token of
-- its own (HOST:PID:RANDOM/tN), so fetch.lua refuses a shard to a thread of
-- any host while another thread holds it, and a thread that no longer owns
-- a shard finishes its call, acks and releases the lease before the new
-- owner's fetch can take it (luakiq.runner's elastic_tick).
local core = require "luakiq.core"

local M = {}

-- The marker of the elastic splitter: `splitter = "elastic"` (config.lua
-- turns the string into it) or `splitter = luakiq.splitters.elastic`.
M.NAME = "elastic"

-- Beat and liveness for lease_ttl (seconds): elastic hosts beat every
-- lease_ttl / 4 (but at most every 2 s, luakiq.hosts' BEAT, and at least
-- every 0.1 s, whatever a tiny lease_ttl asks) and count a
-- host as gone when it has not beaten for dead_after: two thirds of
-- lease_ttl, at least 2.5 beats, at most luakiq.hosts' TIMEOUT. So a killed
-- host's shards are reassigned before its leases run out, and taken when
-- they do (within lease_ttl plus one beat).
function M.timing(lease_ttl, beat_max, timeout_max)
  local beat = math.max(math.min(beat_max, lease_ttl / 4), 0.1)
  local dead_after = math.min(timeout_max, math.max(lease_ttl * 2 / 3, 2.5 * beat))
  return beat, dead_after
end

-- A 32-bit score of a bucket for an item (SHA-256, first 8 hex digits).
local function score(bucket, item)
  return tonumber(core.sha256(bucket .. "\0" .. item):sub(1, 8), 16)
end

-- assign(items, buckets) -> owner: items (array of strings, in a fixed
-- order) to buckets (array of distinct strings), owner[item] = bucket.
-- Rendezvous (highest random weight) hashing with bounded loads: each item,
-- in order, goes to its highest-scoring bucket that is not full. With
-- #items = q * #buckets + r, a bucket is full at q + 1 items, or at q once
-- r buckets have q + 1: so loads differ by at most one. Pure: the same items
-- and buckets give the same result on every host.
function M.assign(items, buckets)
  local owner, n = {}, #buckets
  if n == 0 then return owner end
  local q = math.floor(#items / n)
  local r = #items - q * n
  local big = 0 -- buckets with q + 1 items
  local load = {}
  for _, b in ipairs(buckets) do load[b] = 0 end
  local ranked = {}
  for _, item in ipairs(items) do
    for i, b in ipairs(buckets) do ranked[i] = { b, score(b, item) } end
    table.sort(ranked, function(x, y)
      if x[2] ~= y[2] then return x[2] > y[2] end
      return x[1] < y[1]
    end)
    for _, c in ipairs(ranked) do
      local b = c[1]
      if load[b] < q or (load[b] == q and big < r) then
        owner[item] = b
        load[b] = load[b] + 1
        if load[b] == q + 1 then big = big + 1 end
        break
      end
    end
  end
  return owner
end

local function key(h) return h.worker .. "\0" .. h.shard end

-- The token of thread i (0-based) of the host whose token is host_token.
function M.thread_token(host_token, i) return host_token .. "/t" .. i end

-- share(handlers, hosts, me, threads) -> groups: for the host whose token is
-- `me` (counted live whether or not `hosts` lists it) among the live hosts'
-- tokens `hosts`, the handlers ({worker=, shard=}, Lowkiq's order) each of
-- its `threads` threads owns: groups[i] for thread i - 1 (possibly empty),
-- in handler order.
function M.share(handlers, hosts, me, threads)
  local live, seen = {}, {}
  for _, t in ipairs(hosts) do
    if not seen[t] then seen[t], live[#live + 1] = true, t end
  end
  if not seen[me] then live[#live + 1] = me end
  table.sort(live)
  local items = {}
  for i, h in ipairs(handlers) do items[i] = key(h) end
  local by_host = M.assign(items, live)
  local mine, mine_keys = {}, {}
  for i, h in ipairs(handlers) do
    if by_host[items[i]] == me then
      mine[#mine + 1] = h
      mine_keys[#mine_keys + 1] = items[i]
    end
  end
  local tokens = {}
  for i = 1, threads do tokens[i] = M.thread_token(me, i - 1) end
  local by_thread = M.assign(mine_keys, tokens)
  local groups, index = {}, {}
  for i, t in ipairs(tokens) do groups[i], index[t] = {}, i end
  for j, h in ipairs(mine) do
    local g = groups[index[by_thread[mine_keys[j]]]]
    g[#g + 1] = h
  end
  return groups
end

return M
