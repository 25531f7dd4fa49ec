-- tools/soak.lua: a soak test with an invariant checker.
--
--   luakiq lua tools/soak.lua [--payloads N] [--ids K] [--hosts H] [--threads T]
--       [--shards S] [--batch B] [--fetch-size Z] [--fail F] [--kill-every SECS] [--redis-restarts R]
--       [--max-retry M] [--lease-ttl L] [--work MS] [--backlog X] [--bin PATH]
--       [--timeout SECS] [--seed N] [--io MS] [--quiet] [--elastic [--rate R]]
--       [--await SHARE [--reply-timeout SECS]]
--
-- Starts a private redis-server (appendonly, free port) and H hosts (`luakiq
-- run`, same script directory) of the binary running this script (or --bin),
-- pushes N payloads over K ids while they process (payload = per-id sequence
-- number = score), and meanwhile: about F of the batches fail (retry_in is
-- small, max_retry_count M, so some payloads reach the morgue), a random host
-- is killed with -9 (sometimes stopped with TERM) every ~SECS seconds and
-- started again, and Redis is restarted R times. Every perform appends one
-- record "S|F, start, end, pid, id:payloads;..." to the list soak:log with
-- one RPUSH (atomic per batch), before it returns or raises.
--
-- When everything is pushed and the queues are drained, the hosts stop and the
-- checker verifies, per id:
--   lost     every pushed payload succeeded at least once or is in the morgue
--   overlap  no two recorded batches of the id overlapped in time
--   order    payloads inside a batch ascend; no payload is seen after a
--            higher one had succeeded for good (a success whose payloads never
--            ran again). A batch that ran again (a kill -9 before its ack) is
--            at-least-once delivery: it counts as a duplicate, not an error.
-- It prints the counts and exits 0 when every invariant holds, 1 otherwise.
--
-- --io MS: the I/O-bound mode. Each perform makes one luakiq.http.request to a
-- local server (spec/helpers/httpd.py) that answers after 0..MS ms instead of
-- sleeping, so its call parks and the thread runs other shards' calls
-- meanwhile: several calls in flight per thread, under the same kills, TERMs,
-- failures and Redis restarts. Use more shards than threads (e.g.
--   luakiq lua tools/soak.lua --io 50 --shards 40 --threads 2 --batch 3).
--
-- --elastic: elastic hosts (splitter = "elastic", docs/operations.md, "Adding
-- and removing hosts") through a fixed scenario instead of random faults: 1
-- host, then a 2nd and a 3rd join, one is killed with -9, another stopped
-- with TERM, while payloads are pushed at a steady --rate (payloads/s; the
-- run ends with the scenario, --payloads is not used). It measures and prints
-- how long each hand-over took (from `luakiq hosts`' data: the shards each
-- live host's threads hold; joins: until every live host holds an even share,
-- the kill and the stop: until the live hosts hold every shard again) and
-- the shares after the joins. The checker also counts, in every mode,
-- overlapping calls of one shard ("shard overlaps": two holders at once).
--
-- --reshard LIST: online reshards (docs/operations.md, "Resharding") through a
-- fixed scenario: --hosts elastic hosts run while payloads are pushed at a
-- steady --rate (the pusher follows the new counts), and `luakiq reshard` runs
-- to each count of LIST in turn (e.g. --shards 4 --reshard 7,3), 2 s apart.
-- After each one every job (queued, in flight, dead) must be in its shard,
-- crc32(id) % count. The shard-overlap count then covers only the calls
-- after the last reshard (a shard number names another set of ids before).
--
-- --await SHARE [--reply-timeout SECS]: jobs that wait for a reply (docs/lua-api.md,
-- luakiq.await, on_reply). The ids whose number % 100 < SHARE * 100 are
-- awaited by every call that gets them (a re-run awaits the same ids, so a
-- kill before the ack must give the same token); each await appends its
-- token to soak:await, and this process replies to it through
-- luakiq.lib.replies (the code behind POST /api/v1/replies/TOKEN and
-- `luakiq reply`): by token, or for odd ids by correlation key (their calls
-- await again with the key "k" .. id .. "@" .. attempt, one per attempt,
-- as a service quotes a request's key; POST /api/v1/workers/NAME/replies),
-- with random delays: some twice, some late (after the
-- wait's reply_timeout, default 3 s), some never (the timeout's retry
-- path), some again after the wait ended. on_reply records "id:payloads@
-- attempt=v" (v: the reply's body) before 0..--work ms more of work, so kills
-- land inside it too. Besides the checks above (a timed-out wait's payloads
-- run again, so they are checked as any other's), per (id, attempt): no
-- double completion (a second one only after the first holder's kill -9, or
-- its lease lost in a Redis outage: both at-least-once by design), no reply
-- call without an accepted reply or with another body, no accepted reply
-- dropped (unless the awaiting call failed), no STALE token accepted later,
-- no answer but accepted, duplicate and STALE (a reply by a key whose wait
-- is over and whose entry is gone answers UNKNOWN: counted as STALE).
local root = (arg and arg[0] or ""):match("^(.*)/tools/[^/]*$") or "."
package.path = root .. "/spec/?.lua;" .. package.path

local core = require "luakiq.core"
local json = require "luakiq.json"
local keys = require "luakiq.lib.keys"
local runtime = require "luakiq.lib.runtime"
local client = require "luakiq.client"
local redis = require "helpers.redis"
local host = require "helpers.host"
local httpd = require "helpers.httpd"

-- Options ----------------------------------------------------------------------
local opt = {
  payloads = 20000, ids = 0, hosts = 2, threads = 3, shards = 8, batch = 10, ["fetch-size"] = 0, fail = 0.1,
  ["kill-every"] = 4, ["redis-restarts"] = 1, ["max-retry"] = 4, ["lease-ttl"] = 1.5, work = 1,
  backlog = 0, timeout = 0, seed = 0, io = 0, rate = 400, await = 0, ["reply-timeout"] = 3,
}
local flags = { quiet = true, keep = true, elastic = true }
do
  local a = { ... }
  if #a == 0 and arg then for i = 1, #arg do a[i] = arg[i] end end
  local i = 1
  while a[i] do
    local name = a[i]:match("^%-%-(.+)$")
    if not name then error("soak: unexpected argument " .. a[i], 0) end
    if flags[name] then
      opt[name] = true
      i = i + 1
    elseif name == "reshard" then
      opt.reshard = {}
      for c in tostring(a[i + 1]):gmatch("[^,]+") do
        opt.reshard[#opt.reshard + 1] = tonumber(c) or error("soak: --reshard needs counts like 7,3", 0)
      end
      i = i + 2
    elseif name == "bin" then
      opt.bin = a[i + 1]
      i = i + 2
    elseif opt[name] ~= nil then
      opt[name] = tonumber(a[i + 1]) or error("soak: --" .. name .. " needs a number", 0)
      i = i + 2
    else
      error("soak: unknown option --" .. name, 0)
    end
  end
end
if opt.elastic then
  -- the scenario makes the faults; the stream lasts as long as it does
  opt.hosts, opt["kill-every"], opt["redis-restarts"], opt.payloads = 1, 0, 0, 1e9
end
if opt.reshard then
  opt["kill-every"], opt["redis-restarts"], opt.payloads = 0, 0, 1e9
  client.follow = true -- the pusher routes with the new counts as they come
end
local MAXSHARDS = opt.shards
for _, c in ipairs(opt.reshard or {}) do MAXSHARDS = math.max(MAXSHARDS, c) end
local N = math.floor(opt.payloads)
local IDS = opt.ids > 0 and math.floor(opt.ids) or math.max(50, math.floor(math.min(N, 20000) / 50))
local BACKLOG = opt.backlog > 0 and opt.backlog or math.max(2 * IDS, 1000) -- payloads not yet done
local seed = opt.seed > 0 and opt.seed or math.floor(core.now() * 1000) % 2 ^ 31
math.randomseed(seed)
local function say(...)
  if not opt.quiet then io.stdout:write(string.format("[%7.1f] ", core.now() - (opt.t0 or core.now())), ...) io.stdout:write("\n") io.stdout:flush() end
end
opt.t0 = core.now()

-- The binary: --bin, else the one running this script.
local bin = opt.bin
if not bin then
  local p = io.popen("readlink -f /proc/" .. core.getpid() .. "/exe")
  bin = p:read("*l")
  p:close()
end
host.bin = bin

-- Redis and the script directory ----------------------------------------------
local srv = redis.start { appendonly = true }
local web = opt.io > 0 and httpd.start() or nil
local WORKER = ([[
local luakiq = require "luakiq"
local core = require "luakiq.core"
local pid = core.getpid() .. "." .. (core.thread_index() or 0) -- process.thread
math.randomseed(core.getpid() * 1000 + (core.thread_index() or 0) + math.floor(core.now() * 1000) %% 100000)
local FAIL, WORK, IO, URL = %s, %s, %d, %q
local AWAIT = %s -- the share of ids (by number) whose jobs wait for a reply
local function awaited(id) return tonumber(id) %% 100 < AWAIT * 100 end
local function list(ps)
  local s = {}
  for i, p in ipairs(ps) do s[i] = string.format("%%d", p) end
  return table.concat(s, ",")
end
return {
  shards_count = %d, batch_size = %d, fetch_size = %s, max_retry_count = %d,
  retry_in = function(count) return 0.05 * (count + 1) end,
  reply_timeout = %s,
  -- (--await) a reply's call: one record "S|F, start, end, pid, id:payloads@attempt=v"
  on_reply = AWAIT > 0 and function(id, reply, payloads, call)
    local t0 = core.now()
    local failed, d = math.random() < FAIL, math.random() * WORK
    if not failed then luakiq.redis.call("INCRBY", "soak:done", #payloads) end -- (pacing only)
    -- the record is the call's last Redis command: a call that records its
    -- success cannot fail after it (only a kill -9 redelivers it: at least once)
    luakiq.redis.call("RPUSH", "soak:log", string.format("%%s|%%.6f|%%.6f|%%s|%%s:%%s@%%d=%%s",
      failed and "F" or "S", t0, t0 + d, pid, id, list(payloads), call.attempt, tostring(reply.v)))
    if d > 0 then core.sleep(d) end -- (after the record: a kill -9 here redelivers a recorded call)
    if failed then error("soak: random failure in on_reply") end
  end or nil,
  perform = function(batch)
    local t0 = core.now()
    local parts, waits = {}, 0
    for id, ps in pairs(batch) do
      if AWAIT > 0 and awaited(id) then
        -- the wait is in Redis when await returns: its token goes to the
        -- replier at once, so a reply may come before this call's ack
        local w = luakiq.await(id)
        local key = ""
        if tonumber(id) %% 2 == 1 then -- (the same wait: its key set now that its attempt is known)
          key = "k" .. id .. "@" .. w.attempt
          luakiq.await(id, { key = key })
        end
        luakiq.redis.call("RPUSH", "soak:await", id .. "|" .. w.token .. "|" .. w.attempt .. "|" .. key)
        parts[#parts + 1] = id .. ":" .. list(ps) .. "@" .. w.attempt
        waits = waits + #ps
      else
        parts[#parts + 1] = id .. ":" .. list(ps)
      end
    end
    if IO > 0 then
      local res = luakiq.http.request { url = URL .. "/delay/" .. math.random(0, IO), timeout = 30 }
      if res.status ~= 200 then error("soak: HTTP " .. tostring(res.status)) end
    elseif WORK > 0 then
      core.sleep(math.random() * WORK)
    end
    local failed = math.random() < FAIL
    if not failed then
      local n = 0
      for _, ps in pairs(batch) do n = n + #ps end
      luakiq.redis.call("INCRBY", "soak:done", n - waits) -- for the pusher's pacing only
    end
    local t1 = core.now()
    -- The record is the call's last Redis command (a success recorded is
    -- not failed by a Redis error after it). Ids awaited in a call that
    -- succeeds are marked by their @attempt: not done yet, their reply's
    -- call completes them.
    luakiq.redis.call("RPUSH", "soak:log", string.format("%%s|%%.6f|%%.6f|%%s|%%s",
      failed and "F" or "S", t0, t1, pid, table.concat(parts, ";")))
    if failed then error("soak: random failure") end
  end,
}
]]):format(opt.fail, opt.work / 1000, math.floor(opt.io), web and web.url or "", opt.await, opt.shards, opt.batch,
  opt["fetch-size"] > 0 and tostring(opt["fetch-size"]) or "nil", opt["max-retry"], opt["reply-timeout"])
local dir = host.scriptdir {
  ["config.lua"] = ("return { threads_per_node = %d, poll_interval = 0.2, lease_ttl = %s, redis_retry = 60%s }")
    :format(opt.threads, opt["lease-ttl"], (opt.elastic or opt.reshard) and ', splitter = "elastic"' or ""),
  ["workers/Soak.lua"] = WORKER,
}
local cfg = runtime.load(dir)
local prefixes = {}
for s = 0, MAXSHARDS - 1 do prefixes[#prefixes + 1] = keys.prefix("luakiq", "Soak", s) end

-- Hosts ----------------------------------------------------------------------
local hosts, dead_pids, stats = {}, {}, { kills = 0, terms = 0, restarts = 0, redis_restarts = 0, outages = {} }
local logs = {}
-- A host that did not exit 0 after TERM: counted, with its code and the end
-- of its log, so a failing run says which host and why.
local bad_exits = {}
local function stopped(p, when)
  local rc = p:wait(20)
  if rc == 0 then return end
  local tail = {}
  for line in p:log():gmatch("[^\n]+") do tail[#tail + 1] = line if #tail > 6 then table.remove(tail, 1) end end
  bad_exits[#bad_exits + 1] = ("host pid %s %s, %s:\n      %s"):format(tostring(p.pid),
    rc and ("exited " .. rc) or "still running 20 s", when, table.concat(tail, "\n      "))
  stats.bad_exit = (stats.bad_exit or 0) + 1
end

local function start_host(i)
  hosts[i] = host.spawn("run " .. host.quote(dir), "REDIS_URL=" .. srv.url)
  logs[#logs + 1] = hosts[i]
end
if not opt.elastic and not opt.reshard then for i = 1, opt.hosts do start_host(i) end end

local function conn() return srv.conn end

-- Sum of queued ids and in-flight batches over the shards.
local function backlog()
  local cmds = {}
  for i, P in ipairs(prefixes) do
    cmds[5 * i - 4] = { "ZCARD", P .. "jobs" } -- (layout 2: one member per queued job)
    cmds[5 * i - 3] = { "EXISTS", P .. "busy" }
    cmds[5 * i - 2] = { "HLEN", P .. "waits" } -- (jobs that wait for a reply, the held ones)
    cmds[5 * i - 1] = { "HLEN", P .. "waits:new" }
    cmds[5 * i] = { "ZCARD", P .. "held" }
  end
  local r = conn():pipeline(cmds)
  local queued, busy, waiting = 0, 0, 0
  for i = 1, #prefixes do
    queued = queued + r[5 * i - 4] + r[5 * i]
    busy = busy + r[5 * i - 3]
    waiting = waiting + r[5 * i - 2] + r[5 * i - 1]
  end
  return queued, busy, waiting
end

-- The replier (--await) ---------------------------------------------------------
-- Reads the tokens the calls of awaited jobs append to soak:await and
-- replies by token through luakiq.lib.replies (the functions behind POST
-- /api/v1/replies/TOKEN and `luakiq reply`), each after a random delay:
-- most within 0.5 s (some before the awaiting call's ack), some twice
-- (duplicates), some never (the wait times out: the retry path), some only
-- after the wait's timeout (late: STALE, unless no fetch took the timeout
-- yet), and some again long after the first was accepted (the wait ended:
-- STALE). Every answer is kept per token for the checker.
local rp
if opt.await > 0 then
  local replies = require "luakiq.lib.replies"
  local RT = opt["reply-timeout"]
  rp = { seen = 0, due = {}, sent = {}, answers = {}, by_token = {}, tokens = 0, again = 0, n = {} }
  local function plan(at, token, body, why)
    rp.due[#rp.due + 1] = { at = at, token = token, body = body, why = why }
  end
  function rp.step()
    local c = conn()
    local n = c:call("LLEN", "soak:await")
    if n > rp.seen then
      local now = core.now()
      for _, line in ipairs(c:call("LRANGE", "soak:await", rp.seen, n - 1)) do
        local id, token, attempt, key = line:match("^([^|]+)|([^|]+)|(%d+)|(.*)$")
        local t = rp.by_token[token]
        if t then
          rp.again = rp.again + 1 -- the same token from a re-run (a kill before the ack)
        else
          rp.tokens = rp.tokens + 1
          t = { id = id, attempt = tonumber(attempt), answers = {}, body_v = tostring(rp.tokens),
                key = key ~= "" and key or nil }
          rp.by_token[token] = t
          local body = json.encode { v = rp.tokens }
          local r = math.random()
          if r < 0.05 then
            t.plan = "never"
          elseif r < 0.12 then
            t.plan = "late"
            plan(now + RT + 0.5 + math.random() * 1.5, token, body, "late")
          else
            t.plan = "soon"
            local at = now + math.random() * 0.5
            plan(at, token, body, "first")
            if math.random() < 0.2 then plan(at + math.random() * 0.5, token, body, "duplicate") end
            if math.random() < 0.1 then plan(at + RT + 2 + math.random(), token, body, "after") end
          end
        end
      end
      rp.seen = n
    end
    local now, keep = core.now(), {}
    for _, d in ipairs(rp.due) do
      if d.at <= now then
        local t = rp.by_token[d.token]
        local ok, outcome
        if t.key then
          ok, outcome = pcall(replies.by_key, c, cfg, "Soak", t.key, d.body)
          if ok then rp.n["by key " .. outcome] = (rp.n["by key " .. outcome] or 0) + 1 end
          if outcome == "UNKNOWN" then outcome = "STALE" end -- (the key's entry dropped: its wait is over)
        else
          ok, outcome = pcall(replies.by_token, c, cfg, d.token, d.body, "Soak")
        end
        if ok then
          t.answers[#t.answers + 1] = { at = core.now(), outcome = outcome, why = d.why }
          rp.n[outcome] = (rp.n[outcome] or 0) + 1
        else
          rp.n.retried = (rp.n.retried or 0) + 1 -- Redis away: again in a moment
          d.at = now + 0.2
          keep[#keep + 1] = d
        end
      else
        keep[#keep + 1] = d
      end
    end
    rp.due = keep
  end
end

-- Pushing --------------------------------------------------------------------
local pushed, total, pushed_at = {}, 0, {}
for id = 1, IDS do pushed[id], pushed_at[id] = 0, {} end
local function push_chunk(n)
  local jobs = {}
  local now = core.now()
  for _ = 1, n do
    if total >= N then break end
    local id = math.random(1, IDS)
    pushed[id] = pushed[id] + 1
    total = total + 1
    local seq = pushed[id]
    local job = { id = tostring(id), payload = seq, score = seq }
    if opt.await > 0 then pushed_at[id][seq] = now end
    if math.random() < 0.03 then job.perform_in = now + math.random() * 1.5 end -- a few scheduled ones
    jobs[#jobs + 1] = job
  end
  if #jobs > 0 then client.push(conn(), cfg, "Soak", jobs) end
end

-- The run ----------------------------------------------------------------------
local restarts_due = {}
for r = 1, opt["redis-restarts"] do restarts_due[r] = r / (opt["redis-restarts"] + 1) end
local next_kill = opt["kill-every"] > 0 and core.now() + opt["kill-every"] * (0.5 + math.random()) or math.huge
local last_report = core.now()
local deadline = opt.timeout > 0 and core.now() + opt.timeout or math.huge

local function fault_step()
  local now = core.now()
  if now >= next_kill then
    local i = math.random(1, #hosts)
    local p = hosts[i]
    if math.random() < 0.25 then
      say(("TERM host %s"):format(tostring(p.pid)))
      p:signal("TERM")
      stats.terms = stats.terms + 1
      stopped(p, ("after a TERM at %.1f s"):format(core.now() - opt.t0))
    else
      say(("kill -9 host %s"):format(tostring(p.pid)))
      p:signal("KILL")
      p:wait(5)
      dead_pids[tostring(p.pid)] = true
      stats.kills = stats.kills + 1
    end
    core.sleep(math.random() * 0.5)
    start_host(i)
    stats.restarts = stats.restarts + 1
    next_kill = core.now() + opt["kill-every"] * (0.5 + math.random())
  end
  if restarts_due[1] and total >= restarts_due[1] * N then
    table.remove(restarts_due, 1)
    say("restarting Redis")
    local down = core.now()
    srv:restart(0.5 + math.random())
    stats.outages[#stats.outages + 1] = { down, core.now() }
    stats.redis_restarts = stats.redis_restarts + 1
  end
end


-- The elastic scenario (--elastic) ---------------------------------------------
-- Phases, each started `after` seconds after the previous one ended: act,
-- then wait (at most 20 s) until the live hosts hold every shard once (and,
-- after a join, each an even share: within one of shards / hosts).
local el
if opt.elastic then
  local hosts_mod = require "luakiq.ops.hosts"
  el = { live = {}, results = {}, order = {}, failed = {}, checked = 0 }
  -- pid -> {set = shard -> true, n =} of the live hosts, from the hosts list
  -- (a killed host stays listed for a while with what it held: left out)
  local function holdings()
    local out = {}
    for _, h in ipairs(hosts_mod.list(conn(), "luakiq")) do
      local pid = tostring(h.pid)
      if el.live[pid] then
        local set, n = {}, 0
        for _, t in ipairs(h.threads) do
          for _, x in ipairs(t.shards) do set[x.shard], n = true, n + 1 end
        end
        out[pid] = { set = set, n = n }
      end
    end
    return out
  end
  local function live_pids()
    local l = {}
    for _, i in ipairs(el.order) do l[#l + 1] = tostring(hosts[i].pid) end
    return l
  end
  -- true, shares text when the live hosts hold every shard exactly once
  local function settled(even)
    local pids, hs = live_pids(), holdings()
    local seen, total, shares = {}, 0, {}
    for _, pid in ipairs(pids) do
      local h = hs[pid]
      if not h then return false end
      for sh in pairs(h.set) do
        if seen[sh] then return false end
        seen[sh], total = true, total + 1
      end
      if even and math.abs(h.n - opt.shards / #pids) > 1 then return false end
      shares[#shares + 1] = h.n
    end
    return total == opt.shards, table.concat(shares, ",")
  end
  -- true when every shard's lease is held by a thread of a live host (the
  -- hand-over done in Redis, before the hosts list shows it at the next beat)
  local function leased()
    local cmds = {}
    for i, P in ipairs(prefixes) do cmds[i] = { "GET", P .. "lease" } end
    local live = {}
    for _, pid in ipairs(live_pids()) do live[pid] = true end
    for _, tok in ipairs(conn():pipeline(cmds)) do
      local pid = type(tok) == "string" and tok:match("^[^:]*:(%d+):")
      if not (pid and live[pid]) then return false end
    end
    return true
  end
  local function join(i)
    start_host(i)
    el.live[tostring(hosts[i].pid)] = true
    el.order[#el.order + 1] = i
  end
  local function leave(i)
    el.live[tostring(hosts[i].pid)] = nil
    for k, j in ipairs(el.order) do if j == i then table.remove(el.order, k) break end end
  end
  el.phases = {
    { name = "start", after = 0, act = function() end },
    { name = "join 2", after = 2, even = true, act = function() join(2) end },
    { name = "join 3", after = 2, even = true, act = function() join(3) end },
    { name = "kill -9", after = 3, act = function()
      local p = hosts[1]
      p:signal("KILL")
      p:wait(5)
      dead_pids[tostring(p.pid)] = true
      stats.kills = stats.kills + 1
      leave(1)
    end },
    { name = "TERM", after = 3, act = function()
      hosts[2]:signal("TERM") -- (its exit is collected below, not waited for here)
      stats.terms = stats.terms + 1
      leave(2)
      el.termed = hosts[2]
    end },
    { name = "end", after = 3, act = function() end, last = true },
  }
  el.k, el.next_at = 1, core.now()
  join(1)
  hosts[1].started_at = core.now()
  -- One step of the scenario, from the run loop (at most every 0.1 s).
  function el.step()
    local now = core.now()
    if el.done or now < el.checked + 0.1 then return end
    el.checked = now
    local ph = el.phases[el.k]
    if not ph.acted then
      if now < el.next_at then return end
      ph.acted, ph.t0 = true, now
      ph.act()
      if ph.last then el.done = true return end
    end
    if not ph.leased_at and leased() then ph.leased_at = now end
    local ok, shares = settled(ph.even)
    if ok or now - ph.t0 > 20 then
      el.results[#el.results + 1] = { name = ph.name, secs = now - ph.t0, shares = shares, ok = ok,
                                      leased = ph.leased_at and ph.leased_at - ph.t0 }
      if not ok then el.failed[#el.failed + 1] = ph.name end
      say(("elastic: %s settled after %.2f s (shares %s; every lease held by a live host after %s s)%s"):format(
        ph.name, now - ph.t0, tostring(shares), ph.leased_at and ("%.2f"):format(ph.leased_at - ph.t0) or "?",
        ok and "" or " TIMED OUT"))
      el.k, el.next_at = el.k + 1, now + el.phases[el.k + 1].after
      if el.termed then
        stopped(el.termed, "after the scenario's TERM")
        el.termed = nil
      end
    end
  end
end
-- The reshard scenario (--reshard) --------------------------------------------
local rs
if opt.reshard then
  rs = { results = {}, i = 0, next_at = core.now() + 2 }
  -- jobs of the queue not in shard crc32(id) % count: queued, dead, in flight
  local function misplaced(count)
    local bad = 0
    for s, P in ipairs(prefixes) do
      for _, k in ipairs { "jobs", "morgue:jobs" } do
        for _, m in ipairs(conn():call("ZRANGE", P .. k, 0, -1)) do
          if keys.shard(keys.member_id(m), count) ~= s - 1 then bad = bad + 1 end
        end
      end
      for _, id in ipairs(conn():call("HKEYS", P .. "busy")) do
        -- ("": busy's filler, docs/redis.md)
        if id ~= "" and keys.shard(id, count) ~= s - 1 then bad = bad + 1 end
      end
    end
    return bad
  end
  function rs.step()
    if rs.done then return end
    if rs.proc then
      local rc = tonumber(host.read(rs.proc.dir .. "/rc"))
      if not rc then return end
      local r = rs.results[#rs.results]
      r.rc, r.out = rc, rs.proc:log()
      r.stats = rc == 0 and json.decode(host.read(rs.proc.dir .. "/out")) or nil
      r.misplaced = misplaced(r.to)
      r.after = core.now()
      say(("reshard to %d: exit %d, %s, misplaced %d"):format(r.to, rc, r.out:gsub("\n", " "), r.misplaced))
      rs.proc, rs.next_at = nil, core.now() + 2
      if rs.i == #opt.reshard then rs.done = true end
      return
    end
    if core.now() < rs.next_at then return end
    rs.i = rs.i + 1
    local to = opt.reshard[rs.i]
    rs.results[#rs.results + 1] = { to = to, from = rs.cur or opt.shards, at = core.now() }
    rs.cur = to
    rs.proc = host.spawn("reshard " .. host.quote(dir) .. " Soak " .. to, "REDIS_URL=" .. srv.url)
  end
  for i = 1, opt.hosts do start_host(i) end
end

say(("soak: %d payloads over %d ids, %d hosts x %d threads, %d shards, batch %d, fetch_size %s, fail %.2f, " ..
  "kill every ~%gs, %d Redis restarts, seed %d, Redis %s%s"):format(N, IDS, opt.hosts, opt.threads, opt.shards, opt.batch,
  opt["fetch-size"] > 0 and opt["fetch-size"] or "default", opt.fail,
  opt["kill-every"], opt["redis-restarts"], seed, srv.url, web and (", HTTP 0-" .. opt.io .. " ms " .. web.url) or ""))
local chunk = math.max(100, math.floor(BACKLOG / 4))
while core.now() < deadline do
  fault_step()
  if el then
    el.step()
    if el.done and total < N then N = total end -- the stream ends with the scenario
  end
  if rs then
    rs.step()
    if rs.done and total < N and core.now() >= rs.next_at then N = total end -- 2 s after the last one
  end
  local queued, busy, waiting = backlog()
  if rp then rp.step() end
  if total < N then
    local done = tonumber(conn():call("GET", "soak:done")) or 0
    if el or rs then
      -- a steady stream: opt.rate payloads a second
      if total < opt.rate * (core.now() - opt.t0) then push_chunk(math.max(1, math.floor(opt.rate / 20)))
      else core.sleep(0.02) end
    elseif total - done < BACKLOG then push_chunk(chunk) else core.sleep(0.02) end
  elseif queued == 0 and busy == 0 and waiting == 0 and not (rp and #rp.due > 0) then
    -- drained: confirm after a moment (retries scheduled in the future, restores)
    core.sleep(0.5)
    local q2, b2, w2 = backlog()
    if q2 == 0 and b2 == 0 and w2 == 0 then break end
  else
    core.sleep(0.05)
  end
  if core.now() - last_report >= 5 then
    last_report = core.now()
    say(("pushed %d/%d, queued ids %d, busy shards %d, waiting %d, records %d, kills %d, terms %d"):format(
      total, N, queued, busy, waiting, conn():call("LLEN", "soak:log"), stats.kills, stats.terms))
  end
end
local timed_out = core.now() >= deadline
local run_time = core.now() - opt.t0
for _, p in ipairs(hosts) do
  if not el or el.live[tostring(p.pid)] then -- (the scenario's killed and stopped hosts are gone)
    p:signal("TERM")
    stopped(p, "after the final TERM")
  end
end

-- The checker ------------------------------------------------------------------
say("checking")
local records = {}  -- id -> array of {kind, t0, t1, pid, payloads, n}
local nrec, nlog = 0, conn():call("LLEN", "soak:log")
local bad_records = 0
for from = 0, nlog - 1, 20000 do
  for _, line in ipairs(conn():call("LRANGE", "soak:log", from, from + 19999)) do
    local kind, t0, t1, pid, rest = line:match("^([SF])|([^|]+)|([^|]+)|([^|]+)|(.*)$")
    if not kind then
      bad_records = bad_records + 1
    else
      nrec = nrec + 1
      for part in rest:gmatch("[^;]+") do
        -- id:payloads, @attempt when the call awaited the id, =v in a reply's call
        local id, list, att, v = part:match("^([^:]+):([^@]*)@?(%d*)=?(.*)$")
        local ps = {}
        for p in list:gmatch("[^,]+") do ps[#ps + 1] = tonumber(p) end
        local recs = records[id]
        if not recs then recs = {} records[id] = recs end
        local k = kind
        if att ~= "" and v == "" and kind == "S" then k = "W" end -- awaited: not done yet
        recs[#recs + 1] = { kind = k, t0 = tonumber(t0), t1 = tonumber(t1), pid = pid, ps = ps, n = nrec,
                            attempt = tonumber(att), reply = v ~= "" and v or nil }
      end
    end
  end
end

-- The morgue, per id.
local morgue = {}
local morgued = 0
for _, P in ipairs(prefixes) do
  -- (layout 2: the dead payloads are in records; jobs.lua lists them:
  -- n, then per job id, updated_at, error, npayloads, payload, score, ...)
  local r = conn():script("jobs", P, "morgue", "id", "asc", "-", "+", "0", "1000000")
  local i = 2
  for _ = 1, tonumber(r[1]) do
    local id, np, set = r[i], tonumber(r[i + 3]), {}
    for k = 1, np do
      set[tonumber(json.decode(r[i + 2 + 2 * k]))] = true
      morgued = morgued + 1
    end
    morgue[id] = set
    i = i + 4 + 2 * np
  end
end

local c = { lost = 0, overlaps = 0, order = 0, inner_order = 0, duplicates = 0, succeeded = 0, executions = 0,
            failed_attempts = 0, reruns = 0, morgued_and_succeeded = 0, unknown = 0, awaited = 0,
            double = 0, unreplied = 0, wrong_reply = 0, dropped = 0, revived = 0, bad_answers = 0,
            redelivered = 0, taken_over = 0, timed_out = 0, replied_calls = 0, held = 0 }
local examples = {}
local function example(kind, msg)
  c[kind] = c[kind] + 1
  if #examples < 10 then examples[#examples + 1] = kind .. ": " .. msg end
end
for idn = 1, IDS do
  local id = tostring(idn)
  local recs = records[id] or {}
  table.sort(recs, function(a, b) if a.t0 ~= b.t0 then return a.t0 < b.t0 end return a.n < b.n end)
  -- overlap: each batch starts after every earlier one ended
  local max_t1, last = -math.huge, nil
  for i, r in ipairs(recs) do
    if r.t0 < max_t1 then
      example("overlaps", ("id %s: batch %s at %.6f (pid %s) started before %s %.6f-%.6f (pid %s) ended"):format(
        id, table.concat(r.ps, ","), r.t0, r.pid, table.concat(last.ps, ","), last.t0, last.t1, last.pid))
    end
    if r.t1 > max_t1 then max_t1, last = r.t1, r end
    for k = 2, #r.ps do
      if r.ps[k] <= r.ps[k - 1] then example("inner_order", "id " .. id .. " batch " .. i .. " not ascending") break end
    end
  end
  -- successes for good: no payload of theirs ever ran again
  local later, final = {}, {}
  for i = #recs, 1, -1 do
    local r, again = recs[i], false
    for _, p in ipairs(r.ps) do if later[p] then again = true end end
    final[i] = r.kind == "S" and not again
    if r.kind == "S" and again then c.reruns = c.reruns + 1 end
    for _, p in ipairs(r.ps) do later[p] = true end
  end
  local high, ok_count = -math.huge, {}
  for i, r in ipairs(recs) do
    for _, p in ipairs(r.ps) do
      if p < high then
        example("order", ("id %s: payload %d seen after %d had succeeded"):format(id, p, high))
        break
      end
    end
    if r.kind == "W" then
      c.awaited = c.awaited + #r.ps
    elseif r.kind == "S" then
      c.executions = c.executions + #r.ps
      for _, p in ipairs(r.ps) do ok_count[p] = (ok_count[p] or 0) + 1 end
      if final[i] then high = math.max(high, r.ps[#r.ps] or high) end
    else
      c.failed_attempts = c.failed_attempts + #r.ps
    end
  end
  local dead = morgue[id] or {}
  for p = 1, pushed[idn] do
    local n = ok_count[p] or 0
    if n > 0 then
      c.succeeded = c.succeeded + 1
      c.duplicates = c.duplicates + n - 1
      if dead[p] then c.morgued_and_succeeded = c.morgued_and_succeeded + 1 end
    elseif not dead[p] then
      example("lost", ("id %s: payload %d neither succeeded nor in the morgue"):format(id, p))
    end
  end
  for p in pairs(ok_count) do if p > pushed[idn] then example("unknown", "id " .. id .. " payload " .. p) end end
end

-- Waits and replies (--await), per (id, attempt):
--   double      a reply's call completed one attempt twice, the first on a
--               host that was not killed (a kill -9 before its ack is
--               at-least-once delivery: counted as redelivered)
--   unreplied   a reply's call of an attempt no reply was accepted for
--   wrong_reply a reply's call got a body other than the accepted one
--   dropped     an accepted reply whose call never ran, and no call that
--               awaited that attempt failed (which drops the wait)
--   revived     a token answered STALE, then accepted
--   bad_answers any answer but accepted, duplicate and STALE
-- An attempt awaited and never replied to in time times out (the retry
-- path): counted as timed_out, its payloads checked as any other's.
local rstats = { late_accepted = 0, late_stale = 0, after_stale = 0, after_other = 0 }
-- When each host restored a shard's batch of a previous holder, from its
-- log: pid -> shard -> times (epoch seconds). A holder that was not killed
-- loses its batch so only when its lease lapsed in a Redis outage longer
-- than the lease left (docs/guarantees.md: P4 holds without lease loss).
local function restores()
  local out, t = {}, os.time()
  local offset = os.difftime(t, os.time(os.date("!*t", t))) -- (log times are UTC)
  for _, p in ipairs(logs) do
    local m = {}
    out[tostring(p.pid)] = m
    for y, mo, d, h, mi, sec, shard in p:log():gmatch(
        "(%d+)%-(%d+)%-(%d+)T(%d+):(%d+):([%d.]+)Z [^\n]-of a previous holder[^\n]-\"shard\":(%d+)") do
      local at = os.time { year = y, month = mo, day = d, hour = h, min = mi, sec = 0 } + offset + tonumber(sec)
      local l = m[tonumber(shard)] or {}
      m[tonumber(shard)] = l
      l[#l + 1] = at
    end
  end
  return out
end
if rp then
  local restored = restores()
  -- did a Redis outage start by t1 that ended after t0 - lease_ttl, and
  -- process pid restore id's shard from a previous holder between t0 and t1?
  local function lost_lease(pid, id, t0, t1)
    local outage
    for _, o in ipairs(stats.outages) do
      if o[1] <= t1 and o[2] >= t0 - opt["lease-ttl"] then outage = true end
    end
    if not outage then return false end
    for _, at in ipairs((restored[pid] or {})[keys.shard(id, opt.shards)] or {}) do
      if at >= t0 and at <= t1 then return true end
    end
  end
  local calls, failed_waits, awaits = {}, {}, {}
  for id, recs in pairs(records) do
    for _, r in ipairs(recs) do
      if r.attempt then
        local k = id .. "@" .. r.attempt
        if r.reply then
          local l = calls[k] or {}
          calls[k] = l
          l[#l + 1] = r
        elseif r.kind == "F" then
          failed_waits[k] = true
        else
          awaits[k] = r
        end
      end
    end
  end
  local token_of = {}
  for token, t in pairs(rp.by_token) do
    token_of[t.id .. "@" .. t.attempt] = t
    local stale_at, accepted
    table.sort(t.answers, function(a, b) return a.at < b.at end)
    for _, a in ipairs(t.answers) do
      if a.outcome == "accepted" then
        accepted = accepted or a
        if stale_at then example("revived", ("token %s: STALE, then accepted"):format(token)) end
      elseif a.outcome == "STALE" then
        stale_at = stale_at or a.at
      elseif a.outcome ~= "duplicate" then
        c.bad_answers = c.bad_answers + 1
        if #examples < 10 then examples[#examples + 1] = "bad answer: " .. token .. ": " .. tostring(a.outcome) end
      end
      if a.why == "late" then
        if a.outcome == "STALE" then rstats.late_stale = rstats.late_stale + 1 else rstats.late_accepted = rstats.late_accepted + 1 end
      elseif a.why == "after" then
        if a.outcome == "STALE" then rstats.after_stale = rstats.after_stale + 1 else rstats.after_other = rstats.after_other + 1 end
      end
    end
    t.accepted = accepted
    local k = t.id .. "@" .. t.attempt
    if accepted and not calls[k] and not failed_waits[k] then
      example("dropped", ("id %s attempt %d: reply accepted, never handled"):format(t.id, t.attempt))
    end
    if not accepted and awaits[k] and not calls[k] then c.timed_out = c.timed_out + 1 end
  end
  for k, l in pairs(calls) do
    table.sort(l, function(a, b) return a.t0 < b.t0 end)
    local t = token_of[k]
    if not (t and t.accepted) then example("unreplied", k .. ": a reply's call, no reply accepted") end
    local done
    for _, r in ipairs(l) do
      c.replied_calls = c.replied_calls + 1
      if t and t.body_v and r.reply ~= t.body_v then example("wrong_reply", k .. ": got v=" .. r.reply) end
      if done and r.kind == "S" then
        local pid = done.pid:match("^(%d+)")
        if dead_pids[pid] then c.redelivered = c.redelivered + 1
        elseif lost_lease(r.pid:match("^(%d+)"), k:match("^[^@]+"), done.t0, r.t0) then c.taken_over = c.taken_over + 1
        else example("double", ("%s: completed at %.3f s (pid %s) and again at %.3f s (pid %s)"):format(
          k, done.t0 - opt.t0, done.pid, r.t0 - opt.t0, r.pid)) end
      end
      if r.kind == "S" then done = r end
    end
    -- payloads pushed while the id waited (after its awaiting call ended,
    -- before its reply's call began) succeed only after that call began
    local w, first = awaits[k], l[1]
    if w and first.kind == "S" then
      local id = k:match("^[^@]+")
      for p, at in pairs(pushed_at[tonumber(id)]) do
        if at > w.t1 and at < first.t0 then
          c.held = c.held + 1
          for _, r in ipairs(records[id]) do
            if r.kind == "S" and r.t0 < first.t0 then
              for _, q in ipairs(r.ps) do
                if q == p then example("order", ("id %s: payload %d pushed while it waited (attempt %s) ran before its reply"):format(
                  id, p, k:match("@(%d+)"))) end
              end
            end
          end
        end
      end
    end
  end
end

-- Shard overlaps: two calls of one shard at once (two holders, or two calls
-- of one holder), whatever their ids. One record per call (its number n).
local shard_overlaps = 0
do
  local by_shard, seen_call = {}, {}
  local count, since = opt.shards, -math.huge
  if rs and #rs.results > 0 then
    count, since = rs.results[#rs.results].to, rs.results[#rs.results].after or math.huge
  end
  for id, recs in pairs(records) do
    local sh = keys.shard(id, count)
    for _, r in ipairs(recs) do
      if not seen_call[r.n] and r.t0 >= since then
        seen_call[r.n] = true
        local l = by_shard[sh] or {}
        by_shard[sh] = l
        l[#l + 1] = r
      end
    end
  end
  for sh, l in pairs(by_shard) do
    table.sort(l, function(a, b) if a.t0 ~= b.t0 then return a.t0 < b.t0 end return a.n < b.n end)
    local max_t1, last = -math.huge, nil
    for _, r in ipairs(l) do
      if r.t0 < max_t1 then
        shard_overlaps = shard_overlaps + 1
        if #examples < 10 then
          examples[#examples + 1] = ("shard overlap: shard %d: a call at %.6f (pid %s) started before %.6f-%.6f (pid %s) ended")
            :format(sh, r.t0, r.pid, last.t0, last.t1, last.pid)
        end
      end
      if r.t1 > max_t1 then max_t1, last = r.t1, r end
    end
  end
end

-- Calls in flight at once on one thread (the I/O mode's point): a sweep over
-- each process.thread's recorded calls.
local inflight = 0
do
  local by_thread = {}
  for _, recs in pairs(records) do
    for _, r in ipairs(recs) do
      local ev = by_thread[r.pid] or {}
      by_thread[r.pid] = ev
      ev[r.n] = ev[r.n] or { r.t0, r.t1 } -- one record per call, listed once per id
    end
  end
  for _, calls in pairs(by_thread) do
    local ev = {}
    for _, c in pairs(calls) do ev[#ev + 1] = { c[1], 1 } ev[#ev + 1] = { c[2], -1 } end
    table.sort(ev, function(a, b) if a[1] ~= b[1] then return a[1] < b[1] end return a[2] < b[2] end)
    local cur = 0
    for _, e in ipairs(ev) do cur = cur + e[2] inflight = math.max(inflight, cur) end
  end
end

local host_errors = 0
for _, p in ipairs(logs) do
  local log = p:log()
  if log:match("worker thread failed") or log:match("fatal") then host_errors = host_errors + 1 end
end

local reshard_ok = true
if rs then
  reshard_ok = rs.done == true
  for _, r in ipairs(rs.results) do
    if r.rc ~= 0 or r.misplaced ~= 0 then reshard_ok = false end
  end
end
local ok = c.lost == 0 and c.overlaps == 0 and c.order == 0 and c.inner_order == 0 and c.unknown == 0
  and c.double == 0 and c.unreplied == 0 and c.wrong_reply == 0 and c.dropped == 0 and c.revived == 0
  and c.bad_answers == 0
  and reshard_ok
  and shard_overlaps == 0 and not (el and (#el.failed > 0 or not el.done))
  and bad_records == 0 and not timed_out and host_errors == 0 and (stats.bad_exit or 0) == 0
  and c.succeeded + morgued - c.morgued_and_succeeded == N
local out = io.stdout
out:write(("soak %s: %d payloads over %d ids in %.1f s (%.0f payloads/s), seed %d\n"):format(
  ok and "PASSED" or "FAILED", N, IDS, run_time, N / run_time, seed))
out:write(("  hosts %s x %d threads, %d shards, batch %d, fetch_size %s; faults: %d kill -9, %d TERM, %d Redis restarts, " ..
  "~%.0f%% batches failing\n"):format(el and "elastic, 1 to 3" or tostring(opt.hosts), opt.threads, opt.shards, opt.batch,
  opt["fetch-size"] > 0 and opt["fetch-size"] or "default", stats.kills, stats.terms,
  stats.redis_restarts, opt.fail * 100))
out:write(("  %s; at most %d calls in flight on one thread\n"):format(
  opt.io > 0 and ("I/O mode: one HTTP request per call, 0-" .. opt.io .. " ms") or "calls sleep 0-" .. opt.work .. " ms",
  inflight))
out:write(("  batches recorded %d (ids x batches %d); payload executions %d ok, %d failed attempts\n"):format(
  nrec, (function() local n = 0 for _, r in pairs(records) do n = n + #r end return n end)(), c.executions,
  c.failed_attempts))
out:write(("  succeeded %d, in morgue %d (of which also succeeded %d), lost %d\n"):format(
  c.succeeded, morgued, c.morgued_and_succeeded, c.lost))
out:write(("  duplicates %d (re-runs of batches killed before their ack: %d)\n"):format(c.duplicates, c.reruns))
out:write(("  shard overlaps %d\n"):format(shard_overlaps))
if rp then
  out:write(("  waits: %d payloads awaited (share %g of ids, reply_timeout %g s), %d tokens (%d seen again after a re-run), " ..
    "%d reply calls, %d attempts timed out; reply calls run again: %d after a kill -9, %d after a lease " ..
    "lost in a Redis outage\n"):format(c.awaited, opt.await, opt["reply-timeout"], rp.tokens, rp.again,
    c.replied_calls, c.timed_out, c.redelivered, c.taken_over))
  out:write(("  replies: accepted %d, duplicate %d, stale %d, other %d, retried after Redis errors %d; " ..
    "late: %d stale, %d accepted (timeout not taken yet); again after the wait ended: %d stale, %d other\n"):format(
    rp.n.accepted or 0, rp.n.duplicate or 0, rp.n.STALE or 0, c.bad_answers, rp.n.retried or 0,
    rstats.late_stale, rstats.late_accepted, rstats.after_stale, rstats.after_other))
  out:write(("  of them by correlation key (odd ids): accepted %d, duplicate %d, stale %d, unknown key %d (counted stale)\n")
    :format(rp.n["by key accepted"] or 0, rp.n["by key duplicate"] or 0, rp.n["by key STALE"] or 0,
      rp.n["by key UNKNOWN"] or 0))
  out:write(("  payloads pushed while their id waited: %d, each succeeded after the reply's call began\n"):format(c.held))
  out:write(("  double completions %d, reply calls without an accepted reply %d, wrong replies %d, " ..
    "accepted replies dropped %d, stale tokens revived %d\n"):format(c.double, c.unreplied, c.wrong_reply,
    c.dropped, c.revived))
end
if el then
  local parts = {}
  for _, r in ipairs(el.results) do
    parts[#parts + 1] = ("%s %.2f s (leases %s s) [%s]%s"):format(r.name, r.secs,
      r.leased and ("%.2f"):format(r.leased) or "?", tostring(r.shares), r.ok and "" or " TIMED OUT")
  end
  out:write(("  elastic (lease_ttl %g s, %d shards): %s%s\n"):format(opt["lease-ttl"], opt.shards,
    table.concat(parts, "; "), el.done and "" or "; scenario UNFINISHED"))
end
if rs then
  local parts = {}
  for _, r in ipairs(rs.results) do
    local st = r.stats or {}
    parts[#parts + 1] = ("%d -> %d: exit %s, moved %s, paused %s s, took %s s, waited %s s for calls, misplaced %s")
      :format(r.from, r.to, tostring(r.rc), tostring(st.moved), tostring(st.paused), tostring(st.seconds),
        tostring(st.waited), tostring(r.misplaced))
  end
  out:write(("  reshards: %s%s\n"):format(table.concat(parts, "; "), rs.done and "" or "; scenario UNFINISHED"))
end
out:write(("  overlaps %d, order violations %d, unsorted batches %d, unknown payloads %d, bad records %d, " ..
  "host errors %d, bad exits %d%s\n"):format(c.overlaps, c.order, c.inner_order, c.unknown, bad_records, host_errors,
  stats.bad_exit or 0, timed_out and ", TIMED OUT" or ""))
for _, e in ipairs(examples) do out:write("  ! ", e, "\n") end
for _, e in ipairs(bad_exits) do out:write("  ! bad exit: ", e, "\n") end

if web then web.stop() end
if opt.keep then
  out:write("  kept: ", dir, " ", srv.dir, " (Redis ", srv.url, " still running, pid ", tostring(srv.pid), ")\n")
else
  srv:stop()
  host.sh("rm -rf " .. host.quote(dir))
  for _, p in ipairs(logs) do host.sh("rm -rf " .. host.quote(p.dir)) end
end
return ok and 0 or 1
