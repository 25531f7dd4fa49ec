-- The layout version (docs/redis.md, "Layout version"): a namespace whose
-- keys are not layout 2 (queues registered without a version, or a version
-- a newer luakiq wrote) is refused by every entry point, `luakiq run` and
-- the CLI alike, with exit 1 and one line, having written nothing; a new
-- namespace is marked "2" by the first entry point.
local redis = require "helpers.redis"
local host = require "helpers.host"
local q = host.quote

local srv = redis.fixture()
local LAYOUT = "luakiq:{luakiq:queues}:layout"

local function env() return "REDIS_URL=" .. srv.url end
local function one_line(s) return select(2, tostring(s):gsub("\n", "")) == 1 end

local function all_keys()
  local list = srv.conn:call("KEYS", "*")
  table.sort(list)
  return list
end

-- Every entry point refuses, each with one line holding want; nothing is
-- written, register.lua included (it answers {"LAYOUT", version}).
local function refused_everywhere(dir, want, version)
  local before = all_keys()
  for _, args in ipairs { "run " .. q(dir), "stats " .. q(dir), "jobs " .. q(dir) .. " Alpha queue",
                          "job " .. q(dir) .. " Alpha a", "enqueue " .. q(dir) .. " Alpha" } do
    local rc, _, err = host.exec(args, '{"id":"new"}\n', env())
    assert.are.equal(1, rc, args .. ": " .. err)
    assert.is_true(one_line(err), err)
    assert.truthy(err:find(want, 1, true), err)
  end
  assert.are.same({ "LAYOUT", version }, srv.conn:script("register", "luakiq:queues", "New", "2"))
  assert.are.same(before, all_keys())
end

describe("the layout version", function()
  local dir
  before_each(function()
    srv:flush()
    dir = host.scriptdir { ["workers/Alpha.lua"] = "return { shards_count = 4, perform = function() end }" }
  end)
  after_each(function() host.sh("rm -rf " .. q(dir)) end)

  it("refuses a layout a newer luakiq wrote, with one line, writing nothing", function()
    srv.conn:call("SET", LAYOUT, "3")
    refused_everywhere(dir, "namespace 'luakiq' in Redis has layout '3', written by a newer luakiq; " ..
      "this one reads layout 2", "3")
  end)

  it("refuses queues registered without a version, with one line, writing nothing", function()
    srv.conn:call("HSET", "luakiq:queues", "Alpha", "4")
    refused_everywhere(dir, "namespace 'luakiq' in Redis has queues registered but no layout version", "1")
  end)

  it("marks a new namespace layout 2 at the first command", function()
    assert.are.equal(0, srv.conn:call("EXISTS", LAYOUT))
    local rc, _, err = host.exec("stats " .. q(dir), nil, env())
    assert.are.equal(0, rc, err)
    assert.are.equal("2", srv.conn:call("GET", LAYOUT))
  end)
end)
