-- Lowkiq's spec/queue/queries_spec.rb for luakiq: the listings of luakiq.ops.admin
-- (jobs.lua and busy.lua on every shard, merged). Each filled check runs on
-- "Test" (1 shard) and on "Multi" (5 shards: ids 1 and 2 live in shards 3
-- and 2), so the cross-shard merge is exercised too.
local S = require "queue.support"
local admin = require "luakiq.ops.admin"
local errors = require "luakiq.lib.errors"

local BOTH = { "Test", "Multi" }

describe("queries", function()
  local env = S.lifecycle()
  local function now() return env.now end

  describe("on an empty database", function()
    for _, c in ipairs {
      { "queue", "id", "asc" }, { "queue", "id", "desc" },
      { "queue", "perform_in", "asc" }, { "queue", "perform_in", "desc" },
      { "queue", "retry_count", "asc" }, { "queue", "retry_count", "desc" },
      { "morgue", "id", "asc" }, { "morgue", "id", "desc" },
      { "morgue", "updated_at", "asc" }, { "morgue", "updated_at", "desc" },
    } do
      it(("lists no %s jobs by %s %s over the full range"):format(c[1], c[2], c[3]), function()
        for _, w in ipairs(BOTH) do
          local lo, hi = "-inf", "+inf"
          if c[2] == "id" then lo, hi = "-", "+" end
          assert.are.same({}, admin.list(env.conn, env.cfg, w, c[1], c[2], c[3], lo, hi, 100, 0))
        end
      end)
    end

    it("finds no queued job for unknown ids", function()
      assert.is_nil(env:queued("Test", "1"))
      assert.are.same({}, env:list("Multi", "id", "asc", "[1", "[2"))
    end)

    it("finds no dead job for unknown ids", function()
      assert.is_nil(env:dead("Test", "1"))
      assert.are.same({}, env:morgue("Multi", "id", "asc", "[1", "[2"))
    end)

    it("lists no job in flight", function()
      assert.are.same({}, env:busy("Test"))
      assert.are.same({}, env:busy("Multi"))
    end)
  end)

  describe("with job 1 (retry 0, in 120 s) and job 2 (retry -1, in 60 s)", function()
    before_each(function()
      for _, w in ipairs(BOTH) do
        env:push(w, { { id = 1, payload = "v", retry_count = 0, perform_in = now() + 120 },
                      { id = 2, payload = "v", perform_in = now() + 60 } })
      end
    end)

    it("fetches both full records by id", function()
      for _, w in ipairs(BOTH) do
        assert.are.same({ id = "1", perform_in = now() + 120, retry_count = 0, payloads = { { "v", now() } } },
          env:queued(w, 1))
        assert.are.same({ id = "2", perform_in = now() + 60, retry_count = -1, payloads = { { "v", now() } } },
          env:queued(w, 2))
        assert.are.same({ "1", "2" }, env:ids(env:list(w, "id", "asc", "[1", "[2")))
      end
    end)

    local cases = {
      { "id", "asc", { "1", "2" } }, { "id", "desc", { "2", "1" } },
      { "perform_in", "asc", { "2", "1" } }, { "perform_in", "desc", { "1", "2" } },
      { "retry_count", "asc", { "2", "1" } }, { "retry_count", "desc", { "1", "2" } },
    }
    for _, c in ipairs(cases) do
      it(("lists by %s %s: %s"):format(c[1], c[2], table.concat(c[3], ", ")), function()
        for _, w in ipairs(BOTH) do assert.are.same(c[3], env:ids(env:list(w, c[1], c[2])), w) end
      end)
    end

    it("honours score bounds (exclusive too) and lex bounds", function()
      for _, w in ipairs(BOTH) do
        assert.are.same({ "2" }, env:ids(env:list(w, "perform_in", "asc", "-inf", tostring(now() + 60))))
        assert.are.same({ "1" }, env:ids(env:list(w, "perform_in", "desc", "(" .. (now() + 60), "+inf")))
        assert.are.same({ "1" }, env:ids(env:list(w, "retry_count", "asc", "0", "+inf")))
        assert.are.same({ "2" }, env:ids(env:list(w, "id", "desc", "(1", "+")))
      end
    end)

    it("does not list a job in flight; busy does", function()
      -- (layout 2: job 2, not due when pushed, has its place in P later)
      for _, w in ipairs(BOTH) do
        env.conn:call("ZADD", env:prefix(w, w == "Multi" and 2 or 0) .. "later", "XX", now() - 1, "2")
        local res = env:fetch(w, w == "Multi" and 2 or 0)
        assert.are.same({ "2" }, env:ids(res.jobs))
        assert.are.same({ "1" }, env:ids(env:list(w)))
        assert.are.same({ { id = "2", perform_in = now() - 1, retry_count = -1, payloads = { { "v", now() } } } },
          env:busy(w))
      end
    end)

    it("busy listings with a time show when each batch was fetched and for how long it has run", function()
      for _, w in ipairs(BOTH) do
        local shard = w == "Multi" and 2 or 0
        env.conn:call("ZADD", env:prefix(w, shard) .. "later", "XX", now() - 20, "2")
        local res = env:fetch(w, shard, { now = now() - 12.25 })
        assert.are.same({ "2" }, env:ids(res.jobs))
        local list = admin.busy(env.conn, env.cfg, w, now())
        assert.are.equal(1, #list)
        assert.are.equal("2", list[1].id)
        assert.are.equal(now() - 12.25, list[1].fetched_at)
        assert.are.equal(12, list[1].running) -- whole seconds
        assert.are.equal(0, admin.busy(env.conn, env.cfg, w, now() - 100)[1].running) -- never negative
        -- redelivery of the unacked batch keeps the first fetch's time
        env:fetch(w, shard, { now = now() })
        assert.are.equal(now() - 12.25, admin.busy(env.conn, env.cfg, w, now())[1].fetched_at)
        -- acked: nothing in flight, and no time left behind
        env:fetch(w, shard, { ack = res.batch, fetch = false })
        assert.are.same({}, admin.busy(env.conn, env.cfg, w, now()))
        assert.are.equal(0, env.conn:call("EXISTS", env:prefix(w, shard) .. "busy:fetched_at"))
      end
    end)
  end)

  describe("paging across shards", function()
    it("merges every shard's page by the order, then cuts offset and limit", function()
      local jobs = {}
      for i = 1, 12 do jobs[i] = { id = "j" .. i, perform_in = now() + i } end
      env:push("Multi", jobs)
      assert.are.same({ "j3", "j4", "j5" }, env:ids(env:list("Multi", "perform_in", "asc", nil, nil, 3, 2)))
      assert.are.same({ "j10", "j9", "j8", "j7" }, env:ids(env:list("Multi", "perform_in", "desc", nil, nil, 4, 2)))
      assert.are.same({ "j1", "j10", "j11" }, env:ids(env:list("Multi", "id", "asc", nil, nil, 3, 0)))
      assert.are.same({}, env:list("Multi", "id", "asc", nil, nil, 5, 12))
    end)

    it("a cursor continues where its page ended: every order, both directions, ranges, same as offsets", function()
      local jobs = {}
      for i = 1, 37 do jobs[i] = { id = ("c%02d"):format(i), perform_in = now() + (i % 7) } end
      env:push("Multi", jobs)
      for i = 1, 9 do env:fail_all("Multi", { { id = ("c%02d"):format(i * 4) } }, "e", now() + i % 3) end
      for _, o in ipairs { { "id", "-", "+" }, { "id", "[c05", "(c30" }, { "perform_in", "-inf", "+inf" },
                           { "perform_in", "(" .. (now() + 1), now() + 5 }, { "retry_count", "-inf", "+inf" } } do
        for _, dir in ipairs { "asc", "desc" } do
          local whole = env:ids(env:list("Multi", o[1], dir, o[2], o[3], 1000))
          assert.is_true(#whole > 5)
          for _, size in ipairs { 1, 4, 10 } do
            local got, cursor, n = {}, nil, 0
            repeat
              local page, after, pos = admin.list(env.conn, env.cfg, "Multi", "queue", o[1], dir, o[2], o[3], size, 0, cursor)
              assert.are.equal(#got, pos)
              for _, id in ipairs(env:ids(page)) do got[#got + 1] = id end
              -- the same page by offset
              assert.are.same(env:ids(page), env:ids(env:list("Multi", o[1], dir, o[2], o[3], size, #got - #page)))
              cursor, n = after(), n + 1
            until #page < size or n > 100
            assert.are.same(whole, got, o[1] .. " " .. dir .. " by " .. size)
          end
        end
      end
      -- a cursor of another listing, or malformed, is the caller's mistake
      local _, after = env:list("Multi", "id", "asc", nil, nil, 2)
      for _, bad in ipairs { after(), "junk", "queue:id:asc:0:1,2" } do
        local ok, err = pcall(admin.list, env.conn, env.cfg, "Multi", "queue", "perform_in", "asc", "-inf", "+inf", 2, 0, bad)
        assert.is_false(ok)
        assert.truthy(tostring(err):find("cursor", 1, true), tostring(err))
      end
    end)

    it("a page deep in big shards costs what the first page costs; an offset is walked to in bounded calls", function()
      local n, jobs = 60000, {}
      for i = 1, n do jobs[i] = { id = ("d%06d"):format(i), perform_in = now() + i } end
      env:push("Multi", jobs)
      local conn = env.conn
      -- each script call's Redis time, from the slow log (every call logged)
      local function script_calls(fn)
        conn:call("CONFIG", "SET", "slowlog-log-slower-than", "0")
        conn:call("CONFIG", "SET", "slowlog-max-len", "100000")
        conn:call("SLOWLOG", "RESET")
        fn()
        local us = {}
        for _, e in ipairs(conn:call("SLOWLOG", "GET", "-1")) do
          if tostring(e[4][1]):upper() == "EVALSHA" then us[#us + 1] = e[3] end
        end
        conn:call("CONFIG", "SET", "slowlog-log-slower-than", "10000")
        table.sort(us)
        return us
      end
      for _, order in ipairs { "perform_in", "id" } do
        local lo, hi = order == "id" and "-" or "-inf", order == "id" and "+" or "+inf"
        local first = script_calls(function() env:list("Multi", order, "asc", lo, hi, 100) end)
        local after
        -- (an offset past admin.OFFSET_MAX is refused: the web thread must
        -- not walk for seconds; lifted here to measure the walk's calls)
        assert.has_error(function() env:list("Multi", order, "asc", lo, hi, 100, admin.OFFSET_MAX + 1) end)
        local cap = admin.OFFSET_MAX
        finally(function() admin.OFFSET_MAX = cap end)
        admin.OFFSET_MAX = n
        local walk = script_calls(function()
          local page
          page, after = env:list("Multi", order, "asc", lo, hi, 100, n - 150)
          assert.are.equal(("d%06d"):format(n - 149), page[1].id)
        end)
        -- the walk: n / 5 / 1000 calls per shard at least, none of them long
        -- (one call per shard over the whole offset took ~14 s on 1M jobs before)
        assert.is_true(#walk >= (n - 150) / 1000, #walk .. " calls")
        assert.is_true(walk[#walk] < 100000, "longest call " .. walk[#walk] .. " us")
        local deep = script_calls(function()
          local page = admin.list(conn, env.cfg, "Multi", "queue", order, "asc", lo, hi, 100, 0, after())
          assert.are.equal(("d%06d"):format(n - 49), page[1].id)
          assert.are.equal(50, #page)
        end)
        assert.are.equal(5, #first) -- one call per shard
        assert.are.equal(5, #deep)
        -- O(page): no walk over the ~12,000 jobs of each shard before it
        assert.is_true(deep[5] < 5 * first[5] + 2000, ("deep page %d us, first page %d us"):format(deep[5], first[5]))
      end
    end)

    it("refuses an unknown order with the script's error", function()
      assert.has_error(function() env:list("Test", "score") end)
      local ok, err = pcall(env.conn.script, env.conn, "jobs", env:prefix("Test"), "queue", "score", "asc",
        "-inf", "+inf", 0, 10)
      assert.is_false(ok)
      local code, why = errors.redis_code(err)
      assert.are.equal("BADRANGE", code, tostring(err))
      assert.truthy(why:find("^luakiq jobs: bad what/order"), why)
    end)

    it("answers a bound Redis would refuse as the caller's mistake, in the script's words", function()
      -- (by updated_at the script reads the morgue by rank: without its own
      -- check Redis's ZRANGEBYSCORE refused the bound, in Redis's words)
      for _, case in ipairs {
        { "queue", "perform_in", "soon", "bad score bound 'soon'" },
        { "morgue", "updated_at", "1 ", "bad score bound '1 '" },
        { "queue", "id", "x", "bad lex bound 'x'" },
      } do
        local list = case[1] == "queue" and env.list or env.morgue
        local ok, err = pcall(list, env, "Test", case[2], "asc", case[3], case[2] == "id" and "+" or "+inf")
        assert.is_false(ok)
        assert.are.same({ "input", "bad listing request: " .. case[4] }, { errors.describe(err) })
      end
    end)
  end)

  describe("morgue with ids 1 and 2 dead at t, then 1 again at t+1 (same payload)", function()
    -- Dies through fail.lua at max_retry_count (Test and Multi: 5).
    local function kill(w, ids, err)
      local jobs = {}
      for i, id in ipairs(ids) do jobs[i] = { id = id, payload = "v" } end
      env:kill(w, jobs, err)
    end
    local t
    before_each(function()
      t = now()
      for _, w in ipairs(BOTH) do kill(w, { 1, 2 }, "e" .. w) end
      S.freeze(t + 1)
      env.now = t + 1
      for _, w in ipairs(BOTH) do kill(w, { 1 }, "again") end
    end)

    it("refreshes updated_at of 1 but keeps its payload's first score", function()
      for _, w in ipairs(BOTH) do
        assert.are.same({ id = "1", updated_at = t + 1, error = "again", payloads = { { "v", t } } }, env:dead(w, 1))
        assert.are.same({ id = "2", updated_at = t, error = "e" .. w, payloads = { { "v", t } } }, env:dead(w, 2))
        assert.are.same({}, env:list(w))
      end
    end)

    for _, c in ipairs {
      { "id", "asc", { "1", "2" } }, { "id", "desc", { "2", "1" } },
      { "updated_at", "asc", { "2", "1" } }, { "updated_at", "desc", { "1", "2" } },
    } do
      it(("lists by %s %s: %s"):format(c[1], c[2], table.concat(c[3], ", ")), function()
        for _, w in ipairs(BOTH) do assert.are.same(c[3], env:ids(env:morgue(w, c[1], c[2])), w) end
      end)
    end
  end)
end)
