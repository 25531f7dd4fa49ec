-- jobs.lua: one page of a shard's queued or dead jobs, full records.
-- KEYS[1] = shard prefix "NS:{QUEUE:SHARD}:".
-- ARGV[1] what: "queue" | "morgue"
--     [2] order: "id" | "perform_in" | "retry_count" (queue) | "updated_at" (morgue)
--     [3] dir: "asc" | "desc"
--     [4] min, [5] max: Redis range syntax, lex for id ("-", "+", "[x", "(x"),
--         scores otherwise ("-inf", "+inf", "1.5", "(1.5"); min <= max for
--         both directions (swapped here for ZREV*)
--     [6] offset, [7] limit
--     [8] optional "keys": instead of records, id and sort key pairs (the
--         order's value: perform_in, retry_count or updated_at; "" by id),
--         for a caller that only walks to an offset
-- Returns {n, records...} (strings), records flattened:
--   queue:  id, perform_in, retry_count, error or "", npayloads, payload, score, ...
--   morgue: id, updated_at, error or "", npayloads, payload, score, ...
-- Payloads in ascending score order. Jobs in flight are not listed (busy.lua).
-- Cost: O(log n + limit) for one sorted set, whatever the offset (ranks from
-- counts, page_by_rank); O(offset + limit) where several keys are merged
-- (by perform_in with priorities) or the id index is walked (below).
-- By retry_count: ordered by (retry_count, id). The retries index holds only
-- retry_count >= 0, so the fresh jobs (-1) come from the id index, skipping
-- retried ids; with no retried job queued that is a rank lookup, otherwise a
-- walk of the id index (linear in offset, like ZRANGEBYSCORE's LIMIT).
-- luakiq:include keys
-- luakiq:include levels
local P = KEYS[1]
local K = shard_keys(P)
local what, order, dir, min, max = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local offset, limit = tonumber(ARGV[6]), tonumber(ARGV[7])
local keys_only = ARGV[8] == "keys"
local sources = {
  queue = { id = "ids", perform_in = "queue", retry_count = "retries" },
  morgue = { id = "morgue_ids", updated_at = "morgue" },
}
local src = sources[what] and sources[what][order]
if not src then
  error("luakiq jobs: bad what/order '" .. tostring(what) .. "'/'" .. tostring(order) ..
        "' (queue: id, perform_in, retry_count; morgue: id, updated_at)", 0)
end
if dir ~= "asc" and dir ~= "desc" then error("luakiq jobs: dir must be asc or desc", 0) end
if not min or not max then error("luakiq jobs: min and max are required", 0) end
for _, v in ipairs({ offset or -1, limit or -1 }) do
  if v ~= math.floor(v) or v < 0 or v > 1e9 then
    error("luakiq jobs: offset and limit must be integers >= 0", 0)
  end
end
if limit == 0 then return { "0" } end
-- One page of queued ids by retry_count (see the header).
local function by_retry_count()
  local function bound(s)
    if s == "-inf" then return -math.huge, false end
    if s == "+inf" or s == "inf" then return math.huge, false end
    local excl = s:sub(1, 1) == "("
    local v = tonumber(excl and s:sub(2) or s)
    if not v or v ~= v then error("luakiq jobs: bad score bound '" .. s .. "'", 0) end
    return v, excl
  end
  local lo, lox = bound(min)
  local hi, hix = bound(max)
  local R, I = K.retries, K.ids
  local nr_all = redis.call("ZCARD", R)
  local fresh_in = (lo < -1 or (lo == -1 and not lox)) and (hi > -1 or (hi == -1 and not hix))
  local nf = fresh_in and math.max(queue_size(P, K) - nr_all, 0) or 0
  local function retried(off, n)
    if n <= 0 then return {} end
    if dir == "asc" then return redis.call("ZRANGEBYSCORE", R, min, max, "LIMIT", off, n) end
    return redis.call("ZREVRANGEBYSCORE", R, max, min, "LIMIT", off, n)
  end
  local function ids_by_rank(from, to) -- the id index by rank, in the listing's direction
    if dir == "desc" then return redis.call("ZRANGE", I, from, to, "REV") end
    return redis.call("ZRANGE", I, from, to)
  end
  local function fresh(off, n)
    if n <= 0 or off >= nf then return {} end
    if nr_all == 0 then return ids_by_rank(off, off + n - 1) end
    local out, pos, skip = {}, 0, off
    while #out < n do
      local chunk = ids_by_rank(pos, pos + 999)
      if #chunk == 0 then break end
      local sc = redis.call("ZMSCORE", R, unpack(chunk))
      for j = 1, #chunk do
        if not sc[j] then
          if skip > 0 then skip = skip - 1
          elseif #out < n then out[#out + 1] = chunk[j] end
        end
      end
      pos = pos + #chunk
    end
    return out
  end
  local first, second
  if dir == "asc" then
    first = fresh(offset, limit)
    second = retried(math.max(offset - nf, 0), limit - #first)
  else
    local nr = redis.call("ZCOUNT", R, min, max)
    first = retried(offset, limit)
    second = fresh(math.max(offset - nr, 0), limit - #first)
  end
  for _, id in ipairs(second) do first[#first + 1] = id end
  return first
end

-- One page of a single sorted set by rank: where the range starts (elements
-- before min, or after max for desc) and how many it holds are two counts,
-- O(log n) each, so the page costs O(log n + limit) whatever the offset
-- (ZRANGEBYSCORE's LIMIT walks offset elements).
local function page_by_rank(key, lex)
  local count = lex and "ZLEXCOUNT" or "ZCOUNT"
  local first, last = lex and "-" or "-inf", lex and "+" or "+inf"
  local function outside(b, before) -- elements strictly before (or after) bound b
    if b == (before and first or last) then return 0 end
    local c = b:sub(1, 1)
    local open -- the complement of b's inclusiveness
    if lex then
      if c ~= "[" and c ~= "(" then return redis.call("ZLEXCOUNT", key, b, b) end -- refused by Redis
      open = (c == "[" and "(" or "[") .. b:sub(2)
    else
      open = c == "(" and b:sub(2) or "(" .. b
    end
    if before then return redis.call(count, key, first, open) end
    return redis.call(count, key, open, last)
  end
  local inside = redis.call(count, key, min, max)
  if offset >= inside then return {} end
  local skip = outside(dir == "asc" and min or max, dir == "asc") + offset
  local stop = skip + math.min(limit, inside - offset) - 1
  if dir == "desc" then return redis.call("ZRANGE", key, skip, stop, "REV") end
  return redis.call("ZRANGE", key, skip, stop)
end

local ids
if what == "queue" and order == "retry_count" then
  ids = by_retry_count()
else
  local cmd
  if order == "id" then cmd = dir == "asc" and "ZRANGEBYLEX" or "ZREVRANGEBYLEX"
  else cmd = dir == "asc" and "ZRANGEBYSCORE" or "ZREVRANGEBYSCORE" end
  local lo, hi = min, max
  if dir == "desc" then lo, hi = max, min end
  if what == "queue" and order == "perform_in" and has_levels(K) then
    -- jobs of other priorities are in their own keys (lib/levels.lua):
    -- offset + limit of each, merged by (perform_in, id) as one key would
    local all = {}
    for _, q in ipairs(queue_keys(P, K)) do
      local r = redis.call(cmd, q[1], lo, hi, "WITHSCORES", "LIMIT", 0, offset + limit)
      for i = 1, #r, 2 do all[#all + 1] = { r[i], tonumber(r[i + 1]) } end
    end
    table.sort(all, function(a, b)
      if a[2] ~= b[2] then
        if dir == "desc" then return a[2] > b[2] end
        return a[2] < b[2]
      end
      if dir == "desc" then return a[1] > b[1] end
      return a[1] < b[1]
    end)
    ids = {}
    for i = offset + 1, math.min(#all, offset + limit) do ids[#ids + 1] = all[i][1] end
  else
    ids = page_by_rank(K[src], order == "id")
  end
end
local out, n = { "0" }, 0
local zset, errs, payloads_of = nil, K.errors, payloads_key
if what == "morgue" then zset, errs, payloads_of = K.morgue, K.morgue_errors, morgue_payloads_key end
for _, id in ipairs(ids) do
  local first
  if what == "queue" then first = queued_at(P, K, id) else first = redis.call("ZSCORE", zset, id) end
  if first and keys_only then
    n = n + 1
    out[#out + 1] = id
    if order == "retry_count" then out[#out + 1] = redis.call("ZSCORE", K.retries, id) or "-1"
    elseif order == "id" then out[#out + 1] = ""
    else out[#out + 1] = first end
  elseif first then
    n = n + 1
    out[#out + 1] = id
    out[#out + 1] = first
    if what == "queue" then out[#out + 1] = redis.call("ZSCORE", K.retries, id) or "-1" end
    out[#out + 1] = redis.call("HGET", errs, id) or ""
    local pl = redis.call("ZRANGE", payloads_of(P, id), 0, -1, "WITHSCORES")
    out[#out + 1] = tostring(#pl / 2)
    for k = 1, #pl do out[#out + 1] = pl[k] end
  end
end
out[1] = tostring(n)
return out
