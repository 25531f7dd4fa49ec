-- The Redis scripts as a wire protocol (docs/redis.md), called directly with
-- conn:script: Lowkiq's spec/script_spec.rb tested its Lua helpers; luakiq's
-- equivalents are the shard function, push.lua's reply and wake-up, argument
-- validation before any write, the lease scripts, register.lua and the
-- one-slot-per-shard key layout.
local S = require "queue.support"
local core = require "luakiq.core"
local keys = require "luakiq.lib.keys"
local runtime = require "luakiq.lib.runtime"
local host = require "helpers.host"
local admin = require "luakiq.ops.admin"
local queue = require "luakiq.runner.queue"

describe("scripts", function()
  local env = S.lifecycle()
  local function now() return env.now end

  local function script_error(name, ...)
    local ok, err = pcall(env.conn.script, env.conn, name, ...)
    assert.is_false(ok, name .. " should have failed")
    return tostring(err)
  end

  describe("the shard function", function()
    it("is zlib's CRC-32 of the id's bytes", function()
      local known = { ["1"] = 2212294583, ["2"] = 450215437, ["a"] = 3904355907, [""] = 0,
                      ["é"] = 235179326, ["hello world"] = 222957957, ["Orders"] = 3800299736 }
      for id, crc in pairs(known) do
        assert.are.equal(crc, core.crc32(id), id)
        assert.are.equal(crc % 5, keys.shard(id, 5), id)
        assert.are.equal(crc % 24, keys.shard(id, 24), id)
      end
    end)

    it("places every pushed id in shard crc32(id) % shards_count; 1 and \"1\" are one job", function()
      -- zlib.crc32(str(i)) % 5 for i = 1..12
      local expected = { 3, 2, 1, 3, 1, 0, 1, 1, 4, 1, 4, 0 }
      local jobs = {}
      for i = 1, 12 do jobs[i] = { id = i, payload = i } end
      env:push("Multi", jobs)
      env:push("Multi", { { id = "1", payload = "str" } })
      for i, shard in ipairs(expected) do
        -- (layout 2: queued = a record in P jobs, which job.lua reads)
        assert.truthy(env.conn:script("job", env:prefix("Multi", shard), tostring(i))[1] == "queued", "id " .. i)
      end
      assert.are.equal(12, env:stats("Multi").length)
      -- equal scores: ordered by the payload bytes ('"str"' < '1')
      assert.are.same({ { "str", now() }, { 1, now() } }, env:queued("Multi", 1).payloads)
    end)
  end)

  describe("push.lua", function()
    it("returns the count of newly queued ids and the shard's head", function()
      local p = env:prefix("Test")
      local r = env.conn:script("push", p, "", now(), "1", now() + 5, -1, now(), '"a"', "2", now() + 3, -1, now(), '"b"')
      assert.are.same({ 2, tostring(now() + 3) }, r)
      r = env.conn:script("push", p, "", now(), "1", now() - 1, -1, now(), '"c"')
      assert.are.same({ 0, tostring(now() + 3) }, r)
      assert.are.same({ 0, false }, env.conn:script("push", env:prefix("Multi", 1), "", now()))
    end)

    it("writes a call of new ids alike on its short way and the general one", function()
      -- push.lua takes a shorter way for a call of distinct new ids of one
      -- perform_in; the same call with its first group repeated at the end
      -- (a duplicate id, merged into itself: no change) takes the general
      -- one. Each step goes to both shards, which must then hold the same.
      local a, b = "luakiq:{FastWay:0}:", "luakiq:{GeneralWay:0}:"
      local function call(p, pin, groups, dup)
        local args = { p, "", now() }
        for _, g in ipairs(groups) do
          for _, v in ipairs({ g[1], pin, -1, g[3] or pin, g[2] }) do args[#args + 1] = v end
        end
        if dup then for k = 4, 8 do args[#args + 1] = args[k] end end
        return env.conn:script("push", unpack(args))
      end
      local function state(p)
        return { jobs = env.conn:call("ZRANGE", p .. "jobs", 0, -1), ready = env.conn:call("LRANGE", p .. "ready", 0, -1),
                 later = env.conn:call("ZRANGE", p .. "later", 0, -1, "WITHSCORES"), tail = env.conn:call("GET", p .. "tail") }
      end
      local steps = {
        { now(), { { "b", '"x"' }, { "a", '"x"' }, { "c", '"y"', now() - 2 } } }, -- due: to ready, by id
        { now() + 30, { { "d", '"x"' }, { "e\0\1f", '"z"' } } },                    -- not due: later
        { now() - 5, { { "g", '"x"' }, { "b0", '""' } } },                          -- before ready's tail: later
        { now(), { { "b1", '"x"' }, { "a9", '"x"', now() + 1 } } },                  -- queued ids in the call's range
      }
      for i, st in ipairs(steps) do
        local ra, rb = call(a, st[1], st[2]), call(b, st[1], st[2], true)
        assert.are.same(rb, ra, "step " .. i)
        assert.are.same(state(b), state(a), "step " .. i)
      end
      local st = state(a)
      assert.are.same({ "a", "b", "c", "a9", "b1" }, st.ready)
      assert.are.equal(9, #st.jobs)
      assert.are.equal(8, #st.later) -- d, e\0\1f, g, b0
    end)

    it("reads the \"ids\" and \"pairs\" forms as the groups of 5 they stand for, sections and all", function()
      -- Each step goes to three shards, as groups of 5 and in each short
      -- form, which must then hold the same and reply the same. Sections
      -- name jobs by their place among the ids.
      local shards = { g = "luakiq:{Groups:0}:", i = "luakiq:{IdsForm:0}:", p = "luakiq:{PairsForm:0}:" }
      local function state(p)
        return { jobs = env.conn:call("ZRANGE", p .. "jobs", 0, -1), ready = env.conn:call("LRANGE", p .. "ready", 0, -1),
                 later = env.conn:call("ZRANGE", p .. "later", 0, -1, "WITHSCORES"),
                 levels = env.conn:call("ZRANGE", p .. "levels", 0, -1),
                 retries = env.conn:call("ZRANGE", p .. "retries", 0, -1, "WITHSCORES") }
      end
      local function call(form, p, pin, rc, score, payload, ids, sections)
        local args = { script = "push", p, "", now() }
        local function add(...) for _, v in ipairs({ ... }) do args[#args + 1] = v end end
        if form == "g" then
          for _, id in ipairs(ids) do add(id, pin, rc, score, payload) end
        elseif form == "i" then
          add("", "ids", pin, rc, score, payload)
          for _, id in ipairs(ids) do add(id) end
        else
          add("", "pairs", pin, rc, score)
          for _, id in ipairs(ids) do add(id, payload) end
        end
        for _, v in ipairs(sections or {}) do add(v) end
        return env.conn:pipeline({ args })[1]
      end
      local t = now()
      local steps = {
        { t, -1, t, '""', { "a", "c", "b" } },                                 -- due, new: ready
        { t + 30, -1, t, '"x"', { "d", "a" }, { "", "priority", "1", "7" } },   -- later; d at priority 7
        { t - 5, 2, t - 5, '"y"', { "e", "f", "e" }, { "", "tags", "2", "t1" } }, -- retried; f tagged; e twice
        { t, -1, t, '"z"', { "g" }, { "", "shards", "1" } },
      }
      for i, st in ipairs(steps) do
        local r = {}
        for form, p in pairs(shards) do r[form] = call(form, p, unpack(st)) end
        assert.are.same(r.g, r.i, "step " .. i)
        assert.are.same(r.g, r.p, "step " .. i)
        assert.are.same(state(shards.g), state(shards.i), "step " .. i)
        assert.are.same(state(shards.g), state(shards.p), "step " .. i)
      end
      assert.are.same({ "a", "b", "c", "g" }, state(shards.i).ready)
      assert.are.same({ "f" }, env.conn:call("SMEMBERS", shards.p .. "tag:t1"))
      -- the forms' own errors, before any write
      local p = env:prefix("Test")
      local err = script_error("push", p, "", now(), "", "ids", now(), -1, now())
      assert.truthy(err:find('the "ids" form is "", "ids", perform_in, retry_count, score, payload, then ids', 1, true), err)
      err = script_error("push", p, "", now(), "", "pairs", now(), -1, now(), "a", '"x"', "b")
      assert.truthy(err:find("needs a payload after id 'b'", 1, true), err)
      err = script_error("push", p, "", now(), "", "ids", "soon", -1, now(), '""', "a")
      assert.truthy(err:find("job 1 perform_in must be a finite number, got 'soon'", 1, true), err)
      assert.is_falsy(env.conn:call("GET", p .. "tail"))
      assert.are.equal(0, env.conn:call("EXISTS", p .. "jobs"))
    end)

    it("writes ascending new ids of a short form its shortest way, as the groups of 5 would", function()
      -- (push.lua's short_way: ascending ids, retry_count < 0, no section
      -- but "shards", no tags, priorities or expiring payloads, none of its
      -- ids queued; the scenarios below also reach each of its way-outs)
      local t = now()
      local function state(p)
        return { jobs = env.conn:call("ZRANGE", p .. "jobs", 0, -1), ready = env.conn:call("LRANGE", p .. "ready", 0, -1),
                 later = env.conn:call("ZRANGE", p .. "later", 0, -1, "WITHSCORES"), tail = env.conn:call("GET", p .. "tail"),
                 retries = env.conn:call("ZRANGE", p .. "retries", 0, -1, "WITHSCORES") }
      end
      -- payload: one for all, or a table id -> payload ("pairs" only)
      local function call(form, p, pin, rc, score, payload, ids, tail)
        local args = { script = "push", p, "", now() }
        local function add(...) for _, v in ipairs({ ... }) do args[#args + 1] = v end end
        local function pl(id) return type(payload) == "table" and payload[id] or payload end
        if form == "g" then
          for _, id in ipairs(ids) do add(id, pin, rc, score, pl(id)) end
        elseif form == "i" then
          add("", "ids", pin, rc, score, payload)
          for _, id in ipairs(ids) do add(id) end
        else
          add("", "pairs", pin, rc, score)
          for _, id in ipairs(ids) do add(id, pl(id)) end
        end
        for _, v in ipairs(tail or {}) do add(v) end
        return env.conn:pipeline({ args })[1]
      end
      local scenarios = {
        { "due", { { t, -1, t, '""', { "a", "b", "c" } } } },
        { "byte 0", { { t, -1, t, '"x"', { "x\0a", "x\0b", "y" } } } },
        { "score", { { t, -1, t - 3, '"x"', { "a", "b" } } } },
        { "future", { { t + 30, -1, t + 30, '"x"', { "a", "b" } } } },
        { "below the tail", { { t, -1, t, '"x"', { "a" } }, { t - 5, -1, t - 5, '"x"', { "b", "c" } } } },
        { "a queued id", { { t, -1, t, '"x"', { "m" } }, { t, -1, t, '"y"', { "l", "m", "n" } } } },
        -- (ready's head outside the call's range: the general way must not
        -- read it through the short way's partial view of P jobs)
        { "a queued id behind another", { { t, -1, t, '"x"', { "a" } }, { t, -1, t, '"x"', { "m" } },
                                          { t, -1, t, '"y"', { "l", "m", "n" } } } },
        { "ids between", { { t, -1, t, '"x"', { "b", "d" } }, { t, -1, t, '"y"', { "a", "c", "e" } } } },
        { "retried", { { t, 3, t, '"x"', { "a", "b" } } } },
        { "not ascending", { { t, -1, t, '"x"', { "b", "a" } } } },
        { "shards", { { t, -1, t, '"x"', { "a", "b" }, { "", "shards", "1" } } } },
        { "priority", { { t, -1, t, '"x"', { "a", "b" }, { "", "priority", "2", "5" } } } },
      }
      for k, sc in ipairs(scenarios) do
        local shards = { g = "luakiq:{G" .. k .. ":0}:", i = "luakiq:{I" .. k .. ":0}:", p = "luakiq:{R" .. k .. ":0}:" }
        for j, st in ipairs(sc[2]) do
          local r = {}
          for form, p in pairs(shards) do
            local payload = st[4]
            if form ~= "i" and j == 1 and sc[1] == "due" then payload = { a = '"1"', b = '"2"', c = '"1"' } end
            if form == "i" and type(payload) == "table" then payload = '"1"' end
            r[form] = call(form, p, st[1], st[2], st[3], payload, st[5], st[6])
          end
          assert.are.same(r.g, r.p, sc[1] .. " " .. j)
          assert.are.same(state(shards.g), state(shards.p), sc[1] .. " " .. j)
          if sc[1] ~= "due" then
            assert.are.same(r.g, r.i, sc[1] .. " " .. j)
            assert.are.same(state(shards.g), state(shards.i), sc[1] .. " " .. j)
          end
        end
      end
      -- (a shard with tags, or priorities, takes the general way too)
      env.conn:call("HSET", "luakiq:{Tagged:0}:tags", "z", "t")
      env.conn:call("SADD", "luakiq:{Tagged:0}:tag:t", "z")
      local r = call("i", "luakiq:{Tagged:0}:", t, -1, t, '"x"', { "a", "b" })
      assert.are.same({ 2, tostring(t) }, r)
      assert.are.same({ "a", "b" }, env.conn:call("LRANGE", "luakiq:{Tagged:0}:ready", 0, -1))
    end)

    it("gets from the client the short form its jobs allow, and the same jobs whatever the form", function()
      -- (the client picks: "ids" when a shard's jobs share perform_in,
      -- retry_count, score and payload; "pairs" when only the payloads
      -- differ; else groups of 5)
      local sent = {}
      local conn = setmetatable({}, { __index = function(_, k)
        local f = env.conn[k]
        if type(f) ~= "function" then return f end
        return function(_, cmds, ...)
          local r = f(env.conn, cmds, ...)
          -- (a cluster's connection takes no send: the call goes by pipeline)
          if (k == "send" and r or k == "pipeline") and type(cmds) == "table" then
            for _, c in ipairs(cmds) do if c.script == "push" then sent[#sent + 1] = c[4] == "" and c[5] or "groups" end end
          end
          return r
        end
      end })
      local client = require "luakiq.client"
      client.push(conn, env.cfg, "Test", { { id = 1 }, { id = 2 }, { id = 3 } })
      client.push(conn, env.cfg, "Test", { { id = 4, payload = "a" }, { id = 5, payload = "b" } })
      client.push(conn, env.cfg, "Test", { { id = 6 }, { id = 7, perform_in = now() + 60 } })
      assert.are.same({ "ids", "pairs", "groups" }, sent)
      assert.are.equal(7, env:stats("Test").length)
      assert.are.same({ { "a", now() } }, env:queued("Test", 4).payloads)
      assert.are.same({ { "b", now() } }, env:queued("Test", 5).payloads)
    end)

    it("merges into a queued job alike by appending its payloads and by decoding them", function()
      -- push.lua appends a payload that sorts after a queued job's to its
      -- record without decoding them (lazy_job); a call with an expires_at
      -- section decodes every queued job (here for an id of its own). Each
      -- step goes to both shards, which must then hold the same records.
      local a, b = "luakiq:{Appended:0}:", "luakiq:{Decoded:0}:"
      local t0 = now()
      local function call(p, groups, prio, force)
        local args = { script = "push", p, "", t0 }
        local function group(g)
          for _, v in ipairs({ g[1], g[2] or t0, -1, g[3], g[4] }) do args[#args + 1] = v end
        end
        for _, g in ipairs(groups) do group(g) end
        if force then group({ "force", t0, t0, '"f"' }) end
        if prio then
          args[#args + 1], args[#args + 2] = "", "priority"
          for n, v in pairs(prio) do args[#args + 1], args[#args + 2] = n, v end
        end
        if force then
          for _, v in ipairs({ "", "expires_at", #groups + 1, t0 + 86400 }) do args[#args + 1] = v end
        end
        return env.conn:pipeline({ args })[1]
      end
      local function state(p)
        local jobs = {}
        for _, m in ipairs(env.conn:call("ZRANGE", p .. "jobs", 0, -1)) do
          if not m:find("^force\0") then jobs[#jobs + 1] = m end
        end
        local ready = {}
        for _, id in ipairs(env.conn:call("LRANGE", p .. "ready", 0, -1)) do
          if id ~= "force" then ready[#ready + 1] = id end
        end
        return { jobs = jobs, later = env.conn:call("ZRANGE", p .. "later", 0, -1, "WITHSCORES"), ready = ready,
                 levels = env.conn:call("ZRANGE", p .. "levels", 0, -1) }
      end
      -- a record another program wrote: its last payload without the
      -- trailing nil score the scripts write (decoded, then merged)
      for _, p in ipairs({ a, b }) do
        env.conn:call("EVAL", "redis.call('ZADD', KEYS[1], 0, 'e\\0\\0l' .. cmsgpack.pack(tonumber(ARGV[1]), 'pp'))", 1,
          p .. "jobs", t0 - 50)
        env.conn:call("ZADD", p .. "later", t0 - 50, "e")
      end
      local steps = {
        { { { "a", t0, 1, '"p1"' }, { "b", t0, 5, '"q1"' }, { "c", t0 - 9, t0 - 9, '"x"' } } },
        { { { "a", t0, 2, '"p2"' }, { "b", t0, 3, '"q0"' }, { "a", t0, 0.5, '"p1"' } } },   -- append; insert; lower
        { { { "a", t0, 2, '"p2"' }, { "a", t0, 2, '"p3"' }, { "c", t0, t0 - 9, '"y"' } } },  -- present; tie; score = pin
        { { { "c", t0, 7, '"z"' }, { "a", t0, 9, '"p4"' }, { "a", t0, 9, '"p4"' } }, { [1] = "50" } }, -- moved to a level
        { { { "e", t0, t0, '"pq"' }, { "b", t0, 8, '"q2"' }, { "b", t0, 6, '"q3"' } } },    -- foreign record; out of order
      }
      for i, st in ipairs(steps) do
        local ra, rb = call(a, st[1], st[2]), call(b, st[1], st[2], true)
        assert.are.same(ra[1] + (i == 1 and 1 or 0), rb[1], "step " .. i)
        assert.are.same(state(b), state(a), "step " .. i)
      end
      -- a's record: p1 (its score lowered to 0.5), p2, p3 (tie at 2, by
      -- bytes), p4 once
      local rec = state(a).jobs[1]
      local at = {}
      for k = 1, 4 do at[k] = rec:find('"p' .. k .. '"', 1, true) end
      assert.truthy(at[1] < at[2] and at[2] < at[3] and at[3] < at[4], rec)
      assert.is_nil(rec:find('"p4"', at[4] + 1, true))
      assert.are.equal(4, #state(a).jobs)
    end)

    it("validates every group before the first write", function()
      local p = env:prefix("Test")
      local err = script_error("push", p, "", now(), "1", now(), -1, now(), '"a"', "2", "nan", -1, now(), '"b"')
      assert.truthy(err:find("luakiq push: job 2 perform_in must be a finite number, got 'nan'", 1, true), err)
      err = script_error("push", p, "", now(), "", now(), -1, now(), '"a"')
      assert.truthy(err:find("job 1: id is empty", 1, true), err)
      err = script_error("push", p, "", now(), "1", now())
      assert.truthy(err:find("groups of 5", 1, true), err)
      assert.are.same({}, env.conn:call("KEYS", "*"))
    end)

    -- (one server's channel, heard with redis-cli; on a cluster the pushes
    -- SPUBLISH on each shard's own channel: spec/cluster/cluster_spec.lua)
    local single = require("helpers.redis").on_cluster() and pending or it
    single("publishes the shard prefix on the wake channel only when the head gets earlier", function()
      local dir = host.tmpdir()
      local out = dir .. "/sub"
      host.sh(("(timeout 3 redis-cli -p %d subscribe luakiq:wake >%s 2>&1 &)"):format(env.srv.port, out))
      for _ = 1, 100 do
        if env.conn:call("PUBSUB", "NUMSUB", "luakiq:wake")[2] == 1 then break end
        core.sleep(0.02)
      end
      env:push("Test", { { id = 1, perform_in = now() + 10 } })     -- empty -> head: publish
      env:push("Test", { { id = 2, perform_in = now() + 20 } })     -- later: no publish
      env:push("Test", { { id = 3, perform_in = now() }, { id = 4, perform_in = now() - 1 } })  -- once
      env:push("Multi", { { id = 1 } })
      local text
      for _ = 1, 100 do
        text = host.read(out) or ""
        if text:find("luakiq:{Multi:3}:", 1, true) then break end
        core.sleep(0.02)
      end
      host.sh("rm -rf " .. host.quote(dir))
      local _, n = text:gsub("\nmessage\n", "")
      assert.are.equal(3, n, text)
      local _, test = text:gsub("luakiq:{Test:0}:", "")
      assert.are.equal(2, test, text)
    end)
  end)

  describe("fetch.lua and fail.lua", function()
    it("refuse bad arguments before taking the lease", function()
      local p = env:prefix("Test")
      local err = script_error("fetch", p, S.TOKEN, 30000, now(), "1.5", "", "1")
      assert.truthy(err:find("luakiq fetch: limit must be an integer >= 0", 1, true), err)
      err = script_error("fetch", p, "", 30000, now(), 1, "", "1")
      assert.truthy(err:find("luakiq fetch: token is empty", 1, true), err)
      err = script_error("fail", p, S.TOKEN, 30000, now(), "", 5, "", "1", "inf")
      assert.truthy(err:find("luakiq fail: perform_in of '1' must be a finite number", 1, true), err)
      err = script_error("fail", p, S.TOKEN, 30000, now(), "", 5, "", "1", "fail:5:x:boom")
      assert.truthy(err:find("luakiq fail: '1' must be fail:T:MAX_RETRY_COUNT:ERROR", 1, true), err)
      err = script_error("fail", p, S.TOKEN, 30000, now(), "", 5, "", "1", "snooze:nan")
      assert.truthy(err:find("luakiq fail: perform_in of '1' must be a finite number", 1, true), err)
      err = script_error("fail", p, S.TOKEN, 30000, now(), "", 5, "", "1", "later:5")
      assert.truthy(err:find("luakiq fail: unknown kind 'later' for '1'", 1, true), err)
      assert.are.same({}, env.conn:call("KEYS", "*"))
    end)

    -- One id's own outcome (call:fail, call:snooze): "snooze:T" goes back
    -- as it was, counted snoozed; "fail:T:M:ERR" fails with its own error
    -- and max_retry_count; the others of the batch keep the call's.
    it("takes snooze:T and fail:T:M:ERR beside done and the call's failures", function()
      local p = env:prefix("Test")
      env:push("Test", { { id = "a" }, { id = "b" }, { id = "c" }, { id = "d" }, { id = "e" } })
      local got = env:fetch("Test", 0)
      assert.are.equal(5, #got.jobs)
      local T, dump = now() + 600, env.cfg.dump_error
      local r = env:fail("Test", 0, { batch = got.batch, error = "the call's" }, {
        "a", "done", "b", ("snooze:%.17g"):format(T), "c", ("fail:%.17g:0:"):format(T) .. dump("bad: a:b"),
        "d", ("fail:%.17g:5:"):format(T) .. dump("own"), "e", T })
      assert.are.equal("OK", r[1])
      assert.are.equal("3", r[2]) -- c, d, e failed
      assert.are.equal("1", r[3]) -- c to the morgue (its own max_retry_count 0)
      local b = env:queued("Test", "b")
      assert.are.same({ -1, T }, { b.retry_count, b.perform_in })
      assert.is_nil(b.error)
      assert.are.equal("bad: a:b", env:dead("Test", "c").error)
      local d, e = env:queued("Test", "d"), env:queued("Test", "e")
      assert.are.same({ 0, "own" }, { d.retry_count, d.error })
      assert.are.same({ 0, "the call's" }, { e.retry_count, e.error })
      assert.is_nil(env:queued("Test", "a"))
      local c = env.conn:call("HGETALL", p .. "counters")
      local counters = {}
      for i = 1, #c, 2 do counters[c[i]] = c[i + 1] end
      assert.are.same({ processed = "1", failed = "3", snoozed = "1" }, counters)
    end)

    -- fetch.lua's reply (docs/redis.md): each job a member of P jobs or a
    -- busy record, decoded by the host (queue.parse_fetch).
    it("delivers every kind of job as the host reads it, and junk only the host drops", function()
      local p = env:prefix("Test")
      env:push("Test", { { id = "f", payload = "r" } })
      local got = env:fetch("Test", 0)
      env:fail("Test", 0, { batch = got.batch, error = "boom" }, { "f", now() - 1 })
      env:fetch("Test", 0, { ack = got.batch, fetch = false })
      env:push("Test", {
        { id = "a", payload = 1, score = now() - 5 }, { id = "a", payload = 2, score = now() - 3 }, { id = "a", payload = 3 },
        { id = "b", payload = "x", perform_in = now() - 10 },
        { id = "c", payload = "w", windows = { "00:00-24:00" }, timezone = "UTC" },
        { id = "d", payload = "hi", priority = 50 },
        { id = "e", payload = "old", expires_at = now() + 1 }, { id = "e", payload = "new" },
        { id = "g\0z", payload = "zero byte" },
      })
      -- a ready job whose payload encodings are junk (another client's bytes)
      -- (perform_in 0, a one-byte MessagePack integer; 0xc1 is never valid)
      env.conn:call("ZADD", p .. "jobs", 0, "j\0\0r\0\193")
      env.conn:call("RPUSH", p .. "ready", "j")
      local at = now() + 2
      local function fetch()
        local r = env.conn:pipeline({ queue.fetch_cmd(p, S.TOKEN, 30000, 20, nil, false, at) })[1]
        return queue.parse_fetch(r, { prefix = p, worker = "Test", shard = 0 })
      end
      local res = fetch()
      -- d (priority 50) first, then b, f, a, c, e, g\0z; not j
      local ids, pins = {}, {}
      for i, job in ipairs(res.jobs) do ids[i], pins[i] = job.id, job.perform_in end
      assert.are.same({ "d", "b", "f", "a", "c", "e", "g\0z" }, ids)
      for i = 3, #pins do assert.is_true(pins[i - 1] <= pins[i], "perform_in order") end
      assert.is_true(pins[2] < now() - 9)
      assert.are.same({ { '"hi"' } }, res.jobs[1].payloads)
      assert.are.same({ { '"x"' } }, res.jobs[2].payloads)
      assert.are.same({ { '"r"' } }, res.jobs[3].payloads)
      assert.are.same({ { "1" }, { "2" }, { "3" } }, res.jobs[4].payloads)
      assert.are.same({ { '"w"' } }, res.jobs[5].payloads)
      assert.are.same({ { '"new"' } }, res.jobs[6].payloads)
      assert.are.same({ { '"zero byte"' } }, res.jobs[7].payloads)
      assert.are.same({ 0, "moob" }, { res.jobs[3].retry_count, res.jobs[3].error }) -- (Test stores errors reversed)
      for i, job in ipairs(res.jobs) do
        if i ~= 3 then assert.are.same({ -1, nil }, { job.retry_count, job.error }, job.id) end
        if i ~= 5 then assert.is_nil(job.windows, job.id) end
      end
      assert.are.equal("UTC|00:00-24:00", res.jobs[5].windows)
      assert.is_true(res.windows)
      -- j's record reached the host (8 records in flight), which dropped it;
      -- it is in flight with the batch, and leaves with its ack
      assert.are.equal(8, env.conn:call("HLEN", p .. "busy"))
      -- a lost reply: the batch comes again, the same jobs (in perform_in
      -- order: d's priority no longer counts)
      local again = fetch()
      local function by_id(list)
        table.sort(list, function(x, y) return x.id < y.id end)
        return list
      end
      assert.are.equal(res.batch, again.batch)
      assert.are.same(by_id(res.jobs), by_id(again.jobs))
      env:fetch("Test", 0, { ack = res.batch, fetch = false })
      assert.are.equal(0, env.conn:call("EXISTS", p .. "busy", p .. "jobs"))
      assert.are.same({ "1" }, { env.conn:call("HGET", p .. "counters", "expired") })
    end)

    -- Every key of the shard prefix p by value (sets sorted, the lease's
    -- token as "set"), for comparing what two runs left.
    local function shard_state(p)
      local t = {}
      for _, k in ipairs(env.conn:call("KEYS", p .. "*")) do
        local ty = env.conn:call("TYPE", k)
        local v
        if ty == "string" then v = env.conn:call("GET", k)
        elseif ty == "list" then v = env.conn:call("LRANGE", k, 0, -1)
        elseif ty == "zset" then v = env.conn:call("ZRANGE", k, 0, -1, "WITHSCORES")
        elseif ty == "hash" then
          local f = env.conn:call("HGETALL", k)
          v = {}
          for i = 1, #f, 2 do v[f[i]] = f[i + 1] end
        elseif ty == "set" then
          v = env.conn:call("SMEMBERS", k)
          table.sort(v)
        else v = ty end
        t[k] = v
      end
      t[p .. "lease"] = t[p .. "lease"] and "set"
      return t
    end

    -- The host's fetch of shard p (queue.fetch_cmd: the batch ack acked, up
    -- to limit jobs at time at), as the host reads it (queue.parse_fetch).
    local function fetch_at(p, at, limit, ack)
      local r = env.conn:pipeline({ queue.fetch_cmd(p, S.TOKEN, 30000, limit, ack, false, at) })[1]
      return queue.parse_fetch(r, { prefix = p, worker = "Test", shard = 0 })
    end

    -- Restores shard p from dumps (key -> DUMP) and fetches it empty at time
    -- at, limit at a time, each call acking the batch before; general: with
    -- an unrelated P windows field, which sends every fetch down the general
    -- path (take_default) instead of the one pass. Returns the replies as
    -- the host reads them ({jobs, head, batch, whether the records had
    -- bytes}: a fresh job comes as its member of P jobs from the one pass,
    -- as its busy record from the general path), and the keys (shard_state,
    -- less the windows field) with the first batch in flight and at the end.
    local function drain_shard(p, dumps, at, limit, general)
      for _, k in ipairs(env.conn:call("KEYS", p .. "*")) do env.conn:call("DEL", k) end
      for k, v in pairs(dumps) do env.conn:call("RESTORE", k, 0, v) end
      if general then env.conn:call("HSET", p .. "windows", "nobody", "UTC|00:00-24:00") end
      local function state()
        local st = shard_state(p)
        st[p .. "windows"] = nil
        return st
      end
      local replies, ack, first = {}, "", nil
      for step = 1, 200 do
        local res = fetch_at(p, at, limit, ack)
        replies[step] = { res.jobs, res.head, res.batch, res.bytes > 0 }
        if step == 1 then first = state() end
        if not res.batch then break end
        ack = res.batch
      end
      return replies, state(), first
    end

    it("takes a plain shard's ready jobs in one pass as the general path does, whatever the limit", function()
      -- fetch.lua's one pass (take_quiet) runs when the shard has none of
      -- stale, expiring, levels, windows and nothing due in later; an
      -- unrelated P windows field sends the same shard down
      -- the general path (take_default). Both must give the same replies,
      -- batch by batch, and leave the same keys: on a quiet shard, and on one
      -- with a job waiting for a retry with an error (in later, not due) and a
      -- ready job pushed with a retry_count.
      local p = "luakiq:{OnePass:0}:"
      local T = now()
      local function push(at, jobs)
        local args = { script = "push", p, "", at }
        for _, j in ipairs(jobs) do
          for _, v in ipairs({ j[1], j[2], j[5] or -1, j[3] or j[2], j[4] or '"' .. j[1] .. '"' }) do
            args[#args + 1] = v
          end
        end
        local r = env.conn:pipeline({ args })[1]
        assert.is_nil(r.err)
      end
      local function setup(retried)
        for _, k in ipairs(env.conn:call("KEYS", p .. "*")) do env.conn:call("DEL", k) end
        local run = {}
        for i = 1, 40 do
          run[i] = { string.format("r%02d", i), T - 100, i % 3 == 0 and T - 200 or nil, nil, retried and i == 5 and 1 or nil }
        end
        push(T, run) -- a run of ids: their members read in one range
        push(T, { { "m5", T - 90 }, { "b2", T - 90 } })
        push(T, { { "a0", T - 90 } }) -- (ready: b2, m5, a0: not ascending)
        push(T, { { "n\0x", T - 80 } }) -- (a byte 0: looked up alone)
        env.conn:call("RPUSH", p .. "ready", "ghost") -- no member: passed and popped
        env.conn:call("ZADD", p .. "jobs", 0, "h\0\0x\0\193") -- a junk head: dropped
        env.conn:call("RPUSH", p .. "ready", "h")
        env.conn:call("ZADD", p .. "jobs", 0, "q\0\0r\0\193") -- junk payloads: reach the host
        env.conn:call("RPUSH", p .. "ready", "q")
        push(T, { { "s1", T - 10 }, { "s2", T - 10 } }) -- not due at T - 50: the head
        push(T, { { "fut", T + 1000 } }) -- in later
        if retried then
          push(T, { { "w", T + 500, nil, nil, 2 } }) -- in later and retries
          env.conn:call("HSET", p .. "errors", "w", "boom")
        end
        -- in the run's range, r20's member gives way to r1z's (the same head):
        -- member 20 of the range is not r20's, and r20 is not queued
        local m20 = env.conn:call("ZRANGE", p .. "jobs", "[r20\0\0", "(r20\0\1", "BYLEX")[1]
        env.conn:call("ZREM", p .. "jobs", m20)
        env.conn:call("ZADD", p .. "jobs", 0, "r1z" .. m20:sub(4))
        local dumps = {}
        for _, k in ipairs(env.conn:call("KEYS", p .. "*")) do dumps[k] = env.conn:call("DUMP", k) end
        return dumps
      end
      -- (the retry count r05 was delivered with, from the replies)
      local function rc5_of(replies)
        for _, r in ipairs(replies) do
          for _, job in ipairs(r[1]) do
            if job.id == "r05" then return job.retry_count end
          end
        end
      end
      for _, retried in ipairs({ false, true }) do
        local dumps = setup(retried)
        for _, at in ipairs({ T - 50, T + 1 }) do
          for _, limit in ipairs({ 1, 2, 23, 24, 25, 40, 44, 100 }) do
            local what = (retried and "retried, " or "") .. "at " .. (at - T) .. ", limit " .. limit
            local r1, s1, f1 = drain_shard(p, dumps, at, limit, false)
            local r2, s2, f2 = drain_shard(p, dumps, at, limit, true)
            local rc5 = rc5_of(r1)
            assert.are.same(r2, r1, what)
            assert.are.same(f2, f1, what)
            assert.are.same(s2, s1, what)
            -- every due job but r20's, the junk head's and q's (its junk
            -- payloads reach the host, which drops it), in order; then the head
            local ids = {}
            for _, r in ipairs(r1) do
              for _, job in ipairs(r[1]) do ids[#ids + 1] = job.id end
            end
            local due = at < T and 43 or 45
            assert.are.equal(due, #ids, what)
            assert.are.same({ "r01", "r21", "r40", "b2", "m5", "a0", "n\0x" },
              { ids[1], ids[20], ids[39], ids[40], ids[41], ids[42], ids[43] }, what)
            assert.is_nil(s1[p .. "busy"], what)
            assert.are.equal(retried and 1 or -1, rc5, what)
            if retried then
              assert.are.same({ "w", "2" }, s1[p .. "retries"], what)
              assert.are.same({ w = "boom" }, s1[p .. "errors"], what)
            end
            if at < T then
              assert.are.equal(T - 10, r1[#r1][2], what)
              assert.are.same({ "s1", "s2" }, s1[p .. "ready"], what)
            else
              assert.are.equal(retried and T + 500 or T + 1000, r1[#r1][2], what)
              assert.is_nil(s1[p .. "ready"], what)
            end
          end
        end
      end
    end)

    it("takes a run's members out of P jobs by their range, and nothing else in it", function()
      -- A run (its range holds as many members as ready's entries) whose
      -- first two jobs are taken as a span, removed by one ZREMRANGEBYLEX;
      -- the third entry's id has no member (another program removed it) and
      -- in its place the range holds a second member of the second id,
      -- which sorts after its job's: it is no taken job's and must stay, as
      -- it does on the general path (a ZREM a member).
      local p = "luakiq:{OnePassSpan:0}:"
      local T = now()
      for _, k in ipairs(env.conn:call("KEYS", p .. "*")) do env.conn:call("DEL", k) end
      local args = { script = "push", p, "", T }
      for _, id in ipairs({ "a1", "a2", "a3" }) do
        for _, v in ipairs({ id, T - 10, -1, T - 10, '"x"' }) do args[#args + 1] = v end
      end
      assert.is_nil(env.conn:pipeline({ args })[1].err)
      local a3 = env.conn:call("ZRANGE", p .. "jobs", "[a3\0\0", "(a3\0\1", "BYLEX")[1]
      env.conn:call("ZREM", p .. "jobs", a3)
      local extra = "a2\0\0\255junk"
      env.conn:call("ZADD", p .. "jobs", 0, extra)
      local dumps = {}
      for _, k in ipairs(env.conn:call("KEYS", p .. "*")) do dumps[k] = env.conn:call("DUMP", k) end
      for _, limit in ipairs({ 2, 3, 10 }) do
        local r1, s1, f1 = drain_shard(p, dumps, T, limit, false)
        local r2, s2, f2 = drain_shard(p, dumps, T, limit, true)
        assert.are.same(r2, r1, "limit " .. limit)
        assert.are.same(f2, f1, "limit " .. limit)
        assert.are.same(s2, s1, "limit " .. limit)
        assert.are.same({ "a1", "a2" }, { r1[1][1][1].id, r1[1][1][2].id }, "limit " .. limit)
        assert.are.same({ extra, "0" }, s1[p .. "jobs"], "limit " .. limit)
      end
    end)

    it("reads each long ascending run of ready in one range where the whole does not ascend", function()
      -- ready: c10..c29, then b10..b29, then a10..a29 (three pushes), so
      -- the entries do not ascend as a whole (as a fetch across "9992" and
      -- "10016"), and their lowest and highest span 71 more members (b000
      -- .. b069 and a150, queued in later, not due). The runs of c and b
      -- hold only their ids: each is read in one range, and each taken
      -- whole leaves P jobs by a range of its own; a's range also holds
      -- a150: its ids are looked up alone. Both paths must give the same
      -- replies and keys at every limit; and a fetch of them all makes two
      -- range reads and 20 lookups, not 60 lookups.
      local p = "luakiq:{OnePassRuns:0}:"
      local T = now()
      for _, k in ipairs(env.conn:call("KEYS", p .. "*")) do env.conn:call("DEL", k) end
      for _, pre in ipairs({ "c", "b", "a" }) do
        local args = { script = "push", p, "", T }
        for i = 10, 29 do
          for _, v in ipairs({ pre .. i, T - 10, -1, T - 10, '"' .. pre .. i .. '"' }) do args[#args + 1] = v end
        end
        assert.is_nil(env.conn:pipeline({ args })[1].err)
      end
      local later = { script = "push", p, "", T, "a150", T + 1000, -1, T, '"x"' }
      for i = 0, 69 do
        for _, v in ipairs({ ("b%03d"):format(i), T + 1000, -1, T, '"x"' }) do later[#later + 1] = v end
      end
      assert.is_nil(env.conn:pipeline({ later })[1].err)
      local dumps = {}
      for _, k in ipairs(env.conn:call("KEYS", p .. "*")) do dumps[k] = env.conn:call("DUMP", k) end
      for _, limit in ipairs({ 1, 7, 8, 9, 20, 21, 25, 40, 41, 59, 60, 100 }) do
        local r1, s1, f1 = drain_shard(p, dumps, T, limit, false)
        local r2, s2, f2 = drain_shard(p, dumps, T, limit, true)
        assert.are.same(r2, r1, "limit " .. limit)
        assert.are.same(f2, f1, "limit " .. limit)
        assert.are.same(s2, s1, "limit " .. limit)
        local n = 0
        for _, r in ipairs(r1) do n = n + #r[1] end
        assert.are.equal(60, n, "limit " .. limit)
        assert.are.equal(71, #s1[p .. "jobs"] / 2, "limit " .. limit) -- the later jobs' members are left
      end
      -- (on a cluster, the node of the shard's slot counts its commands)
      local node = require("helpers.redis").on_cluster() and env.srv.cluster:node_of(p .. "jobs") or env.srv
      node.conn:call("CONFIG", "RESETSTAT")
      drain_shard(p, dumps, T, 100, false)
      local calls = tonumber(node.conn:call("INFO", "commandstats"):match("cmdstat_zrange:calls=(%d+)"))
      -- (two range reads, 20 lookups, and 4 more the drain makes either
      -- way: the entries' ids each looked up alone made 64)
      assert.are.equal(26, calls)
    end)

    it("gives what the general path gives on random shards (60 seeds)", function()
      -- Random pushes (merges, ids that interleave in lex order, a byte 0,
      -- retry counts, jobs due and not), failures that put jobs back into
      -- later with an error, deletes that leave stale entries; then the
      -- shard drained at a random limit and time as it is (the one pass
      -- wherever it applies) and with an unrelated P windows field (the
      -- general path throughout). The jobs the host reads and the keys must
      -- agree.
      local p = "luakiq:{OnePassRandom:0}:"
      local T = now()
      local function clear()
        for _, k in ipairs(env.conn:call("KEYS", p .. "*")) do env.conn:call("DEL", k) end
      end
      local plain_runs, merged_runs = 0, 0
      for seed = 1, 60 do
        math.randomseed(seed)
        clear()
        local R = math.random
        local function rid()
          local x = R(100)
          if x <= 5 then return "z\0" .. R(3) end
          return "k" .. R(60)
        end
        for c = 1, R(4, 10) do
          local op = R(10)
          if op <= 7 then
            -- (each call's due jobs after the last's, mostly: they go to ready)
            local args = { script = "push", p, "", T }
            for _ = 1, R(1, 30) do
              local pin = R(4) == 1 and T + R(1, 100) or T - 100 + 9 * c + R(0, R(30) == 1 and 30 or 8)
              local rc = R(10) == 1 and R(0, 3) or -1
              for _, v in ipairs({ rid(), pin, rc, R(3) == 1 and pin - R(1, 9) or pin, '"' .. R(5) .. '"' }) do
                args[#args + 1] = v
              end
            end
            local r = env.conn:pipeline({ args })[1]
            assert.is_nil(type(r) == "table" and r.err or nil)
          elseif op <= 9 then
            -- some of a batch fail back into later (with an error), the rest are acked
            local res = fetch_at(p, T - 50, R(1, 20))
            if res.batch then
              local pairs_ = {}
              for _, job in ipairs(res.jobs) do
                pairs_[#pairs_ + 1] = job.id
                pairs_[#pairs_ + 1] = R(2) == 1 and "done" or R(5) == 1 and T - R(0, 100) or T + R(1, 100)
              end
              env.conn:script("fail", p, S.TOKEN, 30000, T - 50, res.batch, 25, "boom", unpack(pairs_))
              fetch_at(p, T - 50, 0, res.batch)
            end
          else
            env.conn:script("delete", p, rid())
          end
        end
        local dumps = {}
        for _, k in ipairs(env.conn:call("KEYS", p .. "*")) do dumps[k] = env.conn:call("DUMP", k) end
        local at, limit = R(2) == 1 and T - 50 or T + 0.5, R(1, 60)
        local plain = env.conn:call("EXISTS", p .. "stale", p .. "expiring", p .. "levels", p .. "windows") == 0
        if plain then plain_runs = plain_runs + 1 end
        if plain and #env.conn:call("ZRANGEBYSCORE", p .. "later", "-inf", at, "LIMIT", 0, 1) > 0 then
          merged_runs = merged_runs + 1
        end
        local r1, s1, f1 = drain_shard(p, dumps, at, limit, false)
        local r2, s2, f2 = drain_shard(p, dumps, at, limit, true)
        assert.are.same(r2, r1, "seed " .. seed)
        assert.are.same(f2, f1, "seed " .. seed)
        assert.are.same(s2, s1, "seed " .. seed)
      end
      -- (most seeds start on the one pass, some of them with due jobs in
      -- later to merge: the draws above lean that way)
      assert.is_true(plain_runs >= 30 and merged_runs >= 10,
        plain_runs .. " of 60 seeds started plain, " .. merged_runs .. " with due jobs in later")
    end)

    it("delivers the same whether it reads the taken jobs' members in one range or one by one", function()
      -- fetch.lua reads the members of the ready ids it takes in one range
      -- when few other members lie between them (shard a); 80 ids queued
      -- for later among them (shard b) make it look each id up alone.
      local a, b = "luakiq:{RangeRead:0}:", "luakiq:{OneByOne:0}:"
      for _, p in ipairs({ a, b }) do
        local args = { script = "push", p, "", now() }
        for i = 1, 30 do
          for _, v in ipairs({ "k" .. i, now(), -1, now() - i % 3, '"p' .. i .. '"' }) do args[#args + 1] = v end
        end
        for _, v in ipairs({ "k2\0\1", now(), -1, now(), '"zero"', "k2", now(), -1, now() + 1, '"two"' }) do
          args[#args + 1] = v
        end
        assert.are.equal(31, env.conn:pipeline({ args })[1][1])
        -- a junk member in the range (its ready entry is passed and popped)
        env.conn:call("ZADD", p .. "jobs", 0, "k15x\0\0r\0\193")
        env.conn:call("RPUSH", p .. "ready", "k15x")
      end
      local filler = { script = "push", b, "", now() }
      for i = 1, 80 do
        for _, v in ipairs({ "k1" .. i .. "z", now() + 1000, -1, now(), '""' }) do filler[#filler + 1] = v end
      end
      assert.are.equal(80, env.conn:pipeline({ filler })[1][1])
      local ra, rb = fetch_at(a, now() + 1, 100), fetch_at(b, now() + 1, 100)
      -- (the heads differ: b's fillers are queued)
      assert.are.same({ rb.jobs, rb.batch, rb.bytes }, { ra.jobs, ra.batch, ra.bytes })
      assert.are.equal(31, #ra.jobs) -- k1..k30, k2\0\1; the junk record reached the host, which dropped it
      assert.are.same(env.conn:call("HGETALL", b .. "busy"), env.conn:call("HGETALL", a .. "busy"))
      assert.are.same({ 0, 0, 0, 0 }, { env.conn:call("ZCARD", a .. "jobs"), env.conn:call("LLEN", a .. "ready"),
                                        env.conn:call("LLEN", b .. "ready"), env.conn:call("ZCARD", b .. "jobs") - 80 })
    end)

    it("takes a run of ready ids' members as a list only where each member is its id's", function()
      -- ready's ids ascending, without a byte 0: fetch.lua reads the members
      -- between the first and last as a list (read_jobs with as_list) when
      -- they are as many as the ids, and checks each against its id
      -- (run_member)
      local p = env:prefix("Test")
      local function ids_of(res)
        local out = {}
        for i, j in ipairs(res.jobs) do out[i] = j.id end
        return out
      end
      env:push("Test", { { id = "a1", payload = 1, perform_in = now() - 10 } })
      env.conn:call("RPUSH", p .. "ready", "a2") -- (an entry without a member)
      env:push("Test", { { id = "a3", payload = 3, perform_in = now() - 5 } })
      env:push("Test", { { id = "a25", payload = 25, perform_in = now() + 1000 } }) -- (between a2 and a3)
      -- three members for three ids, the second not a2's
      local got = env:fetch("Test", 0, { limit = 10 })
      assert.are.same({ "a1", "a3" }, ids_of(got))
      assert.are.same({ { 1 } }, got.jobs[1].payloads)
      assert.are.same({ { 3 } }, got.jobs[2].payloads)
      assert.are.equal(0, env.conn:call("LLEN", p .. "ready"))
      assert.are.same({ "a25" }, env:ids(env:list("Test")))
      env:fetch("Test", 0, { ack = got.batch, fetch = false })
      -- more members than ids in the range: looked up by id
      env:push("Test", { { id = "c1", payload = "x" }, { id = "c2", payload = "y" } })
      env:push("Test", { { id = "c15", payload = "z", perform_in = now() + 1000 } })
      got = env:fetch("Test", 0, { limit = 10 })
      assert.are.same({ "c1", "c2" }, ids_of(got))
      assert.are.same({ { "y" } }, got.jobs[2].payloads)
      env:fetch("Test", 0, { ack = got.batch, fetch = false })
      -- as many, and each its id's
      local jobs = {}
      for i = 1, 9 do jobs[i] = { id = "d" .. i, payload = i } end
      env:push("Test", jobs)
      got = env:fetch("Test", 0, { limit = 10 })
      assert.are.same({ "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9" }, ids_of(got))
      for i = 1, 9 do assert.are.same({ { i } }, got.jobs[i].payloads) end
      assert.are.same({ "a25", "c15" }, env:ids(env:list("Test")))
    end)

    it("fail.lua never acquires a shard: {LEASE, -2} after another holder's lease ran out", function()
      env:push("Test", { { id = 1 } })
      local res = env:fetch("Test", 0, { token = "a" })
      env.conn:call("DEL", env:prefix("Test") .. "lease")
      local r = env:fail("Test", 0, { token = "b", batch = res.batch }, { "1", now() })
      assert.are.same({ "LEASE", "-2" }, r)
      assert.are.equal(1, #env:busy("Test"))
    end)

    it("fail.lua puts in-flight ids it was not told about back unchanged", function()
      env:push("Batch", { { id = 1, payload = "a" }, { id = 2, payload = "b", retry_count = 1, perform_in = now() - 3 } })
      local res = env:fetch("Batch")
      local r = env:fail("Batch", 0, { batch = res.batch, error = "e" }, { "1", now() + 7 })
      assert.are.same({ "OK", "1", "0", tostring(now() - 3) }, r)
      local j2 = env:queued("Batch", 2)
      assert.are.same({ 1, now() - 3, { { "b", now() } } }, { j2.retry_count, j2.perform_in, j2.payloads })
      assert.is_nil(j2.error)
      assert.are.equal(0, env:queued("Batch", 1).retry_count)
    end)
  end)

  -- P busy's filler (docs/redis.md, "busy"): a batch of 24 jobs or more goes
  -- to busy with the field "" first, so Redis keeps the hash a hash table
  -- (a listpack's HSET is a search per field); no count or reader sees it.
  describe("P busy's filler", function()
    local p
    local function push_n(n)
      p = env:prefix("Test")
      local jobs = {}
      for i = 1, n do jobs[i] = { id = ("b%03d"):format(i), payload = i } end
      env:push("Test", jobs)
    end
    local function hlen() return env.conn:call("HLEN", p .. "busy") end
    local function bury(batch, ...)
      return env.conn:pipeline({ { script = "bury", p, S.TOKEN, 30000, now(), batch, ... } })[1]
    end

    it("comes with a batch of 24 jobs or more, and no count, listing, redelivery or ack sees it", function()
      push_n(30)
      local got = env:fetch("Test", 0, { limit = 30 })
      assert.are.equal(30, #got.jobs)
      assert.are.equal(31, hlen())
      assert.are.equal("hashtable", env.conn:call("OBJECT", "ENCODING", p .. "busy"))
      assert.are.equal("30", env.conn:script("stats", p)[7])
      assert.are.equal("30", env.conn:script("busy", p)[1])
      assert.are.equal(30, env:stats("Test").busy)
      local again = env:fetch("Test", 0, { limit = 30 }) -- (a lost reply)
      assert.are.equal(30, #again.jobs)
      assert.are.equal(31, hlen())
      local acked = env:fetch("Test", 0, { ack = got.batch, fetch = false })
      assert.are.equal(30, acked.acked)
      assert.are.equal(0, env.conn:call("EXISTS", p .. "busy", p .. "busy:fetched_at"))
      assert.are.equal("30", env.conn:call("HGET", p .. "counters", "processed"))
    end)

    it("does not come with a batch of 23", function()
      push_n(23)
      env:fetch("Test", 0, { limit = 30 })
      assert.are.equal(23, hlen())
      assert.are.equal("listpack", env.conn:call("OBJECT", "ENCODING", p .. "busy"))
      assert.are.equal("23", env.conn:script("stats", p)[7])
    end)

    it("is never restored or failed back as a job", function()
      push_n(30)
      env:fetch("Test", 0, { limit = 30, token = "a" })
      env.conn:call("DEL", p .. "lease")
      local taken = env:fetch("Test", 0, { limit = 0, token = "b", fetch = false })
      assert.are.equal(30, taken.restored)
      assert.are.equal(30, env.conn:call("ZCARD", p .. "jobs"))
      local got = env:fetch("Test", 0, { limit = 30, token = "b" })
      assert.are.equal(31, hlen())
      local r = env:fail("Test", 0, { token = "b", batch = got.batch, error = "e" }, { "b001", now() + 5 })
      assert.are.same({ "OK", "1", "0" }, { r[1], r[2], r[3] })
      assert.are.equal(30, env.conn:call("ZCARD", p .. "jobs"))
      assert.are.equal(0, env.conn:call("EXISTS", p .. "busy"))
      assert.are.equal(0, env:queued("Test", "b001").retry_count) -- (a fresh job's first failure)
    end)

    it("goes when fewer than 24 jobs are left in flight, and busy with the last", function()
      push_n(25)
      local got = env:fetch("Test", 0, { limit = 30 })
      assert.are.equal(26, hlen())
      assert.are.same({ "OK", "1" }, { unpack(bury(got.batch, "b001", "1", "e"), 1, 2) })
      assert.are.equal(25, hlen()) -- 24 jobs and the filler
      assert.are.same({ "OK", "1" }, { unpack(bury(got.batch, "b002", "2", "e"), 1, 2) })
      assert.are.equal(23, hlen()) -- 23 jobs
      assert.are.equal("23", env.conn:script("stats", p)[7])
      -- junk in flight: dropped on the way (a redelivery), and the count holds
      env.conn:call("HSET", p .. "busy", "b003", "\193")
      local again = env:fetch("Test", 0, { limit = 30 })
      assert.are.equal(22, #again.jobs)
      assert.are.equal(22, hlen())
      local args = {}
      for i = 4, 25 do
        for _, v in ipairs({ ("b%03d"):format(i), tostring(i), "e" }) do args[#args + 1] = v end
      end
      bury(got.batch, unpack(args))
      assert.are.equal(0, env.conn:call("EXISTS", p .. "busy", p .. "busy:fetched_at"))
      assert.are.equal(24, #env:morgue("Test", "id", "asc"))
    end)
  end)

  describe("renew.lua and release.lua", function()
    it("renew extends the caller's lease, re-takes it when free, never takes another's", function()
      local p = env:prefix("Test")
      env:fetch("Test", 0, { token = "a", lease_ms = 1000 })
      assert.are.equal(1, env.conn:script("renew", p, "a", 60000))
      assert.is_true(env.conn:call("PTTL", p .. "lease") > 1000)
      assert.are.equal(0, env.conn:script("renew", p, "b", 60000))
      env.conn:call("DEL", p .. "lease")
      assert.are.equal(0, env.conn:script("renew", p, "b", 60000))
      assert.are.equal(1, env.conn:script("renew", p, "a", 60000))
      assert.are.equal("a", env.conn:call("GET", p .. "lease"))
    end)

    it("release gives back only the caller's lease and keeps the holder", function()
      local p = env:prefix("Test")
      env:fetch("Test", 0, { token = "a" })
      assert.are.equal(0, env.conn:script("release", p, "b"))
      assert.are.equal(1, env.conn:script("release", p, "a"))
      assert.are.same({ false, "a" }, { env.conn:call("GET", p .. "lease"), env.conn:call("GET", p .. "holder") })
      assert.is_false(env:fetch("Test", 0, { token = "b" }).lease or false)
    end)
  end)

  describe("register.lua", function()
    it("stores shards_count once; runtime.register refuses a different count", function()
      assert.are.equal("5", env.conn:script("register", "luakiq:queues", "Multi", 5))
      assert.are.equal("5", env.conn:script("register", "luakiq:queues", "Multi", 7))
      assert.is_true(runtime.register(env.conn, env.cfg))
      env.conn:call("HSET", "luakiq:queues", "Test", "3")
      local ok, err = runtime.register(env.conn, env.cfg)
      assert.is_nil(ok)
      assert.truthy(err:find("shards_count is 1 but queue 'Test' already has 3 shards", 1, true), err)
      local e = script_error("register", "luakiq:queues", "Q", 0)
      assert.truthy(e:find("shards_count must be an integer >= 1", 1, true), e)
    end)
  end)

  it("keeps every key of a shard under one hash tag (one cluster slot)", function()
    env:push("Multi", { { id = 1, payload = "a", tags = { "t{x}" } }, { id = 4, payload = "b", retry_count = 4 } })
    local res = env:fetch("Multi", 3, { limit = 1 })
    env:fail("Multi", 3, { batch = res.batch, error = "e" }, { res.jobs[1].id, now() + 1 })
    env:fetch("Multi", 3, { limit = 1 })
    admin.kill_failed(env.conn, env.cfg, "Multi")
    local all = env.conn:call("KEYS", "*")
    assert.is_true(#all >= 8, table.concat(all, " "))
    for _, k in ipairs(all) do
      assert.truthy(k:find("^luakiq:{Multi:3}:"), k)
    end
  end)

  it("take every key name from lib/keys.lua (docs/redis.md, key names); none spells one itself", function()
    local schema = host.read("scripts/redis/lib/keys.lua")
    for _, name in ipairs(core.list_dir("scripts/redis")) do
      if name:match("%.lua$") then
        local src = host.read("scripts/redis/" .. name):gsub("%-%-[^\n]*", "") -- code only
        assert.falsy(src:find('KEYS%[1%] %.%. "'), name)
        assert.falsy(src:find('P %.%. "'), name)
        assert.falsy(src:find('"[%w_]*:"'), name)   -- "payloads:", "morgue:"
        -- (these touch namespace or queue keys given as KEYS, no shard key)
        local not_shard = { ["register.lua"] = true, ["pause.lua"] = true, ["units_acquire.lua"] = true,
                            ["units_release.lua"] = true, ["units_renew.lua"] = true,
                            ["running_read.lua"] = true, ["timing.lua"] = true,
                            ["history.lua"] = true, ["hosts_beat.lua"] = true, ["hosts_read.lua"] = true,
                            ["reshard_lock.lua"] = true }
        if not not_shard[name] then
          assert.truthy(host.read("scripts/redis/" .. name):find("\n%-%- luakiq:include keys\n"), name)
        end
      end
    end
    for suffix in schema:gmatch('= "([%w:_]+)",') do
      assert.truthy(host.read("docs/redis.md"):find("`P " .. suffix .. "`", 1, true), suffix)
    end
  end)

  describe("the connection's send and recv (a pipeline in two halves)", function()
    local on_cluster = require("helpers.redis").on_cluster()
    local single, clustered = on_cluster and pending or it, on_cluster and it or pending
    clustered("on a cluster sends nothing and says so (the caller uses pipeline)", function()
      local c = env.conn
      assert.is_false(c:send({ { "SET", "sr:{a}", "1" } }))
      assert.is_falsy(c:call("GET", "sr:{a}"))
    end)

    single("reads the replies of sent commands in order, behind one another", function()
      local c = env.conn
      assert.is_true(c:send({ { "SET", "sr:a", "1" }, { "INCR", "sr:a" } }))
      assert.is_true(c:send({ { "GET", "sr:a" } }))
      assert.are.same({ "OK", 2 }, c:recv(2))
      assert.are.same({ "2" }, c:recv(1))
      local ok, err = pcall(c.recv, c, 1)
      assert.is_false(ok)
      assert.truthy(tostring(err):find("recv of 1 replies, 0 pending", 1, true), err)
      c:call("DEL", "sr:a")
    end)

    single("drops the replies a caller never read before the next command reads its own", function()
      local c = env.conn
      assert.is_true(c:send({ { "SET", "sr:b", "x" }, { "GET", "sr:b" } }))
      -- (the caller raised here, say: its replies stay unread)
      assert.are.equal("x", c:call("GET", "sr:b"))
      assert.are.same({ 1, 0 }, c:pipeline({ { "DEL", "sr:b" }, { "EXISTS", "sr:b" } }))
    end)

    it("stores every chunk of a push whose script Redis forgot (NOSCRIPT: sent again)", function()
      -- 2,500 jobs of one shard: three push.lua calls, each sent before
      -- the replies of the others are read
      env:push("Test", { { id = "warm" } })
      env.conn:call("SCRIPT", "FLUSH")
      local jobs = {}
      for i = 1, 2500 do jobs[i] = { id = "nos" .. i } end
      assert.are.equal(2500, env:push("Test", jobs))
      assert.are.equal(2501, env.conn:call("ZCARD", env:prefix("Test") .. "jobs"))
      assert.are.equal(2, env:push("Test", { { id = "nos1" }, { id = "after" } }))
      assert.are.equal(2502, env.conn:call("ZCARD", env:prefix("Test") .. "jobs"))
    end)
  end)
end)
