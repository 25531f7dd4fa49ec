-- Layout 1 -> 2 (issue 12, "Existing data"; docs/operations.md, "Upgrading
-- from layout 1"): a Redis written by layout 1 (tools/layout1-fixture.lua)
-- is refused by every entry point with one line naming `luakiq migrate DIR`,
-- and `luakiq migrate` converts it online:
--   1. killed -9 half-way (some shards converted, some not; the layout
--      "1>2", refused by a host and the CLI with one line), run again to the
--      end: every job, payload, score, perform_in, retry_count, error and
--      morgue entry read back through the layout-2 scripts (jobs.lua,
--      busy.lua) as the layout-1 keys held it; the keys both layouts share
--      unchanged; no layout-1 key left; each shard fenced against layout-1
--      hosts and producers; a page converted again is a no-op; a rerun says
--      so and exits 0;
--   2. `luakiq run` against layout 1 writes nothing;
--   3. after the migration a host drains the queue: every queued and
--      in-flight payload once, per id in score order, no overlap;
--   4. a layout-1 job written late (a layout-1 producer) is swept in by a
--      rerun.
local core = require "luakiq.core"
local keys = require "luakiq.lib.keys"
local redis = require "helpers.redis"
local host = require "helpers.host"
local S = require "faults.support"
local fixture = dofile("tools/layout1-fixture.lua")
local q = host.quote

local srv = redis.fixture()
local FENCE = "layout2"

local function env() return "REDIS_URL=" .. srv.url end
local function exec(args) return host.exec(args, nil, env()) end
local function one_line(s) return select(2, tostring(s):gsub("\n", "")) == 1 end

local DIR_FILES = {
  ["workers/Alpha.lua"] = "return { shards_count = 4, perform = function() end }",
  ["workers/Beta.lua"] = "return { shards_count = 3, perform = function() end }",
}
local QUEUES = { { "Alpha", 4 }, { "Beta", 3 } }

local function shards()
  local list = {}
  for _, qu in ipairs(QUEUES) do
    for s = 0, qu[2] - 1 do list[#list + 1] = { queue = qu[1], shard = s, P = keys.prefix("luakiq", qu[1], s) } end
  end
  return list
end

-- A shard whose layout-1 jobs are all converted (claimed, nothing left).
local function converted(P)
  return srv.conn:call("GET", P .. "holder") == FENCE
    and srv.conn:call("EXISTS", P .. "ids") == 0 and srv.conn:call("EXISTS", P .. "queue") == 0
    and srv.conn:call("EXISTS", P .. "morgue:ids") == 0
end

local function count_converted()
  local n = 0
  for _, s in ipairs(shards()) do if converted(s.P) then n = n + 1 end end
  return n
end

-- Calls fn(id, fields, payloads) for each record of a listing reply {n,
-- then per job: id, nfields fields, npayloads, payload, score, ...};
-- payloads as {{payload, score (number)}...}.
local function each_record(r, nfields, fn)
  local i = 2
  for _ = 1, tonumber(r[1]) do
    local fields = { unpack(r, i + 1, i + nfields) }
    local j, pl = i + nfields + 1, {}
    for k = 1, tonumber(r[j]) do pl[k] = { r[j + 2 * k - 1], tonumber(r[j + 2 * k]) } end
    fn(r[i], fields, pl)
    i = j + 1 + 2 * #pl
  end
end

-- Every job as layout 2 shows it, through its scripts: jobs.lua (queue and
-- morgue, by id) and busy.lua; the shape of fixture.snapshot's jobs.
local function read_layout2()
  local out = {}
  for _, s in ipairs(shards()) do
    local function add(kind)
      return function(id, f, pl)
        local k = s.queue .. "|" .. s.shard .. "|" .. id
        out[k] = out[k] or {}
        local err = f[#f] ~= "" and f[#f] or nil
        if kind == "dead" then
          out[k].dead = { at = tonumber(f[1]), err = err, payloads = pl }
        else
          out[k][kind] = { pin = tonumber(f[1]), rc = f[2], err = err, payloads = pl }
        end
      end
    end
    each_record(srv.conn:script("jobs", s.P, "queue", "id", "asc", "-", "+", "0", "100000"), 3, add("queued"))
    each_record(srv.conn:script("jobs", s.P, "morgue", "id", "asc", "-", "+", "0", "100000"), 2, add("dead"))
    each_record(srv.conn:script("busy", s.P), 3, add("busy"))
  end
  return out
end

-- Layout-1 keys left anywhere.
local function layout1_keys()
  local left = {}
  for _, pat in ipairs { "*}:ids", "*}:queue", "*}:payloads:*", "*}:busy:payloads:*", "*}:morgue:ids",
                         "*}:morgue:payloads:*" } do
    for _, key in ipairs(srv.conn:call("KEYS", pat)) do left[#left + 1] = key end
  end
  return left
end

describe("luakiq migrate", function()
  local dir
  before_each(function() dir = host.scriptdir(DIR_FILES) end)
  after_each(function() host.sh("rm -rf " .. q(dir)) end)

  it("refuses layout 1 with one line, writing nothing: luakiq run and the CLI", function()
    fixture.write(srv.conn, { seed = 7, jobs = 60, queues = QUEUES })
    local before = fixture.snapshot(srv.conn, "luakiq")
    local all = srv.conn:call("KEYS", "*")
    table.sort(all)
    for _, args in ipairs { "run " .. q(dir), "stats " .. q(dir), "jobs " .. q(dir) .. " Alpha queue",
                            "job " .. q(dir) .. " Alpha Alpha-1", "enqueue " .. q(dir) .. " Alpha" } do
      local rc, _, err = host.exec(args, '{"id":"new"}\n', env())
      assert.are.equal(1, rc, args .. ": " .. err)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("is in layout 1", 1, true), err)
      assert.truthy(err:find("`luakiq migrate " .. dir .. "`", 1, true), err)
    end
    -- (register.lua checks the layout in the same call: nothing written)
    assert.are.same({ "LAYOUT", "1" }, srv.conn:script("register", "luakiq:queues", "New", "2"))
    local after = srv.conn:call("KEYS", "*")
    table.sort(after)
    assert.are.same(all, after)
    assert.are.same(before, fixture.snapshot(srv.conn, "luakiq"))
  end)

  it("killed -9 half-way and run again: every job, payload, score, retry_count, error and dead job kept", function()
    fixture.write(srv.conn, { seed = 42, jobs = 150, queues = QUEUES })
    local before = fixture.snapshot(srv.conn, "luakiq")
    local n = { queued = 0, busy = 0, dead = 0 }
    for _, j in pairs(before.jobs) do
      for kind in pairs(n) do if j[kind] then n[kind] = n[kind] + 1 end end
    end
    assert.is_true(n.queued > 100 and n.busy > 3 and n.dead > 20, require("luakiq.json").encode(n))

    -- 1. killed half-way (pages of 4 jobs, 30 ms apart)
    local p = host.spawn("migrate " .. q(dir) .. " --page 4 --pace 0.03", env())
    host.eventually(function() return count_converted() >= 2 end, 20, "two shards converted", function() return p:log() end)
    p:signal("KILL")
    assert.are.equal(137, p:wait(5))
    p.pid = nil
    assert.are.equal("1>2", srv.conn:call("GET", keys.layout("luakiq")))
    local done = count_converted()
    assert.is_true(done >= 2 and done < #shards(), "converted shards: " .. done)
    assert.is_true(#layout1_keys() > 0)
    -- every shard fenced: layout-1 hosts take none, layout-1 pushes are refused
    for _, s in ipairs(shards()) do
      assert.are.equal(FENCE, srv.conn:call("GET", s.P .. "reshard"))
      assert.truthy(srv.conn:call("GET", s.P .. "shards"):match("^%d+:" .. FENCE .. "$"))
    end

    -- 2. meanwhile this luakiq's hosts and commands refuse, one line
    for _, args in ipairs { "run " .. q(dir), "stats " .. q(dir) } do
      local rc, _, err = exec(args)
      assert.are.equal(1, rc, err)
      assert.is_true(one_line(err), err)
      assert.truthy(err:find("a migration is running or was interrupted", 1, true), err)
      assert.truthy(err:find("`luakiq migrate " .. dir .. "`", 1, true), err)
    end

    -- 3. run again: it goes on (the progress line only on a terminal)
    local rc, out, err = exec("migrate " .. q(dir) .. " --page 7")
    assert.are.equal(0, rc, err)
    assert.are.equal("", err)
    assert.is_true(one_line(out), out)
    assert.truthy(out:find("^namespace luakiq migrated to layout 2 %(resumed%)"), out)
    assert.are.equal("2", srv.conn:call("GET", keys.layout("luakiq")))
    assert.are.same({}, layout1_keys())

    -- 4. everything, through layout 2's scripts, as layout 1 held it
    local after = read_layout2()
    for k, j in pairs(before.jobs) do
      assert.are.same(j, after[k], "job " .. k:gsub("%z", "\\0"))
    end
    for k in pairs(after) do assert.truthy(before.jobs[k], "job " .. k:gsub("%z", "\\0")) end
    local shared = fixture.snapshot(srv.conn, "luakiq").shared
    assert.are.same(before.shared, shared)

    -- 5. a page converted again is a no-op; a rerun says so
    for _, s in ipairs(shards()) do
      assert.are.same({ "0", "0", "0", "0" },
        srv.conn:script("migrate_shard", s.P, "page", "100", tostring(core.now()), "migrate"))
      assert.are.same({ "CLAIMED", "0" }, srv.conn:script("migrate_shard", s.P, "claim", tostring(core.now())))
    end
    assert.are.same(after, read_layout2())
    rc, out, err = exec("migrate " .. q(dir))
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("was layout 2 already; nothing to migrate", 1, true), out)
    rc, out, err = exec("stats " .. q(dir))
    assert.are.equal(0, rc, err)
    assert.truthy(out:find('"length":' .. n.queued .. ",", 1, true), out)
    -- this luakiq pushes past the fence
    host.enqueue(dir, "Alpha", { { id = "new", payload = 1 } }, env())
    rc, out, err = exec("job " .. q(dir) .. " Alpha new")
    assert.are.equal(0, rc, err)
  end)

  it("waits for a shard's lease; a rerun sweeps a layout-1 job written late", function()
    fixture.write(srv.conn, { seed = 3, jobs = 30, queues = QUEUES })
    local P = keys.prefix("luakiq", "Alpha", 0)
    srv.conn:call("SET", P .. "lease", "oldhost:1:x", "PX", "800")
    local t0 = core.now()
    local rc, out, err = exec("migrate " .. q(dir))
    assert.are.equal(0, rc, err)
    assert.is_true(core.now() - t0 >= 0.6, "waited for the lease")
    assert.truthy(out:find("migrated to layout 2:", 1, true), out)
    -- a layout-1 producer pushes after the migration: unseen until swept
    local id = "late one"
    local L = keys.prefix("luakiq", "Beta", keys.shard(id, 3))
    srv.conn:call("ZADD", L .. "queue", "1000.5", id)
    srv.conn:call("ZADD", L .. "ids", "0", id)
    srv.conn:call("ZADD", L .. "payloads:" .. id, "2.25", '"late"')
    rc, out, err = exec("job " .. q(dir) .. " Beta " .. q(id))
    assert.are.equal(1, rc, out)
    rc, out, err = exec("migrate " .. q(dir))
    assert.are.equal(0, rc, err)
    assert.truthy(out:find("was layout 2 already; swept 1 queued and 0 dead jobs", 1, true), out)
    rc, out, err = exec("job " .. q(dir) .. " Beta " .. q(id))
    assert.are.equal(0, rc, err)
    local j = require("luakiq.json").decode(out)
    assert.are.same({ "queued", 1000.5, { { "late", 2.25 } } }, { j.state, j.perform_in, j.payloads })
  end)

  it("is followed by a host that drains the queue: every payload once, in score order per id", function()
    local shards_n = 4
    local d = S.dir("", { shards = shards_n, batch = 5 })
    fixture.write(srv.conn, { seed = 11, jobs = 80, queues = { { "Rec", shards_n } }, due_only = true })
    local before = fixture.snapshot(srv.conn, "luakiq")
    local want = {} -- id -> payloads (decoded) in (score, bytes) order, queued and in flight united
    for k, j in pairs(before.jobs) do
      local id = k:match("^[^|]*|[^|]*|(.*)$")
      local map = {}
      for _, kind in ipairs { "queued", "busy" } do
        for _, pl in ipairs(j[kind] and j[kind].payloads or {}) do
          if not map[pl[1]] or pl[2] < map[pl[1]] then map[pl[1]] = pl[2] end
        end
      end
      local list = {}
      for pay, sc in pairs(map) do list[#list + 1] = { pay, sc } end
      table.sort(list, function(a, b) if a[2] ~= b[2] then return a[2] < b[2] end return a[1] < b[1] end)
      if #list > 0 then
        for i, e in ipairs(list) do list[i] = require("luakiq.json").decode(e[1]) end
        want[id] = list
      end
    end
    local rc, _, err = exec("migrate " .. q(d))
    assert.are.equal(0, rc, err)
    local p = S.spawn(srv, d)
    S.eventually(function()
      for id, list in pairs(want) do
        if srv.conn:call("LLEN", "t:seen:" .. id) < #list then return false end
      end
      return true
    end, 30, "every payload performed", function() return p:log() end)
    assert.are.equal(0, S.stop(p))
    for id, list in pairs(want) do assert.are.same(list, S.seen(srv.conn, id), "id " .. id:gsub("%z", "\\0")) end
    assert.are.same({}, S.overlaps(srv.conn))
    host.sh("rm -rf " .. q(d))
  end)
end)
