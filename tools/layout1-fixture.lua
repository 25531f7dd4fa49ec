-- tools/layout1-fixture.lua: a namespace of layout-1 data (the Redis layout
-- of luakiq before layout 2: docs/redis.md of those versions; the keys
-- layout 2 replaced are in scripts/redis/lib/keys.lua, layout1_keys),
-- written key by key with plain Redis commands, the same for the same seed.
-- For `luakiq migrate` (spec/faults/migrate_spec.lua) and by hand:
--
--   luakiq lua tools/layout1-fixture.lua REDIS_URL [--namespace NS] [--seed N]
--       [--jobs N] [--queues Alpha:4,Beta:3] [--due-only]
--
-- writes it (into whatever the namespace holds) and prints one line of
-- counts. As a module (`dofile`): M.write(conn, opts) -> counts, and
-- M.snapshot(conn, ns) -> every job as layout 1 holds it (queued, in
-- flight, dead), plus the keys both layouts share, raw.
--
-- What it writes, per queue (shard = crc32(id) % shards_count, registry
-- NS:queues): `jobs` ids, some with odd bytes (spaces, ":", "\0", UTF-8,
-- braces); each queued (priority 100 in `queue`, or a level `queue:N` with
-- `prio`/`levels`), dead (`morgue`, `morgue:ids`, `morgue:payloads:<id>`,
-- `morgue:errors`), queued and dead, or in flight in a batch of a dead
-- holder (`busy` "perform_in\nretry_count[\nprio\nwindows]",
-- `busy:payloads:<id>`, `busy:errors`, `busy:fetched_at`, `batch`,
-- `holder`, no lease), some of those queued again; 1-4 payloads (JSON
-- strings) with distinct scores, perform_in due or (unless due_only) in the
-- future, retry_count -1 or >= 0 with an error, windows (unless due_only:
-- then every queued and in-flight job can run at once), tags.
local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"

local M = {}

local function score(x) return string.format("%.17g", x) end

-- Park-Miller: exact in doubles, the same on every build.
local function rng(seed)
  local s = (seed % 2147483646) + 1
  return function(n)
    s = s * 16807 % 2147483647
    return s % n
  end
end

local ODD = { "with space ", "co:lon:", "nul\0byte", "\195\188nic\195\182de-", "{brace}", "tab\tend" }

-- opts: namespace ("luakiq"), seed (1), jobs per queue (120), queues
-- ({{"Alpha", 4}, {"Beta", 3}}), due_only (every perform_in due, no
-- windows), now.
-- Returns {queued=, busy=, dead=, ids=}.
function M.write(conn, opts)
  opts = opts or {}
  local ns, r = opts.namespace or "luakiq", rng(opts.seed or 1)
  local now = opts.now or math.floor(core.now())
  local queues = opts.queues or { { "Alpha", 4 }, { "Beta", 3 } }
  local n = opts.jobs or 120
  local count = { queued = 0, busy = 0, dead = 0, ids = 0 }
  for _, q in ipairs(queues) do
    local name, shards = q[1], q[2]
    conn:call("HSET", keys.registry(ns), name, tostring(shards))
    local batch_of = {} -- shard -> whether it has a batch in flight
    for s = 0, shards - 1 do
      if s % 2 == 0 then
        local P = keys.prefix(ns, name, s)
        batch_of[s] = true
        conn:call("SET", P .. "batch", tostring(3 + s))
        conn:call("SET", P .. "busy:fetched_at", score(now - 30.5))
        conn:call("SET", P .. "holder", "deadhost:1:fixture")
        conn:call("HSET", P .. "counters", "processed", tostring(10 + s), "failed", "2")
      end
    end
    local function payloads(id, key, k)
      local args, base = {}, r(5000) / 8 - 100
      for j = 1, k do
        local v = json.encode(("p%d %s:%d%s"):format(j, name, r(1000), j == 2 and " \195\169\0x" or ""))
        args[#args + 1] = score(base + j * 1.1 + r(97) / 7)
        args[#args + 1] = v
      end
      conn:call("ZADD", key, unpack(args))
    end
    local function pin_of(due)
      if due or opts.due_only then return now - r(5000) / 3 - 0.25 end
      return now + 3600 + r(5000) / 3
    end
    for i = 1, n do
      local id = (i % 7 == 0) and (ODD[i / 7 % #ODD + 1] .. i) or (name .. "-" .. i)
      local s = keys.shard(id, shards)
      local P = keys.prefix(ns, name, s)
      local kind = r(100)
      if kind >= 85 and kind < 92 and not batch_of[s] then kind = 0 end
      count.ids = count.ids + 1
      local queued = kind < 70 or (kind >= 92) or (kind >= 80 and kind < 85) or (kind >= 85 and kind < 92 and r(2) == 0)
      local dead = kind >= 70 and kind < 85
      local busy = kind >= 85 and kind < 92
      if busy then
        local pin, rc = pin_of(true), r(3) - 1
        local v = score(pin) .. "\n" .. rc
        if r(3) == 0 then
          local win = r(2) == 0 and not opts.due_only and "UTC|09:00-17:00" or ""
          v = v .. "\n" .. (r(2) == 0 and "10" or "100") .. "\n" .. win
        end
        conn:call("HSET", P .. "busy", id, v)
        payloads(id, P .. "busy:payloads:" .. id, 1 + r(3))
        if rc >= 0 then conn:call("HSET", P .. "busy:errors", id, json.encode("boom " .. i)) end
        count.busy = count.busy + 1
      end
      if queued then
        local pin = pin_of(r(3) ~= 0)
        local level = (kind >= 60 and kind < 70) and (r(2) == 0 and "10" or "200") or nil
        if level then
          conn:call("ZADD", P .. "queue:" .. level, score(pin), id)
          conn:call("HSET", P .. "prio", id, level)
          conn:call("ZADD", P .. "levels", level, level)
        else
          conn:call("ZADD", P .. "queue", score(pin), id)
        end
        conn:call("ZADD", P .. "ids", "0", id)
        payloads(id, P .. "payloads:" .. id, 1 + r(4))
        if kind >= 92 then
          conn:call("ZADD", P .. "retries", tostring(r(6)), id)
          conn:call("HSET", P .. "errors", id, json.encode({ message = "failed " .. i, class = "E" }))
        end
        if r(10) == 0 and not opts.due_only then conn:call("HSET", P .. "windows", id, "UTC|00:00-23:59") end
        count.queued = count.queued + 1
      end
      if dead then
        conn:call("ZADD", P .. "morgue", score(now - r(100000) - 0.5), id)
        conn:call("ZADD", P .. "morgue:ids", "0", id)
        payloads(id, P .. "morgue:payloads:" .. id, 1 + r(3))
        if r(4) ~= 0 then conn:call("HSET", P .. "morgue:errors", id, json.encode("dead " .. i)) end
        count.dead = count.dead + 1
      end
      if r(8) == 0 then
        local tags = r(2) == 0 and { "blue" } or { "blue", "red" }
        conn:call("HSET", P .. "tags", id, table.concat(tags, "\n"))
        for _, t in ipairs(tags) do conn:call("SADD", P .. "tag:" .. t, id) end
      end
    end
  end
  return count
end

-- Every job of the namespace's registered queues as layout 1 holds it:
-- {jobs = {["Q|shard|id"] = {queued=, busy=, dead=}}, shared = {["key"] = raw}}
-- queued/busy: {pin (number), rc (string), err, payloads = {{p, score}...}};
-- dead: {at (number), err, payloads}. shared: the keys both layouts keep as
-- they are (retries, errors, prio, levels, queue:N, windows, tags,
-- morgue, morgue:errors, busy:errors, busy:fetched_at, batch, counters),
-- read raw (strings).
function M.snapshot(conn, ns)
  local out, shared = {}, {}
  local reg = conn:call("HGETALL", keys.registry(ns))
  local function pls(key)
    local flat, pl = conn:call("ZRANGE", key, 0, -1, "WITHSCORES"), {}
    for i = 1, #flat, 2 do pl[#pl + 1] = { flat[i], tonumber(flat[i + 1]) } end
    return pl
  end
  local function job(k)
    out[k] = out[k] or {}
    return out[k]
  end
  for i = 1, #reg, 2 do
    local name = reg[i]
    for s = 0, tonumber(reg[i + 1]) - 1 do
      local P = keys.prefix(ns, name, s)
      local function k(id) return name .. "|" .. s .. "|" .. id end
      for _, id in ipairs(conn:call("ZRANGE", P .. "ids", 0, -1)) do
        local pin, prio = conn:call("ZSCORE", P .. "queue", id), conn:call("HGET", P .. "prio", id)
        if not pin and prio then pin = conn:call("ZSCORE", P .. "queue:" .. prio, id) end
        job(k(id)).queued = { pin = tonumber(pin), rc = conn:call("ZSCORE", P .. "retries", id) or "-1",
          err = conn:call("HGET", P .. "errors", id) or nil, payloads = pls(P .. "payloads:" .. id) }
      end
      local busy = conn:call("HGETALL", P .. "busy")
      for j = 1, #busy, 2 do
        local id = busy[j]
        local pin, rc = busy[j + 1]:match("^(.-)\n([^\n]*)")
        job(k(id)).busy = { pin = tonumber(pin), rc = rc, err = conn:call("HGET", P .. "busy:errors", id) or nil,
          payloads = pls(P .. "busy:payloads:" .. id) }
      end
      local dead = conn:call("ZRANGE", P .. "morgue", 0, -1, "WITHSCORES")
      for j = 1, #dead, 2 do
        local id = dead[j]
        job(k(id)).dead = { at = tonumber(dead[j + 1]), err = conn:call("HGET", P .. "morgue:errors", id) or nil,
          payloads = pls(P .. "morgue:payloads:" .. id) }
      end
      local names = { "retries", "errors", "prio", "levels", "windows", "tags", "morgue", "morgue:errors",
                      "busy:errors", "busy:fetched_at", "batch", "counters", "tag:blue", "tag:red" }
      for _, lv in ipairs(conn:call("ZRANGE", P .. "levels", 0, -1)) do names[#names + 1] = "queue:" .. lv end
      for _, kn in ipairs(names) do
        local key = P .. kn
        local t = conn:call("TYPE", key)
        local v
        if type(t) == "table" then t = t.ok or t[1] end
        if t == "zset" then v = conn:call("ZRANGE", key, 0, -1, "WITHSCORES")
        elseif t == "hash" then
          local flat = conn:call("HGETALL", key)
          local m = {}
          for j = 1, #flat, 2 do m[flat[j]] = flat[j + 1] end
          v = m
        elseif t == "set" then v = conn:call("SMEMBERS", key) table.sort(v)
        elseif t == "string" then v = conn:call("GET", key) end
        shared[key] = v
      end
    end
  end
  return { jobs = out, shared = shared }
end

-- luakiq lua tools/layout1-fixture.lua REDIS_URL [options]
local function main(url, ...)
  local a = { ... }
  local opts, i = {}, 1
  while a[i] do
    local o, v = a[i], a[i + 1]
    if o == "--namespace" then opts.namespace = v i = i + 2
    elseif o == "--seed" then opts.seed = tonumber(v) i = i + 2
    elseif o == "--jobs" then opts.jobs = tonumber(v) i = i + 2
    elseif o == "--queues" then
      opts.queues = {}
      for qn, c in v:gmatch("([^:,]+):(%d+)") do opts.queues[#opts.queues + 1] = { qn, tonumber(c) } end
      i = i + 2
    elseif o == "--due-only" then opts.due_only = true i = i + 1
    else error("unknown option " .. tostring(o), 0) end
  end
  local conn = assert(core.connect(url, 10))
  local c = M.write(conn, opts)
  io.stdout:write(("layout-1 fixture in namespace %s: %d ids, %d queued, %d in flight, %d dead\n"):format(
    opts.namespace or "luakiq", c.ids, c.queued, c.busy, c.dead))
end

if select("#", ...) > 0 then
  main(...)
  return 0
end
return M
