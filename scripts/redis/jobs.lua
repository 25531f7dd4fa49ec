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
--         for a caller that only walks to an offset ("" = records)
--     [9] optional "walk": by perform_in, walk instead of searching (the
--         reference the script tests compare the search with)
-- Returns {n, records...} (strings), records flattened:
--   queue:  id, perform_in, retry_count, error or "", npayloads, payload, score, ...
--   morgue: id, updated_at, error or "", npayloads, payload, score, ...
-- Payloads in ascending score order. Jobs in flight are not listed (busy.lua).
-- Cost: O(log n + limit) for one sorted set, whatever the offset (ranks from
-- counts, page_by_rank); by perform_in over P ready, P later and the levels
-- O(k^2 log^2 n + limit) for k sources (merged_page), plus finding ready's
-- stale entries when it has some (stale_positions).
-- By retry_count: ordered by (retry_count, id). The retries index holds only
-- retry_count >= 0, so the fresh jobs (-1) come from the id index, skipping
-- retried ids; with no retried job queued that is a rank lookup, otherwise a
-- walk of the id index (linear in offset, like ZRANGEBYSCORE's LIMIT).
-- Layout 2 (docs/redis.md): by id, the lex indexes `jobs` and
-- `morgue:jobs` carry each record (an id bound x becomes a bound on the
-- members esc(x) .. "\0\0" .. record); by perform_in, P ready's live
-- entries (stale ones skipped) are merged with P later and the levels.
-- luakiq:include keys
-- luakiq:include levels
-- luakiq:include listing
local P = KEYS[1]
local K = shard_keys(P)
local what, order, dir, min, max = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local offset, limit = tonumber(ARGV[6]), tonumber(ARGV[7])
local keys_only = ARGV[8] == "keys"
local walk = ARGV[9] == "walk"
local sources = {
  queue = { id = "jobs", perform_in = "ready", retry_count = "retries" },
  morgue = { id = "morgue_jobs", updated_at = "morgue" },
}
local src = sources[what] and sources[what][order]
if not src then
  error("BADRANGE luakiq jobs: bad what/order '" .. tostring(what) .. "'/'" .. tostring(order) ..
        "' (queue: id, perform_in, retry_count; morgue: id, updated_at)", 0)
end
if dir ~= "asc" and dir ~= "desc" then error("BADRANGE luakiq jobs: dir must be asc or desc", 0) end
if not min or not max then error("BADRANGE luakiq jobs: min and max are required", 0) end
for _, v in ipairs({ offset or -1, limit or -1 }) do
  if v ~= math.floor(v) or v < 0 or v > 1e9 then
    error("BADRANGE luakiq jobs: offset and limit must be integers >= 0", 0)
  end
end
if limit == 0 then return { "0" } end
-- A score bound ("-inf", "+inf", "x", "(x"): its value and whether it is
-- exclusive. Refuses what Redis's ZRANGEBYSCORE refuses (a trailing space
-- too, which tonumber would take).
local function score_bound(b)
  local excl = b:sub(1, 1) == "("
  local s = excl and b:sub(2) or b
  local v
  if s == "-inf" then v = -math.huge elseif s == "+inf" or s == "inf" then v = math.huge else v = tonumber(s) end
  if not v or v ~= v or s:find("%s$") then error("BADRANGE luakiq jobs: bad score bound '" .. b .. "'", 0) end
  return v, excl
end
-- The bounds, checked before anything is read: one that a ZRANGEBYSCORE or
-- ZRANGEBYLEX further down would refuse with Redis's own error is refused
-- here, as BADRANGE like the script's other refusals.
if order == "id" then
  for _, b in ipairs({ min, max }) do
    local c = b:sub(1, 1)
    if b ~= "-" and b ~= "+" and c ~= "[" and c ~= "(" then
      error("BADRANGE luakiq jobs: bad lex bound '" .. b .. "'", 0)
    end
  end
else
  score_bound(min)
  score_bound(max)
end

-- One page of queued ids by retry_count (see the header).
local function by_retry_count()
  local lo, lox = score_bound(min)
  local hi, hix = score_bound(max)
  local R, I = K.retries, K.jobs
  local nr_all = redis.call("ZCARD", R)
  local fresh_in = (lo < -1 or (lo == -1 and not lox)) and (hi > -1 or (hi == -1 and not hix))
  local nf = fresh_in and math.max(queue_size(P, K) - nr_all, 0) or 0
  local function retried(off, n)
    if n <= 0 then return {} end
    if dir == "asc" then return redis.call("ZRANGEBYSCORE", R, min, max, "LIMIT", off, n) end
    return redis.call("ZREVRANGEBYSCORE", R, max, min, "LIMIT", off, n)
  end
  local function ids_by_rank(from, to) -- the id index by rank, in the listing's direction
    local ms
    if dir == "desc" then ms = redis.call("ZRANGE", I, from, to, "REV") else ms = redis.call("ZRANGE", I, from, to) end
    for i, m in ipairs(ms) do ms[i] = member_id(m) end
    return ms
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
-- How many elements of key lie strictly before (or after) the range bound b
-- (lex or score syntax): O(log n).
local function outside(key, lex, b, before)
  local count = lex and "ZLEXCOUNT" or "ZCOUNT"
  local first, last = lex and "-" or "-inf", lex and "+" or "+inf"
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

local function page_by_rank(key, lex)
  local count = lex and "ZLEXCOUNT" or "ZCOUNT"
  local inside = redis.call(count, key, min, max)
  if offset >= inside then return {} end
  local skip = outside(key, lex, dir == "asc" and min or max, dir == "asc") + offset
  local stop = skip + math.min(limit, inside - offset) - 1
  if dir == "desc" then return redis.call("ZRANGE", key, skip, stop, "REV") end
  return redis.call("ZRANGE", key, skip, stop)
end

-- The positions (0-based, ascending) of P ready's stale entries: an id's
-- first c entries when P stale holds c for it (an id's stale entries
-- precede its live one, docs/redis.md "Stale entries"). Few ids: one LPOS
-- each (in C, ~13 ns per entry passed, stopping at the c-th match); many:
-- one pass over the list up to the last stale entry (~0.2 us per entry).
local function stale_positions()
  local flat = redis.call("HGETALL", K.stale)
  local sp = {}
  if #flat <= 16 then
    for i = 1, #flat, 2 do
      local c = tonumber(flat[i + 1]) or 0
      if c > 0 then
        for _, p in ipairs(redis.call("LPOS", K.ready, flat[i], "COUNT", c)) do sp[#sp + 1] = p end
      end
    end
    table.sort(sp)
    return sp
  end
  local left, todo = {}, 0
  for i = 1, #flat, 2 do
    local c = tonumber(flat[i + 1]) or 0
    left[flat[i]], todo = c, todo + c
  end
  local pos = 0
  while todo > 0 do
    local chunk = redis.call("LRANGE", K.ready, pos, pos + 999)
    for i, id in ipairs(chunk) do
      local c = left[id]
      if c and c > 0 then
        left[id], todo = c - 1, todo - 1
        sp[#sp + 1] = pos + i - 1
      end
    end
    if #chunk < 1000 then break end
    pos = pos + 1000
  end
  return sp
end

-- The sources of the perform_in order within the score range lo..hi
-- (exclusive when lox/hix), each sorted: P ready's live entries, P later,
-- then each level (lowest first). A source: n (its entries in the range),
-- val(i) (the perform_in of its i-th, 0-based), lt(v) and le(v) (how many
-- of them are < v, <= v; v a perform_in within the range), slice(i, c) (c
-- entries from the i-th: ids, perform_ins). bad() is true once a probed
-- ready entry turned out not to be a live "r" job (junk): the caller walks.
local function due_sources(lo, lox, hi, hix)
  local bad = false
  -- ready: live entry k (its rank among the live ones) sits at position
  -- k + (stale positions before it); live entries before sp[j] are
  -- sp[j] - (j - 1), nondecreasing in j, so that count is a binary search.
  local sp = redis.call("EXISTS", K.stale) == 1 and stale_positions() or {}
  local live = redis.call("LLEN", K.ready) - #sp
  local function pos(k)
    local l, h = 0, #sp
    while l < h do
      local m = math.floor((l + h + 1) / 2)
      if sp[m] - (m - 1) <= k then l = m else h = m - 1 end
    end
    return k + l
  end
  local pins = {} -- live rank -> perform_in (false: junk)
  local function pin(k)
    local v = pins[k]
    if v == nil then
      local _, _, place, p = find_job(K, redis.call("LINDEX", K.ready, pos(k)) or "")
      v = place == "r" and p
      pins[k] = v
    end
    if not v then bad = true return 0 end
    return v
  end
  local function first(pred) -- the first live rank whose perform_in satisfies pred (live: none)
    local l, h = 0, live
    while l < h and not bad do
      local m = math.floor((l + h) / 2)
      if pred(pin(m)) then h = m else l = m + 1 end
    end
    return l
  end
  local a = first(function(x) return x > lo or (x == lo and not lox) end)
  local b = first(function(x) return x > hi or (x == hi and hix) end)
  local ready = {
    n = math.max(0, b - a),
    val = function(i) return pin(a + i) end,
    lt = function(v) return math.max(0, first(function(x) return x >= v end) - a) end,
    le = function(v) return math.max(0, first(function(x) return x > v end) - a) end,
    slice = function(i, c)
      local p1, p2 = pos(a + i), pos(a + i + c - 1)
      local gone, j = {}, 1 -- the stale positions within p1..p2
      while sp[j] and sp[j] < p1 do j = j + 1 end
      while sp[j] and sp[j] <= p2 do gone[sp[j]] = true; j = j + 1 end
      local ids, ps = {}, {}
      for k, id in ipairs(redis.call("LRANGE", K.ready, p1, p2)) do
        if not gone[p1 + k - 1] then
          local _, _, place, p = find_job(K, id)
          if place ~= "r" then bad = true end
          ids[#ids + 1], ps[#ps + 1] = id, p or 0
        end
      end
      return ids, ps
    end,
  }
  local out = { ready }
  local function zset(key)
    local before = outside(key, false, min, true)
    out[#out + 1] = {
      n = redis.call("ZCOUNT", key, min, max),
      val = function(i) return tonumber(redis.call("ZRANGE", key, before + i, before + i, "WITHSCORES")[2]) end,
      lt = function(v) return redis.call("ZCOUNT", key, min, "(" .. score_str(v)) end,
      le = function(v) return redis.call("ZCOUNT", key, min, score_str(v)) end,
      slice = function(i, c)
        local r, ids, ps = redis.call("ZRANGE", key, before + i, before + i + c - 1, "WITHSCORES"), {}, {}
        for k = 1, #r, 2 do ids[#ids + 1], ps[#ps + 1] = r[k], tonumber(r[k + 1]) end
        return ids, ps
      end,
    }
  end
  zset(K.later)
  if has_levels(K) then
    for _, n in ipairs(redis.call("ZRANGE", K.levels, 0, -1)) do zset(level_key(P, n)) end
  end
  return out, function() return bad end
end

-- One page by perform_in over ready, later and the levels: the merge order
-- is (perform_in, source, the source's own order) and a desc page is the
-- reverse of asc. The page's first entry is the s-th (0-based, asc) of the
-- merge: for each source in turn, a binary search for its last entry whose
-- merged position (its own index plus, in every other source, the entries
-- before it: lt or le of its perform_in) is <= s; the source where that
-- position is s holds it, and the other sources' cuts follow from its
-- perform_in. Then c entries of each source from its cut, merged. O(k^2
-- log^2 n + k * limit) lookups for k sources, plus finding ready's stale
-- entries (stale_positions). nil when junk was met: the caller walks.
local function merged_page(lo, lox, hi, hix)
  local srcs, bad = due_sources(lo, lox, hi, hix)
  local total = 0
  for _, S in ipairs(srcs) do total = total + S.n end
  if bad() then return nil end
  if offset >= total then return {} end
  local s, c = offset, math.min(limit, total - offset) -- the page's positions in ascending order
  if dir == "desc" then s = math.max(0, total - offset - limit); c = total - offset - s end
  local cuts
  for t, S in ipairs(srcs) do
    if cuts or bad() then break end
    local function rank(i)
      local v, r = S.val(i), i
      for u, U in ipairs(srcs) do
        if u < t then r = r + U.le(v) elseif u > t then r = r + U.lt(v) end
      end
      return r, v
    end
    if S.n > 0 and rank(0) <= s then
      local l, h = 0, S.n - 1
      while l < h and not bad() do
        local m = math.floor((l + h + 1) / 2)
        if rank(m) <= s then l = m else h = m - 1 end
      end
      local r, v = rank(l)
      if r == s then
        cuts = {}
        for u, U in ipairs(srcs) do
          if u < t then cuts[u] = U.le(v) elseif u > t then cuts[u] = U.lt(v) else cuts[u] = l end
        end
      end
    end
  end
  if bad() or not cuts then return nil end
  local heads = {}
  for u, U in ipairs(srcs) do
    local k, ids, ps = math.min(c, U.n - cuts[u]), {}, {}
    if k > 0 then ids, ps = U.slice(cuts[u], k) end
    heads[u] = { ids, ps, 1 }
  end
  if bad() then return nil end
  local out = {}
  while #out < c do
    local best
    for u, H in ipairs(heads) do
      local v = H[2][H[3]]
      if v and (not best or v < heads[best][2][heads[best][3]]) then best = u end
    end
    if not best then break end
    local H = heads[best]
    out[#out + 1] = H[1][H[3]]
    H[3] = H[3] + 1
  end
  if dir == "desc" then
    for k = 1, math.floor(#out / 2) do out[k], out[#out + 1 - k] = out[#out + 1 - k], out[k] end
  end
  return out
end

-- The same page by walking: each source up to offset + limit entries in
-- the range, merged. O(offset + limit) lookups: only for a ready entry that
-- is not a live job (junk, which merged_page cannot rank) and as the
-- reference of the script tests (ARGV[9] "walk").
local function walk_page(lo, lox, hi, hix)
  local function inside(x) return (x > lo or (x == lo and not lox)) and (x < hi or (x == hi and not hix)) end
  local want = offset + limit
  local all = {}
  local lo_s, hi_s = min, max
  local cmd = dir == "asc" and "ZRANGEBYSCORE" or "ZREVRANGEBYSCORE"
  if dir == "desc" then lo_s, hi_s = max, min end
  local keys = { K.later }
  if has_levels(K) then
    for _, n in ipairs(redis.call("ZRANGE", K.levels, 0, -1)) do keys[#keys + 1] = level_key(P, n) end
  end
  for src_rank, k in ipairs(keys) do
    local r = redis.call(cmd, k, lo_s, hi_s, "WITHSCORES", "LIMIT", 0, want)
    for i = 1, #r, 2 do all[#all + 1] = { r[i], tonumber(r[i + 1]), src_rank, i } end
  end
  -- ready, live entries only: from the head (stale entries of an id precede
  -- its live one) or from the tail (the first entry of an id met is its
  -- live one when the id's place is "r")
  local got, pos, seen, left = 0, 0, {}, {}
  local stale = redis.call("EXISTS", K.stale) == 1
  while got < want do
    local chunk
    if dir == "asc" then chunk = redis.call("LRANGE", K.ready, pos, pos + 999)
    else chunk = redis.call("LRANGE", K.ready, -pos - 1000, -pos - 1) end
    if #chunk == 0 then break end
    local from, to, step = 1, #chunk, 1
    if dir == "desc" then from, to, step = #chunk, 1, -1 end
    local past = false
    for i = from, to, step do
      local id, live = chunk[i], false
      if dir == "asc" then
        local c = 0
        if stale then
          c = left[id]
          if c == nil then c = tonumber(redis.call("HGET", K.stale, id)) or 0 end
        end
        left[id] = c - 1
        live = c <= 0
      else
        live = not seen[id]
        seen[id] = true
      end
      if live then
        local _, _, place, pin = find_job(K, id)
        if place == "r" then
          if inside(pin) then
            all[#all + 1] = { id, pin, 0, #all }
            got = got + 1
            if got >= want then break end
          elseif (dir == "asc" and pin > hi) or (dir == "desc" and pin < lo) then
            past = true
            break
          end
        end
      end
    end
    if past then break end
    pos = pos + #chunk
  end
  -- the merge order: perform_in, then ready before later before the levels
  -- (in their order), then each source's own order (ZRANGEBYSCORE and the
  -- list walk already give it in the listing's direction)
  table.sort(all, function(a, b)
    if a[2] ~= b[2] then
      if dir == "desc" then return a[2] > b[2] end
      return a[2] < b[2]
    end
    if a[3] ~= b[3] then
      if dir == "desc" then return a[3] > b[3] end
      return a[3] < b[3]
    end
    return a[4] < b[4]
  end)
  local ids = {}
  for i = offset + 1, math.min(#all, offset + limit) do ids[#ids + 1] = all[i][1] end
  return ids
end

local ids, members = nil, nil -- (by id: the members, records included)
if what == "queue" and order == "retry_count" then
  ids = by_retry_count()
elseif order == "id" then
  -- id bounds as member bounds: [x from esc(x)\0\0 on, (x from esc(x)\0\1
  -- on (ids that extend x included); up to [x below esc(x)\0\1, up to (x
  -- below esc(x)\0\0
  local function mb(b, lower)
    if b == "-" or b == "+" then return b end
    local c = b:sub(1, 1)
    local E = esc(b:sub(2))
    if lower then return c == "[" and "[" .. E .. "\0\0" or "[" .. E .. "\0\1" end
    return c == "[" and "(" .. E .. "\0\1" or "(" .. E .. "\0\0"
  end
  min, max = mb(min, true), mb(max, false)
  members = page_by_rank(K[src], true)
  ids = {}
  for i, m in ipairs(members) do ids[i] = member_id(m) end
elseif what == "queue" and not has_levels(K) and redis.call("EXISTS", K.ready) == 0 then
  -- by perform_in, nothing in ready (every job queued for later, or
  -- retried): one sorted set, by rank
  ids = page_by_rank(K.later, false)
elseif what == "queue" then
  -- by perform_in: ready's live entries, later and the levels
  local lo, lox = score_bound(min)
  local hi, hix = score_bound(max)
  if not walk then ids = merged_page(lo, lox, hi, hix) end
  if not ids then ids = walk_page(lo, lox, hi, hix) end
else
  ids = page_by_rank(K[src], false)
end
local out, n = { "0" }, 0
for i, id in ipairs(ids) do
  local first, pl, m
  if what == "queue" then
    local E, place, pin
    if members then m, E = members[i], esc(id) else m, E = find_job(K, id) end
    if m then place, pin, pl = job_decode(m, E) end
    if place then first = score_str(pin) end
  else
    local E = esc(id)
    m = members and members[i] or find_member(K.morgue_jobs, E)
    first = redis.call("ZSCORE", K.morgue, id)
    pl = m and morgue_decode(m, E)
    if not pl then first = nil end
  end
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
    out[#out + 1] = redis.call("HGET", what == "queue" and K.errors or K.morgue_errors, id) or ""
    put_payloads(out, pl)
  end
end
out[1] = tostring(n)
return out
