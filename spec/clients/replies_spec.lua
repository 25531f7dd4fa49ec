-- Each client in another language (clients/) replies to jobs that wait for
-- one on a real host (`luakiq run`): by the token the job's await returned
-- and by the correlation key it named; the host's on_reply sees each
-- reply, and the clients tell accepted, duplicate, conflict, stale and
-- unknown apart as `luakiq reply` does. Each client runs through a small
-- program of its own tests (reply.py, reply.js, reply.rb).
local host = require "helpers.host"
local q = host.quote

local srv, env = host.fixture()

local CLIENTS = {
  python = "PYTHONPATH=clients/python /usr/bin/python3 clients/python/tests/reply.py",
  node = "node clients/node/test/reply.js",
  ruby = "ruby -Iclients/ruby/lib clients/ruby/test/reply.rb",
}

local FILES = {
  ["config.lua"] = "return { threads_per_node = 2, poll_interval = 0.2, lease_ttl = 2 }",
  -- awaits every id (with the payload's key, if any) and records its token;
  -- on_reply logs "ID ANSWER" and, for the reply by token, runs until the
  -- spec sets t:release (meanwhile the same reply again is a duplicate,
  -- another a conflict)
  ["workers/W.lua"] = [[
local luakiq = require "luakiq"
return { shards_count = 2,
  perform = function(batch)
    for id, pls in pairs(batch) do
      local w = luakiq.await(id, pls[1].key and { key = pls[1].key } or nil)
      luakiq.redis.call("RPUSH", "t:tokens:" .. id, w.token)
    end
  end,
  on_reply = function(id, reply)
    luakiq.redis.call("RPUSH", "t:replies", id .. " " .. tostring(reply.answer))
    local t0 = luakiq.now()
    while reply.answer == "by token" and not luakiq.redis.call("GET", "t:release") and luakiq.now() - t0 < 60 do
      luakiq.sleep(0.05)
    end
  end }
]],
}

describe("replies from each client", function()
  local box = host.dir_per_test(FILES)
  local function explain() return box.proc and box.proc:log() end

  for _, lang in ipairs { "python", "node", "ruby" } do
    it(lang .. ": by token and by key, seen by the host's on_reply", function()
      box.proc = host.spawn("run " .. q(box.dir), env())
      local t, k = lang .. "-t", lang .. "-k"
      host.enqueue(box.dir, "W", { { id = t }, { id = k, payload = { key = "corr-" .. lang } } }, env())
      local token = host.eventually(function() return srv.conn:call("LINDEX", "t:tokens:" .. t, 0) end, 15,
        t .. "'s await", explain)
      host.eventually(function() return srv.conn:call("LINDEX", "t:tokens:" .. k, 0) end, 15, k .. "'s await", explain)
      local function reply(how, value, body)
        local rc, out, err = host.sh_out(CLIENTS[lang] .. " " .. q(srv.url) .. " luakiq W " .. how .. " " .. q(value) ..
          " " .. q(body))
        assert.are.equal(rc == 2 and 2 or 0, rc, out .. err)
        return (out:gsub("\n$", ""))
      end
      assert.are.equal("accepted", reply("token", token, ' {"answer": "by token"}\n'))
      host.eventually(function() return srv.conn:call("LINDEX", "t:replies", 0) end, 15, "on_reply", explain)
      assert.are.equal("duplicate", reply("token", token, '{"answer": "by token"}'))
      assert.are.equal("conflict", reply("token", token, '{"answer": "other"}'))
      srv.conn:call("SET", "t:release", "1")
      assert.are.equal("accepted", reply("key", "corr-" .. lang, '{"answer":"by key"}'))
      assert.are.equal("unknown", reply("key", "no-such-key", '{}'))
      assert.are.equal("unknown", reply("token", token:gsub("%x$", function(x) return x == "0" and "1" or "0" end), '{}'))
      assert.truthy(reply("token", token, '{"answer":'):find("^error: invalid JSON"))
      host.eventually(function()
        local got = srv.conn:call("LRANGE", "t:replies", 0, -1)
        table.sort(got)
        return #got == 2 and got[1] == k .. " by key" and got[2] == t .. " by token"
      end, 15, "on_reply of both", explain)
      -- the waits are over
      host.eventually(function() return reply("token", token, '{"answer": "late"}') == "stale" end, 5, "stale", explain)
      assert.are.equal("stale", reply("key", "corr-" .. lang, '{"answer":"late"}'))
      assert.are.equal("unknown", reply("key", "corr-" .. lang, '{"answer":"late"}')) -- (the stale key was dropped)
      -- the same outcomes as luakiq reply's
      local rc, _, err = host.exec("reply " .. q(box.dir) .. " W " .. q(token) .. " '{\"answer\":1}'", nil, env())
      assert.are.equal(1, rc)
      assert.truthy(err:find("STALE", 1, true), err)
    end)
  end
end)
