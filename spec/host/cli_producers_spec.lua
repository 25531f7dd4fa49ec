-- The command line's side of the producer contract (clients/, docs/redis.md):
-- `luakiq scripts DIR` (the embedded Redis scripts as files, for the clients
-- in other languages), `luakiq lua`'s Redis connection, and `luakiq enqueue`
-- registering a queue no host registered yet, as the clients do.
local redis = require "helpers.redis"
local host = require "helpers.host"
local json = require "luakiq.json"
local core = require "luakiq.core"
local q = host.quote

local srv = redis.fixture()

describe("luakiq scripts", function()
  it("writes every embedded script as the binary sends it, and a manifest whose sha1 Redis agrees with", function()
    local dir = host.tmpdir() .. "/out"
    finally(function() host.sh("rm -rf " .. q(dir)) end)
    local rc, out, err = host.exec("scripts " .. q(dir))
    assert.are.equal(0, rc, err)
    local names = core.script_names()
    table.sort(names)
    assert.are.equal(("%d scripts in %s, %d files changed\n"):format(#names, dir, #names + 1), out)
    local manifest = json.decode(host.read(dir .. "/manifest.json"))
    assert.are.equal("2", manifest.layout)
    assert.are.equal(require("luakiq").version, manifest.luakiq)
    for _, name in ipairs(names) do
      local e = manifest.scripts[name]
      assert.are.equal(name .. ".lua", e.file)
      local text = host.read(dir .. "/" .. e.file)
      assert.are.equal(core.script_source(name), text, name)
      assert.is_nil(text:find("\n%-%- luakiq:include "), name) -- includes expanded
      -- the sha1 is the name EVALSHA knows the script by
      assert.are.equal(e.sha1, srv.conn:call("SCRIPT", "LOAD", text), name)
    end
    -- again: nothing changes
    rc, out = host.exec("scripts " .. q(dir))
    assert.are.equal(0, rc)
    assert.are.equal(("%d scripts in %s, 0 files changed\n"):format(#names, dir), out)
  end)

  it("writes only the scripts named (--out says where), removing those the manifest there had before", function()
    local dir = host.tmpdir()
    finally(function() host.sh("rm -rf " .. q(dir)) end)
    assert.are.equal(0, (host.exec("scripts " .. q(dir) .. " push stats job")))
    host.write(dir .. "/mine.lua", "-- not luakiq's")
    local rc, out, err = host.exec("scripts --out " .. q(dir) .. " push register")
    assert.are.equal(0, rc, err)
    assert.are.equal("2 scripts in " .. dir .. ", 4 files changed\n", out) -- stats, job gone; register; manifest
    local files = host.lines("ls " .. q(dir))
    assert.are.same({ "manifest.json", "mine.lua", "push.lua", "register.lua" }, files)
    local manifest = json.decode(host.read(dir .. "/manifest.json"))
    assert.are.same({ "push", "register" }, (function()
      local t = {}
      for k in pairs(manifest.scripts) do t[#t + 1] = k end
      table.sort(t)
      return t
    end)())
  end)

  it("refuses an unknown script and a missing DIR with one line, exit 2", function()
    local rc, _, err = host.exec("scripts " .. q(host.tmpdir()) .. " push nope")
    assert.are.equal(2, rc)
    assert.are.equal("luakiq: no Redis script 'nope' in this luakiq\n", err)
    rc, _, err = host.exec("scripts")
    assert.are.equal(2, rc)
    assert.are.equal("luakiq: usage: luakiq scripts DIR [NAME...]\n", err)
  end)
end)

describe("luakiq lua", function()
  local function file(src)
    local d = host.tmpdir()
    host.write(d .. "/f.lua", src)
    return d .. "/f.lua"
  end
  local SRC = [[
    local luakiq = require "luakiq"
    luakiq.redis.call("SET", "from-lua", arg[1])
    io.write(luakiq.redis.call("GET", "from-lua"), " ", #arg, "\n")]]

  it("gives luakiq.redis a connection to REDIS_URL", function()
    local rc, out, err = host.exec("lua " .. q(file(SRC)) .. " one two", nil, "REDIS_URL=" .. srv.url)
    assert.are.equal(0, rc, err)
    assert.are.equal("one 2\n", out)
    assert.are.equal("one", srv.conn:call("GET", "from-lua"))
  end)

  it("or to --redis URL, given before FILE (the arguments after FILE are the file's)", function()
    local rc, out, err = host.exec("lua --redis " .. q(srv.url) .. " " .. q(file(SRC)) .. " x --redis y",
      nil, "REDIS_URL=redis://127.0.0.1:1/0")
    assert.are.equal(0, rc, err)
    assert.are.equal("x 3\n", out)
    rc, out, err = host.exec("lua --redis=" .. q(srv.url) .. " " .. q(file(SRC)) .. " z")
    assert.are.equal(0, rc, err)
    assert.are.equal("z 1\n", out)
  end)

  it("runs a Lua producer: a script directory loaded, perform_async enqueues as luakiq enqueue does", function()
    local dir = host.scriptdir { ["workers/A.lua"] = "return { shards_count = 2, perform = function() end }" }
    local src = file([[
      require("luakiq.lib.runtime").load(arg[1])
      io.write(require("luakiq").perform_async("A", { { id = "p1", payload = { n = 1 } } }), "\n")]])
    local rc, out, err = host.exec("lua " .. q(src) .. " " .. q(dir), nil, "REDIS_URL=" .. srv.url)
    assert.are.equal(0, rc, err)
    assert.are.equal("1\n", out)
    local jobs = host.jobs(dir, "A", "queue", "REDIS_URL=" .. srv.url)
    assert.are.same({ { { n = 1 }, jobs.p1.payloads[1][2] } }, jobs.p1.payloads)
  end)

  it("connects only when the file uses Redis", function()
    local rc, out, err = host.exec("lua " .. q(file('io.write("no redis\\n")')), nil, "REDIS_URL=redis://127.0.0.1:1/0")
    assert.are.equal(0, rc, err)
    assert.are.equal("no redis\n", out)
    rc, _, err = host.exec("lua " .. q(file(SRC)) .. " a", nil, "REDIS_URL=redis://127.0.0.1:1/0")
    assert.are.equal(1, rc)
    assert.truthy(err:find("127.0.0.1:1", 1, true), err)
  end)
end)

describe("luakiq enqueue", function()
  it("registers a queue no host registered yet with the worker's shards_count, and then refuses another", function()
    local dir = host.scriptdir { ["workers/A.lua"] = "return { shards_count = 3, perform = function() end }" }
    local env = "REDIS_URL=" .. srv.url
    assert.falsy(srv.conn:call("HGET", "luakiq:queues", "A"))
    local rc, out, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":1}', env)
    assert.are.equal(0, rc, err)
    assert.are.equal("enqueued 1 job\n", out)
    assert.are.equal("3", srv.conn:call("HGET", "luakiq:queues", "A"))
    assert.are.equal("2", srv.conn:call("GET", "luakiq:{luakiq:queues}:layout"))
    host.write(dir .. "/workers/A.lua", "return { shards_count = 5, perform = function() end }")
    rc, _, err = host.exec("enqueue " .. q(dir) .. " A", '{"id":2}', env)
    assert.are.equal(2, rc)
    assert.truthy(err:find("shards_count is 5 but queue 'A' has 3 shards in Redis; nothing enqueued", 1, true), err)
  end)
end)
